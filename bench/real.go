package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/realkafka"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// realKafka is the --kafka value that has the benchmark start Apache Kafka itself (internal/realkafka)
// rather than dial a cluster.
const realKafka = "real"

// benchListener is the Kafka listener that the members use on a cluster the benchmark starts. The
// cluster advertises it at a counting proxy's address, so every request of every member passes the
// proxy, which counts them as the embedded broker's observer counts them on kfake: Apache Kafka
// counts requests only in its JMX metrics, which the benchmark has no agent to read. The harness
// and the benchmark's own queries (group descriptions, end offsets) use the cluster's own listener
// and are not counted, as on kfake, where they are not requests at all.
const benchListener = "BENCH"

// startReal starts a one-node Apache Kafka cluster with the harness's fast group profile (sessions
// down to 500 ms and no initial rebalance delay, as the embedded broker has them), behind a
// counting proxy.
func (e *env) startReal(o options) error {
	proxy, err := realkafka.NewProxy()
	if err != nil {
		return err
	}
	e.proxy = proxy
	c, err := realkafka.Open(realkafka.Options{
		Version:   o.realVersion,
		Listeners: []realkafka.Listener{{Name: benchListener, Advertise: []string{proxy.Addr()}}},
	})
	if err != nil {
		return fmt.Errorf("starting Apache Kafka: %w", err)
	}
	e.real = c
	target, err := c.ListenerAddrs(benchListener)
	if err != nil {
		return err
	}
	e.counter = &requestCounter{}
	proxy.ObserveRequests(func(b []byte) {
		if req := decodeRequest(b); req != nil {
			e.counter.observe(req)
		}
	})
	proxy.SetTarget(target)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Bootstrap(), ",")...))
	if err != nil {
		return err
	}
	e.client = cl
	e.addr = proxy.Addr()
	e.brokerPids = c.Pids()
	e.brokerName = fmt.Sprintf("Apache Kafka %s (1 node, fast profile)", c.Version())
	return nil
}

// decodeRequest reads the API key of a request as a client sent it (after its size) and returns a
// request of that kind: a Produce request decoded, for its record bytes, the others empty, as only
// their kind is counted (decoding every request would cost the harness's CPU, which the figures
// count). It returns nil for a request too short to name its key or of a key kmsg does not know.
func decodeRequest(b []byte) kmsg.Request {
	if len(b) < 2 {
		return nil
	}
	key := int16(binary.BigEndian.Uint16(b))
	req := kmsg.RequestForKey(key)
	if req == nil || key != kmsg.Produce.Int16() {
		return req
	}
	produce := req.(*kmsg.ProduceRequest)
	if body, ok := requestBody(b, req); ok && req.ReadFrom(body) == nil {
		return produce
	}
	return kmsg.RequestForKey(key) // counted, though its bytes are not
}

// requestBody is what follows a request's header: the key and version (2 bytes each), the
// correlation id (4), the client id (a nullable string: a 2-byte length, -1 for null) and, in the
// header of a flexible version (KIP-482), tagged fields. It sets req's version from the header.
func requestBody(b []byte, req kmsg.Request) ([]byte, bool) {
	if len(b) < 10 {
		return nil, false
	}
	version := int16(binary.BigEndian.Uint16(b[2:]))
	if version > req.MaxVersion() {
		return nil, false
	}
	req.SetVersion(version)
	n := int(int16(binary.BigEndian.Uint16(b[8:])))
	rest := b[10:]
	if n > 0 {
		if len(rest) < n {
			return nil, false
		}
		rest = rest[n:]
	}
	if !req.IsFlexible() {
		return rest, true
	}
	tags, k := binary.Uvarint(rest)
	if k <= 0 {
		return nil, false
	}
	rest = rest[k:]
	for range tags {
		if _, k = binary.Uvarint(rest); k <= 0 {
			return nil, false
		}
		rest = rest[k:]
		size, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < size {
			return nil, false
		}
		rest = rest[k+int(size):]
	}
	return rest, true
}

// realNote says how the Apache Kafka figures were measured and what they leave out, under their
// tables.
const realNote = "Apache Kafka ran as one node that the benchmark started (internal/realkafka, the fast group " +
	"profile: no initial rebalance delay, classic sessions down to 500 ms), on the same machine in the same run, after the " +
	"embedded broker's scenarios. Its requests were counted by a proxy in front of it, through which every member " +
	"connected (the broker advertises the proxy's address on the members' listener); its CPU is the JVM's, " +
	"added to the harness's in the broker + harness columns. Not run on it: the fencing trials (they cut one member " +
	"off inside the embedded broker; internal/realkafka/realtest's TestNetworkCut cuts members off Kafka), the " +
	"load scenario (it delays the embedded broker's answers), the phase traces (they read the embedded broker's " +
	"requests as it handles them), the rolling upgrades and the roles handoffs and group (left out to bound the run)."

// printBrokers sets the headline figures of the run on the embedded broker beside those of the
// same scenarios on Apache Kafka (--real-kafka), then prints every table of the Apache Kafka run.
func printBrokers(w io.Writer, rep *Report) {
	real := rep.Real
	if real == nil {
		return
	}
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("| Same run, two brokers (medians; p90 after the slash) | %s | %s |", rep.Broker, real.Broker)
	p("|---|---|---|")
	for _, b := range brokerRows(rep, real) {
		p("| %s | %s | %s |", b.title, b.kfake, b.real)
	}
	p("")
	p("%s", realNote)
	p("")
	p("Every table of the run on %s:", real.Broker)
	printTable(w, real)
}

// brokerRow is one figure of the two brokers.
type brokerRow struct{ title, kfake, real string }

// brokerRows are the figures that both runs measured, in the tables' order.
func brokerRows(a, b *Report) []brokerRow {
	var rows []brokerRow
	add := func(title string, fa, fb func(*Report) (string, bool)) {
		va, oka := fa(a)
		vb, okb := fb(b)
		if oka || okb {
			rows = append(rows, brokerRow{title, orDash(va, oka), orDash(vb, okb)})
		}
	}
	same := func(title string, f func(*Report) (string, bool)) { add(title, f, f) }
	contenders := map[int]bool{}
	for _, r := range []*Report{a, b} {
		for _, fl := range r.FirstLeader {
			contenders[fl.Contenders] = true
		}
	}
	for _, n := range slices.Sorted(maps.Keys(contenders)) {
		same(fmt.Sprintf("first election, %d contenders: processes launched -> first `acquired`", n), func(r *Report) (string, bool) {
			for _, fl := range r.FirstLeader {
				if fl.Contenders == n && fl.LaunchToAcquired.N > 0 {
					return statStr(fl.LaunchToAcquired), true
				}
			}
			return "", false
		})
	}
	var leases []int64
	for _, r := range []*Report{a, b} {
		for _, s := range r.Series {
			if !slices.Contains(leases, s.HeartbeatTimeoutMs) {
				leases = append(leases, s.HeartbeatTimeoutMs)
			}
		}
	}
	for _, name := range []string{seriesHandoff, seriesFailover} {
		for _, lease := range leases {
			same(fmt.Sprintf("%s, HeartbeatTimeout %v", seriesTitle(name), time.Duration(lease)*time.Millisecond), func(r *Report) (string, bool) {
				for _, s := range r.Series {
					if s.Name == name && s.HeartbeatTimeoutMs == lease && s.N > 0 {
						return statStr(s.Stat), true
					}
				}
				return "", false
			})
		}
	}
	cost := func(n int, f func(Cost) string) func(*Report) (string, bool) {
		return func(r *Report) (string, bool) {
			for _, c := range r.Cost {
				if c.Instances == n {
					return f(c), true
				}
			}
			return "", false
		}
	}
	sizes := map[int]bool{}
	for _, r := range []*Report{a, b} {
		for _, c := range r.Cost {
			sizes[c.Instances] = true
		}
	}
	for _, n := range slices.Sorted(maps.Keys(sizes)) {
		if n > 1 {
			same(fmt.Sprintf("group of %d: idle follower CPU s/min", n), cost(n, func(c Cost) string { return fmt.Sprintf("%.2f", c.FollowerCPUSPerMin) }))
		}
		same(fmt.Sprintf("group of %d: leader CPU s/min (%v task loop)", n, time.Duration(a.CostTaskMs*float64(time.Millisecond))),
			cost(n, func(c Cost) string { return fmt.Sprintf("%.2f", c.LeaderCPUSPerMin) }))
		same(fmt.Sprintf("group of %d: broker + harness CPU s/min", n), cost(n, func(c Cost) string {
			if c.BrokerJVMCPUSPerMin > 0 {
				return fmt.Sprintf("%.2f (JVM %.2f)", c.HarnessCPUSPerMin, c.BrokerJVMCPUSPerMin)
			}
			return fmt.Sprintf("%.2f", c.HarnessCPUSPerMin)
		}))
		same(fmt.Sprintf("group of %d: broker requests/s", n), cost(n, func(c Cost) string { return fmt.Sprintf("%.1f", c.RequestsPerS) }))
	}
	same("idle leader CPU s/min (its task sleeps "+idleTaskStr(a)+" per run)", func(r *Report) (string, bool) {
		if r.IdleLeader == nil {
			return "", false
		}
		return fmt.Sprintf("%.2f", r.IdleLeader.LeaderCPUSPerMin), true
	})
	setups := map[string]bool{}
	for _, r := range []*Report{a, b} {
		if r.Roles != nil {
			for _, c := range r.Roles.Cost {
				setups[c.Setup] = true
			}
		}
	}
	for _, setup := range rolesSetups {
		if !setups[setup] {
			continue
		}
		var title string
		f := func(r *Report) (string, bool) {
			if r.Roles == nil {
				return "", false
			}
			for _, c := range r.Roles.Cost {
				if c.Setup == setup {
					title = setupTitle(c)
					return fmt.Sprintf("%.2f", c.RequestsPerSPerRole), true
				}
			}
			return "", false
		}
		va, oka := f(a)
		vb, okb := f(b)
		rows = append(rows, brokerRow{"roles cost, " + title + ": broker requests/s per role", orDash(va, oka), orDash(vb, okb)})
	}
	return rows
}

func orDash(v string, ok bool) string {
	if !ok {
		return "-"
	}
	return v
}

// statStr is a median and a p90.
func statStr(s Stat) string { return msStr(s.Median) + " / " + msStr(s.P90) }

// idleTaskStr is the idle leader's task sleep, as the report recorded it.
func idleTaskStr(r *Report) string {
	return time.Duration(r.IdleTaskMs * float64(time.Millisecond)).String()
}
