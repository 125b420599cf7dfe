package goneli

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/kprobe"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// Default values of the optional Config fields, applied by Config.SetDefaults.
const (
	// DefaultPollDuration is the default value of Config.PollDuration.
	DefaultPollDuration = core.DefaultPollDuration

	// DefaultMinPollInterval is the default value of Config.MinPollInterval.
	DefaultMinPollInterval = core.MinPollCap

	// DefaultHeartbeatTimeout is the default value of Config.HeartbeatTimeout.
	DefaultHeartbeatTimeout = 5 * time.Second

	// DefaultRenewalsPerLease sets the default Config.RenewInterval: HeartbeatTimeout divided by
	// it, 500 ms for the default lease. With the default MinPollInterval a leader then holds at
	// least nine tenths of a lease (less one round trip) after every renewal, and can miss five
	// renewals in a row (eight at the default lease) before its lease runs out; see the package
	// doc, Protocol.
	DefaultRenewalsPerLease = core.RenewalsPerLease

	// DefaultBootstrapServers is the bootstrap.servers entry added to Config.KafkaConfig when it
	// names none.
	DefaultBootstrapServers = "localhost:9092"

	// MinHeartbeatTimeout is the smallest HeartbeatTimeout Validate accepts. librdkafka cannot hold
	// a group session shorter than about a second without spurious rebalances (SessionTimeout), and
	// a lease must outlast a few group heartbeats and renewals.
	MinHeartbeatTimeout = core.MinHeartbeatTimeout

	// MaxHeartbeatTimeout is the largest HeartbeatTimeout Validate accepts. The rebalance timeout is
	// twice the lease, and at such leases the group session is about 1.05 times it plus 6 s
	// (SessionTimeout, with the group heartbeat interval capped at 3 s); brokers refuse sessions
	// over their group.max.session.timeout.ms (30 min by default), so leases above about 28 min
	// need that raised.
	MaxHeartbeatTimeout = 30 * time.Minute

	// MaxAddressLength is the longest Config.Address Validate accepts, in bytes. Every heartbeat
	// carries the address, so it is kept to what a URL needs.
	MaxAddressLength = 1024
)

// KafkaConfigMap holds librdkafka configuration properties, shared by the consumer and the
// producer that a Neli creates. See librdkafka's CONFIGURATION.md for the keys.
type KafkaConfigMap map[string]interface{}

// Config holds the settings of a Neli instance. Optional fields left at their zero value are filled
// in by SetDefaults, which New calls.
type Config struct {
	// KafkaConfig is passed to the Kafka clients. Default: bootstrap.servers=localhost:9092, when
	// unset; an empty list is refused.
	// Settings that carry the safety argument (group.id, offset handling, rebalance plumbing) are
	// owned by goneli and rejected here; group timing may be overridden only within safe bounds.
	// Settings that would keep the protocol from working are refused too, rather than overridden,
	// since a user who set them expects them to hold: transactional.id (a transactional producer
	// sends no heartbeat), offset.store.method other than "broker" (the lease is renewed by
	// commits to the group coordinator), fetch.min.bytes other than 1 (a fetch would hold every
	// heartbeat back for its whole wait) and fetch.wait.max.ms above HeartbeatTimeout/3 (a
	// heartbeat that came back that late would leave no renewal to spare).
	// See docs/configuration.md for the full list of derived settings.
	KafkaConfig KafkaConfigMap

	// LeaderTopic is the topic whose partition 0 confers leadership. Default: LeaderGroupID
	// followed by ".neli". It is created with one partition when it does not exist and the broker
	// allows it.
	LeaderTopic string

	// LeaderGroupID is the consumer group shared by all contenders. Default: the sanitised file
	// name of the running program.
	LeaderGroupID string

	// KafkaConsumerProvider creates the consumer. Default: StandardKafkaConsumerProvider().
	KafkaConsumerProvider KafkaConsumerProvider

	// KafkaProducerProvider creates the heartbeat producer, which only an instance that has been
	// assigned partition 0 opens. Default: StandardKafkaProducerProvider().
	KafkaProducerProvider KafkaProducerProvider

	// KafkaAdminProvider creates the short-lived admin client that checks for, and if necessary
	// creates, the leader topic in New. Default: StandardKafkaAdminProvider().
	KafkaAdminProvider KafkaAdminProvider

	// Scribe receives goneli's log output, and librdkafka's if KafkaConfig sets
	// "go.logs.channel.enable" to true (otherwise librdkafka writes its own lines to stderr, as for
	// any confluent-kafka-go client; forwarding costs each client a goroutine that wakes ten times
	// a second, a third of an idle follower's CPU). Default: scribe.New(scribe.StandardBinding()),
	// which writes through the standard log package.
	Scribe scribe.Scribe

	// Name identifies this instance in logs, in its heartbeats and (as goneli-<Name>) in the Kafka
	// client.id. Default: <hostname>_<pid>_<unix seconds>.
	Name string

	// Address is how others reach this instance while it leads, for example the URL of its API, so
	// that followers can forward work to the leader. Any string of at most MaxAddressLength bytes;
	// the leader carries it in every heartbeat and Watch, Curator.Leader, OnLeaderChange, `neli
	// watch` and Describe report it as LeaderInfo.Address. Default: empty, no address.
	Address string

	// PollDuration is how long one Pulse of an instance that holds a partition waits in the
	// consumer's poll for an event. An instance that holds none waits up to a group heartbeat
	// interval, or MinPollInterval if that is longer (within Pulse's timeout), so that it takes a
	// new assignment the moment it arrives; its Close may wait that long. It may not exceed
	// MinPollInterval. Default: DefaultPollDuration (1 ms).
	PollDuration *time.Duration

	// MinPollInterval is the shortest time between two polls of the consumer, except while a new
	// tenure proves its first lease: an instance assigned a partition it does not lead yet polls
	// every couple of milliseconds until it leads (for at most one HeartbeatTimeout), so that its
	// first heartbeat's round trip and commit are seen as they happen. Default:
	// DefaultMinPollInterval (100 ms), or HeartbeatTimeout/20 if that is shorter.
	MinPollInterval *time.Duration

	// HeartbeatTimeout is the lease: leadership lasts until HeartbeatTimeout after the send time
	// of the newest own heartbeat that came back and whose offset the group coordinator accepted.
	// The group session timeout and heartbeat interval are derived from it. Default:
	// DefaultHeartbeatTimeout (5 s); at least MinHeartbeatTimeout and at most MaxHeartbeatTimeout,
	// and at least 2 x RenewInterval + 2 x MinPollInterval, RenewInterval rounded up to a whole
	// number of MinPollIntervals (heartbeats go out on polls), so that a leader keeps its lease
	// through a lost renewal (see the package doc, Protocol).
	HeartbeatTimeout *time.Duration

	// RenewInterval is how often a leader renews its lease: it produces a heartbeat, reads it back
	// and has its offset committed. Each renewal costs a Produce, a Fetch and an OffsetCommit
	// request. It must be at least MinPollInterval and at most a third of HeartbeatTimeout.
	// Default: HeartbeatTimeout/DefaultRenewalsPerLease (500 ms for the default lease), or
	// MinPollInterval if that is longer.
	RenewInterval *time.Duration

	// HandOverAfter is how long this instance may own a role's partition without leading it
	// (Stats.NotLeadingSince: since its assignment, or since it was fenced; a tenure that has yet
	// to lead is given twice this) while its own heartbeats do not come back within a quarter lease,
	// before it hands every role over: it leaves the group as Yield does, so that a member that can
	// renew is elected, and contends again after a back-off (see Stats.HandOvers). An instance that
	// keeps its group session but cannot renew (a slow path to the broker that leads the leader
	// topic's partition, say) would otherwise keep the role without a leader for as long as that
	// lasts; one whose heartbeats come back but whose commits wait is held up by a rebalance, which
	// ends by itself, and does not hand over. It must be at least HeartbeatTimeout/2, as a
	// rebalance can hold a healthy leader's renewals back for most of a lease. A longer one waits
	// longer for the fault to pass before moving leadership; one of years never hands over.
	// Default: nil, which means HeartbeatTimeout, whatever that is.
	HandOverAfter *time.Duration

	// LeaderTopicReplicationFactor is the replication factor the leader topic gets when goneli
	// creates it; a topic that exists is left as it is. With 2 or more, the topic's
	// min.insync.replicas is set to the smaller of 2 and one less than the factor, so that
	// heartbeats (produced with acks=all) survive the loss of a broker. Use 3 in production.
	// Default: 0, the broker's default.replication.factor, which is often 1: losing that one
	// broker then stops every leader of the group until it returns.
	LeaderTopicReplicationFactor int

	// ObserveLeader makes this instance follow who leads, whether or not it is the leader, at the
	// cost of a second consumer that reads partition 0 (see Curator.Leader). Default: false.
	ObserveLeader bool

	// Priority says which contenders should lead: among the members of the group, one of the
	// highest priority leads, and among equal priorities goneli behaves as without them. A leader
	// hands over, gracefully, to a member of higher priority once that member has been in the
	// group for two HeartbeatTimeouts, and then stays out of the group while one is in it. A
	// negative priority leads only when no member of priority 0 or more is left: a canary, or a
	// host far from what the leader writes to. Use a higher priority for the new version in a
	// rolling upgrade (see docs/operations.md). From MinPriority to MaxPriority. The priority
	// travels in the Kafka client.id (goneli--<1000-Priority>-<Name> above 0,
	// goneli-zz<-Priority>-<Name> below), which is why a non-zero one cannot be combined with a
	// client.id of your own; quotas set for the client.id goneli-<Name> do not apply to it. See
	// the package doc, Preferred leaders. Default: 0.
	Priority int

	// OnLeaderChange, if set, is called with the new LeaderInfo whenever the observed leader
	// changes, and implies ObserveLeader. It runs on the goroutine that calls the barrier with the
	// first role's events (the only role of New), in order with them, and must not block for long.
	// Default: nil.
	OnLeaderChange func(LeaderInfo)
}

// Duration returns a pointer to d, for the optional duration fields of Config.
func Duration(d time.Duration) *time.Duration {
	return &d
}

// Sanitise replaces every character of name outside [a-zA-Z0-9._-] with an underscore, giving a
// string that Kafka accepts as a topic name or group ID.
func Sanitise(name string) string {
	return driver.Sanitise(name)
}

// SetDefaults fills the unset optional fields with their defaults.
func (c *Config) SetDefaults() {
	if c.KafkaConfig == nil {
		c.KafkaConfig = KafkaConfigMap{}
	}
	if _, ok := c.KafkaConfig["bootstrap.servers"]; !ok {
		c.KafkaConfig["bootstrap.servers"] = DefaultBootstrapServers
	}
	if c.LeaderGroupID == "" {
		c.LeaderGroupID = Sanitise(filepath.Base(os.Args[0]))
	}
	if c.LeaderTopic == "" {
		c.LeaderTopic = c.LeaderGroupID + ".neli"
	}
	if c.KafkaConsumerProvider == nil {
		c.KafkaConsumerProvider = StandardKafkaConsumerProvider()
	}
	if c.KafkaProducerProvider == nil {
		c.KafkaProducerProvider = StandardKafkaProducerProvider()
	}
	if c.KafkaAdminProvider == nil {
		c.KafkaAdminProvider = StandardKafkaAdminProvider()
	}
	if c.Scribe == nil {
		c.Scribe = scribe.New(scribe.StandardBinding())
	}
	if c.Name == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "localhost"
		}
		c.Name = fmt.Sprintf("%s_%d_%d", host, os.Getpid(), time.Now().Unix())
	}
	if c.PollDuration == nil {
		c.PollDuration = Duration(DefaultPollDuration)
	}
	if c.HeartbeatTimeout == nil {
		c.HeartbeatTimeout = Duration(DefaultHeartbeatTimeout)
	}
	if c.MinPollInterval == nil {
		c.MinPollInterval = Duration(core.DefaultMinPollInterval(*c.HeartbeatTimeout))
	}
	if c.RenewInterval == nil {
		c.RenewInterval = Duration(core.DefaultRenewInterval(*c.HeartbeatTimeout, *c.MinPollInterval))
	}
}

// ownedKafkaKeys are managed by goneli because the lease argument depends on them.
var ownedKafkaKeys = map[string]string{
	"group.id":                        "set Config.LeaderGroupID instead",
	"enable.auto.commit":              "goneli commits the leader's heartbeat offsets itself to verify its group generation",
	"enable.auto.offset.store":        "goneli stores only the offsets of its own verified heartbeats",
	"auto.commit.interval.ms":         "derived from Config.MinPollInterval",
	"enable.partition.eof":            "goneli does not handle partition EOF events",
	"go.application.rebalance.enable": "goneli handles rebalances in its own callback",
	"go.events.channel.enable":        "goneli polls the consumer from Pulse",
	"go.logs.channel":                 `set "go.logs.channel.enable": true instead, and goneli forwards librdkafka's logs to Config.Scribe`,
	"transactional.id": "the heartbeat producer is not transactional, and a transactional producer sends nothing " +
		"before InitTransactions, so no heartbeat would go out and no instance would ever lead",
	"group.instance.id": "static membership lets a replacement with the same instance id take partition 0 at once, " +
		"without a rebalance, while the member it replaced may still hold a lease, so two instances would lead; " +
		"leave it unset (see Static membership in docs/operations.md)",
}

var topicName = regexp.MustCompile(`^[a-zA-Z0-9._\-]{1,249}$`)

// Validate checks every field and the KafkaConfig keys that goneli derives or owns, and returns all
// problems found, each as a *ConfigError (combined with errors.Join).
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, value interface{}, format string, args ...interface{}) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)})
	}

	if c.KafkaConfig == nil {
		bad("KafkaConfig", nil, "must be set (SetDefaults supplies bootstrap.servers=%s)", DefaultBootstrapServers)
	}
	for key, why := range ownedKafkaKeys {
		if v, ok := c.KafkaConfig[key]; ok {
			bad(fmt.Sprintf("KafkaConfig[%q]", key), v, "must not be set: %s", why)
		}
	}
	if v, ok := c.KafkaConfig["bootstrap.servers"]; ok && len(kprobe.Servers(fmt.Sprint(v))) == 0 {
		// librdkafka takes an empty list and only warns at close, after the instance has waited
		// in vain for a broker all its life.
		bad(`KafkaConfig["bootstrap.servers"]`, v, "must not be empty: give host:port[,host:port...], or leave it unset for %s", DefaultBootstrapServers)
	}
	if _, err := c.kafkaBool("go.logs.channel.enable"); err != nil {
		errs = append(errs, err)
	}
	if v, ok := c.KafkaConfig["offset.store.method"]; ok && fmt.Sprint(v) != "broker" {
		bad(`KafkaConfig["offset.store.method"]`, v, `must be "broker" or unset: a lease is renewed only by an offset commit `+
			`that the group coordinator accepts, and offsets kept elsewhere never reach it (and every Close waits out its bound)`)
	}
	if n, ok, err := c.kafkaInt("fetch.min.bytes", "bytes"); err != nil {
		errs = append(errs, err)
	} else if ok && n != 1 {
		bad(`KafkaConfig["fetch.min.bytes"]`, c.KafkaConfig["fetch.min.bytes"], "must be 1 or unset: a heartbeat is a small record, "+
			"and a fetch that waits for more holds every heartbeat back until fetch.wait.max.ms has passed")
	}
	if c.LeaderGroupID == "" {
		bad("LeaderGroupID", nil, "must not be empty")
	}
	switch {
	case c.LeaderTopic == "":
		bad("LeaderTopic", nil, "must not be empty")
	case (c.LeaderTopic == "." || c.LeaderTopic == ".." || !topicName.MatchString(c.LeaderTopic)) && c.LeaderTopic == c.LeaderGroupID+".neli":
		bad("LeaderTopic", c.LeaderTopic, "must be 1 to 249 characters of [a-zA-Z0-9._-]; the default, LeaderGroupID + \".neli\", is not, so set LeaderTopic")
	case c.LeaderTopic == "." || c.LeaderTopic == ".." || !topicName.MatchString(c.LeaderTopic):
		bad("LeaderTopic", c.LeaderTopic, "must be 1 to 249 characters of [a-zA-Z0-9._-] and not '.' or '..'")
	}
	if c.KafkaConsumerProvider == nil {
		bad("KafkaConsumerProvider", nil, "must be set")
	}
	if c.KafkaProducerProvider == nil {
		bad("KafkaProducerProvider", nil, "must be set")
	}
	if c.KafkaAdminProvider == nil {
		bad("KafkaAdminProvider", nil, "must be set")
	}
	if c.Scribe == nil {
		bad("Scribe", nil, "must be set")
	}
	if c.Name == "" {
		bad("Name", nil, "must not be empty")
	}
	c.validatePriority(bad)
	if c.LeaderTopicReplicationFactor < 0 || c.LeaderTopicReplicationFactor > math.MaxInt16 {
		bad("LeaderTopicReplicationFactor", c.LeaderTopicReplicationFactor, "must be 0 (the broker's default) to %d", math.MaxInt16)
	}
	if len(c.Address) > MaxAddressLength {
		bad("Address", c.Address[:32]+"...", "must be at most %d bytes (it is %d), as it travels in every heartbeat", MaxAddressLength, len(c.Address))
	}
	switch {
	case c.PollDuration == nil:
		bad("PollDuration", nil, "must be set")
	case *c.PollDuration < 0:
		bad("PollDuration", *c.PollDuration, "must not be negative")
	case c.MinPollInterval != nil && *c.MinPollInterval >= time.Millisecond && *c.PollDuration > *c.MinPollInterval:
		// A poll holds the instance's lock for as long as it waits, and so holds back heartbeats,
		// renewals and Yield; with a wait near HeartbeatTimeout no lease could ever be renewed.
		bad("PollDuration", *c.PollDuration, "must be at most MinPollInterval (%v)", *c.MinPollInterval)
	}
	switch {
	case c.MinPollInterval == nil:
		bad("MinPollInterval", nil, "must be set")
	case *c.MinPollInterval < time.Millisecond:
		bad("MinPollInterval", *c.MinPollInterval, "must be at least 1ms")
	}
	// A field is compared with another only while that one passed its own checks: "at most
	// HeartbeatTimeout/3 (0s)" says nothing that the HeartbeatTimeout error does not.
	leaseInRange, leaseOK := false, false
	switch {
	case c.HeartbeatTimeout == nil:
		bad("HeartbeatTimeout", nil, "must be set")
	case *c.HeartbeatTimeout < MinHeartbeatTimeout:
		bad("HeartbeatTimeout", *c.HeartbeatTimeout, "must be at least %v", MinHeartbeatTimeout)
	case *c.HeartbeatTimeout > MaxHeartbeatTimeout:
		bad("HeartbeatTimeout", *c.HeartbeatTimeout, "must be at most %v: brokers allow group sessions of at most 30 min by default, and the rebalance timeout is twice the lease", MaxHeartbeatTimeout)
	case c.MinPollInterval != nil && *c.HeartbeatTimeout < 3**c.MinPollInterval:
		leaseInRange = true
		bad("HeartbeatTimeout", *c.HeartbeatTimeout,
			"must be at least 3 x MinPollInterval (%v) so that several heartbeats fit in one lease", *c.MinPollInterval)
	default:
		leaseInRange, leaseOK = true, true
	}
	switch {
	case c.RenewInterval == nil:
		bad("RenewInterval", nil, "must be set")
	case c.MinPollInterval != nil && *c.MinPollInterval >= time.Millisecond && *c.RenewInterval < *c.MinPollInterval:
		bad("RenewInterval", *c.RenewInterval, "must be at least MinPollInterval (%v): heartbeats are produced by polls", *c.MinPollInterval)
	case leaseInRange && *c.RenewInterval > *c.HeartbeatTimeout/3 &&
		// The default RenewInterval exceeds HeartbeatTimeout/3 exactly when MinPollInterval does,
		// which the HeartbeatTimeout error already reports.
		(leaseOK || *c.RenewInterval != core.DefaultRenewInterval(*c.HeartbeatTimeout, *c.MinPollInterval)):
		bad("RenewInterval", *c.RenewInterval, "must be at most HeartbeatTimeout/3 (%v), so that a lease survives a lost renewal", *c.HeartbeatTimeout/3)
	}
	if c.HandOverAfter != nil && leaseInRange && *c.HandOverAfter < *c.HeartbeatTimeout/2 {
		bad("HandOverAfter", *c.HandOverAfter, "must be at least HeartbeatTimeout/2 (%v): a rebalance can hold a healthy leader's "+
			"renewals back for most of a lease, and a shorter bound would hand leadership over for it", *c.HeartbeatTimeout/2)
	}
	if n, ok, err := c.kafkaInt("fetch.wait.max.ms", "milliseconds"); err != nil {
		errs = append(errs, err)
	} else if wait := time.Duration(n) * time.Millisecond; ok && leaseInRange && (wait < 0 || wait > *c.HeartbeatTimeout/3) {
		bad(`KafkaConfig["fetch.wait.max.ms"]`, c.KafkaConfig["fetch.wait.max.ms"], "must be 0 to at most HeartbeatTimeout/3 (%d) with HeartbeatTimeout %v: "+
			"a fetch that returns a heartbeat a whole wait late must leave the lease a renewal to spare",
			(*c.HeartbeatTimeout / 3).Milliseconds(), *c.HeartbeatTimeout)
	}
	if len(errs) == 0 {
		if need, every := renewalBound(*c.MinPollInterval, *c.RenewInterval); *c.HeartbeatTimeout < need {
			interval := c.RenewInterval.String()
			if every != *c.RenewInterval {
				interval += fmt.Sprintf(" (%v, as heartbeats go out on polls)", every)
			}
			bad("HeartbeatTimeout", *c.HeartbeatTimeout,
				"too short for MinPollInterval %v and RenewInterval %s: must be at least 2 x RenewInterval + 2 x MinPollInterval (%v), "+
					"since a renewal takes effect up to RenewInterval + 2 x MinPollInterval after the previous one, and the lease must "+
					"outlast that and one lost renewal; lower MinPollInterval or RenewInterval, or raise HeartbeatTimeout",
				*c.MinPollInterval, interval, need)
		}
	}
	if len(errs) == 0 {
		if _, err := c.groupTiming(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// String renders the configuration with secrets (any KafkaConfig key containing "password",
// "secret", "jaas" or "key", except the paths named *.location) masked.
func (c Config) String() string {
	masked := KafkaConfigMap{}
	for k, v := range c.KafkaConfig {
		lk := strings.ToLower(k)
		if strings.Contains(lk, "password") || strings.Contains(lk, "secret") || strings.Contains(lk, "jaas") ||
			(strings.Contains(lk, "key") && !strings.HasSuffix(lk, ".location")) {
			v = "***"
		}
		masked[k] = v
	}
	return fmt.Sprintf("Config[KafkaConfig=%v, LeaderTopic=%s, LeaderGroupID=%s, Name=%s, Address=%s, "+
		"PollDuration=%s, MinPollInterval=%s, HeartbeatTimeout=%s, RenewInterval=%s, HandOverAfter=%s, Priority=%d]",
		masked, c.LeaderTopic, c.LeaderGroupID, c.Name, c.Address,
		durationString(c.PollDuration), durationString(c.MinPollInterval), durationString(c.HeartbeatTimeout),
		durationString(c.RenewInterval), durationString(c.HandOverAfter), c.Priority)
}

// settings are what the machine needs of a Config that SetDefaults has filled (machine.go).
func (c Config) settings() core.Settings {
	return core.Settings{Name: c.Name, Topic: c.LeaderTopic, Lease: *c.HeartbeatTimeout, Renew: *c.RenewInterval,
		MinPoll: *c.MinPollInterval, HandOverAfter: c.handOverAfter()}
}

// handOverAfter is HandOverAfter, or its default for the HeartbeatTimeout set.
func (c Config) handOverAfter() time.Duration {
	if c.HandOverAfter != nil {
		return *c.HandOverAfter
	}
	return core.HandOverBound(*c.HeartbeatTimeout)
}

// renewalBound is the shortest lease that a leader polled every poll and renewing every renew keeps
// through one lost renewal, and how often it really renews. Heartbeats go out on polls, so renew
// counts as a whole number of polls; a heartbeat is read back at the next poll after it was sent
// and its commit is seen at the one after that, so a renewal takes effect up to every + 2 x poll
// after the previous one (plus round trips, which the lost renewal's slack covers).
func renewalBound(poll, renew time.Duration) (need, every time.Duration) {
	every = (renew + poll - 1) / poll * poll
	return 2*every + 2*poll, every
}

func durationString(d *time.Duration) string {
	if d == nil {
		return "<nil>"
	}
	return d.String()
}

// groupTiming derives the group timing of a Config that SetDefaults has filled (deriveTiming).
func (c Config) groupTiming() (core.GroupTiming, error) {
	var o core.TimingOverrides
	if p, ok := c.KafkaConfig["group.protocol"]; ok && strings.EqualFold(fmt.Sprint(p), "consumer") {
		// KIP-848 moves the session timeout and heartbeat interval to the broker; librdkafka rejects
		// them on the client.
		o.ConsumerProtocol = true
	}
	keys := []struct {
		key string
		to  *time.Duration
	}{{"heartbeat.interval.ms", &o.Interval}, {"session.timeout.ms", &o.Session}, {"max.poll.interval.ms", &o.MaxPoll}}
	for _, k := range keys {
		if o.ConsumerProtocol && k.key != "max.poll.interval.ms" {
			continue
		}
		v, ok, err := c.kafkaMillis(k.key)
		if err != nil {
			return core.GroupTiming{}, err
		}
		if ok {
			*k.to = v
		}
	}
	t, err := core.DeriveTiming(*c.HeartbeatTimeout, *c.MinPollInterval, o)
	if err != nil {
		return t, &ConfigError{Field: fmt.Sprintf("KafkaConfig[%q]", err.Key), Value: err.Value.Milliseconds(), Reason: err.Reason}
	}
	return t, nil
}

// SessionTimeout is the group session timeout (session.timeout.ms) that goneli derives for a lease of
// heartbeatTimeout under the classic group protocol, unless KafkaConfig sets one: the lease, plus
// two group heartbeat intervals (heartbeat.interval.ms, a tenth of the lease within 100 ms and 3 s),
// plus a margin of a twentieth of the lease (at least 50 ms) for the clocks of the leader and the
// coordinator running at different rates, and never less than a second, below which librdkafka
// rebalances spuriously. It is 6.25 s at the default lease of 5 s, 1.25 s at a lease of 1 s and 1 s
// at the shortest lease, 500 ms. A crashed or cut-off leader is replaced about this long after its last group
// heartbeat. The package doc gives the argument. Brokers refuse sessions below their
// group.min.session.timeout.ms (6 s by default in Apache Kafka); New raises a derived session to
// it where it can read it, and to that default where it cannot.
func SessionTimeout(heartbeatTimeout time.Duration) time.Duration {
	return core.SessionTimeout(heartbeatTimeout)
}

// CloseBound is how long Close may take with this configuration, its unset fields taking their
// defaults: the rebalance timeout (max.poll.interval.ms: twice HeartbeatTimeout, or the session
// timeout if that is longer, and under the classic protocol at least 1.5 s, unless KafkaConfig
// sets it) plus one HeartbeatTimeout; 15 s at the default lease, 2 s at the shortest. Run returns within it too once its context ends, if the leader function returns
// promptly when its context is cancelled.
//
// A supervisor that kills a process it asked to stop should wait longer than this, and longer
// than the program needs for its own work after Close: Kubernetes' terminationGracePeriodSeconds,
// systemd's TimeoutStopSec. A process killed while Close is under way is as safe as one that
// crashes, but its successor waits for its group session to expire (SessionTimeout) instead of
// taking over within a group heartbeat interval.
//
// New may raise the bound: where the brokers' group.min.session.timeout.ms is longer than the
// derived session and the rebalance timeout (leases under 3 s against Kafka's default minimum of
// 6 s), New raises both to that minimum (to Kafka's default, 6 s, where it cannot read the
// brokers'), and Close's bound is then that minimum plus one HeartbeatTimeout. CloseBound returns
// Validate's error for a configuration that New would refuse.
func (c Config) CloseBound() (time.Duration, error) {
	// SetDefaults adds bootstrap.servers to the map, which is the caller's.
	c.KafkaConfig = maps.Clone(c.KafkaConfig)
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return 0, err
	}
	t, err := c.groupTiming()
	if err != nil {
		return 0, err
	}
	return t.CloseBound(*c.HeartbeatTimeout), nil
}

// derived is what New derives from a Config, once, for every part of the instance that needs it:
// the Config with its defaults, the group timing, what the machine needs (internal/core.Settings),
// the client configurations (the consumer's client.id naming the role list by digest, as the group
// check tells role lists apart), and whether librdkafka's log lines go to the Scribe.
type derived struct {
	config Config
	// shell is what the driver needs (internal/driver), the timing, the settings and the client
	// configurations included.
	shell driver.Setup
}

// derive prepares c (prepare) and derives the rest from it; digest names the role list (NewRoles),
// empty for New.
func (c Config) derive(digest string) (derived, error) {
	c, timing, err := c.prepare()
	if err != nil {
		return derived{}, err
	}
	s := driver.Setup{Config: c.shellConfig(), Timing: timing, Settings: c.settings(), ForwardLogs: c.forwardsLogs(),
		Observe: c.ObserveLeader || c.OnLeaderChange != nil}
	s.Consumer, s.Producer, s.Admin = c.clientConfigs(timing)
	if digest != "" {
		// The group check tells members with another role list by this suffix (internal/driver,
		// groupcheck.go).
		s.Consumer["client.id"] = fmt.Sprint(s.Consumer["client.id"]) + core.RolesSuffix + digest
	}
	return derived{config: c, shell: s}, nil
}

// shellConfig is what the driver needs of a Config that prepare has filled in: its fields, the
// principal that authorization errors name, and the client providers for the driver's interfaces,
// which have the same methods as this package's.
func (c Config) shellConfig() driver.Config {
	return driver.Config{
		Name:                         c.Name,
		Address:                      c.Address,
		LeaderTopic:                  c.LeaderTopic,
		LeaderGroupID:                c.LeaderGroupID,
		Priority:                     c.Priority,
		LeaderTopicReplicationFactor: c.LeaderTopicReplicationFactor,
		HeartbeatTimeout:             c.HeartbeatTimeout,
		MinPollInterval:              c.MinPollInterval,
		PollDuration:                 c.PollDuration,
		RenewInterval:                c.RenewInterval,
		Scribe:                       c.Scribe,
		Errors:                       shellErrors{c},
		KafkaConsumerProvider: func(conf *driver.KafkaConfigMap) (driver.KafkaConsumer, error) {
			kc, err := c.KafkaConsumerProvider((*KafkaConfigMap)(conf))
			if kc == nil {
				return nil, err
			}
			return kc, err
		},
		KafkaProducerProvider: func(conf *driver.KafkaConfigMap) (driver.KafkaProducer, error) {
			kp, err := c.KafkaProducerProvider((*KafkaConfigMap)(conf))
			if kp == nil {
				return nil, err
			}
			return kp, err
		},
		KafkaAdminProvider: func(conf *driver.KafkaConfigMap) (driver.KafkaAdmin, error) {
			ka, err := c.KafkaAdminProvider((*KafkaConfigMap)(conf))
			if ka == nil {
				return nil, err
			}
			return ka, err
		},
	}
}

// prepare applies the defaults to a copy of c, leaving the caller's KafkaConfig map untouched,
// validates it and derives the group timing.
func (c Config) prepare() (Config, core.GroupTiming, error) {
	if c.KafkaConfig != nil {
		clone := make(KafkaConfigMap, len(c.KafkaConfig))
		for k, v := range c.KafkaConfig {
			clone[k] = v
		}
		c.KafkaConfig = clone
	}
	noGroup := c.LeaderGroupID == ""
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return c, core.GroupTiming{}, err
	}
	if noGroup {
		// Kept from v0.5.0, but two services built as "app" on one cluster would share a group and
		// elect one leader between them without anyone having chosen that.
		c.Scribe.W()("goneli %s: no LeaderGroupID given, so the group is %q, the program's file name; every program of that name on this cluster shares it", c.Name, c.LeaderGroupID)
	}
	t, err := c.groupTiming()
	return c, t, err
}

// kafkaMillis reads a positive millisecond-valued KafkaConfig entry given as an integer or a string.
func (c Config) kafkaMillis(key string) (time.Duration, bool, error) {
	ms, ok, err := c.kafkaInt(key, "milliseconds")
	if !ok || err != nil {
		return 0, false, err
	}
	if ms <= 0 {
		return 0, false, &ConfigError{Field: fmt.Sprintf("KafkaConfig[%q]", key), Value: c.KafkaConfig[key], Reason: "must be positive"}
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// kafkaInt reads a whole-numbered KafkaConfig entry, counting unit, given as an integer or a string.
func (c Config) kafkaInt(key, unit string) (int64, bool, error) {
	raw, ok := c.KafkaConfig[key]
	if !ok {
		return 0, false, nil
	}
	switch v := raw.(type) {
	case int:
		return int64(v), true, nil
	case int32:
		return int64(v), true, nil
	case int64:
		return v, true, nil
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, false, &ConfigError{Field: fmt.Sprintf("KafkaConfig[%q]", key), Value: raw, Reason: "must be a whole number of " + unit}
		}
		return n, true, nil
	default:
		return 0, false, &ConfigError{Field: fmt.Sprintf("KafkaConfig[%q]", key), Value: raw, Reason: fmt.Sprintf("must be an int or a string of digits (%s)", unit)}
	}
}

// kafkaBool reads a boolean KafkaConfig setting: a bool, or the strings librdkafka takes for one
// (as given on a command line).
func (c Config) kafkaBool(key string) (bool, error) {
	raw, ok := c.KafkaConfig[key]
	if !ok {
		return false, nil
	}
	switch v := raw.(type) {
	case bool:
		return v, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "t", "1":
			return true, nil
		case "false", "f", "0":
			return false, nil
		}
	}
	return false, &ConfigError{Field: fmt.Sprintf("KafkaConfig[%q]", key), Value: raw, Reason: `must be true or false (a bool, or "true" or "false")`}
}

// forwardsLogs says whether librdkafka's log lines go to the Scribe (KafkaConfig
// "go.logs.channel.enable", as for any confluent-kafka-go client) rather than to stderr, which
// librdkafka writes to by itself; logForwarder says what forwarding costs.
func (c Config) forwardsLogs() bool {
	on, err := c.kafkaBool("go.logs.channel.enable")
	return on && err == nil
}

// clientConfigs builds the consumer, producer and admin configurations. User settings are copied
// first; the derived settings fill in what the user left unset; owned settings always win.
func (c Config) clientConfigs(t core.GroupTiming) (consumer, producer, admin kafka.ConfigMap) {
	base := kafka.ConfigMap{}
	for k, v := range c.KafkaConfig {
		base[k] = v
	}
	// The log forwarder sets it on the clients whose logs it takes (internal/driver, logs.go).
	delete(base, "go.logs.channel.enable")
	setDefault(base, "client.id", driver.ClientIDFor(c.Name, c.Priority))
	setDefault(base, "enable.metrics.push", false)
	// librdkafka backs off reconnects up to 10 s by default, which would add seconds to recovery
	// after a network cut; leadership decisions are only as fast as the reconnect.
	setDefault(base, "reconnect.backoff.max.ms", 1000)

	consumer = cloneConfig(base)
	consumer["group.id"] = c.LeaderGroupID
	consumer["enable.auto.commit"] = true
	consumer["enable.auto.offset.store"] = false
	consumer["auto.commit.interval.ms"] = int(t.Commit.Milliseconds())
	consumer["enable.partition.eof"] = false
	// Every assignment names its start (releaseLookback records before the end), so a reset only
	// happens when that start is out of range: before the log start of a partition that retention
	// has trimmed, where the earliest record is the one to read from so as not to skip a release
	// marker, or beyond the end of a log that restarted, which is read from its beginning.
	setDefault(consumer, "auto.offset.reset", "earliest")
	if t.Classic {
		consumer["session.timeout.ms"] = int(t.Session.Milliseconds())
		consumer["heartbeat.interval.ms"] = int(t.Interval.Milliseconds())
		// Sticky cooperative assignment keeps partition 0 where it is when followers come and go, so
		// membership churn does not interrupt the leader.
		setDefault(consumer, "partition.assignment.strategy", "cooperative-sticky")
	}
	consumer["max.poll.interval.ms"] = int(t.MaxPoll.Milliseconds())
	// A fetch returns as soon as a heartbeat lands, so its wait only sets how often a leader's fetch
	// comes back empty. Twice the renewal interval keeps that rare (with a wait equal to the
	// interval, half the fetches raced the next heartbeat and lost), and no more than Validate
	// allows a user. librdkafka sends commits on a connection of their own, and its close does not
	// wait for a fetch in flight.
	fetchWait := 100 * time.Millisecond
	if c.RenewInterval != nil {
		fetchWait = core.ClampDuration(2**c.RenewInterval, 100*time.Millisecond, time.Second)
	}
	if c.HeartbeatTimeout != nil {
		fetchWait = min(fetchWait, *c.HeartbeatTimeout/3)
	}
	setDefault(consumer, "fetch.wait.max.ms", int(fetchWait.Milliseconds()))
	setDefault(consumer, "fetch.error.backoff.ms", 100)

	producer = cloneConfig(base)
	for _, k := range consumerOnlyKeys {
		delete(producer, k)
	}
	setDefault(producer, "acks", "all")
	setDefault(producer, "linger.ms", 0)
	// A heartbeat is worthless once its lease would have lapsed; retrying it later only adds noise.
	producer["message.timeout.ms"] = int(c.HeartbeatTimeout.Milliseconds())
	// Every heartbeat's delivery report is awaited before the next is produced (mayProduce).
	producer["go.delivery.reports"] = true
	setDefault(producer, "enable.idempotence", false)
	// confluent-kafka-go sizes both channels for a million entries by default, some 24 MB of
	// buffers for a producer that sends ten small records a second.
	producer["go.events.channel.size"] = 1000
	producer["go.produce.channel.size"] = 0
	// librdkafka lets a producer's metadata requests (and so the admin client's, which is one) ask
	// the broker to create a missing topic, and Apache Kafka does so by default
	// (auto.create.topics.enable) with num.partitions partitions and none of leaderTopicConfig: New's
	// look at a missing leader topic made it, with one partition, before New could create it with one
	// per role, and a topic deleted while the group ran came back. Only New creates the topic.
	producer["allow.auto.create.topics"] = false

	admin = cloneConfig(producer)
	for _, k := range producerOnlyKeys {
		delete(admin, k)
	}
	return consumer, producer, admin
}

var consumerOnlyKeys = []string{"session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
	"partition.assignment.strategy", "auto.offset.reset", "fetch.wait.max.ms", "fetch.error.backoff.ms",
	"group.protocol", "group.remote.assignor", "group.instance.id", "isolation.level", "fetch.min.bytes",
	"fetch.max.bytes", "max.partition.fetch.bytes", "queued.min.messages", "queued.max.messages.kbytes",
	"check.crcs", "allow.auto.create.topics", "group.protocol.type", "coordinator.query.interval.ms"}

var producerOnlyKeys = []string{"go.events.channel.size", "go.produce.channel.size", "go.delivery.reports", "acks", "linger.ms", "message.timeout.ms", "enable.idempotence",
	"batch.size", "batch.num.messages", "compression.type", "compression.codec", "retries", "queue.buffering.max.ms",
	"queue.buffering.max.messages", "queue.buffering.max.kbytes", "request.required.acks", "delivery.timeout.ms"}

func setDefault(m kafka.ConfigMap, key string, value kafka.ConfigValue) {
	if _, ok := m[key]; !ok {
		m[key] = value
	}
}

func cloneConfig(m kafka.ConfigMap) kafka.ConfigMap {
	out := make(kafka.ConfigMap, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// MaxPriority and MinPriority bound Config.Priority.
const (
	MaxPriority = driver.MaxPriority
	MinPriority = driver.MinPriority
)

// validatePriority checks Priority, and the Name and client.id it goes with.
func (c Config) validatePriority(bad func(field string, value interface{}, format string, args ...interface{})) {
	switch {
	case c.Priority > MaxPriority || c.Priority < MinPriority:
		bad("Priority", c.Priority, "must be %d to %d (0, the default, for no preference)", MinPriority, MaxPriority)
		return
	case c.Priority != 0:
		if id, ok := c.KafkaConfig["client.id"]; ok {
			bad("Priority", c.Priority, "needs the client.id goneli derives from Name, which carries it to the group (client.id %q is set in KafkaConfig): "+
				"unset KafkaConfig[\"client.id\"], or leave Priority 0", fmt.Sprint(id))
		}
		return
	}
	if _, ok := c.KafkaConfig["client.id"]; ok || c.Name == "" {
		return
	}
	if p, _ := driver.SplitPriority(Sanitise(c.Name)); p != 0 {
		bad("Name", c.Name, "reads as priority %d in the client.id goneli derives from it (%s): a Name may not begin with "+
			"a dash, three digits and a dash, or with zz, three digits and a dash", p, driver.ClientIDFor(c.Name, 0))
	}
}

// ClientID is the Kafka client.id of an instance whose Config.Name is name and Config.Priority
// priority, unless its KafkaConfig sets one (NewRoles then adds a digest of the role list). Quotas
// and ACLs given to a client.id, and tools that pick a member out by it, need the one with the
// priority in it.
func ClientID(name string, priority int) string {
	return driver.ClientIDFor(name, priority)
}
