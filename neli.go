package goneli

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
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

	// Closed means every client is closed and every goroutine has ended.
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

// ErrNonLivePulse is returned by Pulse, PulseCtx and Background once Close has begun.
var ErrNonLivePulse = errors.New("goneli: cannot pulse in non-live state")

// Neli contends for leadership of one group on behalf of one process. It is safe for concurrent
// use.
type Neli interface {
	// IsLeader reports whether this instance holds a valid lease now. It reads an atomic and a
	// monotonic clock, so it is cheap, never blocks, and turns false the moment the lease lapses
	// even if nobody is pulsing.
	IsLeader() bool

	// Pulse does the due Kafka work (polling, heartbeats, lease checks) and reports leadership. A
	// leader returns at once; a non-leader keeps pulsing until it becomes leader or timeout
	// passes, and then returns (false, nil). Errors are fatal: the instance cannot continue.
	Pulse(timeout time.Duration) (bool, error)

	// PulseCtx is Pulse bounded by ctx. When ctx's deadline passes it returns (false, nil), as
	// Pulse does on timeout; when ctx is cancelled it returns (false, ctx.Err()).
	PulseCtx(ctx context.Context) (bool, error)

	// Deadline is the throttle that keeps the consumer from being polled more often than
	// Config.MinPollInterval.
	Deadline() concurrent.Deadline

	// Close gives up leadership (IsLeader turns false and the barrier receives LeaderRevoked if
	// a tenure was acquired), then leaves the group so that a successor is elected at once, and
	// releases every client and goroutine. It is idempotent: later calls wait for the first to
	// finish and return its result. It returns within max.poll.interval.ms plus HeartbeatTimeout,
	// whatever the broker or the barrier does (see ErrCloseTimeout and Barrier).
	Close() error

	// Await blocks until the instance is Closed.
	Await()

	// State reports the lifecycle stage.
	State() State

	// Background starts a goroutine that pulses continually and runs task whenever this
	// instance leads. See Pulser.
	Background(task LeaderTask) (Pulser, error)
}

// TopicError reports that the leader topic is missing and could not be created.
type TopicError struct {
	Topic string
	Err   error
}

func (e *TopicError) Error() string {
	return fmt.Sprintf("goneli: leader topic %q does not exist and could not be created (%v); "+
		"create it with one partition, for example: kafka-topics.sh --create --topic %s --partitions 1",
		e.Topic, e.Err, e.Topic)
}

// Unwrap returns the cause.
func (e *TopicError) Unwrap() error { return e.Err }

// maxEventsPerCycle bounds the work one Pulse does when a backlog has built up in the consumer.
const maxEventsPerCycle = 1000

// leaderTopicConfig keeps the topic small: only the last few seconds of heartbeats matter.
var leaderTopicConfig = map[string]string{
	"cleanup.policy": "delete",
	"retention.ms":   "600000",
	"segment.ms":     "600000",
}

type neli struct {
	config    Config
	timing    groupTiming
	barrier   Barrier
	log       scribe.Scribe
	topic     string
	key       []byte
	base      time.Time // origin of the monotonic clock that leases are measured on
	consumer  KafkaConsumer
	prodConf  *KafkaConfigMap
	adminConf *KafkaConfigMap
	clientID  string // the consumer's client.id, by which the group check finds this instance

	// The group check (groupcheck.go) runs one describe at a time, off the pulsing goroutine.
	checkCtx    context.Context
	checkCancel context.CancelFunc
	checks      sync.WaitGroup
	checkDone   chan groupCheck

	state        atomic.Int32
	leaseEnd     atomic.Int64 // monotonic nanoseconds; 0 while not leading
	barrierG     atomic.Int64 // goroutine running the barrier, 0 if none
	pollDeadline concurrent.Deadline

	closeOnce sync.Once
	closing   chan struct{}
	closed    chan struct{}
	closeErr  error
	// clientsClosed is closed once every Kafka client has finished closing, which can be after
	// Close returns (see ErrCloseTimeout).
	clientsClosed chan struct{}
	workers       sync.WaitGroup // lease watchdog
	forwarder     sync.WaitGroup // log forwarder, which outlives Close while a client finishes closing
	closers       sync.WaitGroup // Kafka client closes, which may outlive Close (see closeConsumers)
	logs          chan kafka.LogEvent
	logsStop      chan struct{}
	leaseCh       chan time.Duration

	mu            sync.Mutex // guards the fields below; held while polling and while calling the barrier
	producer      KafkaProducer
	watchdogOn    bool
	ten           tenure
	pending       map[kafka.Offset]confirmed // stored offset -> the heartbeat just before it
	lastCommitted kafka.Offset               // newest partition-0 offset the coordinator accepted from us
	// storedSinceAssign is set once an offset has been stored since partition 0 was assigned:
	// librdkafka then commits it again when the partition is revoked, and owedCommit is set until
	// that commit's result has been polled.
	storedSinceAssign, owedCommit bool
	renewedSent                   time.Duration // send time of the heartbeat behind the current lease
	throttle                      logThrottle
	checking                      bool           // a group check is running
	observer                      *observer      // nil unless Config.ObserveLeader
	unsubscribed                  bool           // left the group to yield
	groupParts                    map[int32]bool // partitions of the leader topic the group has assigned to this member
	rebalances                    int            // rebalance callbacks so far
	held                          *[]Event       // while set, emit collects events here instead of calling the barrier

	// consumerClosing is set once the group consumer's Close has been called; from then on its
	// rebalance callback may run without mu, from a close that goes on in the background.
	consumerClosing atomic.Bool
	// lateRebalances counts rebalance events that reached the callback only during the group
	// consumer's Close, which awaitLeft exists to prevent.
	lateRebalances atomic.Int32

	yieldUntil     atomic.Int64 // monotonic nanoseconds until which this instance stays out of the group
	yieldRequested atomic.Bool  // a Yield has yet to take this instance out of the group
	stats          counters
}

// confirmed is an own heartbeat that came back and awaits the coordinator's acceptance of its
// offset.
type confirmed struct {
	sent   time.Duration
	offset kafka.Offset
}

type tenure struct {
	// verified is set once a group check made after the assignment found no member on another
	// leader topic; until then the tenure does not lead, and held keeps its newest renewal.
	verified   bool
	checkAt    time.Duration
	checkDelay time.Duration
	held       *confirmed

	active        bool
	id            uint64
	seq           uint64
	confirmedSeq  uint64
	leading       bool
	acquired      bool
	since         int64
	token         int64
	nextHeartbeat time.Duration
}

func (t *tenure) name() string {
	return strconv.FormatUint(t.id, 16)
}

// New validates config, makes sure the leader topic exists, and joins the group. It does not wait
// for leadership; call Pulse or Background for that. New is bounded in time: an unreachable
// broker costs at most one HeartbeatTimeout spent looking for the topic, after which New succeeds
// and Pulse keeps trying.
func New(config Config, barrier ...Barrier) (Neli, error) {
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
		base:          time.Now(),
		pollDeadline:  concurrent.NewDeadline(*config.MinPollInterval),
		closing:       make(chan struct{}),
		closed:        make(chan struct{}),
		clientsClosed: make(chan struct{}),
		logs:          make(chan kafka.LogEvent, 64),
		logsStop:      make(chan struct{}),
		leaseCh:       make(chan time.Duration, 1),
		checkDone:     make(chan groupCheck, 1),
		pending:       map[kafka.Offset]confirmed{},
		groupParts:    map[int32]bool{},
	}
	if len(barrier) > 0 && barrier[0] != nil {
		n.barrier = barrier[0]
	}
	n.throttle.every = 10 * time.Second

	consumerConf, producerConf, adminConf := config.clientConfigs(timing)
	for _, cm := range []kafka.ConfigMap{consumerConf, producerConf} {
		cm["go.logs.channel.enable"] = true
		cm["go.logs.channel"] = n.logs
	}
	// The admin client cannot forward its logs; its failures come back as errors anyway.
	adminConf["log_level"] = 0
	n.prodConf = fromKafkaConfigMap(producerConf)
	n.clientID = fmt.Sprint(consumerConf["client.id"])
	n.checkCtx, n.checkCancel = context.WithCancel(context.Background())
	n.forwarder.Add(1)
	go func() {
		defer n.forwarder.Done()
		forwardLogs(n.log, config.Name, n.logs, n.logsStop)
	}()

	fail := func(err error) (Neli, error) {
		n.checkCancel()
		close(n.logsStop)
		n.forwarder.Wait()
		return nil, err
	}
	n.adminConf = fromKafkaConfigMap(adminConf)
	if err := n.prepareGroup(); err != nil {
		return fail(err)
	}
	consumer, err := config.KafkaConsumerProvider(fromKafkaConfigMap(consumerConf))
	if err != nil {
		return fail(fmt.Errorf("goneli: cannot create Kafka consumer: %w", err))
	}
	if err := consumer.Subscribe(n.topic, n.onRebalance); err != nil {
		_ = consumer.Close()
		return fail(fmt.Errorf("goneli: cannot subscribe to leader topic %q: %w", n.topic, err))
	}
	n.consumer = consumer
	if config.ObserveLeader || config.OnLeaderChange != nil {
		oc := observerConfig(consumerConf)
		o, err := newObserver(config, oc, func(info LeaderInfo) {
			if config.OnLeaderChange != nil {
				n.callback(func() { config.OnLeaderChange(info) })
			}
		})
		if err != nil {
			_ = consumer.Close()
			return fail(err)
		}
		n.observer = o
	}
	n.log.I()("goneli %s: contending for leadership of group %s on topic %s (lease %v, session %v, group heartbeat %v)",
		config.Name, config.LeaderGroupID, n.topic, *config.HeartbeatTimeout, timing.session, timing.interval)
	return n, nil
}

// prepareGroup makes sure that the leader topic exists and that the group has no members on other
// leader topics.
func (n *neli) prepareGroup() error {
	admin, err := n.config.KafkaAdminProvider(n.adminConf)
	if err != nil {
		return fmt.Errorf("goneli: cannot create Kafka admin client: %w", err)
	}
	defer admin.Close()
	if reached, err := n.ensureTopic(admin); err != nil || !reached {
		// Not reached: New has spent its HeartbeatTimeout, and every tenure checks again anyway.
		return err
	}
	desc, err := describeGroup(context.Background(), admin, n.config.LeaderGroupID, *n.config.HeartbeatTimeout)
	if err != nil {
		// Every tenure checks again before it leads; this check only refuses early.
		n.log.W()("goneli %s: could not describe group %s (%v); its members are checked before this instance leads",
			n.config.Name, n.config.LeaderGroupID, err)
		return nil
	}
	if v := judgeGroup(desc, n.topic, n.clientID); v.conflict != nil {
		return v.conflict
	}
	return nil
}

// ensureTopic creates the leader topic if the broker says it is missing. If the broker cannot be
// reached in time the check is skipped: the consumer reports a missing topic later, through Pulse's
// logs.
func (n *neli) ensureTopic(admin KafkaAdmin) (reached bool, err error) {
	timeout := *n.config.HeartbeatTimeout
	md, err := admin.GetMetadata(&n.topic, false, int(timeout.Milliseconds()))
	if err != nil {
		n.log.W()("goneli %s: could not check leader topic %s within %v (%v); continuing", n.config.Name, n.topic, timeout, err)
		return false, nil
	}
	tm, ok := md.Topics[n.topic]
	if ok && tm.Error.Code() == kafka.ErrNoError {
		if len(tm.Partitions) > 1 {
			n.log.W()("goneli %s: leader topic %s has %d partitions; only partition 0 is used", n.config.Name, n.topic, len(tm.Partitions))
		}
		return true, nil
	}
	if ok && tm.Error.Code() != kafka.ErrUnknownTopicOrPart && tm.Error.Code() != kafka.ErrUnknownTopic {
		return true, &TopicError{Topic: n.topic, Err: tm.Error}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := admin.CreateTopics(ctx, []kafka.TopicSpecification{{
		Topic: n.topic, NumPartitions: 1, ReplicationFactor: -1, Config: leaderTopicConfig,
	}}, kafka.SetAdminOperationTimeout(timeout))
	if err == nil && len(res) == 1 {
		err = res[0].Error
		if res[0].Error.Code() == kafka.ErrNoError || res[0].Error.Code() == kafka.ErrTopicAlreadyExists {
			n.log.I()("goneli %s: created leader topic %s", n.config.Name, n.topic)
			return true, nil
		}
	}
	return true, &TopicError{Topic: n.topic, Err: err}
}

func (n *neli) now() time.Duration {
	return time.Since(n.base)
}

func (n *neli) IsLeader() bool {
	end := n.leaseEnd.Load()
	return end != 0 && int64(n.now()) < end
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
		if err := n.pulseOnce(); err != nil {
			return false, err
		}
		if n.IsLeader() {
			return true, nil
		}
		wait := max(n.pollDeadline.Remaining(), time.Millisecond)
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
		case <-timer.C:
		}
	}
}

// ctxResult is what PulseCtx returns for its context's error: nothing for a deadline, which ends a
// pulse like Pulse's timeout, and the error itself for a cancellation.
func ctxResult(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

func (n *neli) pulseOnce() error {
	// Most calls from a leader's loop find nothing due. Checking first keeps them free of the two
	// heap allocations that the closure below costs (see BenchmarkLeader/PulseNotDue).
	if !n.pollDeadline.Expired() {
		return nil
	}
	return n.runCycle()
}

// runCycle runs a cycle unless another goroutine has just claimed the poll deadline.
func (n *neli) runCycle() (err error) {
	n.pollDeadline.TryRun(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.State() == Live {
			err = n.cycle()
		}
	})
	return err
}

// cycle polls the consumer dry (within bounds), sends a heartbeat if one is due and checks the
// lease. Called with mu held.
func (n *neli) cycle() error {
	n.applyYield()
	if n.observer != nil {
		n.observer.poll()
	}
	var fatal error
	ev := n.consumer.Poll(int(n.config.PollDuration.Milliseconds()))
	for i := 0; ev != nil; i++ {
		if err := n.handle(ev); err != nil && fatal == nil {
			fatal = err
		}
		if i+1 >= maxEventsPerCycle || n.State() != Live {
			break
		}
		ev = n.consumer.Poll(0)
	}
	n.drainProducer()
	n.tendGroupCheck()
	if n.ten.active && n.State() == Live && n.now() >= n.ten.nextHeartbeat {
		n.sendHeartbeat()
	}
	n.checkLease()
	return fatal
}

func (n *neli) handle(ev kafka.Event) error {
	switch e := ev.(type) {
	case *kafka.Message:
		n.onMessage(e)
	case kafka.OffsetsCommitted:
		n.owedCommit = false
		n.onCommit(e)
	case kafka.Error:
		if e.IsFatal() {
			n.fence("fatal consumer error: " + e.Error())
			return fmt.Errorf("goneli: fatal Kafka consumer error: %w", e)
		}
		n.logKafkaError("consumer", e)
	}
	return nil
}

func (n *neli) onMessage(m *kafka.Message) {
	if m.TopicPartition.Error != nil {
		n.throttle.log(n.log.W(), "fetch:"+m.TopicPartition.Error.Error(), "goneli %s: fetch from %s failed: %v",
			n.config.Name, n.topic, m.TopicPartition.Error)
		return
	}
	if m.TopicPartition.Partition != 0 || m.TopicPartition.Topic == nil || *m.TopicPartition.Topic != n.topic {
		return
	}
	var h heartbeat
	if h.decode(m.Value) != nil || string(m.Key) != n.config.Name {
		return
	}
	if !n.ten.active || h.tenure != n.ten.id || h.seq <= n.ten.confirmedSeq {
		// A heartbeat of an earlier tenure, or a retry arriving after a newer one: it proves nothing
		// about the present.
		n.stats.stale.Add(1)
		return
	}
	n.ten.confirmedSeq = h.seq
	next := m.TopicPartition.Offset + 1
	if _, err := n.consumer.StoreOffsets([]kafka.TopicPartition{{Topic: &n.topic, Partition: 0, Offset: next}}); err != nil {
		n.throttle.log(n.log.W(), "store", "goneli %s: cannot store heartbeat offset: %v", n.config.Name, err)
		return
	}
	n.storedSinceAssign = true
	n.pending[next] = confirmed{sent: h.sentMono, offset: m.TopicPartition.Offset}
	n.stats.confirmed.Add(1)
	n.stats.rtt.Store(int64(n.now() - h.sentMono))
	if next <= n.lastCommitted {
		n.commitBelow(next)
	}
}

// onCommit turns a commit the coordinator accepted into a lease renewal: the commit was sent after
// the heartbeat came back, so the coordinator still counted this instance as the owner of partition
// 0 in its current generation after that heartbeat's send time.
func (n *neli) onCommit(e kafka.OffsetsCommitted) {
	if e.Error != nil {
		n.onCommitError(e.Error)
		return
	}
	for _, tp := range e.Offsets {
		if tp.Partition != 0 || tp.Topic == nil || *tp.Topic != n.topic {
			continue
		}
		if tp.Error != nil {
			n.onCommitError(tp.Error)
			continue
		}
		n.lastCommitted = tp.Offset
		hb, ok := n.pending[tp.Offset]
		for off := range n.pending {
			if off <= tp.Offset {
				delete(n.pending, off)
			}
		}
		if ok {
			n.renew(hb)
		}
	}
}

// commitBelow commits an offset that is not above the last one committed, which happens after
// partition 0's log restarted (a broker that lost its data, an unclean leader election). librdkafka
// auto-commits only offsets above the last it committed, so without this no heartbeat could be
// confirmed until the new log grew past the old offset. The explicit commit is synchronous, but it
// is needed only once per such restart. Called with mu held.
func (n *neli) commitBelow(offset kafka.Offset) {
	n.log.W()("goneli %s: partition 0 restarted below the committed offset %d; committing %d explicitly",
		n.config.Name, n.lastCommitted, offset)
	committed, err := n.consumer.CommitOffsets([]kafka.TopicPartition{{Topic: &n.topic, Partition: 0, Offset: offset}})
	n.onCommit(kafka.OffsetsCommitted{Error: err, Offsets: committed})
}

func (n *neli) onCommitError(err error) {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		n.throttle.log(n.log.W(), "commit", "goneli %s: heartbeat offset commit failed: %v", n.config.Name, err)
		return
	}
	switch ke.Code() {
	case kafka.ErrNoOffset:
		return
	case kafka.ErrUnknownMemberID, kafka.ErrIllegalGeneration, kafka.ErrFencedInstanceID,
		kafka.ErrStaleMemberEpoch, kafka.ErrFencedMemberEpoch:
		n.stats.commitRejects.Add(1)
		n.fence("group coordinator rejected the heartbeat commit: " + ke.Error())
	default:
		// Includes REBALANCE_IN_PROGRESS: under cooperative assignment partition 0 usually stays put,
		// so the lease simply goes unrenewed until the rebalance settles.
		n.throttle.log(n.log.D(), "commit:"+ke.Code().String(), "goneli %s: heartbeat offset commit not accepted: %v", n.config.Name, ke)
	}
}

func (n *neli) renew(hb confirmed) {
	sent := hb.sent
	end := sent + *n.config.HeartbeatTimeout
	if n.now() >= end {
		n.stats.late.Add(1)
		return
	}
	n.stats.renewalLag.Store(int64(n.now() - sent))
	if !n.ten.verified {
		if n.ten.held == nil || sent > n.ten.held.sent {
			n.ten.held = &hb
		}
		return
	}
	if sent > n.renewedSent {
		n.renewedSent = sent
	}
	end = n.renewedSent + *n.config.HeartbeatTimeout
	if !n.ten.leading {
		n.ten.leading = true
		if !n.ten.acquired {
			// The first confirmed offset of a tenure makes the fencing token: partition 0's offsets
			// only grow, and a tenure cannot confirm a heartbeat before the previous tenure has ended.
			n.ten.acquired = true
			n.ten.since = time.Now().UnixNano()
			n.ten.token = int64(hb.offset) + 1 // 0 means no token
			n.stats.token.Store(n.ten.token)
			n.stats.since.Store(n.ten.since)
		}
		n.stats.leading.Store(true)
		n.stats.acquired.Add(1)
		n.emit(LeaderAcquired{Tenure: n.ten.name(), Token: n.ten.token, Since: time.Unix(0, n.ten.since)})
		if !n.ten.leading || n.now() >= end {
			// The barrier took longer than the lease; the next cycle's lease check fences.
			return
		}
	}
	n.stats.renewedEnd.Store(int64(end))
	n.leaseEnd.Store(int64(end))
	if n.State() != Live || n.yieldUntil.Load() > int64(n.now()) {
		// Close began meanwhile and cleared the lease; keep it cleared.
		n.leaseEnd.Store(0)
		return
	}
	n.armWatchdog(end)
}

func (n *neli) checkLease() {
	if n.ten.leading && n.State() == Live && n.now() >= n.renewedSent+*n.config.HeartbeatTimeout {
		n.fence(fmt.Sprintf("no own heartbeat confirmed within HeartbeatTimeout (%v)", *n.config.HeartbeatTimeout))
	}
}

func (n *neli) fence(reason string) {
	if !n.ten.leading {
		return
	}
	n.ten.leading = false
	n.stats.leading.Store(false)
	n.leaseEnd.Store(0)
	n.stats.fenced.Add(1)
	n.log.W()("goneli %s: fenced: %s", n.config.Name, reason)
	n.emit(LeaderFenced{Tenure: n.ten.name(), Token: n.ten.token, Reason: reason, LeaseAge: n.now() - n.renewedSent})
}

// armWatchdog makes sure LeaderFenced is delivered when the lease lapses even if nobody pulses
// (a long-running task, a stuck pulse loop). IsLeader does not depend on it.
func (n *neli) armWatchdog(end time.Duration) {
	if !n.watchdogOn {
		n.watchdogOn = true
		n.workers.Add(1)
		go n.watchdog()
	}
	select {
	case <-n.leaseCh:
	default:
	}
	n.leaseCh <- end
}

func (n *neli) watchdog() {
	defer n.workers.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-n.closing:
			return
		case end := <-n.leaseCh:
			timer.Reset(max(end-n.now(), 0))
		case <-timer.C:
			n.mu.Lock()
			n.checkLease()
			n.mu.Unlock()
		}
	}
}

func (n *neli) onRebalance(c *kafka.Consumer, ev kafka.Event) error {
	if n.consumerClosing.Load() {
		// A consumer finishing its close, perhaps in the background, must not touch state that
		// the mutex no longer guards; confluent-kafka-go applies the change itself.
		n.lateRebalances.Add(1)
		return nil
	}
	n.rebalances++
	cooperative := c != nil && c.GetRebalanceProtocol() == "COOPERATIVE"
	n.trackGroupAssignment(ev, cooperative, c != nil && c.AssignmentLost())
	if n.State() != Live {
		// Close has ended the tenure already; confluent-kafka-go applies the change itself.
		return nil
	}
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		mine := n.partitionZero(e.Partitions)
		for i := range mine {
			// A tenure only needs the heartbeats it produces from now on. Starting from the end,
			// rather than from the group's committed offset, also keeps librdkafka from learning a
			// committed offset that lies beyond the end of a log that restarted (a broker that lost
			// its data, an unclean leader election): it auto-commits only offsets above the one
			// it knows, so no heartbeat could be confirmed until the log grew past it.
			mine[i].Offset = kafka.OffsetEnd
		}
		if c != nil {
			var err error
			if cooperative {
				err = c.IncrementalAssign(mine)
			} else {
				err = c.Assign(mine)
			}
			if err != nil {
				n.throttle.log(n.log.E(), "assign", "goneli %s: cannot take assignment: %v", n.config.Name, err)
				return err
			}
		}
		if len(mine) > 0 && !n.ten.active {
			n.beginTenure()
		}
	case kafka.RevokedPartitions:
		mine := n.partitionZero(e.Partitions)
		if len(mine) > 0 && n.ten.active {
			n.endTenure(c != nil && c.AssignmentLost())
		}
		if c != nil {
			if cooperative {
				return c.IncrementalUnassign(mine)
			}
			return c.Unassign()
		}
	}
	return nil
}

// trackGroupAssignment keeps the set of partitions the group has given this member, which Close
// waits to see revoked. Called with mu held.
func (n *neli) trackGroupAssignment(ev kafka.Event, cooperative, lost bool) {
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		if !cooperative {
			clear(n.groupParts)
		}
		for _, tp := range e.Partitions {
			n.groupParts[tp.Partition] = true
		}
	case kafka.RevokedPartitions:
		if n.groupParts[0] && (!cooperative || slices.ContainsFunc(e.Partitions, func(tp kafka.TopicPartition) bool { return tp.Partition == 0 })) {
			n.owedCommit = n.storedSinceAssign && !lost
			n.storedSinceAssign = false
		}
		if !cooperative {
			clear(n.groupParts)
		}
		for _, tp := range e.Partitions {
			delete(n.groupParts, tp.Partition)
		}
	}
}

func (n *neli) partitionZero(tps []kafka.TopicPartition) []kafka.TopicPartition {
	for _, tp := range tps {
		if tp.Partition == 0 && tp.Topic != nil && *tp.Topic == n.topic {
			return []kafka.TopicPartition{tp}
		}
	}
	return []kafka.TopicPartition{}
}

func (n *neli) beginTenure() {
	var b [8]byte
	_, _ = rand.Read(b[:])
	n.ten = tenure{active: true, id: binary.BigEndian.Uint64(b[:])}
	n.stats.assigned.Store(true)
	n.stats.tenure.Store(n.ten.id)
	clear(n.pending)
	n.renewedSent = 0
	n.log.D()("goneli %s: assigned partition 0 (tenure %s)", n.config.Name, n.ten.name())
}

func (n *neli) endTenure(lost bool) {
	switch {
	case lost:
		n.fence("partition 0 assignment lost")
	case n.ten.leading && n.now() >= n.renewedSent+*n.config.HeartbeatTimeout:
		// The lease ran out before anything here noticed (the pulsing goroutine was busy in a poll
		// that ended with this revocation): the events must still say so.
		n.fence(fmt.Sprintf("no own heartbeat confirmed within HeartbeatTimeout (%v)", *n.config.HeartbeatTimeout))
	}
	n.ten.leading = false
	n.stats.leading.Store(false)
	n.stats.assigned.Store(false)
	n.stats.token.Store(0)
	n.leaseEnd.Store(0)
	acquired := n.ten.acquired
	n.ten.active = false
	clear(n.pending)
	if acquired {
		n.stats.revoked.Add(1)
		n.emit(LeaderRevoked{Tenure: n.ten.name(), Token: n.ten.token})
	}
}

// tendGroupCheck collects the result of a finished group check and starts one when the tenure
// needs it. Called with mu held.
func (n *neli) tendGroupCheck() {
	select {
	case res := <-n.checkDone:
		n.checking = false
		n.onGroupCheck(res)
	default:
	}
	if n.checking || !n.ten.active || n.ten.verified || n.State() != Live || n.now() < n.ten.checkAt {
		return
	}
	d, release, err := n.describer()
	if err != nil {
		n.throttle.log(n.log.W(), "check", "goneli %s: cannot check the group's members: %v", n.config.Name, err)
		n.retryGroupCheck()
		return
	}
	n.checking = true
	n.checks.Add(1)
	tenure, group, timeout := n.ten.id, n.config.LeaderGroupID, *n.config.HeartbeatTimeout
	go func() {
		defer n.checks.Done()
		defer release()
		desc, err := describeGroup(n.checkCtx, d, group, timeout)
		res := groupCheck{tenure: tenure, err: err}
		if err == nil {
			res.verdict = judgeGroup(desc, n.topic, n.clientID)
		}
		n.checkDone <- res
	}()
}

// describer returns an admin client for the group check. The producer's own is preferred: it
// shares the producer's connections, which, unlike the consumer's, never wait in a long fetch.
func (n *neli) describer() (groupDescriber, func(), error) {
	if !n.ensureProducer() {
		return nil, nil, errors.New("no producer")
	}
	if p, ok := n.producer.(*kafka.Producer); ok {
		a, err := kafka.NewAdminClientFromProducer(p)
		if err != nil {
			return nil, nil, err
		}
		return a, func() {}, nil
	}
	a, err := n.config.KafkaAdminProvider(n.adminConf)
	if err != nil {
		return nil, nil, err
	}
	return a, a.Close, nil
}

func (n *neli) onGroupCheck(res groupCheck) {
	if !n.ten.active || res.tenure != n.ten.id {
		return
	}
	switch {
	case res.err != nil:
		n.throttle.log(n.log.W(), "check", "goneli %s: cannot describe group %s to check its members (%v); not leading until it can",
			n.config.Name, n.config.LeaderGroupID, res.err)
		n.retryGroupCheck()
	case res.verdict.conflict != nil:
		n.stats.conflict.Store(res.verdict.conflict)
		n.throttle.log(n.log.E(), "conflict", "goneli %s: not leading: %v", n.config.Name, res.verdict.conflict)
		n.ten.checkAt = n.now() + *n.config.HeartbeatTimeout
	case !res.verdict.sawSelf:
		// The description predates this tenure's assignment, or hides assignments during a
		// rebalance (kfake does); it proves nothing yet, and the group is about to settle, so
		// the next look comes soon rather than after a backoff.
		n.ten.checkAt = n.now() + inconclusiveCheckRetry
	default:
		n.ten.verified = true
		n.stats.conflict.Store(nil)
		if hb := n.ten.held; hb != nil {
			n.ten.held = nil
			n.renew(*hb)
		}
	}
}

// inconclusiveCheckRetry is how soon a group check that could not see this instance's own
// assignment is made again: two small requests to the coordinator each time, while a rebalance
// settles.
const inconclusiveCheckRetry = 20 * time.Millisecond

func (n *neli) retryGroupCheck() {
	n.ten.checkDelay = clampDuration(2*n.ten.checkDelay, *n.config.MinPollInterval, *n.config.HeartbeatTimeout)
	n.ten.checkAt = n.now() + n.ten.checkDelay
}

// ensureProducer opens the heartbeat producer on the first assignment of partition 0; it is kept
// from then on. Called with mu held.
func (n *neli) ensureProducer() bool {
	if n.producer == nil {
		p, err := n.config.KafkaProducerProvider(n.prodConf)
		if err != nil {
			n.throttle.log(n.log.E(), "producer", "goneli %s: cannot create heartbeat producer: %v", n.config.Name, err)
			return false
		}
		n.producer = p
	}
	return true
}

func (n *neli) sendHeartbeat() {
	if !n.ensureProducer() {
		return
	}
	n.ten.seq++
	now := n.now()
	h := heartbeat{tenure: n.ten.id, seq: n.ten.seq, sentWall: time.Now().UnixNano(), sentMono: now}
	if n.ten.acquired {
		h.since, h.token = n.ten.since, n.ten.token
	}
	err := n.producer.Produce(&kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &n.topic, Partition: 0},
		Key:            n.key,
		Value:          h.appendTo(make([]byte, 0, heartbeatSize)),
	}, nil)
	if err != nil {
		n.throttle.log(n.log.W(), "produce", "goneli %s: cannot send heartbeat: %v", n.config.Name, err)
	} else {
		n.stats.sent.Add(1)
	}
	n.ten.nextHeartbeat = now + *n.config.MinPollInterval
}

func (n *neli) drainProducer() {
	if n.producer == nil {
		return
	}
	for i := 0; i < maxEventsPerCycle; i++ {
		select {
		case ev := <-n.producer.Events():
			switch e := ev.(type) {
			case *kafka.Message:
				if e.TopicPartition.Error != nil {
					n.throttle.log(n.log.W(), "delivery", "goneli %s: heartbeat not delivered: %v", n.config.Name, e.TopicPartition.Error)
				}
			case kafka.Error:
				n.logKafkaError("producer", e)
			}
		default:
			return
		}
	}
}

func (n *neli) logKafkaError(client string, e kafka.Error) {
	hint := ""
	if e.Code() == kafka.ErrInconsistentGroupProtocol {
		hint = fmt.Sprintf(" (members of group %s use another assignment strategy; goneli v0.5.0 members use librdkafka's "+
			"eager default and cannot share a group with cooperative-sticky ones: see the README's Migrating section)", n.config.LeaderGroupID)
	}
	if e.Code() == kafka.ErrInvalidSessionTimeout {
		hint = fmt.Sprintf(" (the derived session.timeout.ms=%d is outside the broker's group.min/max.session.timeout.ms; "+
			"raise HeartbeatTimeout or lower the broker's group.min.session.timeout.ms)", n.timing.session.Milliseconds())
	}
	n.throttle.log(n.log.W(), client+":"+e.Code().String(), "goneli %s: Kafka %s: %v%s", n.config.Name, client, e, hint)
}

// emit calls the barrier, remembering which goroutine runs it so that a Close from inside the
// barrier can be recognised.
func (n *neli) emit(e Event) {
	n.log.I()("goneli %s: %v", n.config.Name, e)
	if n.held != nil {
		*n.held = append(*n.held, e)
		return
	}
	n.callback(func() { n.barrier(e) })
}

// deliverFinal gives the barrier the events that end the last tenure on Close. The barrier may
// finish in-flight work there, which holds back the successor as a revocation in a rebalance
// would, and for as long: up to the rebalance timeout. A barrier that takes longer runs on in the
// background while Close leaves the group, so that Close keeps its bound. Called with mu held.
func (n *neli) deliverFinal(events []Event) {
	if len(events) == 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, e := range events {
			n.callback(func() { n.barrier(e) })
		}
	}()
	limit := time.NewTimer(n.timing.maxPoll)
	defer limit.Stop()
	select {
	case <-done:
	case <-limit.C:
		n.log.W()("goneli %s: the barrier has not returned from %v after %v (the rebalance timeout); leaving the group regardless",
			n.config.Name, events[len(events)-1], n.timing.maxPoll)
	}
}

// callback runs application code (the barrier, OnLeaderChange), remembering which goroutine runs
// it so that a Close or Yield from inside can be recognised.
func (n *neli) callback(f func()) {
	n.barrierG.Store(goid())
	defer n.barrierG.Store(0)
	f()
}

func (n *neli) Close() error {
	first := false
	n.closeOnce.Do(func() {
		first = true
		n.state.Store(int32(Closing))
		n.leaseEnd.Store(0)
		close(n.closing)
	})
	if g := n.barrierG.Load(); g != 0 && g == goid() {
		// Called by the barrier, perhaps while this goroutine holds mu inside a poll: finish the
		// shutdown elsewhere once the barrier returns.
		if first {
			go n.shutdown()
		}
		return nil
	}
	if first {
		n.shutdown()
	} else {
		<-n.closed
	}
	return n.closeErr
}

func (n *neli) shutdown() {
	var errs []error
	deadline := time.Now().Add(n.closeBound())
	n.mu.Lock()
	if n.ten.active {
		var final []Event
		n.held = &final
		n.endTenure(false)
		n.held = nil
		n.deliverFinal(final)
	}
	// A check may be using the producer's connections.
	n.checkCancel()
	n.checks.Wait()
	if n.producer != nil {
		n.producer.Close()
	}
	// librdkafka 2.11 under the cooperative-sticky assignor can skip the LeaveGroup when a member
	// that owns no partition closes; the coordinator then waits for it through the next rebalance,
	// and whoever joins or leaves next is held up to a rebalance timeout. An explicit unsubscribe
	// sent the LeaveGroup in every run measured (TestSequentialCloseLeavesPromptly).
	if err := n.consumer.Unsubscribe(); err != nil {
		n.log.D()("goneli %s: unsubscribing before close: %v", n.config.Name, err)
	} else {
		n.awaitLeft(deadline)
	}
	closing := []namedConsumer{{"Kafka consumer", n.consumer}}
	if n.observer != nil {
		closing = append(closing, namedConsumer{"leader observer", n.observer.consumer})
	}
	n.consumerClosing.Store(true)
	errs = append(errs, n.closeConsumers(closing, deadline)...)
	n.mu.Unlock()
	n.workers.Wait()
	// librdkafka may still log from a consumer that is finishing its close in the background;
	// its logs keep flowing until it is done.
	go func() {
		n.closers.Wait()
		close(n.logsStop)
		n.forwarder.Wait()
		close(n.clientsClosed)
	}()
	n.closeErr = errors.Join(errs...)
	n.state.Store(int32(Closed))
	n.log.I()("goneli %s: closed", n.config.Name)
	close(n.closed)
}

// ErrCloseTimeout is wrapped by the error Close returns when a Kafka consumer did not finish
// closing within the close bound: the rebalance timeout (max.poll.interval.ms, by default the
// session timeout) plus one HeartbeatTimeout. A close that lands in a rebalance must wait for it,
// so the bound lies above the rebalance timeout; it is exceeded when the group coordinator cannot
// be reached, for which librdkafka waits indefinitely. The consumer then finishes closing in the
// background, and the group expels the instance after its session timeout, as after a crash.
var ErrCloseTimeout = errors.New("goneli: Kafka client close timed out")

type namedConsumer struct {
	what string
	c    KafkaConsumer
}

// closeBound is how long Close may take: the rebalance timeout plus one HeartbeatTimeout.
func (n *neli) closeBound() time.Duration {
	return n.timing.maxPoll + *n.config.HeartbeatTimeout
}

// subscriptionReader is what awaitLeft asks of the consumer beyond KafkaConsumer; *kafka.Consumer has it.
type subscriptionReader interface {
	Subscription() ([]string, error)
}

// awaitLeft polls the consumer after Unsubscribe until librdkafka has carried the unsubscribe out
// (the subscription is empty) and every partition it revoked has been handed back, or until
// deadline. Called with mu held.
//
// Closing a consumer while a rebalance event still waits in its queue can hang librdkafka 2.11
// for good (issue 16): during the close an assignment that arrived earlier is served as an
// unassignment, the group terminates, and the revocation queued behind it then reaches the
// rebalance callback, whose Unassign waits for a reply from the terminated group that never comes.
// A member whose poll loop stalled while a rebalance went on is in exactly that state. Serving
// every rebalance before the close leaves none for the close to trip over. Unsubscribe itself is
// postponed by librdkafka until a rebalance in progress completes, so the subscription is the
// sign that the unsubscribe has happened.
func (n *neli) awaitLeft(deadline time.Time) {
	sr, ok := n.consumer.(subscriptionReader)
	if !ok {
		return
	}
	for {
		served := n.drainForClose()
		// Revoking partition 0 commits the offset stored last, and only once that commit is
		// answered does librdkafka send the LeaveGroup; a close that comes first skips it, and
		// the group then waits a session timeout for this member (librdkafka 2.11.1).
		if !served && len(n.groupParts) == 0 && !n.owedCommit {
			if topics, err := sr.Subscription(); err != nil || len(topics) == 0 {
				return
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			n.log.W()("goneli %s: the group did not let this member leave within %v; closing anyway", n.config.Name, n.closeBound())
			return
		}
		if !served {
			// Nothing was queued: the rebalance that postponed the unsubscribe is still with the
			// coordinator. Wait for its next event in librdkafka rather than spinning.
			n.serve(n.consumer.Poll(int(min(left, 50*time.Millisecond).Milliseconds())))
		}
	}
}

// drainForClose serves what the consumer has queued and reports whether that included anything.
// Rebalance events are served by the callback from within Poll, which then returns nil, so they
// are counted by the callback.
func (n *neli) drainForClose() bool {
	before := n.rebalances
	served := false
	for i := 0; i < maxEventsPerCycle; i++ {
		ev := n.consumer.Poll(0)
		if ev == nil && n.rebalances == before {
			break
		}
		before = n.rebalances
		served = true
		n.serve(ev)
	}
	return served || n.rebalances != before
}

// serve handles an event polled while closing: commit results, which awaitLeft counts, and errors,
// for the logs.
func (n *neli) serve(ev kafka.Event) {
	switch e := ev.(type) {
	case kafka.OffsetsCommitted:
		n.owedCommit = false
	case kafka.Error:
		n.log.D()("goneli %s: Kafka consumer while closing: %v", n.config.Name, e)
	}
}

// closeConsumers closes the consumers side by side and waits for all of them until deadline, so
// that Close's bound does not grow with the number of consumers. Called with mu held, since a
// consumer's close may call onRebalance.
func (n *neli) closeConsumers(consumers []namedConsumer, deadline time.Time) []error {
	results := make([]chan error, len(consumers))
	for i, nc := range consumers {
		results[i] = make(chan error, 1)
		n.closers.Add(1)
		go func() {
			defer n.closers.Done()
			results[i] <- nc.c.Close()
		}()
	}
	bound := n.closeBound()
	expired := time.After(time.Until(deadline))
	var errs []error
	for i, nc := range consumers {
		var err error
		select {
		case err = <-results[i]:
		case <-expired:
			// The bound has passed for every consumer still to be collected.
			expired = passed
			select {
			case err = <-results[i]:
			default:
				n.log.W()("goneli %s: %s did not close within %v; it goes on closing in the background", n.config.Name, nc.what, bound)
				errs = append(errs, fmt.Errorf("%w: %s did not close within %v (is the broker reachable?)", ErrCloseTimeout, nc.what, bound))
				continue
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("goneli: closing %s: %w", nc.what, err))
		}
	}
	return errs
}

// passed is a deadline channel that has already fired.
var passed = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// forwardLogs passes librdkafka's log lines to scribe until stop is closed.
func forwardLogs(log scribe.Scribe, name string, logs <-chan kafka.LogEvent, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case l := <-logs:
			logger := log.D()
			switch {
			case l.Level <= 3:
				logger = log.E()
			case l.Level == 4:
				logger = log.W()
			case l.Level <= 6:
				logger = log.I()
			}
			logger("goneli %s: librdkafka %s [%s] %s", name, l.Name, l.Tag, l.Message)
		}
	}
}
