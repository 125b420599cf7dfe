package goneli

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// driver is the Kafka side of an instance: it owns the clients, runs the poll cycle and the
// rebalance callback, tells the lease of each partition it contends for what happened there, and
// carries out what that lease answers (apply). It reaches the application only through deliver.
// Every method is called with mu held unless its comment says otherwise.
//
// Its parts are small types of their own: the heartbeat producer (producer.go), the explicit
// commits (commit.go), the group check (groupcheck.go), the lease watchdog (watchdog.go), the
// reachability of Kafka (reach.go), the yield (yield.go) and the leave and close sequence
// (closer.go). Every time it reads is from one clock, d.now's, which the leases, the watchdog, the
// pulse loop and the close sequence share; its waits are timers of package time. Under
// testing/synctest (driver_test.go) both are the bubble's, so that a test moves them together.
type driver struct {
	config   Config
	timing   groupTiming
	log      scribe.Scribe
	topic    string
	key      []byte
	clientID string // the consumer's client.id, by which the group check finds this instance
	confs    clientConfs
	// parts are the partitions contended for, by partition number, shared with the API type.
	parts []*part
	life  *lifecycle
	// deliver posts a lease's events to the application and returns the last one's delivery
	// (neli.deliver); the driver never calls the application itself.
	deliver func(p *part, events []Event) *delivery
	clock   clock
	base    time.Time // origin of the monotonic durations that leases, yields and deadlines are measured in

	// mu guards the leases and every field below that is not atomic. It is held while the
	// consumer is polled, and so in the rebalance callback, but never while the application is
	// called. An instance that holds no partition polls for up to a group heartbeat interval
	// (pollFor), so Close may wait that long for it.
	mu       sync.Mutex
	consumer KafkaConsumer
	heart    heartbeatProducer
	observer *observer // nil unless Config.ObserveLeader
	// commits sends the consumer's explicit commits (commit.go); commitAsks gathers those that the
	// leases asked for during a cycle, by partition, for one request at its end.
	commits    *committer
	commitAsks map[int32]commitAsk
	// resets are the partitions whose explicit commit asked for in this cycle is to reset
	// librdkafka's committed offset below a log that restarted (leaseOut.restarted); resetting
	// says that the commit under way is only such a reset, sent while explicit commits are held.
	resets    map[int32]bool
	resetting bool
	// gate keeps one of the consumer's commits in flight (commitgate.go); storeAsks gathers the
	// offsets the leases asked to store, by partition, until the gate lets them be stored.
	gate       *commitGate
	gateCounts gateCounts
	storeAsks  map[int32]commitAsk
	// commitsHeld stops explicit commits (holdCommits) until librdkafka's auto-commit is accepted
	// again.
	commitsHeld bool
	// beats gathers the heartbeats that the leases produced during a cycle, for sendHeartbeats at
	// its end; wire writes those of several roles in one request over goneli's own connection
	// (internal/sidechan), nil where that cannot follow the clients' settings.
	beats []wireBeat
	wire  *sidechan.Beats[wireBeat]
	// unwatched says that a lease changed since the watchdog was last aimed (watchPending).
	unwatched bool
	group     groupState
	// drainedAt is when a Poll last found the consumer's queue empty (heldAssignment): whatever a
	// later Poll returns was queued after it.
	drainedAt time.Duration
	// brokers are the ids of the brokers New found, whose KIP-848 group settings a check reads
	// again (checkSessionAgain).
	brokers   []int32
	releases  []release // tenures whose released marker waits for the barrier
	check     checkState
	reach     reachability // whether Kafka answers, for Stats (reach.go)
	watchdog  *watchdog
	yield     yieldState
	handover  handover      // when to hand the roles over (handover.go)
	handOvers atomic.Uint64 // hand-overs so far (Stats.HandOvers)
	prio      priorityState // priorities, transfers and leaving the group (groupwatch.go)
	renewals  consumerRenewals
	throttle  logThrottle
	logs      *logForwarder
	// closers counts the goroutines that close clients or write final markers, which may outlive
	// Close (lifecycle.clientsClosed).
	closers sync.WaitGroup
}

// checkState is what the driver keeps beside the group checker (groupcheck.go).
type checkState struct {
	checker *groupChecker
	// wire is goneli's own connection (internal/sidechan), which describes the group; nil where
	// it cannot follow the clients' settings, and the check then goes through librdkafka's admin
	// client, as it does once the connection has given way to librdkafka (viaSide).
	wire sidechan.Channel
	// alone is set after a group check failed: the next one goes through an admin client of its
	// own rather than the producer's (describer).
	alone bool
	count atomic.Uint64 // descriptions of the group asked for (Stats.GroupChecks)
	// troubled says that a client has seen a broker connection fail, last at troubleAt; deferSince
	// is since when a group check has waited for the connections to settle (startGroupCheck).
	troubled              bool
	troubleAt, deferSince time.Duration
	deferring             bool
	// began is when the check under way began, and sided whether it went over wire; side and
	// sideBeats watch wire's group checks and heartbeats, and sideOff says that wire gave way to
	// librdkafka at the instance's behest (sidefail.go), for a wire that cannot be told to.
	began           time.Duration
	sided           bool
	side, sideBeats sideWatch
	sideOff         atomic.Bool
	// timings keeps what each broker answered for its KIP-848 group settings (session848.go).
	timings brokerTimings
	// inconclusive counts the checks in a row that could not see this instance's assignment, and
	// retryAt is when the next may start (backOffInconclusive).
	inconclusive int
	retryAt      time.Duration
}

// clientConfs are the librdkafka configurations of the clients an instance makes.
type clientConfs struct {
	consumer, producer, admin *KafkaConfigMap
}

// groupState is what the driver knows of its membership of the group.
type groupState struct {
	parts      map[int32]bool // partitions of the leader topic the group has assigned to this member
	rebalances int            // rebalance callbacks so far
	// owedCommit is set when a revocation took partitions with stored offsets, which librdkafka
	// commits once more, until that commit's result has been polled.
	owedCommit bool
	// member says whether this membership of the group passed a group check (groupcheck.go).
	member membership
	// closing is set once the group consumer's Close has been called; from then on its rebalance
	// callback may run without mu, from a close that goes on in the background.
	closing atomic.Bool
	// late counts rebalance events that reached the callback only during the group consumer's
	// Close, which awaitLeft exists to prevent.
	late atomic.Int32
}

// consumerRenewals are the replacements of a consumer that read nothing back (renewConsumer).
type consumerRenewals struct {
	last  time.Duration // when the consumer was last replaced
	count int
	// retired holds the replaced consumers, whose rebalance callbacks are ignored while they
	// close in the background.
	retired sync.Map
}

// now is the time on the driver's clock, the monotonic scale that leases, yields and the close
// bound are measured in. Safe without mu.
func (d *driver) now() time.Duration {
	return d.clock.Now().Sub(d.base)
}

// live reports whether Close has yet to begin. Safe without mu.
func (d *driver) live() bool {
	return d.life.state() == Live
}

// part is one role: a partition of the leader topic that this instance contends for, its lease,
// the dispatcher that calls the barrier with its events, and what the driver keeps beside them.
// The driver finds parts by partition (partOf) and walks them in order (neli.parts).
type part struct {
	id     int32
	name   string // the role's name; empty for the single leader of New
	lease  *lease
	events *dispatcher
	// wantCheck says that the lease asked for a group check that has not been started yet.
	wantCheck bool
	// member is the member id under which the current tenure was assigned, if known.
	member string
	// signal wakes the role's Background task when the barrier has returned from LeaderAcquired.
	signal chan struct{}
	// acquiring is the epoch of the newest LeaderAcquired whose barrier call has begun
	// (acquisitionStands). Written and read on the role's dispatcher goroutine.
	acquiring atomic.Uint64
	// hooks are the FencedProducers bound to the role, initialised at each LeaderAcquired.
	hooks acquireHooks
}

// release is a tenure that gave its partition up while the barrier still had its LeaderRevoked:
// once the barrier has returned from it (done), the released marker is written.
type release struct {
	p      *part
	marker heartbeat
	done   *delivery
	fresh  bool // made by Close: its releasing marker has not been written yet
}

// releaseLookback is how many records before the end of a partition a new tenure starts reading,
// so that it sees a predecessor's release marker (lease.foreign). Only the partition's owner
// writes; a revoked owner writes nothing after its marker but the released one, and a tenure that
// waits on a marker writes one heartbeat until the wait is over, so the marker stays in reach
// through a chain of fifteen successors that came and went while it waited.
const releaseLookback = 16

// step runs one cycle, unless Close has begun, waiting in the poll for up to poll, or for pollFor(limit)
// if poll is negative. It takes mu, which a cycle needs.
func (d *driver) step(poll, limit time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.live() {
		return nil
	}
	if poll < 0 {
		poll = d.pollFor(limit)
	}
	return d.cycle(poll)
}

// pollFor is how long a cycle waits in the consumer's poll. An instance that holds no partition
// has nothing to renew, fence or release, and waits for up to idlePoll (within limit, if not
// negative): it then serves a new assignment the moment it arrives rather than at its next cycle,
// which shortens every handoff by up to a poll interval. Called with mu held.
func (d *driver) pollFor(limit time.Duration) time.Duration {
	base := *d.config.PollDuration
	if len(d.releases) > 0 || d.yielding() {
		return base
	}
	for _, p := range d.parts {
		if p.lease.active() {
			return base
		}
	}
	wait := d.idlePoll()
	if limit >= 0 {
		wait = min(wait, limit)
	}
	return max(wait, base)
}

// idlePoll is how long an instance that holds no partition waits in one poll: a group heartbeat
// interval (a tenth of the lease, 500 ms by default), or MinPollInterval if that is longer. Such a
// follower's poll returns the moment an assignment or any other event arrives, so waiting longer
// delays nothing the protocol needs: only what a cycle does on its own clock, the end of a Yield's
// back-off and Close, which waits for the poll under way. It costs far less: every poll that
// blocks in librdkafka (a cgo call) for more than about 10 ms has the Go runtime's monitor take the
// goroutine's P away and then spin down from 20 µs sleeps, some sixty wake-ups each time; a
// follower polling ten times a second spent about a third of its CPU there (perf, 3 members on the
// embedded broker: 0.58-0.81 CPU s/min per follower with 100 ms polls, 0.38-0.47 with 1 s polls,
// side by side). A follower that watches the leader (ObserveLeader) or cannot reach Kafka (its
// probes go out from the cycle) polls every MinPollInterval as before. Called with mu held.
func (d *driver) idlePoll() time.Duration {
	poll := *d.config.MinPollInterval
	if _, _, down := d.reach.state(); down || d.observer != nil {
		return poll
	}
	return max(poll, min(d.timing.heartbeat(), time.Second))
}

// proving reports whether a tenure of this instance is proving its first lease: assigned, not
// acquired yet, not waiting for a predecessor to release the partition, and within one
// HeartbeatTimeout of its assignment, so that a tenure that cannot lead (a group conflict, say)
// does not keep the instance polling fast.
func (d *driver) proving() bool {
	now := d.now()
	for _, p := range d.parts {
		if v := p.lease.load(); v.proveBy > now && !v.releasing {
			return true
		}
	}
	return false
}

// cycle polls the consumer dry (within bounds), waiting up to poll for the first event, lets the
// lease act on the time that has passed and starts what it asks for.
func (d *driver) cycle(poll time.Duration) error {
	d.holdOut()
	d.applyYield()
	if d.observer != nil {
		d.observer.poll()
	}
	var fatal error
	ev := d.consumer.Poll(int(poll.Milliseconds()))
	for i := 0; ev != nil; i++ {
		if err := d.handle(ev); err != nil && fatal == nil {
			fatal = err
		}
		if i+1 >= maxEventsPerCycle || !d.live() {
			break
		}
		ev = d.consumer.Poll(0)
	}
	if ev == nil {
		d.drainedAt = d.now()
	}
	if denied := d.drainProducer(); fatal == nil {
		fatal = denied
	}
	d.collectHeartbeats()
	d.collectCommits()
	d.checkReadBack()
	d.probeReach()
	d.collectGroupCheck()
	d.finishReleases()
	if d.live() {
		beats := d.mayProduce()
		for _, p := range d.parts {
			d.apply(p, p.lease.due(beats))
		}
		d.sendHeartbeats()
		d.checkHandOver()
		d.watchGroup()
		d.startGroupCheck()
		d.startCommits()
	}
	d.watchPending()
	return fatal
}

// apply carries out what p's lease asked for after a transition, and returns the delivery of its
// last event. A group check it asks for is started by the cycle, together with any others.
func (d *driver) apply(p *part, out leaseOut) *delivery {
	if out.heartbeat != nil {
		d.beats = append(d.beats, wireBeat{p: p, h: out.heartbeat})
	}
	if out.store != 0 {
		d.storeAsks[p.id] = commitAsk{out.store, out.tag}
	}
	if out.commit != 0 {
		if out.restarted {
			d.log.W()("goneli %s: partition %d restarted below the offset committed last; committing %d explicitly",
				d.config.Name, p.id, out.commit)
		}
		d.commitAsks[p.id] = commitAsk{out.commit, out.tag}
		if out.restarted {
			d.resets[p.id] = true
		}
	}
	if out.check {
		p.wantCheck = true
	}
	// The watchdog is aimed once the cycle is over (watchPending) rather than after every lease's
	// transition: aiming walks every lease, and a cycle of an instance that leads N roles makes a
	// few transitions per role. Until then the cycle holds the lock that expireLeases needs.
	d.unwatched = true
	return d.deliver(p, out.events)
}

func (d *driver) handle(ev kafka.Event) error {
	switch e := ev.(type) {
	case *kafka.Message:
		d.onMessage(e)
	case kafka.OffsetsCommitted:
		d.group.owedCommit = false
		if e.Error == nil {
			d.reachable("consumer", "a commit accepted")
		}
		d.sideCommit(e)
		d.gate.answer(e, d.drainedAt)
		d.onCommit(e, false)
		d.autoCommitted(e)
	case kafka.Error:
		if e.IsFatal() {
			for _, p := range d.parts {
				d.apply(p, p.lease.fail("fatal consumer error: "+e.Error()))
			}
			return fmt.Errorf("goneli: fatal Kafka consumer error: %w", e)
		}
		if e.Code() == kafka.ErrInvalidSessionTimeout && d.timing.classic {
			// A configuration mismatch that no retry can mend. A lease this instance may still hold
			// runs out on its own: no commit is accepted without a session, and the watchdog
			// fences it.
			return &SessionTimeoutError{Session: d.timing.session, HeartbeatTimeout: *d.config.HeartbeatTimeout, Err: e}
		}
		if err := authorizationError(d.config, "consumer", e); err != nil {
			return err
		}
		if e.Code() == kafka.ErrAllBrokersDown {
			d.unreachable("consumer", e.Error())
		}
		d.noteTrouble(e)
		d.logKafkaError("consumer", e)
	}
	return nil
}

func (d *driver) onMessage(m *kafka.Message) {
	if m.TopicPartition.Error != nil {
		d.throttle.log(d.log.W(), "fetch:"+m.TopicPartition.Error.Error(), "goneli %s: fetch from %s failed: %v",
			d.config.Name, d.topic, m.TopicPartition.Error)
		return
	}
	d.reachable("consumer", "a record fetched")
	p := d.partOf(m.TopicPartition)
	if p == nil {
		return
	}
	var h heartbeat
	if h.decode(m.Value) != nil {
		return
	}
	if h.kind == kindHeartbeat && string(m.Key) == d.config.Name {
		d.apply(p, p.lease.readBack(h, int64(m.TopicPartition.Offset)))
		return
	}
	d.foreignRecord(p, string(m.Key), h)
}

// partOf returns the part of tp, or nil if tp is not one this instance contends for.
func (d *driver) partOf(tp kafka.TopicPartition) *part {
	if tp.Topic == nil || *tp.Topic != d.topic || tp.Partition < 0 || int(tp.Partition) >= len(d.parts) {
		return nil
	}
	return d.parts[tp.Partition]
}

// commitAsk is an offset a lease asked to have committed, stored or explicitly: the offset and its
// metadata (confirmed.tag).
type commitAsk struct {
	offset int64
	tag    string
}

// newGate makes the commit gate of consumer c (commitgate.go), for librdkafka's auto-commit
// interval as the consumer's configuration has it, in whole milliseconds.
func (d *driver) newGate(c KafkaConsumer) *commitGate {
	tick := time.Duration(d.timing.commit.Milliseconds()) * time.Millisecond
	return newCommitGate(c, &d.topic, tick, d.timing.heartbeat(), *d.config.HeartbeatTimeout/4, d.now, &d.gateCounts)
}

// withdraw takes back the offset stored for p, if any, so that librdkafka's auto-commit does not
// send it and the partition's revocation commits nothing (lease.quiesce, a revocation), and drops
// one waiting to be stored: librdkafka commits only a stored offset above the one it committed
// last, and on revocation only a stored offset that is not a logical one (librdkafka 2.11.1,
// rd_kafka_assignment_serve_removals).
func (d *driver) withdraw(p *part) {
	delete(d.storeAsks, p.id)
	d.gate.withdraw(p.id)
}

func (d *driver) onCommit(e kafka.OffsetsCommitted, explicit bool) {
	if e.Error != nil {
		// The whole commit failed: it carried every partition's offset.
		for _, p := range d.parts {
			d.onCommitError(p, e.Error)
		}
		return
	}
	for _, tp := range e.Offsets {
		p := d.partOf(tp)
		if p == nil {
			continue
		}
		if tp.Error != nil {
			d.onCommitError(p, tp.Error)
			continue
		}
		tag := ""
		if tp.Metadata != nil {
			tag = *tp.Metadata
		}
		d.apply(p, p.lease.committed(int64(tp.Offset), tag, explicit))
	}
}

// startCommits starts what the leases asked for in this cycle, as long as the consumer has no
// commit in flight (commitgate.go): the explicit commits as one request, unless explicit commits
// are held (holdCommits), or else the offsets to store for librdkafka's auto-commit. Explicit
// commits go first: a lease asks for one only when an offset it stored has waited for its
// automatic commit for the stall (lease.stalled). An explicit commit that cannot start now is
// dropped, and its lease asks again after the stall; an offset to store waits for the gate.
func (d *driver) startCommits() {
	now := d.now()
	busy, presumed := d.gate.busy(now)
	for _, s := range presumed {
		// Presumed never committed (its tick fell after the withdrawal, or librdkafka was
		// rejoining): the newest offset each of its partitions waits for is stored again.
		for _, tp := range s.stored {
			if p := d.partOf(tp); p != nil {
				if _, asked := d.storeAsks[p.id]; !asked {
					if ask, ok := p.lease.newestPending(); ok {
						d.storeAsks[p.id] = ask
					}
				}
			}
		}
	}
	busy = busy || d.commits.busy
	if len(d.commitAsks) > 0 {
		if wait := d.commits.waiting(now); wait > d.timing.heartbeat() {
			d.holdCommits(wait)
		}
		if !busy {
			// While explicit commits are held, only those that reset librdkafka's committed offset
			// below a restarted log go out, and their answers renew nothing (collectCommits):
			// librdkafka auto-commits only offsets above the one it committed last, so without
			// them no automatic commit could ever be accepted again to end the hold.
			offsets := make([]kafka.TopicPartition, 0, len(d.commitAsks))
			for id, ask := range d.commitAsks {
				if !d.commitsHeld || d.resets[id] {
					offsets = append(offsets, kafka.TopicPartition{Topic: &d.topic, Partition: id, Offset: kafka.Offset(ask.offset), Metadata: &ask.tag})
				}
			}
			if d.commits.start(offsets, now) {
				busy, d.resetting = true, d.commitsHeld
				// An offset sent in an explicit commit has been handed to librdkafka: its answer's
				// lateness counts from now (lease.storedAt, heldAnswers).
				for _, tp := range offsets {
					d.parts[tp.Partition].lease.storedAt(int64(tp.Offset), now)
				}
				d.throttle.log(d.log.D(), "explicit commit", "goneli %s: committing heartbeat offsets %v explicitly", d.config.Name, offsets)
			}
		}
		clear(d.commitAsks)
		clear(d.resets)
	}
	if busy || len(d.storeAsks) == 0 {
		return
	}
	offsets := make([]kafka.TopicPartition, 0, len(d.storeAsks))
	var hint time.Duration
	for id, ask := range d.storeAsks {
		p := d.parts[id]
		if !p.lease.storable(ask.offset) {
			continue
		}
		offsets = append(offsets, kafka.TopicPartition{Topic: &d.topic, Partition: id, Offset: kafka.Offset(ask.offset), Metadata: &ask.tag})
		hint = max(hint, p.lease.load().rtt)
	}
	clear(d.storeAsks)
	// The store time is read by the gate before its StoreOffsets call and recorded for what the call
	// may have stored, with the time its chain of stores began (lease.storedAt and storedSince give
	// the argument).
	at, chain, stored, err := d.gate.store(offsets, hint)
	for _, tp := range stored {
		d.parts[tp.Partition].lease.storedSince(int64(tp.Offset), at, chain)
	}
	if err != nil {
		d.throttle.log(d.log.W(), "store", "goneli %s: cannot store heartbeat offsets: %v", d.config.Name, err)
	}
}

// collectCommits takes the answer to an explicit commit, once it has come.
func (d *driver) collectCommits() {
	e, took, ok := d.commits.collect(d.now())
	if !ok {
		return
	}
	d.gate.answered(took)
	if took > d.timing.heartbeat() {
		d.holdCommits(took)
	}
	var ke kafka.Error
	if errors.As(e.Error, &ke) && ke.Code() == kafka.ErrIllegalGeneration {
		// An explicit commit can go out behind the JoinGroup that ends the rebalance, still
		// carrying the generation it was made with, and reach the coordinator after the new one
		// began: the member is in the group all the same, unlike when librdkafka's own commit is
		// refused so. It renews nothing, and the lease runs out on its own if nothing else renews it.
		d.throttle.log(d.log.D(), "explicit commit generation", "goneli %s: explicit heartbeat commit overtaken by a rebalance: %v", d.config.Name, ke)
		return
	}
	if e.Error == nil {
		d.reachable("consumer", "a commit accepted")
	}
	d.sideCommit(e)
	if d.resetting {
		d.resetting = false
		for _, tp := range e.Offsets {
			if p := d.partOf(tp); p != nil && tp.Error == nil && e.Error == nil {
				p.lease.resetCommitted(int64(tp.Offset))
			}
		}
		return
	}
	d.onCommit(e, true)
}

// holdCommits stops explicit commits because one waited for its answer for longer than a group
// heartbeat interval, until librdkafka's auto-commit is accepted again (autoCommitted).
//
// The window for explicit commits (commitWindow in lease.go) leaves one group heartbeat interval
// for the answer that tells librdkafka of a rebalance, since it auto-commits until that answer
// comes. librdkafka shows goneli neither its group heartbeats nor their answers, but it sends them
// on the connection to the coordinator that carries goneli's explicit commits, and a broker answers
// a connection's requests in order: a commit answered late means that whatever went before it on
// that connection, group heartbeats included, may have been answered as late. Explicit commits
// then stop, and the lease lives on librdkafka's own commits, whose acceptance shows it steady in
// the group again. What goneli cannot see is a heartbeat's answer held up while no explicit commit
// was under way; the package doc states that assumption.
func (d *driver) holdCommits(took time.Duration) {
	if !d.commitsHeld {
		d.commitsHeld = true
		d.log.D()("goneli %s: an explicit commit has waited %v for its answer, more than a group heartbeat interval (%v): no explicit commits until librdkafka's own is accepted",
			d.config.Name, took.Round(time.Millisecond), d.timing.heartbeat())
	}
}

// autoCommitted takes an answer to one of librdkafka's automatic commits: one that the coordinator
// accepted for a partition ends a hold on explicit commits.
func (d *driver) autoCommitted(e kafka.OffsetsCommitted) {
	if !d.commitsHeld || e.Error != nil || slices.ContainsFunc(d.parts, func(p *part) bool { return p.lease.holding() }) {
		// An answer seen while the leases count the connection as holding answers back may be
		// one of those held: it shows librdkafka steady again only once that is over.
		return
	}
	for _, tp := range e.Offsets {
		if tp.Error == nil && tp.Offset >= 0 && d.partOf(tp) != nil {
			d.commitsHeld = false
			return
		}
	}
}

func (d *driver) onCommitError(p *part, err error) {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		d.throttle.log(d.log.W(), "commit", "goneli %s: heartbeat offset commit failed: %v", d.config.Name, err)
		return
	}
	switch ke.Code() {
	case kafka.ErrNoOffset:
		return
	case kafka.ErrUnknownMemberID, kafka.ErrIllegalGeneration, kafka.ErrFencedInstanceID, kafka.ErrFencedMemberEpoch:
		d.apply(p, p.lease.rejected(ke.Error()))
	default:
		// Includes REBALANCE_IN_PROGRESS, and KIP-848's STALE_MEMBER_EPOCH, which says the member
		// is still in the group at a newer epoch: the lease simply goes unrenewed by this commit.
		d.throttle.log(d.log.D(), "commit:"+ke.Code().String(), "goneli %s: heartbeat offset commit not accepted: %v", d.config.Name, ke)
	}
}

func (d *driver) onRebalance(c *kafka.Consumer, ev kafka.Event) error {
	if _, retired := d.renewals.retired.Load(c); d.group.closing.Load() || (c != nil && retired) {
		// A consumer finishing its close, perhaps in the background, must not touch state that
		// the mutex no longer guards; confluent-kafka-go applies the change itself.
		d.group.late.Add(1)
		d.log.D()("goneli %s: a rebalance event reached a closing consumer (%v); left to confluent-kafka-go", d.config.Name, ev)
		return nil
	}
	var s groupSession = noSession{}
	switch {
	case c != nil:
		s = kafkaSession{c: c, group: d.config.LeaderGroupID}
	default:
		// A KafkaConsumer of the application's, or of the driver's tests, that is not a
		// *kafka.Consumer may speak for its group itself.
		if gs, ok := d.consumer.(groupSession); ok {
			s = gs
		}
	}
	return d.rebalanced(s, ev)
}

// rebalanced serves a change of this member's assignment: the new tenures begin, the ended ones
// end, and the session takes the partitions or gives them back.
// heldAssignment makes the leases hold their renewals back after an assignment that reached the
// application late, in a poll that came more than the answer bound after the one before (a loop
// paused or starved of CPU): one queued more than the answer bound after a Poll last found the
// queue empty; or after librdkafka had committed nothing for that long, which shows it was
// rejoining all along, and may have had the assignment's answer late (a held connection) as well:
// a tenure's oldest offset still waiting for its commit was stored more than the answer bound ago.
//
// librdkafka waits for the application to take a new assignment before its group is steady again,
// and while it waits it ignores what its group heartbeats say of a further rebalance
// (rd_kafka_cgrp_handle_Heartbeat: REBALANCE_IN_PROGRESS is dropped in the wait-assign-call state).
// Once the assignment is taken it counts as steady and auto-commits, although the coordinator may
// have begun that further rebalance any time since the assignment was made, and its commits, of the
// current generation, are accepted until then; it learns of the rebalance only from its next group
// heartbeat. So the anchor of the window, and the automatic commits' own renewals, rest on nothing
// until a group heartbeat interval (and an answer's bound) after the assignment was taken: the
// leases hold back the renewals of heartbeats sent from the poll before until then (the simulation
// found two leaders at a 500 ms lease without this).
func (d *driver) heldAssignment() {
	now := d.now()
	bound := d.timing.answerBound(d.config)
	for _, p := range d.parts {
		from := d.drainedAt
		if stored, ok := p.lease.oldestPending(); ok && stored < from {
			from = stored
		}
		if now-from > bound {
			p.lease.holdRenewals(from, now+bound)
		}
	}
}

func (d *driver) rebalanced(s groupSession, ev kafka.Event) error {
	d.group.rebalances++
	d.reachable("consumer", "a rebalance")
	cooperative, lost := s.Cooperative(), s.AssignmentLost()
	d.trackGroupAssignment(ev, cooperative, lost)
	switch ev.(type) {
	case kafka.AssignedPartitions:
		d.heldAssignment()
		d.group.member.assigned(s.MemberID(), len(d.group.parts) > 0)
	case kafka.RevokedPartitions:
		d.group.member.revoked(lost, cooperative, len(d.group.parts) > 0)
		if lost {
			d.trouble()
		}
	}
	if !d.live() {
		// Close has ended the tenure already; confluent-kafka-go applies the change itself.
		return nil
	}
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		mine := d.mine(e.Partitions)
		// A tenure needs the heartbeats it produces from now on, and the last few records before
		// them for a predecessor's release marker. Starting relative to the end, rather than from
		// the group's committed offset, also keeps librdkafka from learning a committed offset
		// that lies beyond the end of a log that restarted (a broker that lost its data, an
		// unclean leader election): it auto-commits only offsets above the one it knows, so no
		// heartbeat could be confirmed until the log grew past it.
		d.startFrom(mine)
		if err := s.Take(mine); err != nil {
			d.throttle.log(d.log.E(), "assign", "goneli %s: cannot take assignment: %v", d.config.Name, err)
			return err
		}
		for _, tp := range mine {
			d.beginTenure(d.parts[tp.Partition])
		}
	case kafka.RevokedPartitions:
		mine := d.mine(e.Partitions)
		var ending []*part
		for _, tp := range mine {
			ending = append(ending, d.parts[tp.Partition])
		}
		d.endTenures(ending, lost, true)
		return s.GiveBack(mine)
	}
	return nil
}

// beginTenure starts p's tenure.
func (d *driver) beginTenure(p *part) {
	if p.lease.active() {
		return
	}
	p.member = d.group.member.member
	// Under KIP-848 every tenure is checked, whatever its membership passed: the check reads the
	// broker's session for the group again (checkSessionAgain).
	d.apply(p, p.lease.assign(d.group.member.vouched && d.timing.classic))
	_, name := p.lease.tenure()
	d.log.D()("goneli %s: assigned partition %d (tenure %s)", d.config.Name, p.id, name)
}

// endTenures ends the tenures of parts. Unless the assignment was lost, a successor must not lead
// before the barrier has returned from LeaderRevoked (or the rebalance timeout has passed). Holding
// the revocation back until then would hold up the whole group, and with it the renewals of every
// other role, so instead each tenure whose LeaderRevoked is still on its way writes a releasing
// marker to its partition, which the successor waits on (lease.foreign), and a released marker
// once the barrier has returned (finishReleases). Only if the markers cannot be written in time is
// the revocation held back, as a rebalance would be, for up to the rebalance timeout; it ends
// early if Close begins, since Close may be waiting for it.
//
// markers is false for a hand-over (handover.go): the instance leaves the group because it cannot
// renew, and its markers would most likely be as late as its heartbeats, so the revocation is held
// back at once rather than after the markers' wait. That holds up nothing else, as the instance
// is leaving the group with every role.
func (d *driver) endTenures(parts []*part, lost, markers bool) {
	var pending []release
	for _, p := range parts {
		out := p.lease.revoke(lost)
		d.tagRelease(out.release)
		dl := d.apply(p, out)
		if out.release != nil && dl != nil {
			pending = append(pending, release{p: p, marker: *out.release, done: dl})
		}
	}
	if len(pending) == 0 {
		return
	}
	if markers {
		// A heartbeat of the ending tenure still on goneli's own connection would land after the
		// marker, where it takes a place of the successor's lookback (releaseLookback).
		limit := d.awaitHeartbeats()
		// Released markers follow either way: a releasing marker that reaches the broker late
		// must not leave a successor waiting for the rebalance timeout.
		d.releases = append(d.releases, pending...)
		if d.writeMarkers(pending, limit) {
			return
		}
		d.log.W()("goneli %s: could not write release markers within %v; holding the revocation until the barrier returns",
			d.config.Name, d.releaseFlush())
	}
	deadline := d.now() + d.timing.maxPoll
	for _, r := range pending {
		if !awaitDelivery(r.done, deadline-d.now(), d.life.closing) {
			if d.live() {
				d.log.W()("goneli %s: the barrier has not returned from LeaderRevoked within %v (the rebalance timeout); releasing the partition regardless",
					d.config.Name, d.timing.maxPoll)
			}
			return
		}
	}
}

// finishReleases writes the released marker of every release whose barrier call has returned.
func (d *driver) finishReleases() {
	kept := d.releases[:0]
	for _, r := range d.releases {
		select {
		case <-r.done.done:
			r.marker.kind = kindReleased
			r.marker.seq++
			r.marker.sentWall, r.marker.sentMono = time.Now().UnixNano(), d.now()
			if err := d.produceRecord(r.p, &r.marker); err != nil {
				d.throttle.log(d.log.W(), "produce", "goneli %s: cannot write the released marker of partition %d: %v", d.config.Name, r.p.id, err)
			}
		default:
			kept = append(kept, r)
		}
	}
	clear(d.releases[len(kept):])
	d.releases = kept
}

// trackGroupAssignment keeps the set of partitions the group has given this member, which Close
// waits to see revoked.
func (d *driver) trackGroupAssignment(ev kafka.Event, cooperative, lost bool) {
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		if !cooperative {
			clear(d.group.parts)
		}
		for _, tp := range e.Partitions {
			d.group.parts[tp.Partition] = true
		}
	case kafka.RevokedPartitions:
		for _, p := range d.parts {
			if d.group.parts[p.id] && (!cooperative || slices.ContainsFunc(e.Partitions, func(tp kafka.TopicPartition) bool { return tp.Partition == p.id })) {
				// What is stored is withdrawn, so that the revocation commits nothing: the commit
				// would renew no tenure, and the unassign (and a LeaveGroup after it) would wait
				// for its answer.
				d.withdraw(p)
				d.group.owedCommit = d.group.owedCommit || (d.gate.holds(p.id) && !lost)
			}
		}
		if !cooperative {
			clear(d.group.parts)
		}
		for _, tp := range e.Partitions {
			delete(d.group.parts, tp.Partition)
		}
	}
}

// mine picks, from a rebalance's partitions, those this instance contends for. The others (a leader
// topic with more partitions than parts) are taken and released with the rest but never used.
func (d *driver) mine(tps []kafka.TopicPartition) []kafka.TopicPartition {
	out := []kafka.TopicPartition{}
	for _, tp := range tps {
		if d.partOf(tp) != nil {
			out = append(out, tp)
		}
	}
	return out
}

// The consumer keeps the same stale leader epoch for the partitions it fetches (librdkafka #4898
// covers the producer; the consumer's fetcher behaves alike): after the topic is recreated its
// fetches go to the old broker, are answered NOT_LEADER_OR_FOLLOWER, and the metadata that would
// redirect them is ignored. The heartbeats then reach the log but are never read back, and the
// tenure can never renew. A consumer that has read back no own heartbeat of a tenure for two
// leases while the producer still delivers is therefore replaced: the instance leaves the group,
// as for a yield, and joins it again through a new handle. Its partitions go to others meanwhile,
// whose own handles may be as stale and are replaced in their turn.

// consumerRenewBackoff is the least time between two replacements of an instance's consumer.
func (d *driver) consumerRenewBackoff() time.Duration {
	return 4 * *d.config.HeartbeatTimeout
}

// checkReadBack replaces the consumer when a tenure reads nothing back although the producer
// delivers (see above).
func (d *driver) checkReadBack() {
	lease := *d.config.HeartbeatTimeout
	now := d.now()
	if !d.mayRenewConsumer(now) {
		return
	}
	for _, p := range d.parts {
		if unread := p.lease.unread(); unread > 2*lease {
			d.renewConsumer(fmt.Sprintf("partition %d has read back no own heartbeat for %v while the producer delivers them",
				p.id, unread.Round(time.Millisecond)))
			return
		}
	}
}

// mayRenewConsumer reports whether checkReadBack would replace the consumer now, were a tenure to
// read nothing back: the producer delivers, and no replacement was made too recently.
func (d *driver) mayRenewConsumer(now time.Duration) bool {
	return d.live() && !d.yield.unsubscribed && d.heart.p != nil && d.heart.delivered != 0 && now-d.heart.delivered < *d.config.HeartbeatTimeout &&
		!(d.renewals.count > 0 && now-d.renewals.last < d.consumerRenewBackoff())
}

// consumerSuspect reports whether p's trouble is for checkReadBack rather than a hand-over: p has
// read back none of its heartbeats for a lease although the producer delivers them, so the consumer
// itself is suspect, and leaving the group on the same handle would not mend it.
func (d *driver) consumerSuspect(p *part, now time.Duration) bool {
	return d.mayRenewConsumer(now) && p.lease.unread() > *d.config.HeartbeatTimeout
}

// renewConsumer leaves the group and joins it again through a new consumer; the old one closes in
// the background. Called with mu held.
func (d *driver) renewConsumer(reason string) {
	fresh, err := d.config.KafkaConsumerProvider(d.confs.consumer)
	if err != nil {
		d.throttle.log(d.log.E(), "renew", "goneli %s: cannot create a Kafka consumer to replace one that %s: %v", d.config.Name, reason, err)
		return
	}
	d.log.W()("goneli %s: replacing the Kafka consumer: %s", d.config.Name, reason)
	d.renewals.last = d.now()
	d.renewals.count++
	d.endTenures(d.parts, false, true)
	d.group.member.left()
	old, oldCommits := d.consumer, d.commits
	// Nothing the old consumer holds is to be committed any more, and nothing is stored on it
	// from now on.
	d.gate.withdrawAll()
	d.gate.close()
	if err := old.Unsubscribe(); err == nil {
		d.awaitLeft(d.now() + *d.config.HeartbeatTimeout)
	}
	if kc, ok := old.(*kafka.Consumer); ok {
		d.renewals.retired.Store(kc, true)
	}
	d.consumer, d.commits = fresh, newCommitter(fresh, &d.closers)
	d.gate = d.newGate(fresh)
	d.commitsHeld, d.resetting = false, false
	clear(d.resets)
	clear(d.group.parts)
	clear(d.commitAsks)
	clear(d.resets)
	clear(d.storeAsks)
	d.group.owedCommit = false
	d.closers.Add(1)
	go func() {
		defer d.closers.Done()
		oldCommits.close()
		if err := old.Close(); err != nil {
			d.log.D()("goneli %s: closing the replaced Kafka consumer: %v", d.config.Name, err)
		}
	}()
	if err := fresh.Subscribe(d.topic, d.onRebalance); err != nil {
		d.throttle.log(d.log.E(), "subscribe", "goneli %s: the new Kafka consumer cannot subscribe to %s: %v", d.config.Name, d.topic, err)
	}
}

// startGroupCheck describes the group, off the pulsing goroutine, for every part whose lease has
// asked for a check; collectGroupCheck takes the result in a later cycle. One description is under
// way at a time and serves every part that asked before it began.
//
// While a client has just seen a broker connection fail, the check waits for a quiet checkQuiet
// (groupcheck.go), though never longer than checkQuietMax: a description sent as the
// coordinator's connection drops can abort the process.
func (d *driver) startGroupCheck() {
	if d.check.checker.busy() || !slices.ContainsFunc(d.parts, func(p *part) bool { return p.wantCheck }) {
		return
	}
	now := d.now()
	if now < d.check.retryAt {
		// An inconclusive check waits its back-off (groupcheck.go, backOffInconclusive).
		return
	}
	if d.check.troubled && now-d.check.troubleAt < checkQuiet {
		if !d.check.deferring {
			d.check.deferring, d.check.deferSince = true, now
		}
		if now-d.check.deferSince < checkQuietMax {
			return
		}
		d.throttle.log(d.log.W(), "check-unquiet", "goneli %s: broker connections have kept failing for %v; checking the group regardless",
			d.config.Name, checkQuietMax)
	}
	d.check.deferring = false
	d.check.count.Add(1)
	tenures := map[int32]uint64{}
	for _, p := range d.parts {
		if p.wantCheck {
			p.wantCheck = false
			tenures[p.id], _ = p.lease.tenure()
		}
	}
	d.check.began, d.check.sided = now, d.viaSide()
	desc, release, err := d.describer()
	if err != nil {
		d.throttle.log(d.log.W(), "check", "goneli %s: cannot check the group's members: %v", d.config.Name, err)
		for id, tenure := range tenures {
			p := d.parts[id]
			d.apply(p, p.lease.checked(tenure, groupCheck{err: err}))
		}
		return
	}
	d.check.checker.start(desc, release, d.config.LeaderGroupID, *d.config.HeartbeatTimeout, tenures, d.sessionReader(desc))
}

func (d *driver) collectGroupCheck() {
	res, tenures, ok := d.check.checker.result()
	if !ok {
		return
	}
	d.check.alone = res.err != nil
	// A check that failed because goneli's own connection gave way to librdkafka says nothing of
	// the brokers' connections: the next one goes through librdkafka without a quiet.
	if res.err != nil && !sidechan.IsFallback(res.err) {
		d.trouble()
	}
	d.sideChecked(res)
	switch {
	case res.err != nil:
		d.throttle.log(d.log.W(), "check", "goneli %s: cannot describe group %s to check its members (%v); not leading until it can",
			d.config.Name, d.config.LeaderGroupID, res.err)
	default:
		if conflict := judgeGroup(res.desc, d.topic, d.clientID, "", 0).conflict; conflict != nil {
			d.throttle.log(d.log.E(), "conflict", "goneli %s: not leading: %v", d.config.Name, conflict)
		}
	}
	var sessionErr error
	if res.err == nil && res.timing != nil {
		sessionErr = d.checkSessionAgain(*res.timing)
	}
	inconclusive := false
	for id, tenure := range tenures {
		p := d.parts[id]
		c := groupCheck{err: res.err}
		if res.err == nil {
			c.verdict = judgeGroup(res.desc, d.topic, d.clientID, p.member, id)
			inconclusive = inconclusive || c.verdict.conflict == nil && !c.verdict.sawSelf
		}
		if sessionErr != nil {
			c.err = sessionErr
		}
		d.apply(p, p.lease.checked(tenure, c))
		if p.lease.cleared(tenure) {
			d.group.member.passed(p.member)
		}
	}
	d.backOffInconclusive(inconclusive)
}

// noteTrouble marks a failed broker connection that a client reported (see startGroupCheck).
func (d *driver) noteTrouble(e kafka.Error) {
	switch e.Code() {
	case kafka.ErrTransport, kafka.ErrAllBrokersDown, kafka.ErrNetworkException, kafka.ErrNotCoordinator,
		kafka.ErrCoordinatorNotAvailable, kafka.ErrCoordinatorLoadInProgress, kafka.ErrResolve:
		d.trouble()
	}
}

// trouble marks now as a moment when the brokers' connections were unsettled.
func (d *driver) trouble() {
	d.check.troubled, d.check.troubleAt = true, d.now()
}

// describer returns what describes the group for the group check: goneli's own connection where
// it follows the clients' settings and has not given way to librdkafka (viaSide), else an admin
// client.
//
// Of admin clients the producer's own is preferred: it shares the producer's connections, which,
// unlike the consumer's, never wait in a long fetch. But after a failed check the next one gets a
// client of its own, made and closed for it. A handle keeps the group's coordinator in a cache, and
// librdkafka 2.11 did not let go of a stale entry once the coordinator had moved to another broker:
// every retry through the producer's handle failed for as long as the instance lived
// (TestGroupCheckAfterCoordinatorMoves), and it never led. A new handle looks the coordinator up
// afresh. The producer's is tried again at the next tenure, as a working handle costs nothing to
// reuse and a stale one costs one retry.
func (d *driver) describer() (groupDescriber, func(), error) {
	if d.viaSide() {
		return d.check.wire, func() {}, nil
	}
	if !d.ensureProducer() {
		return nil, nil, errors.New("no producer")
	}
	if p, ok := d.heart.p.(*kafka.Producer); ok && !d.check.alone {
		a, err := kafka.NewAdminClientFromProducer(p)
		if err != nil {
			return nil, nil, err
		}
		return a, func() {}, nil
	}
	a, err := d.config.KafkaAdminProvider(d.confs.admin)
	if err != nil {
		return nil, nil, err
	}
	return a, a.Close, nil
}

// watch aims the watchdog at the earliest end of a lease held.
func (d *driver) watch() {
	end, ok := time.Duration(0), false
	for _, p := range d.parts {
		if e, leading := p.lease.deadline(); leading && (!ok || e < end) {
			end, ok = e, true
		}
	}
	if ok {
		d.watchdog.aim(end)
	}
}

// watchPending aims the watchdog if a lease changed since it was last aimed.
func (d *driver) watchPending() {
	if d.unwatched {
		d.unwatched = false
		d.watch()
	}
}

// expireLeases fences every lease that has run out; the watchdog calls it.
func (d *driver) expireLeases() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.live() {
		for _, p := range d.parts {
			d.deliver(p, p.lease.expire().events)
		}
		d.watch()
	}
}

func (d *driver) logKafkaError(client string, e kafka.Error) {
	hint := ""
	if e.Code() == kafka.ErrInconsistentGroupProtocol {
		hint = fmt.Sprintf(" (members of group %s use another assignment strategy; goneli v0.5.0 members use librdkafka's "+
			"eager default and cannot share a group with cooperative-sticky ones: see docs/migrating.md)", d.config.LeaderGroupID)
	}
	d.throttle.log(d.log.W(), client+":"+e.Code().String(), "goneli %s: Kafka %s: %v%s", d.config.Name, client, e, hint)
}
