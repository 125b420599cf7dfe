package askafka

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := realkafka.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// side is one of the two brokers a case runs on: one node, so that every request can go to it.
type side struct {
	name string
	real bool
	addr string
	rk   *realkafka.Cluster
	kb   *kafkatest.Broker
	// saslAddr is the SASL/PLAIN listener of a side that authorises (dialAs), "" where it has
	// none; admin, if set, is the super user every other connection authenticates as (the real
	// cluster's plain listener needs none: its principal, ANONYMOUS, is a super user there).
	saslAddr string
	admin    *credentials
}

// credentials are a SASL/PLAIN user's.
type credentials struct{ user, pass string }

// pair is a real cluster and the embedded broker answering as the release that AsKafka models
// closest to it: 3.9 for a 3.x cluster, 4.0 for a 4.x one.
type pair struct {
	real, as *side
	// release is the real cluster's major.minor; model is AsKafka's ("3.9" or "4.0"). Where they
	// differ (Kafka 4.1 and later against AsKafka's 4.0) the request versions and features that
	// came after 4.0 differ too, and the cases say which of their fields they leave out then.
	release, model string
	kip848         bool // the real cluster serves the consumer group protocol (4.0 and later)
	nonce          string
}

// fastConfigs are the embedded broker's settings that match realkafka's fast profile.
var fastConfigs = map[string]string{
	"group.consumer.session.timeout.ms":    "2000",
	"group.consumer.heartbeat.interval.ms": "100",
}

// newPair starts the embedded broker AsKafka beside rk, with kopts and opts after the settings of
// the fast profile, and waits until both serve groups. warm says whether to wait for that: a case
// of a new cluster's coordinators must not.
func newPair(t *testing.T, rk *realkafka.Cluster, warm bool, kopts []kafkatest.KafkaOpt, opts ...kfake.Opt) *pair {
	t.Helper()
	p := &pair{nonce: nonce()}
	p.release = release(rk.Version())
	if rk.External() {
		t.Skip("the comparison needs a cluster the tests start: it compares the settings it gives both brokers")
	}
	if len(rk.Nodes(t)) != 1 {
		t.Fatalf("the comparison needs a one-node cluster, has %d", len(rk.Nodes(t)))
	}
	ok, err := rk.KIP848(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	p.kip848 = ok
	p.model = kafkatest.Kafka40.String()
	if !ok {
		p.model = kafkatest.Kafka39.String()
		kopts = append([]kafkatest.KafkaOpt{kafkatest.Version(kafkatest.Kafka39)}, kopts...)
	}
	t.Setenv(kafkatest.AsKafkaEnv, "")
	all := append([]kfake.Opt{kfake.BrokerConfigs(fastConfigs)}, opts...)
	// The fast profile's bounds on a group's own KIP-848 timing.
	kopts = append([]kafkatest.KafkaOpt{kafkatest.ConsumerGroupBounds(500*time.Millisecond, time.Minute, 50*time.Millisecond, 15*time.Second)}, kopts...)
	all = append(all, kafkatest.AsKafka(kopts...))
	kb := kafkatest.StartT(t, all...)
	p.real = &side{name: "Kafka " + rk.Version(), real: true, addr: rk.Node(t, 0).Addr, rk: rk}
	p.as = &side{name: "AsKafka " + p.model, addr: kb.Addr, kb: kb}
	if warm {
		p.as.warm(t)
	}
	return p
}

// release is a version's major.minor.
func release(version string) string {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return version
	}
	return parts[0] + "." + parts[1]
}

func nonce() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// name is a name of the run's own: the real cluster is shared by the package's tests, and -count
// runs them again on it.
func (p *pair) name(s string) string { return s + "-" + p.nonce }

// strip takes the run's nonce out of s, for an observation.
func (p *pair) strip(s string) string { return strings.ReplaceAll(s, "-"+p.nonce, "") }

// sameRelease reports whether AsKafka models the real cluster's release itself.
func (p *pair) sameRelease() bool { return p.release == p.model }

// warm waits until the side's group coordinator answers, as realkafka.Start does for the real
// cluster: FindCoordinator has it create __consumer_offsets and load its partitions.
func (s *side) warm(t *testing.T) {
	t.Helper()
	s.awaitCoordinator(t, "askafka-warm")
}

// awaitCoordinator waits until the coordinators of groups serve them. Kafka loads each partition of
// __consumer_offsets on its own, so that one group's coordinator may answer while another's still
// loads.
func (s *side) awaitCoordinator(t *testing.T, groups ...string) {
	t.Helper()
	w := s.dial(t)
	limit := time.Now().Add(await)
	for {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorKeys = groups
		last := int16(0)
		for _, c := range w.send(fc, 4).(*kmsg.FindCoordinatorResponse).Coordinators {
			last = max(last, c.ErrorCode)
		}
		if last == 0 {
			dg := kmsg.NewPtrDescribeGroupsRequest()
			dg.Groups = groups
			for _, g := range w.send(dg, 5).(*kmsg.DescribeGroupsResponse).Groups {
				last = max(last, g.ErrorCode)
			}
		}
		if last == 0 {
			return
		}
		if time.Now().After(limit) {
			t.Fatalf("%s: the group coordinator still answers %s", s.name, code(last))
		}
		time.Sleep(100 * time.Millisecond) // a coordinator's load gives no event to await
	}
}

// internalTopics lists the internal topics the side has created (AsKafka: would have created).
func (s *side) internalTopics(t *testing.T) []string {
	t.Helper()
	if !s.real {
		return s.kb.Kafka.InternalTopics()
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Topics = nil // every topic
	resp := s.dial(t).send(md, 12).(*kmsg.MetadataResponse)
	var out []string
	for _, want := range []string{"__consumer_offsets", "__transaction_state"} {
		for _, tp := range resp.Topics {
			if tp.Topic != nil && *tp.Topic == want {
				out = append(out, want)
			}
		}
	}
	return out
}

// createTopic creates topic with n partitions on the side, and fails the test if it cannot.
func (s *side) createTopic(t *testing.T, topic string, n int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, n, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp := s.dial(t).send(req, 5).(*kmsg.CreateTopicsResponse)
	if c := resp.Topics[0].ErrorCode; c != 0 && c != kerr.TopicAlreadyExists.Code {
		t.Fatalf("%s: creating %s: %s", s.name, topic, code(c))
	}
	// A new topic's partition leader is known a moment later on Kafka: wait until Metadata has it.
	w := s.dial(t)
	limit := time.Now().Add(await)
	for {
		md := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		md.Topics = append(md.Topics, mt)
		r := w.send(md, 12).(*kmsg.MetadataResponse)
		if len(r.Topics) == 1 && r.Topics[0].ErrorCode == 0 && len(r.Topics[0].Partitions) == int(n) && r.Topics[0].Partitions[0].Leader >= 0 {
			return
		}
		if time.Now().After(limit) {
			t.Fatalf("%s: topic %s has no leader", s.name, topic)
		}
		time.Sleep(50 * time.Millisecond) // no event to await
	}
}

// kafkaUUID is a random Kafka Uuid in its text form, as a KIP-848 member names itself (KIP-1082).
func kafkaUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
