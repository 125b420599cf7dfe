package goneli

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
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
	// finish and return its result. It returns within max.poll.interval.ms plus HeartbeatTimeout
	// (see ErrCloseTimeout).
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
	config   Config
	timing   groupTiming
	barrier  Barrier
	log      scribe.Scribe
	topic    string
	key      []byte
	base     time.Time // origin of the monotonic clock that leases are measured on
	consumer KafkaConsumer
	prodConf *KafkaConfigMap

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
	renewedSent   time.Duration              // send time of the heartbeat behind the current lease
	throttle      logThrottle
	observer      *observer // nil unless Config.ObserveLeader
	unsubscribed  bool      // left the group to yield

	yieldUntil atomic.Int64 // monotonic nanoseconds until which this instance stays out of the group
	stats      counters
}

// confirmed is an own heartbeat that came back and awaits the coordinator's acceptance of its
// offset.
type confirmed struct {
	sent   time.Duration
	offset kafka.Offset
}

type tenure struct {
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
		pending:       map[kafka.Offset]confirmed{},
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
	n.forwarder.Add(1)
	go func() {
		defer n.forwarder.Done()
		forwardLogs(n.log, config.Name, n.logs, n.logsStop)
	}()

	fail := func(err error) (Neli, error) {
		close(n.logsStop)
		n.forwarder.Wait()
		return nil, err
	}
	if err := n.ensureTopic(fromKafkaConfigMap(adminConf)); err != nil {
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

// ensureTopic creates the leader topic if the broker says it is missing. If the broker cannot be
// reached in time the check is skipped: the consumer reports a missing topic later, through Pulse's
// logs.
func (n *neli) ensureTopic(conf *KafkaConfigMap) error {
	admin, err := n.config.KafkaAdminProvider(conf)
	if err != nil {
		return fmt.Errorf("goneli: cannot create Kafka admin client: %w", err)
	}
	defer admin.Close()
	timeout := *n.config.HeartbeatTimeout
	md, err := admin.GetMetadata(&n.topic, false, int(timeout.Milliseconds()))
	if err != nil {
		n.log.W()("goneli %s: could not check leader topic %s within %v (%v); continuing", n.config.Name, n.topic, timeout, err)
		return nil
	}
	tm, ok := md.Topics[n.topic]
	if ok && tm.Error.Code() == kafka.ErrNoError {
		if len(tm.Partitions) > 1 {
			n.log.W()("goneli %s: leader topic %s has %d partitions; only partition 0 is used", n.config.Name, n.topic, len(tm.Partitions))
		}
		return nil
	}
	if ok && tm.Error.Code() != kafka.ErrUnknownTopicOrPart && tm.Error.Code() != kafka.ErrUnknownTopic {
		return &TopicError{Topic: n.topic, Err: tm.Error}
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
			return nil
		}
	}
	return &TopicError{Topic: n.topic, Err: err}
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
			if err := doneErr(); errors.Is(err, context.DeadlineExceeded) {
				return false, nil
			} else {
				return false, err
			}
		case <-n.closing:
			timer.Stop()
			return false, ErrNonLivePulse
		case <-timer.C:
		}
	}
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
	if n.State() != Live {
		// Close has ended the tenure already, and a consumer finishing its close in the background
		// must not touch state that the mutex no longer guards.
		return nil
	}
	cooperative := c != nil && c.GetRebalanceProtocol() == "COOPERATIVE"
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

func (n *neli) sendHeartbeat() {
	if n.producer == nil {
		p, err := n.config.KafkaProducerProvider(n.prodConf)
		if err != nil {
			n.throttle.log(n.log.E(), "producer", "goneli %s: cannot create heartbeat producer: %v", n.config.Name, err)
			return
		}
		n.producer = p
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
	n.callback(func() { n.barrier(e) })
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
	n.mu.Lock()
	if n.ten.active {
		n.endTenure(false)
	}
	if n.producer != nil {
		n.producer.Close()
	}
	// librdkafka 2.11 under the cooperative-sticky assignor can skip the LeaveGroup when a member
	// that owns no partition closes; the coordinator then waits for it through the next rebalance,
	// and whoever joins or leaves next is held up to a rebalance timeout. An explicit unsubscribe
	// sent the LeaveGroup in every run measured (TestSequentialCloseLeavesPromptly).
	if err := n.consumer.Unsubscribe(); err != nil {
		n.log.D()("goneli %s: unsubscribing before close: %v", n.config.Name, err)
	}
	closing := []namedConsumer{{"Kafka consumer", n.consumer}}
	if n.observer != nil {
		closing = append(closing, namedConsumer{"leader observer", n.observer.consumer})
	}
	errs = append(errs, n.closeConsumers(closing)...)
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

// closeConsumers closes the consumers side by side and waits for all of them at most the
// rebalance timeout plus one HeartbeatTimeout, so that Close's bound does not grow with the number
// of consumers. Called with mu held, since a consumer's close may call onRebalance.
func (n *neli) closeConsumers(consumers []namedConsumer) []error {
	results := make([]chan error, len(consumers))
	for i, nc := range consumers {
		results[i] = make(chan error, 1)
		n.closers.Add(1)
		go func() {
			defer n.closers.Done()
			results[i] <- nc.c.Close()
		}()
	}
	bound := n.timing.maxPoll + time.Duration(*n.config.HeartbeatTimeout)
	expired := time.After(bound)
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
