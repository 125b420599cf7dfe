package kafkatest

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// AsKafka makes the broker that Start, StartT, StartNet or StartNetOnPort runs answer as Apache
// Kafka does where kfake is more lenient (askafka_*.go, each behaviour beside the Kafka source it
// follows). It is a kfake.Opt only so that it can ride in the same list; given to kfake.NewCluster
// directly it does nothing. The broker's Kafka field then holds its knobs.
//
// It works at the wire, between the Netem and kfake, so it needs kafkatest's listener and the
// protocol in the clear: under kfake.TLS (whose listener wraps ours) it relays the encrypted bytes
// unchanged, and with a kfake.ListenFn of the caller's own it is not there at all.
func AsKafka(opts ...KafkaOpt) kfake.Opt {
	cfg := defaultKafkaConfig()
	for _, o := range opts {
		o(&cfg)
	}
	// kfake.Opt has an unexported method: embedding one is the only way to be one. This one merges
	// no configs, so applied by kfake it changes nothing.
	return &asKafka{Opt: kfake.BrokerConfigs(nil), cfg: cfg}
}

// AsKafkaByDefault is AsKafka(opts...) unless AsKafkaEnv is set, in which case the environment
// decides as for a broker started without either: "0" for plain kfake, "3.9" for Kafka 3.9's
// answers. It is for the tests whose subject is how goneli copes with what Apache Kafka answers
// (goneli's own connection, the group check, Describe, the doctor, KIP-848, the lease), so that
// `go test` runs them as against Kafka while the environment can still run them on plain kfake.
func AsKafkaByDefault(opts ...KafkaOpt) kfake.Opt {
	a := AsKafka(opts...).(*asKafka)
	a.byDefault = true
	return a
}

// AsKafkaEnv names the environment variable that applies AsKafka to every broker that Start and
// its variants run without one: "1" or "4.0" for AsKafka(), "3.9" for AsKafka(Version(Kafka39)).
// It lets a package's broker tests run as against Apache Kafka without a change to each test.
const AsKafkaEnv = "KAFKATEST_AS_KAFKA"

// KafkaVersion is the Apache Kafka release whose answers AsKafka gives where releases differ.
type KafkaVersion int

const (
	// Kafka40 is Apache Kafka 4.0: KIP-848 generally available, DescribeGroups v6, GROUP config
	// resources, ConsumerGroupDescribe's topic authorization (KAFKA-18813).
	Kafka40 KafkaVersion = iota
	// Kafka39 is Apache Kafka 3.9 (and, for what AsKafka changes, 3.7 and 3.8 with the new group
	// coordinator): no GROUP config resource, DescribeGroups up to v5, ConsumerGroupDescribe
	// without topic authorization.
	Kafka39
)

func (v KafkaVersion) String() string {
	if v == Kafka39 {
		return "3.9"
	}
	return "4.0"
}

// KafkaOpt sets one of AsKafka's knobs.
type KafkaOpt func(*kafkaConfig)

type kafkaConfig struct {
	version KafkaVersion
	// offsetsCreate is how long __consumer_offsets takes to be created after the first
	// FindCoordinator for a group; load how long a coordinator takes to load a group's partition,
	// after that creation and after the coordinator moves.
	offsetsCreate, load time.Duration
	idle                time.Duration   // connections.max.idle.ms
	reauth              time.Duration   // connections.max.reauth.ms; 0 turns re-authentication off
	ackDelay            time.Duration   // how long every node takes to have acks=-1 acknowledged
	sessions            bool            // KIP-848 sessions end a session timeout after the last heartbeat
	bounds              *consumerBounds // nil: Kafka's defaults, widened to the broker's values
	consumerProtocol    *bool           // nil: as the release does by default
	groupConfigsDenied  map[string]bool
}

// groupMaxSession is Kafka's default group.max.session.timeout.ms
// (GroupCoordinatorConfig.GROUP_MAX_SESSION_TIMEOUT_MS_DEFAULT).
const groupMaxSession = 30 * time.Minute

// Defaults: Kafka's for the settings it has (connections.max.idle.ms 10 min, re-authentication
// off), and for the rest what a small cluster shows: creating __consumer_offsets (50 partitions)
// takes about a second, loading a moved coordinator's partition a few hundred milliseconds.
func defaultKafkaConfig() kafkaConfig {
	return kafkaConfig{
		version:       Kafka40,
		offsetsCreate: time.Second,
		load:          500 * time.Millisecond,
		idle:          10 * time.Minute,
		sessions:      true,
	}
}

// Version picks the release whose answers differ: Kafka40 (the default) or Kafka39. It also caps
// the API versions the broker advertises at that release's.
func Version(v KafkaVersion) KafkaOpt { return func(c *kafkaConfig) { c.version = v } }

// OffsetsTopicCreation sets how long FindCoordinator answers COORDINATOR_NOT_AVAILABLE for a group
// after the first one asks, while Kafka would create __consumer_offsets (default 1 s).
func OffsetsTopicCreation(d time.Duration) KafkaOpt {
	return func(c *kafkaConfig) { c.offsetsCreate = d }
}

// CoordinatorLoad sets how long a coordinator answers COORDINATOR_LOAD_IN_PROGRESS for a group
// after __consumer_offsets is created and after the group's coordinator moves (default 500 ms).
func CoordinatorLoad(d time.Duration) KafkaOpt { return func(c *kafkaConfig) { c.load = d } }

// IdleTimeout sets connections.max.idle.ms: a connection that neither sends nor receives for this
// long is closed (Kafka's default 10 min).
func IdleTimeout(d time.Duration) KafkaOpt { return func(c *kafkaConfig) { c.idle = d } }

// ReauthAfter sets connections.max.reauth.ms (KIP-368): SASL sessions last d, and a connection that
// sends anything but a new SaslHandshake after its session ended is closed. 0, Kafka's default,
// turns it off.
func ReauthAfter(d time.Duration) KafkaOpt { return func(c *kafkaConfig) { c.reauth = d } }

// AckDelay makes every node hold an acks=-1 produce for d before answering, as a broker whose
// followers are slow to fetch does; Kafka.SetAckDelay changes it per node while a test runs.
func AckDelay(d time.Duration) KafkaOpt { return func(c *kafkaConfig) { c.ackDelay = d } }

// GroupConfigsDeniedTo refuses DESCRIBE_CONFIGS on every GROUP resource to the SASL users named
// ("ANONYMOUS" for a connection without SASL), as Kafka does to a principal without that grant.
// kfake checks no ACL on GROUP config resources and has no way to ask it for one, so this stands
// in for the ACL.
func GroupConfigsDeniedTo(users ...string) KafkaOpt {
	return func(c *kafkaConfig) {
		if c.groupConfigsDenied == nil {
			c.groupConfigsDenied = map[string]bool{}
		}
		for _, u := range users {
			c.groupConfigsDenied[u] = true
		}
	}
}

// ConsumerProtocol says whether the brokers serve the consumer group protocol (KIP-848), as
// group.coordinator.rebalance.protocols does in Kafka: by default they do from 4.0, and 3.9 does
// only where an operator names "consumer" there. A broker that does not answers
// ConsumerGroupHeartbeat and ConsumerGroupDescribe UNSUPPORTED_VERSION, though it lists both in
// ApiVersions (KafkaApis.isConsumerGroupProtocolEnabled).
func ConsumerProtocol(enabled bool) KafkaOpt {
	return func(c *kafkaConfig) { c.consumerProtocol = &enabled }
}

// consumerProtocolOn reports whether the brokers serve the consumer group protocol. A pointer
// receiver: a copy of the whole config would read groupConfigsDenied, which DenyGroupConfigs
// replaces under Kafka.mu while connections are served (a data race under .ci/stress).
func (c *kafkaConfig) consumerProtocolOn() bool {
	if c.consumerProtocol != nil {
		return *c.consumerProtocol
	}
	return c.version != Kafka39
}

// LenientSessions keeps kfake's KIP-848 sessions, which an OffsetCommit refreshes as a heartbeat
// does, instead of ending them a session timeout after the last heartbeat as Kafka does.
func LenientSessions() KafkaOpt { return func(c *kafkaConfig) { c.sessions = false } }

// asKafka is AsKafka's marker among the kfake options; StartNet takes it out of the list.
type asKafka struct {
	kfake.Opt
	cfg       kafkaConfig
	byDefault bool // AsKafkaByDefault: the environment, when set, decides instead
}

// kfakeOpts are the kfake settings that go with the configuration, given before the caller's own
// options so that those win.
func (c kafkaConfig) kfakeOpts() []kfake.Opt {
	versions := kversion.V4_0_0()
	if c.version == Kafka39 {
		versions = kversion.V3_9_0()
		// Kafka 3.8 added DescribeTopicPartitions (KIP-966), which kversion's 3.9 leaves out; the
		// doctor reads it as a sign of 3.8 or later.
		versions.SetMaxKeyVersion(kmsg.DescribeTopicPartitions.Int16(), 0)
	}
	opts := []kfake.Opt{kfake.MaxVersions(versions),
		// A Metadata request that allows it creates a missing topic, with num.partitions (1), as
		// Kafka does by default (auto.create.topics.enable, KafkaApis.handleTopicMetadataRequest;
		// ServerLogConfigs.NUM_PARTITIONS_DEFAULT): librdkafka's producer and admin client allow it.
		// kfake creates none, and gives a topic created with -1 partitions 10.
		kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1),
		// Kafka's group.max.session.timeout.ms is 30 min (GroupCoordinatorConfig); kfake's 5 min.
		kfake.GroupMaxSessionTimeout(groupMaxSession)}
	if c.reauth > 0 {
		// kfake then answers session_lifetime_ms and accepts a new handshake on an authenticated
		// connection; AsKafka adds the closing of an expired one.
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": strconv.FormatInt(c.reauth.Milliseconds(), 10)}))
	}
	return opts
}

// splitAsKafka takes AsKafka and AsKafkaByDefault out of opts. An AsKafka decides; else, while
// AsKafkaEnv is unset, an AsKafkaByDefault does; else AsKafkaEnv.
func splitAsKafka(opts []kfake.Opt) (*kafkaConfig, []kfake.Opt, error) {
	var explicit, byDefault *kafkaConfig
	rest := opts[:0:0]
	env := os.Getenv(AsKafkaEnv)
	for _, o := range opts {
		a, ok := o.(*asKafka)
		if !ok {
			rest = append(rest, o)
			continue
		}
		cfg := a.cfg
		if a.byDefault {
			byDefault = &cfg
		} else {
			explicit = &cfg
		}
	}
	switch {
	case explicit != nil:
		return explicit, rest, nil
	case byDefault != nil && env == "":
		return byDefault, rest, nil
	}
	switch env {
	case "", "0":
		return nil, rest, nil
	case "1", "4.0":
		cfg := defaultKafkaConfig()
		return &cfg, rest, nil
	case "3.9":
		cfg := defaultKafkaConfig()
		cfg.version = Kafka39
		return &cfg, rest, nil
	default:
		return nil, nil, fmt.Errorf("kafkatest: %s=%q: want empty, 0, 1, 4.0 or 3.9", AsKafkaEnv, env)
	}
}
