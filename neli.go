package goneli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/obsidiandynamics/libstdgo/concurrent"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// State is the lifecycle stage of a Neli instance.
type State int32

const (
	// Live means the instance is contending for, or holding, leadership.
	Live State = iota

	// Closing means Close has begun: the instance no longer leads and is releasing its clients.
	Closing

	// Closed means the instance has left the group and closed its clients (or given up waiting
	// for them, see ErrCloseTimeout). The barrier may still be returning from its last event;
	// Await waits for that as well.
	Closed
)

// String names the state.
func (s State) String() string {
	switch s {
	case Live:
		return "Live"
	case Closing:
		return "Closing"
	case Closed:
		return "Closed"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Neli contends for leadership of one group on behalf of one process. It is safe for concurrent
// use.
type Neli interface {
	// IsLeader reports whether this instance holds a valid lease now. It reads atomics and the
	// monotonic clock, so it is cheap, never blocks, and turns false the moment the lease lapses
	// even if nobody is pulsing.
	IsLeader() bool

	// Pulse does the due Kafka work (polling, heartbeats, lease checks) and reports leadership. A
	// leader returns at once; a non-leader keeps pulsing until it becomes leader or timeout
	// passes, and then returns (false, nil). Errors are fatal: the instance cannot continue. They
	// include a *SessionTimeoutError when the broker refuses the group session that HeartbeatTimeout
	// implies.
	Pulse(timeout time.Duration) (bool, error)

	// PulseCtx is Pulse bounded by ctx. When ctx's deadline passes it returns (false, nil), as
	// Pulse does on timeout; when ctx is cancelled it returns (false, ctx.Err()), whether or not
	// the instance leads.
	PulseCtx(ctx context.Context) (bool, error)

	// Deadline is the throttle that keeps the consumer from being polled more often than
	// Config.MinPollInterval.
	Deadline() concurrent.Deadline

	// Close gives up leadership (IsLeader turns false and the barrier receives LeaderRevoked if
	// a tenure was acquired), then leaves the group so that a successor is elected at once, and
	// releases every client and goroutine. It is idempotent: later calls wait for the first to
	// finish and return its result. It returns within max.poll.interval.ms plus HeartbeatTimeout,
	// whatever the broker or the barrier does (see ErrCloseTimeout and Barrier). A Close made
	// while the barrier is being called (from the barrier itself, or from another goroutine) does
	// not wait for that call: it returns once the instance has left the group, and the remaining
	// events follow when the call returns; Await waits for those as well.
	Close() error

	// Await blocks until the instance is Closed and the barrier has returned from its last event,
	// or the close bound (see Close) has passed.
	Await()

	// State reports the lifecycle stage.
	State() State

	// Background starts a goroutine that pulses continually and runs task whenever this
	// instance leads. See Pulser.
	Background(task LeaderTask) (Pulser, error)
}

// maxEventsPerCycle bounds the work one Pulse does when a backlog has built up in the consumer.
const maxEventsPerCycle = 1000

// leaderTopicConfig keeps the topic small: only the last few seconds of heartbeats matter.
var leaderTopicConfig = map[string]string{
	"cleanup.policy": "delete",
	"retention.ms":   "600000",
	"segment.ms":     "600000",
}

// neli is the Kafka side of an instance (driver.go, closer.go): it owns the clients, runs the poll
// cycle and the rebalance callback, and feeds what it sees to the lease of each partition it
// contends for (lease.go), whose verdicts it carries out. Events go to the application through the
// dispatcher (dispatch.go); the group check and the lease watchdog have small types of their own.
type neli struct {
	config    Config
	timing    groupTiming
	barrier   Barrier
	log       scribe.Scribe
	topic     string
	key       []byte
	clientID  string // the consumer's client.id, by which the group check finds this instance
	consConf  *KafkaConfigMap
	prodConf  *KafkaConfigMap
	adminConf *KafkaConfigMap
	consumer  KafkaConsumer
	observer  *observer   // nil unless Config.ObserveLeader
	events    dispatchers // one per part, in the same order
	digest    string      // of the role list, as the group check sees it; empty for New's single role
	// parts are the partitions contended for, by partition number: only partition 0 today, whose
	// lease is what the Neli and Curator methods report.
	parts []*part
	clock clock
	base  time.Time // origin of the monotonic durations that leases and yields are measured in

	state        atomic.Int32
	pollDeadline concurrent.Deadline
	// leaderSignal wakes a waiting Pulse when the barrier has returned from any LeaderAcquired.
	leaderSignal chan struct{}

	// Lifecycle. Close returns at kafkaClosed when made during a barrier call, else at closed.
	closeOnce sync.Once
	closing   chan struct{} // Close has begun
	// fromBarrier is closed when Close is called while the barrier is being called, perhaps by
	// the barrier itself: the close sequence then waits for no barrier call.
	fromBarrier     chan struct{}
	fromBarrierOnce sync.Once
	kafkaClosed     chan struct{} // the instance has left the group and its clients are closed or abandoned
	closed          chan struct{} // and the last event was delivered
	closeErr        error
	clientsClosed   chan struct{} // every client finished closing, which can be after Close returns
	closers         sync.WaitGroup
	logs            *logForwarder

	checker *groupChecker // the group check (groupcheck.go)
	// wire describes the group over connections of goneli's own (groupwire.go); nil where the
	// clients' security settings are ones it cannot speak, and the check then goes through
	// librdkafka's admin client.
	wire *wireDescriber
	// checkAlone is set after a group check failed: the next one goes through an admin client of
	// its own rather than the producer's (driver.go, describer). Guarded by mu.
	checkAlone bool
	// member says whether this membership of the group passed a group check (groupcheck.go);
	// troubleAt is when a client last saw a broker connection fail (troubled), and deferSince
	// since when a group check has waited for the connections to settle. Guarded by mu.
	member      membership
	groupChecks atomic.Uint64 // descriptions of the group asked for (Stats.GroupChecks)
	troubled    bool
	troubleAt   time.Duration
	deferSince  time.Duration
	deferring   bool
	reach       reachability // whether Kafka answers, for Stats (reach.go)
	watchdog    *watchdog

	// mu guards the lease and the fields below. It is held while the consumer is polled, and so
	// in the rebalance callback, but never while the application is called. An instance that
	// holds no partition polls for up to MinPollInterval (pollFor), so Close may wait that long
	// for it.
	mu       sync.Mutex
	producer KafkaProducer
	// producerOK is when the producer was opened or last delivered a record, and producerRecycled
	// counts the producers replaced for delivering nothing (noteDelivery).
	producerOK        time.Duration
	producerDelivered time.Duration
	producerRecycled  int
	// consumerRenewed is when the consumer was last replaced for reading nothing back
	// (renewConsumer); retired holds the replaced consumers, whose rebalance callbacks are
	// ignored while they close in the background.
	consumerRenewed  time.Duration
	consumerRenewals int
	retired          sync.Map
	throttle         logThrottle
	unsubscribed     bool           // left the group to yield
	groupParts       map[int32]bool // partitions of the leader topic the group has assigned to this member
	rebalances       int            // rebalance callbacks so far
	// owedCommit is set when a revocation took partitions with stored offsets, which librdkafka
	// commits once more, until that commit's result has been polled.
	owedCommit bool
	releases   []release // tenures whose released marker waits for the barrier
	// commits sends the consumer's explicit commits (commit.go); commitAsks gathers those that the
	// leases asked for during a cycle, by partition, for one request at its end.
	commits    *committer
	commitAsks map[int32]int64

	// consumerClosing is set once the group consumer's Close has been called; from then on its
	// rebalance callback may run without mu, from a close that goes on in the background.
	consumerClosing atomic.Bool
	// lateRebalances counts rebalance events that reached the callback only during the group
	// consumer's Close, which awaitLeft exists to prevent.
	lateRebalances atomic.Int32

	yieldUntil     atomic.Int64 // on the lease's clock, until which this instance stays out of the group
	yieldRequested atomic.Bool  // a Yield has yet to take this instance out of the group
}

// New validates config, makes sure the leader topic exists and that no member of the group uses
// another one, under KIP-848 (group.protocol=consumer) that the broker's session timeout covers
// HeartbeatTimeout (see the package doc's Guarantees), and joins the group. It does not wait for leadership; call Pulse or Background for
// that. New is bounded in time: an unreachable broker costs at most one HeartbeatTimeout spent
// looking for the topic, after which New succeeds, Pulse keeps trying and Stats reports Kafka
// unreachable (UnreachableSince) until a broker answers. Bootstrap servers that accept connections
// but do not answer as Kafka, whether they answer otherwise or not at all, cost up to two seconds
// more each, and New fails with a NotKafkaError.
//
// The instance contends for one leadership, partition 0 of the leader topic. It is the one-role
// case of NewRoles, whose events have an empty Role.
func New(config Config, barrier ...Barrier) (Neli, error) {
	n, err := newInstance(config, []string{""}, "", barrier)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// newInstance joins the group on behalf of an instance that contends for roles, role i being
// partition i of the leader topic. digest names the role list in the group (see rolesDigest); it
// is empty for the single unnamed role of New.
func newInstance(config Config, roles []string, digest string, barrier []Barrier) (*neli, error) {
	config, timing, err := config.prepare()
	if err != nil {
		return nil, err
	}

	n := &neli{
		config:        config,
		timing:        timing,
		barrier:       NopBarrier(),
		log:           config.Scribe,
		topic:         config.LeaderTopic,
		key:           []byte(config.Name),
		pollDeadline:  concurrent.NewDeadline(*config.MinPollInterval),
		leaderSignal:  make(chan struct{}, 1),
		closing:       make(chan struct{}),
		fromBarrier:   make(chan struct{}),
		kafkaClosed:   make(chan struct{}),
		closed:        make(chan struct{}),
		clientsClosed: make(chan struct{}),
		groupParts:    map[int32]bool{},
		digest:        digest,
	}
	if len(barrier) > 0 && barrier[0] != nil {
		n.barrier = barrier[0]
	}
	n.clock = systemClock{}
	n.base = n.clock.Now()
	for i, role := range roles {
		n.parts = append(n.parts, &part{id: int32(i), name: role, signal: make(chan struct{}, 1), lease: newLease(leaseConfig{
			role: role, timeout: *config.HeartbeatTimeout, interval: *config.RenewInterval, poll: *config.MinPollInterval, releaseWait: timing.maxPoll,
			window: commitWindow(timing.maxPoll, *config.HeartbeatTimeout, timing.interval), clock: n.clock, base: n.base,
		})})
	}
	n.throttle.every = 10 * time.Second

	consumerConf, producerConf, adminConf := config.clientConfigs(timing)
	if digest != "" {
		// The group check tells members with another role list by this suffix (groupcheck.go).
		consumerConf["client.id"] = fmt.Sprint(consumerConf["client.id"]) + rolesSuffix + digest
	}
	n.logs = startLogForwarder(n.log, config.Name)
	n.logs.attach(consumerConf)
	n.logs.attach(producerConf)
	// The admin client cannot forward its logs; its failures come back as errors anyway.
	adminConf["log_level"] = 0
	n.consConf = fromKafkaConfigMap(consumerConf)
	n.prodConf = fromKafkaConfigMap(producerConf)
	n.adminConf = fromKafkaConfigMap(adminConf)
	n.clientID = fmt.Sprint(consumerConf["client.id"])
	n.checker = newGroupChecker()
	if w, err := newWireDescriber(adminConf, !timing.classic); err == nil {
		n.wire = w
	} else {
		n.log.I()("goneli %s: the group check goes through librdkafka's admin client (%v), which librdkafka 2.11.1 "+
			"can abort the process on while brokers restart (confluentinc/librdkafka#4605)", config.Name, err)
	}
	n.watchdog = newWatchdog(n.now, n.expireLeases, n.closing)

	fail := func(err error) (*neli, error) {
		n.checker.stop()
		n.logs.close()
		return nil, err
	}
	if err := n.prepareGroup(); err != nil {
		return fail(err)
	}
	consumer, err := config.KafkaConsumerProvider(n.consConf)
	if err != nil {
		return fail(fmt.Errorf("goneli: cannot create Kafka consumer: %w", err))
	}
	if err := consumer.Subscribe(n.topic, n.onRebalance); err != nil {
		_ = consumer.Close()
		return fail(fmt.Errorf("goneli: cannot subscribe to leader topic %q: %w", n.topic, err))
	}
	n.consumer = consumer
	n.commits = newCommitter(consumer, &n.closers)
	n.commitAsks = map[int32]int64{}
	for _, p := range n.parts {
		p.events = newDispatcher()
		n.events = append(n.events, p.events)
	}
	if config.ObserveLeader || config.OnLeaderChange != nil {
		o, err := newObserver(config, observerConfig(consumerConf), len(n.parts), func(info LeaderInfo) {
			if config.OnLeaderChange != nil {
				n.parts[0].events.post(func() { config.OnLeaderChange(info) })
			}
		})
		if err != nil {
			n.events.stop()
			n.events.wait()
			_ = consumer.Close()
			return fail(err)
		}
		n.observer = o
	}
	what := fmt.Sprintf("%d roles", len(n.parts))
	if digest == "" {
		what = "leadership"
	}
	n.log.I()("goneli %s: contending for %s of group %s on topic %s (lease %v, %s)",
		config.Name, what, config.LeaderGroupID, n.topic, *config.HeartbeatTimeout, n.timing.describe())
	return n, nil
}

// partitionCreator is what ensureTopic asks of a KafkaAdmin to grow the leader topic. It is not
// part of KafkaAdmin, so that wrappers written for earlier versions still satisfy it;
// *kafka.AdminClient has it.
type partitionCreator interface {
	CreatePartitions(ctx context.Context, partitions []kafka.PartitionsSpecification, options ...kafka.CreatePartitionsAdminOption) ([]kafka.TopicResult, error)
}

// prepareGroup makes sure that the leader topic exists with a partition for every role and that
// the group has no members on other leader topics or with other role lists.
func (n *neli) prepareGroup() error {
	admin, err := n.config.KafkaAdminProvider(n.adminConf)
	if err != nil {
		return fmt.Errorf("goneli: cannot create Kafka admin client: %w", err)
	}
	defer admin.Close()
	brokers, reached, err := n.ensureTopic(admin)
	if err != nil || !reached {
		// Not reached: New has spent its HeartbeatTimeout, and the first tenure checks again anyway.
		// A broker may be on its way up, but a port of another service will never answer.
		if err == nil {
			err = checkSpeaksKafka(*n.adminConf, reachTimeout)
		}
		if err == nil && len(n.parts) > 1 {
			n.log.W()("goneli %s: could not make sure that leader topic %s has a partition for each of the %d roles; "+
				"roles beyond its partitions have no leader until a contender that reaches the broker adds them",
				n.config.Name, n.topic, len(n.parts))
		}
		if err == nil && !n.timing.classic {
			n.log.W()("goneli %s: could not reach the broker to read the session timeout it applies to group %s under KIP-848, "+
				"so cannot check that it covers HeartbeatTimeout (%v)", n.config.Name, n.config.LeaderGroupID, *n.config.HeartbeatTimeout)
		}
		return err
	}
	n.groupChecks.Add(1)
	if !n.timing.classic {
		if err := n.checkConsumerGroupSession(admin, brokers); err != nil {
			return err
		}
	}
	var d groupDescriber = admin
	if n.wire != nil {
		d = n.wire
	}
	desc, err := describeGroup(context.Background(), d, n.config.LeaderGroupID, *n.config.HeartbeatTimeout)
	if err != nil {
		// The first tenure checks again before it leads; this check only refuses early.
		n.log.W()("goneli %s: could not describe group %s (%v); its members are checked before this instance leads",
			n.config.Name, n.config.LeaderGroupID, err)
		return nil
	}
	if v := judgeGroup(desc, n.topic, n.clientID, "", 0); v.conflict != nil {
		if v.conflict.definite() {
			return v.conflict
		}
		// A member whose partitions' topic the broker does not name may well use this topic: New
		// cannot refuse on that, but no tenure leads while such a member holds a partition.
		n.log.W()("goneli %s: %v", n.config.Name, v.conflict)
	}
	return nil
}

// ensureTopic creates the leader topic with a partition per role if the broker says it is missing,
// or adds partitions to one that has too few, and reports whether the broker could be reached, and
// the ids of the brokers in the cluster if so. If it could not be reached in time the check is
// skipped: the consumer reports a missing topic later, through Pulse's logs.
func (n *neli) ensureTopic(admin KafkaAdmin) (brokers []int32, reached bool, err error) {
	timeout := *n.config.HeartbeatTimeout
	need := len(n.parts)
	md, err := admin.GetMetadata(&n.topic, false, int(timeout.Milliseconds()))
	if err != nil {
		n.log.W()("goneli %s: could not check leader topic %s within %v (%v); continuing", n.config.Name, n.topic, timeout, err)
		n.unreachable("admin", fmt.Sprintf("no metadata for leader topic %s within %v: %v", n.topic, timeout, err))
		return nil, false, nil
	}
	for _, b := range md.Brokers {
		brokers = append(brokers, b.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tm, ok := md.Topics[n.topic]
	if ok && tm.Error.Code() == kafka.ErrNoError {
		has := len(tm.Partitions)
		switch {
		case has > need:
			n.log.W()("goneli %s: leader topic %s has %d partitions; %d are used, and the others count towards the balance of the assignment",
				n.config.Name, n.topic, has, need)
		case has < need:
			pc, ok := admin.(partitionCreator)
			if !ok {
				return brokers, true, &PartitionsError{Topic: n.topic, Has: has, Needs: need, Err: errors.New("the KafkaAdmin cannot add partitions")}
			}
			res, err := pc.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: n.topic, IncreaseTo: need}},
				kafka.SetAdminOperationTimeout(timeout))
			if err == nil && len(res) == 1 {
				err = res[0].Error
				if res[0].Error.Code() == kafka.ErrNoError {
					n.log.I()("goneli %s: added partitions to leader topic %s: %d, was %d", n.config.Name, n.topic, need, has)
					return brokers, true, nil
				}
			}
			return brokers, true, &PartitionsError{Topic: n.topic, Has: has, Needs: need, Err: err}
		}
		return brokers, true, nil
	}
	if ok && tm.Error.Code() != kafka.ErrUnknownTopicOrPart && tm.Error.Code() != kafka.ErrUnknownTopic {
		return brokers, true, &TopicError{Topic: n.topic, Err: tm.Error}
	}
	spec := kafka.TopicSpecification{Topic: n.topic, NumPartitions: need, ReplicationFactor: -1, Config: leaderTopicConfig}
	if rf := n.config.LeaderTopicReplicationFactor; rf > 0 {
		spec.ReplicationFactor = rf
		if rf >= 2 {
			spec.Config = maps.Clone(leaderTopicConfig)
			spec.Config["min.insync.replicas"] = strconv.Itoa(min(2, rf-1))
		}
	}
	res, err := admin.CreateTopics(ctx, []kafka.TopicSpecification{spec}, kafka.SetAdminOperationTimeout(timeout))
	if err == nil && len(res) == 1 {
		err = res[0].Error
		if res[0].Error.Code() == kafka.ErrNoError || res[0].Error.Code() == kafka.ErrTopicAlreadyExists {
			n.log.I()("goneli %s: created leader topic %s", n.config.Name, n.topic)
			return brokers, true, nil
		}
	}
	return brokers, true, &TopicError{Topic: n.topic, Partitions: need, Err: err}
}

// IsLeader reports on the first role, the only one of an instance made by New.
func (n *neli) IsLeader() bool {
	return n.isLeaderOf(n.parts[0])
}

// isLeaderOf is IsLeader for one role.
func (n *neli) isLeaderOf(p *part) bool {
	return n.State() == Live && !n.yielding() && p.lease.isLeader()
}

// leadsAny reports whether this instance leads at least one role.
func (n *neli) leadsAny() bool {
	for _, p := range n.parts {
		if n.isLeaderOf(p) {
			return true
		}
	}
	return false
}

// now is the time on the monotonic scale that leases and yields are measured in.
func (n *neli) now() time.Duration {
	return n.clock.Now().Sub(n.base)
}

// yielding reports whether a Yield keeps this instance from leading now.
func (n *neli) yielding() bool {
	return n.yieldRequested.Load() || n.yieldUntil.Load() > int64(n.now())
}

func (n *neli) State() State {
	return State(n.state.Load())
}

func (n *neli) Deadline() concurrent.Deadline {
	return n.pollDeadline
}

func (n *neli) Await() {
	<-n.closed
}

func (n *neli) Pulse(timeout time.Duration) (bool, error) {
	return n.pulse(nil, nil, timeout)
}

func (n *neli) PulseCtx(ctx context.Context) (bool, error) {
	return n.pulse(ctx.Done(), ctx.Err, -1)
}

// pulse runs due cycles until this instance leads, the timeout (if not negative) passes, done is
// closed, or the instance closes.
func (n *neli) pulse(done <-chan struct{}, doneErr func() error, timeout time.Duration) (bool, error) {
	start := time.Now()
	var timer *time.Timer
	for {
		if n.State() != Live {
			return false, ErrNonLivePulse
		}
		select {
		case <-done:
			// Checked before anything else, so that a leader too answers an ended context as
			// PulseCtx's doc says, rather than with its leadership.
			return false, ctxResult(doneErr())
		default:
		}
		limit := time.Duration(-1)
		if timeout >= 0 {
			limit = max(timeout-time.Since(start), 0)
		}
		if err := n.pulseOnce(limit); err != nil {
			return false, err
		}
		if n.leadsAny() {
			return true, nil
		}
		wait := n.cycleWait()
		if timeout >= 0 {
			left := timeout - time.Since(start)
			if left <= 0 {
				return false, nil
			}
			wait = min(wait, left)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-done:
			timer.Stop()
			return false, ctxResult(doneErr())
		case <-n.closing:
			timer.Stop()
			return false, ErrNonLivePulse
		case <-n.leaderSignal:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// ctxResult is what PulseCtx returns for its context's error: nothing for a deadline, which ends a
// pulse like Pulse's timeout, and the error itself for a cancellation.
func ctxResult(err error) error {
	if err == context.DeadlineExceeded {
		return nil
	}
	return err
}

// pulseOnce runs a cycle if one is due, waiting in the consumer's poll for at most limit (if not
// negative) beyond PollDuration.
func (n *neli) pulseOnce(limit time.Duration) error {
	// Most calls from a leader's loop find nothing due. Checking first keeps them free of the two
	// heap allocations that the closure below costs (see BenchmarkLeader/PulseNotDue).
	if n.pollDeadline.Expired() {
		return n.runCycle(limit)
	}
	if n.proving() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.State() == Live {
			return n.cycle(*n.config.PollDuration)
		}
	}
	return nil
}

// pollFor is how long a cycle waits in the consumer's poll. An instance that holds no partition
// has nothing to renew, fence or release, and waits for up to MinPollInterval (within limit, if not
// negative): it then serves a new assignment the moment it arrives rather than at its next cycle,
// which shortens every handoff by up to a poll interval. Called with mu held.
func (n *neli) pollFor(limit time.Duration) time.Duration {
	base := *n.config.PollDuration
	if len(n.releases) > 0 || n.yielding() {
		return base
	}
	for _, p := range n.parts {
		if p.lease.t.active {
			return base
		}
	}
	d := *n.config.MinPollInterval
	if limit >= 0 {
		d = min(d, limit)
	}
	return max(d, base)
}

// proofPoll is the poll interval of an instance with a tenure that proves its first lease. The
// proof is a chain of round trips (the heartbeat produced, fetched back, its offset committed, the
// group described), each of which would otherwise wait for the next MinPollInterval to be seen.
const proofPoll = 2 * time.Millisecond

// proving reports whether a tenure of this instance is proving its first lease: assigned, not
// acquired yet, not waiting for a predecessor to release the partition, and within one
// HeartbeatTimeout of its assignment, so that a tenure that cannot lead (a group conflict, say)
// does not keep the instance polling fast.
func (n *neli) proving() bool {
	now := n.now()
	for _, p := range n.parts {
		if v := p.lease.load(); v.proveBy > now && !v.releasing {
			return true
		}
	}
	return false
}

// cycleWait is how long a pulsing loop may wait before its next cycle is due.
func (n *neli) cycleWait() time.Duration {
	if n.proving() {
		return proofPoll
	}
	return max(n.pollDeadline.Remaining(), time.Millisecond)
}

// runCycle runs a cycle unless another goroutine has just claimed the poll deadline.
func (n *neli) runCycle(limit time.Duration) (err error) {
	n.pollDeadline.TryRun(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.State() == Live {
			err = n.cycle(n.pollFor(limit))
		}
	})
	return err
}

// deliver posts the events of a transition of p's lease to the application, in order.
// LeaderAcquired becomes visible to IsLeader once its barrier call has returned. It returns the
// delivery of the last event, if any.
func (n *neli) deliver(p *part, events []Event) *delivery {
	var calls []func()
	for _, e := range events {
		n.log.I()("goneli %s: %v", n.config.Name, e)
		call := func() { n.barrier(e) }
		if _, ok := e.(LeaderAcquired); ok {
			l := p.lease
			epoch := l.epoch
			call = func() {
				p.acquiring.Store(epoch)
				n.barrier(e)
				l.acquiredDelivered(epoch)
				for _, s := range []chan struct{}{n.leaderSignal, p.signal} {
					select {
					case s <- struct{}{}:
					default:
					}
				}
			}
		}
		calls = append(calls, call)
	}
	return p.events.post(calls...)
}

// acquisitionStands reports, from within the barrier's call for a LeaderAcquired of role, whether
// that acquisition still stands: its lease is held and has not run out, nothing has fenced or ended
// it since (a later acquisition of the same tenure is another one), and the instance is neither
// closing nor yielding. It is what IsLeader will say once the call returns, except that the event
// that ends the acquisition may come at any moment after.
func (n *neli) acquisitionStands(role string) bool {
	for _, p := range n.parts {
		if p.name == role {
			v := p.lease.load()
			return n.State() == Live && !n.yielding() && v.leading && v.epoch == p.acquiring.Load() && n.now() < v.end
		}
	}
	return false
}

func (n *neli) Close() error {
	// A call made while the application is being called may come from the barrier itself, which
	// cannot return before Close does: it waits only for the Kafka side, and the close sequence
	// stops waiting for the barrier, leaving release markers to hold successors back instead.
	during := n.events.inCall()
	if during {
		n.fromBarrierOnce.Do(func() { close(n.fromBarrier) })
	}
	n.closeOnce.Do(func() {
		n.state.Store(int32(Closing))
		close(n.closing)
		go n.shutdown()
	})
	if during {
		<-n.kafkaClosed
	} else {
		<-n.closed
	}
	return n.closeErr
}
