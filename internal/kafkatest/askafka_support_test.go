package kafkatest

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// await bounds every wait of these tests.
const await = 20 * time.Second

// instant leaves out the coordinators' creation and loading, for the tests of other behaviours.
var instant = []KafkaOpt{OffsetsTopicCreation(0), CoordinatorLoad(0)}

// kip848 lets KIP-848 members heartbeat often and expire fast.
var kip848 = kfake.BrokerConfigs(map[string]string{
	"group.consumer.heartbeat.interval.ms": "100",
	"group.consumer.session.timeout.ms":    "1000",
})

// eachBroker runs test on plain kfake and on kfake AsKafka(kopts...), both started with opts.
// AsKafkaEnv is cleared so that the plain one stays plain.
func eachBroker(t *testing.T, kopts []KafkaOpt, opts []kfake.Opt, test func(t *testing.T, b *Broker, asKafka bool)) {
	t.Setenv(AsKafkaEnv, "")
	for _, asKafka := range []bool{false, true} {
		name := "kfake"
		if asKafka {
			name = "AsKafka"
		}
		t.Run(name, func(t *testing.T) {
			o := append([]kfake.Opt(nil), opts...)
			if asKafka {
				o = append(o, AsKafka(kopts...))
			}
			test(t, StartT(t, o...), asKafka)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), await)
	t.Cleanup(cancel)
	return ctx
}

// newClient is a kgo client of b that knows b's nodes. It speaks Kafka 4.0's request versions
// (unless opts say otherwise), which kfake serves too, so that both brokers get the same requests.
func newClient(t *testing.T, b *Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addrs...), kgo.MaxVersions(kversion.V4_0_0())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctxT(t), cl); err != nil {
		t.Fatalf("metadata: %v", err)
	}
	return cl
}

func user(name, pass string) kgo.Opt {
	return kgo.SASL(plain.Auth{User: name, Pass: pass}.AsMechanism())
}

// direct sends req to node as it is, without kgo's routing and retries.
func direct[R kmsg.Response](t *testing.T, cl *kgo.Client, node int32, req kmsg.Request) R {
	t.Helper()
	resp, err := cl.Broker(int(node)).Request(ctxT(t), req)
	if err != nil {
		t.Fatalf("%s to node %d: %v", kmsg.NameForKey(req.Key()), node, err)
	}
	return resp.(R)
}

// routed sends req where kgo sends it (a group request to the group's coordinator).
func routed[R kmsg.Response](t *testing.T, cl *kgo.Client, req kmsg.Request) R {
	t.Helper()
	resp, err := cl.Request(ctxT(t), req)
	if err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp.(R)
}

// join848 makes a KIP-848 member of group subscribed to topic and heartbeats until kfake has
// given it an assignment; it returns the member and its epoch.
func join848(t *testing.T, b *Broker, cl *kgo.Client, group, topic string) (string, int32) {
	t.Helper()
	member, epoch := "m-"+group, int32(0)
	owned := []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	limit := time.Now().Add(await)
	for time.Now().Before(limit) {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.MemberEpoch = group, member, epoch
		req.RebalanceTimeoutMillis, req.SubscribedTopicNames, req.Topics = 5000, []string{topic}, owned
		resp := routed[*kmsg.ConsumerGroupHeartbeatResponse](t, cl, req)
		if resp.ErrorCode != 0 {
			t.Fatalf("heartbeat of %s: error %d", member, resp.ErrorCode)
		}
		epoch = resp.MemberEpoch
		if a := resp.Assignment; a != nil {
			owned = owned[:0]
			for _, tp := range a.Topics {
				ot := kmsg.NewConsumerGroupHeartbeatRequestTopic()
				ot.TopicID, ot.Partitions = tp.TopicID, tp.Partitions
				owned = append(owned, ot)
			}
		}
		if g := b.GroupInfo(group); g != nil && g.NumAssigned() > 0 {
			return member, epoch
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("member %s of %s was never assigned %s", member, group, topic)
	return "", 0
}

// commit commits offset 0 of topic's partition 0 for group, as member at epoch (a simple group's
// commit with member "" and epoch -1), and returns the partition's error code.
func commit(t *testing.T, cl *kgo.Client, group, member string, epoch int32, topic string) int16 {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = group, member, epoch
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rt.Partitions = append(rt.Partitions, kmsg.NewOffsetCommitRequestTopicPartition())
	req.Topics = append(req.Topics, rt)
	return routed[*kmsg.OffsetCommitResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
}

// findCoordinator makes the cluster create its coordinators, as a client does first.
func findCoordinator(t *testing.T, cl *kgo.Client, group string) {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey, req.CoordinatorKeys = group, []string{group}
	routed[*kmsg.FindCoordinatorResponse](t, cl, req)
}

// rawConn speaks to one node without a client library's connection handling, to see what the
// broker does with the connection itself.
type rawConn struct {
	net.Conn
	corr int32
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c}
}

func (c *rawConn) do(req kmsg.Request, version int16) (kmsg.Response, error) {
	req.SetVersion(version)
	c.corr++
	id := "raw"
	if _, err := c.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID(id)).AppendRequest(nil, req, c.corr)); err != nil {
		return nil, err
	}
	if err := c.SetReadDeadline(time.Now().Add(await)); err != nil {
		return nil, err
	}
	frame, err := readFrame(c.Conn)
	if err != nil {
		return nil, err
	}
	return decodeResponse(req, frame)
}

// plainAuth authenticates c with SASL PLAIN and returns the session lifetime the broker gave.
func (c *rawConn) plainAuth(t *testing.T, name, pass string) int64 {
	t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = "PLAIN"
	if resp, err := c.do(hs, 1); err != nil || resp.(*kmsg.SASLHandshakeResponse).ErrorCode != 0 {
		t.Fatalf("handshake: %v %+v", err, resp)
	}
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.SASLAuthBytes = []byte("\x00" + name + "\x00" + pass)
	resp, err := c.do(auth, 1)
	if err != nil || resp.(*kmsg.SASLAuthenticateResponse).ErrorCode != 0 {
		t.Fatalf("authenticate: %v %+v", err, resp)
	}
	return resp.(*kmsg.SASLAuthenticateResponse).SessionLifetimeMillis
}

// batch is a valid record batch of one record.
func batch(value string) []byte {
	rec := kmsg.NewRecord()
	rec.Value = []byte(value)
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // the length's own varint, 0, is one byte
	recs := rec.AppendTo(nil)
	b := kmsg.NewRecordBatch()
	b.Magic, b.ProducerID, b.ProducerEpoch, b.FirstSequence = 2, -1, -1, -1
	b.NumRecords, b.Records = 1, recs
	enc := b.AppendTo(nil)
	binary.BigEndian.PutUint32(enc[8:], uint32(len(enc)-12))
	binary.BigEndian.PutUint32(enc[17:], crc32.Checksum(enc[21:], crc32.MakeTable(crc32.Castagnoli)))
	return enc
}

// produce sends one record to topic's partition 0 on node 0 with the acks that cl is configured
// with (kgo sets a produce request's), and returns the partition's error code.
func produce(t *testing.T, cl *kgo.Client, topic string, timeout time.Duration) int16 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.TimeoutMillis = int32(timeout.Milliseconds())
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch("v")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := direct[*kmsg.ProduceResponse](t, cl, 0, req)
	return resp.Topics[0].Partitions[0].ErrorCode
}
