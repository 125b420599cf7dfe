// Package sidechantest tests goneli's own connection (internal/sidechan) on the embedded broker:
// what a long-lived connection to a real cluster meets (re-authentication, idle connections,
// throttling, a slow broker), made to happen as Apache Kafka makes it happen.
package sidechantest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/sidechan"
	"github.com/goneli/goneli/internal/testkit"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start runs a broker that answers as Apache Kafka does where kfake is more lenient, unless
// KAFKATEST_AS_KAFKA says otherwise (kafkatest.AsKafkaByDefault): this package's subject is how
// goneli's own connection copes with what a real cluster answers.
func start(t *testing.T, opts ...kfake.Opt) *kafkatest.Broker {
	t.Helper()
	return kafkatest.StartT(t, append(opts, kafkatest.AsKafkaByDefault())...)
}

// newClient makes a client of the broker with conf's settings besides the bootstrap server.
func newClient(t *testing.T, b *kafkatest.Broker, conf kafka.ConfigMap, limit time.Duration) *sidechan.Client {
	t.Helper()
	all := kafka.ConfigMap{"bootstrap.servers": b.Addr, "client.id": "side"}
	for k, v := range conf {
		all[k] = v
	}
	c, err := sidechan.New(all, sidechan.Options{Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// awaitCondition polls cond until it holds; it stands for an event the client does not publish.
func awaitCondition(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(testkit.AwaitLimit)
	for !cond() {
		if time.Now().After(limit) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func records(partitions ...int32) []sidechan.Record {
	var out []sidechan.Record
	for _, p := range partitions {
		out = append(out, sidechan.Record{Partition: p, Key: []byte("k"), Value: []byte(fmt.Sprint("v", p))})
	}
	return out
}

func wantProduced(t *testing.T, res []sidechan.Produced) {
	t.Helper()
	for i, r := range res {
		if r.Err != nil {
			t.Errorf("record %d: %v", i, r.Err)
		}
	}
}

// Records of partitions led by three brokers go to the three at once: a broker that holds its
// acknowledgement (acks=all waits for its in-sync replicas) holds back only its own partitions.
// Each broker's request is held here until all three have arrived, which they do only if they
// were sent at once; one after the other, the first would wait for ever.
func TestProduceToEveryLeaderAtOnce(t *testing.T) {
	const topic = "beats"
	b := start(t, kfake.NumBrokers(3), kfake.SeedTopics(3, topic))
	for p := range int32(3) {
		if err := b.MoveTopicPartition(topic, p, p); err != nil {
			t.Fatal(err)
		}
	}
	var arrived atomic.Int32
	all := make(chan struct{})
	b.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		if arrived.Add(1) == 3 {
			close(all)
		} else {
			b.SleepControl(func() {
				select {
				case <-all:
				case <-time.After(testkit.AwaitLimit):
				}
			})
		}
		return nil, nil, false
	})
	c := newClient(t, b, nil, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.AwaitLimit)
	defer cancel()
	wantProduced(t, c.Produce(ctx, topic, records(0, 1, 2)))
	if n := arrived.Load(); n != 3 {
		t.Fatalf("%d produce requests for three leaders, want 3", n)
	}
}

// A throttled broker (KIP-219: its answer carries ThrottleMillis, and Kafka mutes the connection
// for that long, SocketServer) gets no request on that connection until the throttle ends; a
// round that cannot wait that long fails without sending, and its heartbeats go to librdkafka.
func TestProduceHonoursThrottling(t *testing.T) {
	const topic = "beats"
	b := start(t, kfake.SeedTopics(1, topic))
	var requests atomic.Int32
	b.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		if requests.Add(1) > 1 {
			return nil, nil, false
		}
		q := req.(*kmsg.ProduceRequest)
		resp := q.ResponseKind().(*kmsg.ProduceResponse)
		resp.SetVersion(q.Version)
		resp.ThrottleMillis = int32(time.Minute.Milliseconds())
		for _, rt := range q.Topics {
			rt2 := kmsg.NewProduceResponseTopic()
			rt2.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewProduceResponseTopicPartition()
				p.Partition = rp.Partition
				rt2.Partitions = append(rt2.Partitions, p)
			}
			resp.Topics = append(resp.Topics, rt2)
		}
		return resp, nil, true
	})
	c := newClient(t, b, nil, 10*time.Second)
	wantProduced(t, c.Produce(context.Background(), topic, records(0)))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if res := c.Produce(ctx, topic, records(0)); res[0].Err == nil {
		t.Fatal("a round within the broker's throttle was written")
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the broker received %d produce requests within its throttle, want 1", n)
	}
}

// A request whose answer does not come in time fails, and the next goes over another connection,
// not the one whose answer is still owed.
func TestProduceAfterATimedOutRound(t *testing.T) {
	const topic = "beats"
	b := start(t, kfake.SeedTopics(1, topic))
	release := make(chan struct{})
	var held atomic.Bool
	b.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.CompareAndSwap(false, true) {
			b.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	c := newClient(t, b, nil, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	res := c.Produce(ctx, topic, records(0))
	cancel()
	close(release)
	if res[0].Err == nil {
		t.Fatal("a round whose answer was held succeeded")
	}
	opened := c.Opened()
	wantProduced(t, c.Produce(context.Background(), topic, records(0)))
	if c.Opened() <= opened {
		t.Errorf("the round after a timed-out one opened no connection (%d opened)", c.Opened())
	}
}

// With connections.max.reauth.ms set, Kafka closes a connection that has not re-authenticated by
// then (KIP-368, SaslServerAuthenticator; kafkatest.AsKafka does so too); the client
// re-authenticates on the same connection before the session it was given ends.
func TestReauthenticatesBeforeTheSessionEnds(t *testing.T) {
	b := kafkatest.StartT(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "svc", "pw"), kafkatest.AsKafka(),
		kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": "2000"}))
	var auths atomic.Int32
	b.ControlKey(int16(kmsg.SASLAuthenticate), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		auths.Add(1)
		return nil, nil, false
	})
	c := newClient(t, b, kafka.ConfigMap{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "svc", "sasl.password": "pw"}, 10*time.Second)
	awaitCondition(t, "a re-authentication", func() bool {
		if _, err := c.Request(context.Background(), kmsg.NewPtrApiVersionsRequest()); err != nil {
			t.Fatal(err)
		}
		return auths.Load() > int32(c.Opened())
	})
	if c.Closed() != 0 {
		t.Errorf("%d connections closed; want the session renewed in place", c.Closed())
	}
}

// Kafka closes a connection idle for connections.max.idle.ms (10 minutes by default; Selector),
// and a load balancer may drop one silently sooner. The client closes its own idle connections
// after the configured time, so that it does not send on one that is gone.
func TestClosesIdleConnections(t *testing.T) {
	b := start(t)
	c := newClient(t, b, kafka.ConfigMap{"connections.max.idle.ms": 200}, 10*time.Second)
	if _, err := c.Request(context.Background(), kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatal(err)
	}
	awaitCondition(t, "the idle connections to be closed", func() bool { return c.Opened() > 0 && c.Closed() == c.Opened() })
}

// Kafka answers a DescribeConfigs with the resources it authorizes first
// (ConfigHelper.handleDescribeConfigsRequest): results are matched by resource, not position.
func TestDescribeConfigsMatchedByResource(t *testing.T) {
	b := start(t)
	b.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		q := req.(*kmsg.DescribeConfigsRequest)
		resp := q.ResponseKind().(*kmsg.DescribeConfigsResponse)
		resp.SetVersion(q.Version)
		for i := len(q.Resources) - 1; i >= 0; i-- {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = q.Resources[i].ResourceType, q.Resources[i].ResourceName
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value = "retention.ms", kmsg.StringPtr("of "+rr.ResourceName)
			rr.Configs = append(rr.Configs, c)
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	c := newClient(t, b, nil, 10*time.Second)
	res, err := c.DescribeConfigs(context.Background(), []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: "a"}, {Type: kafka.ResourceTopic, Name: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b"} {
		if res[i].Name != name || res[i].Config["retention.ms"].Value != "of "+name {
			t.Errorf("result %d: %s %v, want topic %s's", i, res[i].Name, res[i].Config, name)
		}
	}
}

// A SCRAM server's first message may name fewer iterations than Kafka's minimum, 4096
// (ScramMechanism): only a server that is not the broker would, to make an offline guess of the
// password cheaper. The client refuses it and sends no proof.
func TestSCRAMRefusesFewIterations(t *testing.T) {
	b := start(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "svc", "pw"))
	var proofs atomic.Int32
	b.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		q := req.(*kmsg.SASLAuthenticateRequest)
		msg := string(q.SASLAuthBytes)
		if strings.HasPrefix(msg, "c=") {
			proofs.Add(1)
			return nil, nil, false
		}
		_, nonce, ok := strings.Cut(msg, ",r=")
		if !ok {
			return nil, nil, false
		}
		resp := q.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.SetVersion(q.Version)
		resp.SASLAuthBytes = []byte("r=" + nonce + "server,s=c2FsdHNhbHRzYWx0c2FsdA==,i=1024")
		return resp, nil, true
	})
	c := newClient(t, b, kafka.ConfigMap{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "svc", "sasl.password": "pw"}, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Request(ctx, kmsg.NewPtrMetadataRequest()); err == nil {
		t.Fatal("authenticated with a server that asked for 1024 iterations")
	}
	if n := proofs.Load(); n != 0 {
		t.Fatalf("sent %d proofs to a server that asked for 1024 iterations", n)
	}
}

// How many connections group descriptions open: one client keeps its connections for the next
// description (the connection that the old transport opened anew, with TLS and SASL, for each).
func TestDescriptionsReuseConnections(t *testing.T) {
	b := start(t, kfake.NumBrokers(3))
	c := newClient(t, b, nil, 10*time.Second)
	const n = 20
	for range n {
		if _, err := c.DescribeConsumerGroups(context.Background(), []string{"g"}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d descriptions of a group on 3 brokers opened %d connections", n, c.Opened())
	if c.Opened() > 3 {
		t.Errorf("%d descriptions opened %d connections; want no more than the seed's and the coordinator's", n, c.Opened())
	}
}

// EndOffsets reads the ends of partitions led by three brokers in one call, one ListOffsets per
// leader, and leaves out a partition the topic does not have.
func TestEndOffsetsOfEveryLeader(t *testing.T) {
	const topic = "beats"
	b := start(t, kfake.NumBrokers(3), kfake.SeedTopics(3, topic))
	for p := range int32(3) {
		if err := b.MoveTopicPartition(topic, p, p); err != nil {
			t.Fatal(err)
		}
	}
	var lists atomic.Int32
	b.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		lists.Add(1)
		return nil, nil, false
	})
	c := newClient(t, b, nil, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.AwaitLimit)
	defer cancel()
	// Partition p gets p+1 records.
	wantProduced(t, c.Produce(ctx, topic, records(0, 1, 1, 2, 2, 2)))
	ends, err := c.EndOffsets(ctx, topic, []int32{0, 1, 2, 7})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{0: 1, 1: 2, 2: 3}
	if fmt.Sprint(ends) != fmt.Sprint(want) {
		t.Errorf("ends %v, want %v", ends, want)
	}
	if n := lists.Load(); n != 3 {
		t.Errorf("%d ListOffsets requests for three leaders, want 3", n)
	}
	if _, err := c.EndOffsets(ctx, topic, []int32{9}); err == nil {
		t.Error("no error for a partition the topic does not have")
	}
}

// A group whose coordinator died (its connections reset, its port closed) and moved to another
// broker is described at the new one. kgo keeps the coordinators it has found and forgets one only
// when it answers that it no longer coordinates the group, which a dead broker never does: on
// Apache Kafka 4.4 every description went to the dead broker until it came back, and no instance
// led meanwhile (realtest's TestBrokerCrash).
func TestDescribeAfterTheCoordinatorDied(t *testing.T) {
	b := start(t, kfake.NumBrokers(3))
	const group = "g"
	c := newClient(t, b, nil, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.AwaitLimit)
	defer cancel()
	if _, err := c.DescribeConsumerGroups(ctx, []string{group}); err != nil {
		t.Fatal(err)
	}
	dead := b.CoordinatorFor(group)
	b.Net.CutBroker(b.Addrs[dead], kafkatest.Refuse)
	if err := b.RemoveNode(dead); err != nil {
		t.Fatal(err)
	}
	if now := b.CoordinatorFor(group); now == dead {
		t.Fatalf("group %s is still coordinated by node %d after its removal", group, dead)
	}
	res, err := c.DescribeConsumerGroups(ctx, []string{group})
	if err != nil {
		t.Fatalf("describing group %s after its coordinator, node %d, died: %v", group, dead, err)
	}
	if d := res.ConsumerGroupDescriptions[0]; d.Error.Code() != kafka.ErrNoError {
		t.Fatalf("describing group %s after its coordinator, node %d, died: %v", group, dead, d.Error)
	}
}

// A broker before Kafka 3.7 offers no ConsumerGroupDescribe, and kgo does not send a request that
// the broker's ApiVersions does not list, with an error it does not export: the connection asks
// the coordinator what it offers, and describes the group with DescribeGroups, as it describes
// a group that ConsumerGroupDescribe does not know (issue 46 C5: the error's text was matched).
func TestDescribesWithoutConsumerGroupDescribe(t *testing.T) {
	b := start(t, kfake.MaxVersions(kversion.V3_6_0()), kfake.SeedTopics(1, "t"))
	all := kafka.ConfigMap{"bootstrap.servers": b.Addr, "client.id": "side"}
	c, err := sidechan.New(all, sidechan.Options{ConsumerProtocol: true, Limit: testkit.AwaitLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	res, err := c.DescribeConsumerGroups(context.Background(), []string{"g"})
	if err != nil {
		t.Fatalf("describing a group on a broker without ConsumerGroupDescribe: %v", err)
	}
	if d := res.ConsumerGroupDescriptions[0]; d.Error.Code() != kafka.ErrNoError || d.State != kafka.ConsumerGroupStateDead {
		t.Errorf("the group is %v (error %v); want Dead, as librdkafka describes a group that does not exist", d.State, d.Error)
	}
}

// kgo honours a request's context while the request is queued or its answer awaited, but not
// while it opens the connection the request needs: a broker that went silent before the instance
// had a connection to it held EndOffsets (waited for in the rebalance callback, for at most half a
// lease) and DescribeConfigs (a tenure's check, for a tenth of one) for kgo's own timeout, a lease,
// on the connection's first request. They return when their context ends.
func TestRequestsEndWithTheirContext(t *testing.T) {
	const topic = "beats"
	b := start(t, kfake.NumBrokers(3), kfake.SeedTopics(3, topic))
	for p := range int32(3) {
		if err := b.MoveTopicPartition(topic, p, p); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, b, nil, testkit.AwaitLimit)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.AwaitLimit)
	defer cancel()
	// The topic's leaders known, and a connection to broker 1, none to broker 2.
	if _, err := c.EndOffsets(ctx, topic, []int32{1}); err != nil {
		t.Fatal(err)
	}
	b.Net.CutBroker(b.Addrs[2], kafkatest.Blackhole)
	t.Cleanup(func() { b.Net.HealBroker(b.Addrs[2]) })
	for _, tc := range []struct {
		name string
		call func(context.Context) error
	}{
		{"EndOffsets", func(ctx context.Context) error { _, err := c.EndOffsets(ctx, topic, []int32{2}); return err }},
		{"DescribeConfigs", func(ctx context.Context) error {
			_, err := c.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceBroker, Name: "2"}})
			return err
		}},
	} {
		short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		err := tc.call(short)
		took := time.Since(start)
		cancel()
		// The client's own bound is testkit.AwaitLimit, a hundred times the context's: what
		// separates the two is far beyond a loaded machine's noise.
		if !errors.Is(err, context.DeadlineExceeded) || took > testkit.AwaitLimit/2 {
			t.Errorf("%s of a broker that went silent: %v after %v; want its context's end, 300ms", tc.name, err, took)
		}
	}
}
