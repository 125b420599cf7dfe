package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// env is what every scenario shares: the broker, the way to start members, and the counters.
type env struct {
	opts   options
	addr   string
	broker *kafkatest.Broker // nil with --kafka
	// counter counts the requests the broker receives: the embedded broker's, or those that pass the
	// proxy in front of a cluster started with --kafka real (real.go); nil with --kafka host:port.
	counter *requestCounter
	trace   *tracer     // the embedded broker's only
	client  *kgo.Client // for group and offset queries to an external broker
	// real and proxy are the Apache Kafka cluster that --kafka real started and the counting proxy
	// its members reach it through; brokerPids are its JVMs, whose CPU the cost figures add to the
	// harness's as the embedded broker's is part of it.
	real       *realkafka.Cluster
	proxy      *realkafka.Proxy
	brokerPids []int
	// brokerName says which broker the figures are of, for the report.
	brokerName string
	exe        string
	runID      string
	// wire counts each member's requests and those in flight on the broker's sockets, and delay
	// holds back the broker's answers (delayAnswers); both only for the load scenario (--load).
	wire  *kafkatest.Wire
	delay atomic.Int64
}

func newEnv(o options) (*env, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	e := &env{opts: o, exe: exe, runID: strconv.FormatInt(time.Now().Unix()%1_000_000, 36)}
	if o.kafka == realKafka {
		if err := e.startReal(o); err != nil {
			e.close()
			return nil, err
		}
		return e, nil
	}
	if o.kafka != "" {
		e.addr, e.brokerName = o.kafka, o.kafka
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(o.kafka, ",")...))
		if err != nil {
			return nil, err
		}
		e.client = cl
		return e, nil
	}
	var opts []kfake.Opt
	nm := kafkatest.NewNetem()
	if o.load {
		e.wire = kafkatest.NewWire()
		opts = append(opts, kfake.ListenFn(e.wire.Listen(nm.Listen)))
	}
	b, err := kafkatest.StartNet(nm, opts...)
	if err != nil {
		return nil, fmt.Errorf("starting embedded broker: %w", err)
	}
	if o.load {
		e.delayAnswers(b)
	}
	e.broker, e.addr, e.brokerName = b, b.Addr, "embedded (kfake)"
	e.counter, e.trace = &requestCounter{}, &tracer{}
	// An observer of every request: it never handles one, so the broker goes on as usual.
	b.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.counter.observe(req)
		e.trace.observe(req)
		return nil, nil, false
	})
	return e, nil
}

func (e *env) close() {
	if e.client != nil {
		e.client.Close()
	}
	if e.broker != nil {
		e.broker.Close()
	}
	if e.proxy != nil {
		_ = e.proxy.Close()
	}
	if e.real != nil {
		_ = e.real.Close()
	}
}

// waitStable waits until the group is stable with n members, so that a trial does not begin in
// the middle of a rebalance caused by the previous one. The broker offers no event for this, so it
// is polled.
func (e *env) waitStable(group string, n int, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if e.broker != nil {
		g, err := e.broker.WaitGroupStable(ctx, group, n)
		if err != nil {
			return fmt.Errorf("group %s not stable with %d members within %v: %w; last seen: %s", group, n, limit, err, describeGroup(g))
		}
		return nil
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(ctx, e.client)
		if err == nil && len(resp.Groups) == 1 && resp.Groups[0].State == "Stable" && len(resp.Groups[0].Members) == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s not stable with %d members within %v", group, n, limit)
		case <-tick.C:
		}
	}
}

func describeGroup(g *kfake.GroupInfo) string {
	if g == nil {
		return "no such group"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "state %s, generation %d, %d members:", g.State, g.Epoch, len(g.Members))
	for _, m := range g.Members {
		fmt.Fprintf(&sb, " %s%v", m.ClientID, m.Assignment)
	}
	return sb.String()
}

// heartbeats is the sum of the end offsets of parts: the number of heartbeats ever sent to them.
func (e *env) heartbeats(parts []topicPartition) (int64, error) {
	var total int64
	for _, p := range parts {
		n, err := e.highWatermark(p.topic, p.partition)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// highWatermark is the end offset of one partition of topic.
func (e *env) highWatermark(topic string, partition int32) (int64, error) {
	if e.broker != nil {
		// Asking kfake directly keeps the query out of the request counts.
		pi := e.broker.PartitionInfo(topic, partition)
		if pi == nil {
			return 0, fmt.Errorf("no partition %d of %s", partition, topic)
		}
		return pi.HighWatermark, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	t := kmsg.NewListOffsetsRequestTopic()
	t.Topic = topic
	p := kmsg.NewListOffsetsRequestTopicPartition()
	p.Partition, p.Timestamp = partition, -1
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, e.client)
	if err != nil {
		return 0, err
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition == partition {
				if rp.ErrorCode != 0 {
					return 0, fmt.Errorf("ListOffsets %s: error code %d", topic, rp.ErrorCode)
				}
				return rp.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("ListOffsets: no partition %d in the response", partition)
}

// requestCounter counts the requests the embedded broker receives, by API key, and the record
// bytes of Produce requests.
type requestCounter struct {
	byKey        [128]atomic.Int64
	produceBytes atomic.Int64
}

func (c *requestCounter) observe(req kmsg.Request) {
	if k := req.Key(); k >= 0 && int(k) < len(c.byKey) {
		c.byKey[k].Add(1)
	}
	if p, ok := req.(*kmsg.ProduceRequest); ok {
		for _, t := range p.Topics {
			for _, part := range t.Partitions {
				c.produceBytes.Add(int64(len(part.Records)))
			}
		}
	}
}

// counts is a snapshot of a requestCounter.
type counts struct {
	byKey        map[int16]int64
	produceBytes int64
}

// minus is the counts since before.
func (c counts) minus(before counts) counts {
	out := counts{byKey: map[int16]int64{}, produceBytes: c.produceBytes - before.produceBytes}
	for k, v := range c.byKey {
		if d := v - before.byKey[k]; d != 0 {
			out.byKey[k] = d
		}
	}
	return out
}

func (c *requestCounter) snapshot() counts {
	s := counts{byKey: map[int16]int64{}, produceBytes: c.produceBytes.Load()}
	for k := range c.byKey {
		if v := c.byKey[k].Load(); v != 0 {
			s.byKey[int16(k)] = v
		}
	}
	return s
}

// procSample is what /proc says about one process at one moment.
type procSample struct {
	cpuTicks int64 // utime + stime, in USER_HZ ticks
	rssKB    int64
	anonKB   int64 // RssAnon: private memory; the rest of VmRSS is mostly the binary's shared text
	threads  int64
}

// userHZ is the unit of /proc/<pid>/stat's times; Linux fixes it at 100 for user space.
const userHZ = 100

func sampleProc(pid int) (procSample, error) {
	var s procSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name may contain spaces and parentheses; the fields after it do not.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	fields := strings.Fields(rest) // fields[0] is the state, field 3 of the file
	if len(fields) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return s, err
	}
	s.cpuTicks = utime + stime
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		switch key {
		case "VmRSS":
			s.rssKB, _ = strconv.ParseInt(f[0], 10, 64)
		case "RssAnon":
			s.anonKB, _ = strconv.ParseInt(f[0], 10, 64)
		case "Threads":
			s.threads, _ = strconv.ParseInt(f[0], 10, 64)
		}
	}
	return s, nil
}

// brokerTicks is the CPU that the JVMs of a cluster started with --kafka real have used so far, in
// USER_HZ ticks; 0 for any other broker, whose CPU is this process's or not measured.
func (e *env) brokerTicks() (int64, error) {
	var total int64
	for _, pid := range e.brokerPids {
		s, err := sampleProc(pid)
		if err != nil {
			return 0, fmt.Errorf("sampling the Kafka JVM: %w", err)
		}
		total += s.cpuTicks
	}
	return total, nil
}

// loadAverage reads the one-minute load average, to show how busy the machine was.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// undelayedKeys are the requests delayAnswers never holds back: the handshake before anything else
// (ApiVersions, SASL), which a slow broker answers as slowly but which only a connection's start
// sends.
var undelayedKeys = map[kmsg.Key]bool{kmsg.ApiVersions: true, kmsg.SASLHandshake: true, kmsg.SASLAuthenticate: true}

// delayAnswers makes the broker answer every request but undelayedKeys e.delay late: a control
// function per request key sleeps that long before the broker handles the request (SleepControl
// lets other connections go on meanwhile). kfake, as Kafka, takes a connection's next request only
// once it has answered the one before, so a connection's requests wait for one another: a broker
// whose request handling is slow, not a slow network. A delay of zero sleeps not at all.
func (e *env) delayAnswers(b *kafkatest.Broker) {
	for k := range kmsg.Key(100) {
		if undelayedKeys[k] || kmsg.NameForKey(int16(k)) == "Unknown" {
			continue
		}
		b.ControlKey(int16(k), func(kmsg.Request) (kmsg.Response, error, bool) {
			if d := time.Duration(e.delay.Load()); d > 0 {
				b.SleepControl(func() { time.Sleep(d) })
			}
			return nil, nil, false
		})
	}
}
