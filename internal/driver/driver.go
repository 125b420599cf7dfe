package driver

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goneli/goneli/internal/core"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// Driver is the Kafka side of an instance, the shell around its machine (internal/core): it owns the
// clients, runs the poll cycle and the rebalance callback, carries what librdkafka, kgo and the
// producer report into the machine and carries out what the machine asks (effects). It reaches the
// application only through deliver. Every decision about a tenure is the machine's; what stays
// here is how: which client describes the group, when a producer is replaced, how long a wait in
// the callback lasts, how the clients close.
//
// Its parts are small types of their own: the heartbeat producer (producer.go), the explicit
// commits (commit.go), the group check (groupcheck.go), the alarm (watchdog.go), the reachability
// of Kafka (reach.go), the yield (yield.go) and the leave and close sequence (closer.go). Every
// time it reads is from one clock, d.now's, which the machine, the leases, the alarm, the pulse
// loop and the close sequence share; its waits are timers of package time. Under testing/synctest
// (driver_test.go in the root package) both are the bubble's, so that a test moves them together.
//
// Two locks: mu is the loop's, held for a whole cycle, the poll and the rebalance callback in it
// included; mm guards the machine, and is held only for each call into it and what that call asks
// of the shell. The alarm takes mm alone, so that it fences a lease and withdraws a stored offset on
// time while the loop waits in a poll. mm is never held while waiting, and always taken after mu.
type Driver struct {
	config   Config
	timing   core.GroupTiming // the machine's, as the shell reads it (changed only with mu and mm held)
	log      scribe.Scribe
	topic    string
	key      []byte
	clientID string // the consumer's client.id, by which the group check finds this instance
	confs    clientConfs
	// parts are the roles contended for, by partition number, shared with the API type.
	parts []*core.Role
	life  Life
	// deliverTo posts a lease's events to the application (the root package's deliver); the driver
	// never calls the application itself.
	deliverTo func(r *core.Role, events []core.TenureEvent, dl *core.Delivery)
	clock     core.Clock
	base      time.Time // origin of the monotonic durations that leases, yields and deadlines are measured in

	mu sync.Mutex
	mm sync.Mutex
	m  *core.Machine

	consumer KafkaConsumer
	// fatal is the fatal error the consumer raised, if it did (guarded by mu): confluent-kafka-go
	// v2.11.1 never finishes closing such a consumer (closer.go).
	fatal    error
	heart    heartbeatProducer
	observer *Observer // nil unless Setup.Observe
	observe  bool
	onLeader func(Leader)
	// commits sends the consumer's explicit commits (commit.go).
	commits *committer
	// beats gathers the heartbeats that the machine produced during a cycle, for sendHeartbeats at
	// its end; wire writes those of several roles in one request over goneli's own connection
	// (internal/sidechan), nil where that cannot follow the clients' settings.
	beats []wireBeat
	wire  *sidechan.Beats[wireBeat]
	// brokers are the ids of the brokers New found, whose KIP-848 group settings a check reads
	// again (checkSessionAgain).
	brokers []int32
	check   checkState
	reach   reachability // whether Kafka answers, for Stats (reach.go)
	alarm   *watchdog
	prio    priorityState // priorities, transfers and leaving the group (groupwatch.go)
	// closing is set once the group consumer's Close has been called; from then on its rebalance
	// callback may run without mu, from a close that goes on in the background. late counts
	// rebalance events that reached the callback only during the group consumer's Close, which
	// awaitLeft exists to prevent.
	closing atomic.Bool
	late    atomic.Int32
	// retired holds the consumers replaced (renewConsumer), whose rebalance callbacks are ignored
	// while they close in the background.
	retired  sync.Map
	throttle LogThrottle
	logs     *LogForwarder
	// closers counts the goroutines that close clients or write final markers, which may outlive
	// Close (AwaitClients).
	closers sync.WaitGroup
}

// checkState is what the driver keeps beside the group checker (groupcheck.go).
type checkState struct {
	checker *groupChecker
	// wire is goneli's own connection (internal/sidechan), which describes the group; nil where
	// it cannot follow the clients' settings, and the check then goes through librdkafka's admin
	// client, as it does once the connection has given way to librdkafka (viaSide).
	wire sidechan.Channel
	// began is when the check under way began, and sided whether it went over wire; side watches
	// wire's group checks, and sideOff says that wire gave way to librdkafka at the instance's
	// behest (sidefail.go), for a wire that cannot be told to.
	began   time.Duration
	sided   bool
	side    sideWatch
	sideOff atomic.Bool
	// timings keeps what each broker answered for its KIP-848 group settings (session848.go).
	timings brokerTimings
}

// clientConfs are the librdkafka configurations of the clients an instance makes.
type clientConfs struct {
	consumer, producer, admin *KafkaConfigMap
}

// now is the time on the driver's clock, the monotonic scale that leases, yields and the close
// bound are measured in. Safe without mu.
func (d *Driver) now() time.Duration {
	return d.clock.Now().Sub(d.base)
}

// live reports whether Close has yet to begin. Safe without mu.
func (d *Driver) Live() bool {
	return d.life.Live()
}

// machine runs f on the machine with mm held. Called with mu held, or from the alarm.
func (d *Driver) machine(f func(m *core.Machine)) {
	d.mm.Lock()
	defer d.mm.Unlock()
	f(d.m)
}

// step runs one cycle, unless Close has begun, waiting in the poll for up to poll, or for pollFor(limit)
// if poll is negative. It takes mu, which a cycle needs.
func (d *Driver) step(poll, limit time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.Live() {
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
func (d *Driver) pollFor(limit time.Duration) time.Duration {
	base := *d.config.PollDuration
	busy := false
	d.machine(func(m *core.Machine) { busy = m.BusyLoop() })
	if busy {
		return base
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
func (d *Driver) idlePoll() time.Duration {
	poll := *d.config.MinPollInterval
	if _, _, down := d.reach.state(); down || d.observer != nil {
		return poll
	}
	return max(poll, min(d.timing.Heartbeat(), time.Second))
}

// proving reports whether a tenure of this instance is proving its first lease (machine.proving).
// Safe without mu: it reads what the leases publish.
func (d *Driver) proving() bool {
	now := d.now()
	for _, p := range d.parts {
		if v := p.Lease.Load(); v.ProveBy > now && !v.Releasing {
			return true
		}
	}
	return false
}

// cycle polls the consumer dry (within bounds), waiting up to poll for the first event, lets the
// machine act on the time that has passed and starts what it asks for.
func (d *Driver) cycle(poll time.Duration) error {
	d.holdOut()
	d.applyYield()
	if d.observer != nil {
		d.observer.Poll()
	}
	var fatal error
	ev := d.consumer.Poll(int(poll.Milliseconds()))
	for i := 0; ev != nil; i++ {
		if err := d.handle(ev); err != nil && fatal == nil {
			fatal = err
		}
		if i+1 >= core.MaxEventsPerCycle || !d.Live() {
			break
		}
		ev = d.consumer.Poll(0)
	}
	d.machine(func(m *core.Machine) { m.Polled(ev == nil) })
	if denied := d.drainProducer(); fatal == nil {
		fatal = denied
	}
	d.collectHeartbeats()
	d.collectCommits()
	d.checkReadBack()
	d.probeReach()
	d.collectGroupCheck()
	d.machine(func(m *core.Machine) { m.FinishReleases() })
	if d.Live() {
		beats := d.mayProduce()
		d.machine(func(m *core.Machine) { m.Tick(beats) })
		d.sendHeartbeats()
		d.checkHandOver()
		d.watchGroup()
		d.machine(func(m *core.Machine) {
			m.StartGroupCheck()
			m.StartCommits()
		})
	}
	d.watchPending()
	return fatal
}

func (d *Driver) handle(ev kafka.Event) error {
	switch e := ev.(type) {
	case *kafka.Message:
		d.onMessage(e)
	case kafka.OffsetsCommitted:
		if e.Error == nil {
			d.reachable("consumer", "a commit accepted")
		}
		d.sideCommit(e)
		d.machine(func(m *core.Machine) { m.AutoCommitted(commitAnswerOf(e)) })
	case kafka.Error:
		if e.IsFatal() {
			d.fatal = e
			d.machine(func(m *core.Machine) { m.Fail("fatal consumer error: " + e.Error()) })
			// Under KIP-848 librdkafka raises a refused ConsumerGroupHeartbeat as a fatal error
			// (GROUP_AUTHORIZATION_FAILED), where the classic protocol's JoinGroup gives a plain one.
			if err := d.config.Errors.Authorization("consumer", e); err != nil {
				return err
			}
			return fmt.Errorf("goneli: fatal Kafka consumer error: %w", e)
		}
		if e.Code() == kafka.ErrInvalidSessionTimeout && d.timing.Classic {
			// A configuration mismatch that no retry can mend. A lease this instance may still hold
			// runs out on its own: no commit is accepted without a session, and the alarm fences
			// it.
			return d.config.Errors.SessionTimeout(d.timing.Session, *d.config.HeartbeatTimeout, e)
		}
		if err := d.config.Errors.Authorization("consumer", e); err != nil {
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

func (d *Driver) onMessage(msg *kafka.Message) {
	if msg.TopicPartition.Error != nil {
		d.throttle.Log(d.log.W(), "fetch:"+msg.TopicPartition.Error.Error(), "goneli %s: fetch from %s failed: %v",
			d.config.Name, d.topic, msg.TopicPartition.Error)
		return
	}
	d.reachable("consumer", "a record fetched")
	p := d.partOf(msg.TopicPartition)
	if p == nil {
		return
	}
	var h core.Heartbeat
	if h.Decode(msg.Value) != nil {
		return
	}
	if h.Kind == core.KindHeartbeat && string(msg.Key) == d.config.Name {
		d.machine(func(m *core.Machine) { m.ReadBack(p, h, int64(msg.TopicPartition.Offset)) })
		return
	}
	d.foreignRecord(p, string(msg.Key), h)
}

// partOf returns the part of tp, or nil if tp is not one this instance contends for.
func (d *Driver) partOf(tp kafka.TopicPartition) *core.Role {
	if tp.Topic == nil || *tp.Topic != d.topic || tp.Partition < 0 || int(tp.Partition) >= len(d.parts) {
		return nil
	}
	return d.parts[tp.Partition]
}

// commitAnswerOf translates a commit's answer for the machine.
func commitAnswerOf(e kafka.OffsetsCommitted) core.CommitAnswer {
	a := core.CommitAnswer{Err: e.Error, Outcome: commitOutcomeOf(e.Error)}
	for _, tp := range e.Offsets {
		c := core.Committed{OffsetRef: core.OffsetRef{Partition: tp.Partition, Offset: int64(tp.Offset)}, Err: tp.Error, Outcome: commitOutcomeOf(tp.Error)}
		if tp.Metadata != nil {
			c.Tag = *tp.Metadata
		}
		a.Offsets = append(a.Offsets, c)
	}
	return a
}

// commitOutcomeOf sorts a commit's error (lease.rejected and commitOutcome say why).
func commitOutcomeOf(err error) core.CommitOutcome {
	if err == nil {
		return core.CommitOK
	}
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return core.CommitFailed
	}
	switch ke.Code() {
	case kafka.ErrNoOffset:
		return core.CommitNoOffset
	case kafka.ErrIllegalGeneration:
		return core.CommitGeneration
	case kafka.ErrUnknownMemberID, kafka.ErrFencedInstanceID, kafka.ErrFencedMemberEpoch:
		return core.CommitGone
	}
	return core.CommitNotAccepted
}

// offsetsOf translates offsets of the leader topic for librdkafka.
func (d *Driver) offsetsOf(offsets []core.OffsetRef) []kafka.TopicPartition {
	out := make([]kafka.TopicPartition, len(offsets))
	for i, o := range offsets {
		out[i] = kafka.TopicPartition{Topic: &d.topic, Partition: o.Partition, Offset: kafka.Offset(o.Offset)}
		if o.Tag != "" {
			tag := o.Tag
			out[i].Metadata = &tag
		}
	}
	return out
}

// storerOf is consumer c's StoreOffsets as the commit gate needs it (storer): the offsets it
// stored, of those asked.
func (d *Driver) storerOf(c KafkaConsumer) core.Storer {
	return func(offsets []core.OffsetRef) ([]core.OffsetRef, error) {
		stored, err := c.StoreOffsets(d.offsetsOf(offsets))
		var out []core.OffsetRef
		for _, tp := range stored {
			if tp.Error == nil {
				out = append(out, core.OffsetRef{Partition: tp.Partition, Offset: int64(tp.Offset)})
			}
		}
		if err != nil && len(stored) == 0 {
			return nil, err
		}
		return out, err
	}
}

// collectCommits takes the answer to an explicit commit, once it has come.
func (d *Driver) collectCommits() {
	e, _, ok := d.commits.collect(d.now())
	if !ok {
		return
	}
	if e.Error == nil {
		d.reachable("consumer", "a commit accepted")
	}
	d.sideCommit(e)
	d.machine(func(m *core.Machine) { m.ExplicitAnswered(commitAnswerOf(e)) })
}

func (d *Driver) onRebalance(c *kafka.Consumer, ev kafka.Event) error {
	if _, retired := d.retired.Load(c); d.closing.Load() || (c != nil && retired) {
		// A consumer finishing its close, perhaps in the background, must not touch state that
		// the locks no longer guard; confluent-kafka-go applies the change itself.
		d.late.Add(1)
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

// rebalanced serves a change of this member's assignment: the machine begins the new tenures and
// ends the old ones, and the session takes the partitions or gives them back. The waits it leaves
// (for the partitions' ends, for release markers or the barrier) are made here, without mm, so that
// the alarm goes on meanwhile.
func (d *Driver) rebalanced(s groupSession, ev kafka.Event) error {
	d.reachable("consumer", "a rebalance")
	cooperative, lost := s.Cooperative(), s.AssignmentLost()
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		partitions := d.partitionsOf(e.Partitions)
		var read []int32
		take := false
		member := s.MemberID()
		canRead := d.check.wire != nil && d.check.wire.Fallback() == nil
		d.machine(func(m *core.Machine) { read, take = m.Assign(partitions, member, cooperative, canRead) })
		if !take {
			// Close has ended the tenures already; confluent-kafka-go applies the change itself.
			return nil
		}
		ends := d.endsOf(read)
		var offsets []core.OffsetRef
		d.machine(func(m *core.Machine) { offsets = m.TakeAt(ends) })
		err := s.Take(d.offsetsOf(offsets))
		d.machine(func(m *core.Machine) { m.Taken(err) })
		return err
	case kafka.RevokedPartitions:
		partitions := d.partitionsOf(e.Partitions)
		var wait *core.ReleaseWait
		var back []int32
		give := false
		d.machine(func(m *core.Machine) { wait, back, give = m.Revoke(partitions, lost, cooperative) })
		if lost {
			d.trouble()
		}
		if !give {
			return nil
		}
		d.waitReleases(wait)
		return s.GiveBack(d.offsetsOf(refsOf(back)))
	}
	return nil
}

// partitionsOf returns the partitions of the leader topic among tps.
func (d *Driver) partitionsOf(tps []kafka.TopicPartition) []int32 {
	out := []int32{}
	for _, tp := range tps {
		if tp.Topic == nil || *tp.Topic == d.topic {
			out = append(out, tp.Partition)
		}
	}
	return out
}

// refsOf returns partitions as offsets that name no offset.
func refsOf(partitions []int32) []core.OffsetRef {
	out := make([]core.OffsetRef, len(partitions))
	for i, id := range partitions {
		out[i] = core.OffsetRef{Partition: id, Offset: core.OffsetInvalid}
	}
	return out
}

// waitReleases makes the waits that ending tenures leave (machine.endTenures): the releasing
// markers written, or else the barrier's return from each LeaderRevoked, up to the rebalance
// timeout; it ends early if Close begins, since Close may be waiting for it.
func (d *Driver) waitReleases(w *core.ReleaseWait) {
	if w == nil {
		return
	}
	if w.Markers {
		// A heartbeat of the ending tenure still on goneli's own connection would land after the
		// marker, where it takes a place of the successor's lookback (releaseLookback).
		limit := d.awaitHeartbeats()
		if d.writeMarkers(w.Pending, limit) {
			return
		}
		d.log.W()("goneli %s: could not write release markers within %v; holding the revocation until the barrier returns",
			d.config.Name, d.releaseFlush())
	}
	deadline := d.now() + w.Limit
	for _, r := range w.Pending {
		if !AwaitDelivery(r.Done, deadline-d.now(), d.life.Closing()) {
			if d.Live() {
				d.log.W()("goneli %s: the barrier has not returned from LeaderRevoked within %v (the rebalance timeout); releasing the partition regardless",
					d.config.Name, w.Limit)
			}
			return
		}
	}
}

// mine picks, from a rebalance's partitions, those this instance contends for. The others (a leader
// topic with more partitions than parts) are taken and released with the rest but never used.
func (d *Driver) mine(tps []kafka.TopicPartition) []kafka.TopicPartition {
	out := []kafka.TopicPartition{}
	for _, tp := range tps {
		if d.partOf(tp) != nil {
			out = append(out, tp)
		}
	}
	return out
}

// delivering reports whether the producer delivered a heartbeat within the last lease: the machine
// then suspects the consumer of a tenure that reads nothing back (machine.stuckConsumer).
func (d *Driver) delivering() bool {
	now := d.now()
	return d.heart.p != nil && d.heart.delivered != 0 && now-d.heart.delivered < *d.config.HeartbeatTimeout
}

// checkReadBack replaces the consumer when a tenure reads nothing back although the producer
// delivers (machine.stuckConsumer).
func (d *Driver) checkReadBack() {
	var why string
	stuck := false
	delivering := d.delivering()
	d.machine(func(m *core.Machine) { why, stuck = m.StuckConsumer(delivering) })
	if stuck {
		d.renewConsumer(why)
	}
}

// renewConsumer leaves the group and joins it again through a new consumer; the old one closes in
// the background. Called with mu held.
func (d *Driver) renewConsumer(reason string) {
	fresh, err := d.config.KafkaConsumerProvider(d.confs.consumer)
	if err != nil {
		d.throttle.Log(d.log.E(), "renew", "goneli %s: cannot create a Kafka consumer to replace one that %s: %v", d.config.Name, reason, err)
		return
	}
	d.log.W()("goneli %s: replacing the Kafka consumer: %s", d.config.Name, reason)
	var wait *core.ReleaseWait
	d.machine(func(m *core.Machine) { wait = m.ReplacingConsumer() })
	d.waitReleases(wait)
	old, oldCommits := d.consumer, d.commits
	if err := old.Unsubscribe(); err == nil {
		d.awaitLeft(d.now() + *d.config.HeartbeatTimeout)
	}
	if kc, ok := old.(*kafka.Consumer); ok {
		d.retired.Store(kc, true)
	}
	d.machine(func(m *core.Machine) {
		d.consumer, d.commits = fresh, newCommitter(fresh, &d.closers)
		m.ConsumerReplaced(d.storerOf(fresh))
	})
	d.closers.Add(1)
	go func() {
		defer d.closers.Done()
		oldCommits.close()
		if err := old.Close(); err != nil {
			d.log.D()("goneli %s: closing the replaced Kafka consumer: %v", d.config.Name, err)
		}
	}()
	if err := fresh.Subscribe(d.topic, d.onRebalance); err != nil {
		d.throttle.Log(d.log.E(), "subscribe", "goneli %s: the new Kafka consumer cannot subscribe to %s: %v", d.config.Name, d.topic, err)
	}
}

// collectGroupCheck takes a group check's result, once it has come, to the machine.
func (d *Driver) collectGroupCheck() {
	res, tenures, ok := d.check.checker.result()
	if !ok {
		return
	}
	var sessionErr error
	if res.err == nil && res.timing != nil {
		sessionErr = d.checkSessionAgain(*res.timing)
	}
	d.sideChecked(res)
	fallback := res.err != nil && sidechan.IsFallback(res.err)
	desc := describedOf(res.desc)
	desc.Group = d.config.LeaderGroupID
	d.machine(func(m *core.Machine) { m.Checked(tenures, desc, res.err, fallback, sessionErr) })
}

// noteTrouble marks a failed broker connection that a client reported (machine.startGroupCheck).
func (d *Driver) noteTrouble(e kafka.Error) {
	switch e.Code() {
	case kafka.ErrTransport, kafka.ErrAllBrokersDown, kafka.ErrNetworkException, kafka.ErrNotCoordinator,
		kafka.ErrCoordinatorNotAvailable, kafka.ErrCoordinatorLoadInProgress, kafka.ErrResolve:
		d.trouble()
	}
}

// trouble marks now as a moment when the brokers' connections were unsettled.
func (d *Driver) trouble() {
	d.machine(func(m *core.Machine) { m.Trouble() })
}

// troubled reports whether the brokers' connections were unsettled within the last checkQuiet.
// Called with mu held.
func (d *Driver) troubled() bool {
	t := false
	d.machine(func(m *core.Machine) { t = m.Check.Troubled && d.now()-m.Check.TroubleAt < core.CheckQuiet })
	return t
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
func (d *Driver) describer(alone bool) (GroupDescriber, func(), error) {
	if d.viaSide() {
		return d.check.wire, func() {}, nil
	}
	if !d.ensureProducer() {
		return nil, nil, errors.New("no producer")
	}
	if p, ok := d.heart.p.(*kafka.Producer); ok && !alone {
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

// watchPending aims the alarm again if the machine's deadline may have changed.
func (d *Driver) watchPending() {
	d.machine(func(m *core.Machine) {
		if m.WatchPending() {
			d.aim(m)
		}
	})
}

// aim aims the alarm at the machine's deadline. Called with mm held.
func (d *Driver) aim(m *core.Machine) {
	if at, ok := m.Deadline(); ok {
		d.alarm.aim(at)
	}
}

// ring is the alarm's call, at the machine's deadline: it fences every lease that has run out and
// lets the commit gate act, with mm alone held.
func (d *Driver) ring() {
	d.machine(func(m *core.Machine) {
		if !d.Live() {
			return
		}
		m.Alarm()
		d.aim(m)
	})
}

func (d *Driver) logKafkaError(client string, e kafka.Error) {
	hint := ""
	if e.Code() == kafka.ErrInconsistentGroupProtocol {
		hint = fmt.Sprintf(" (members of group %s use another assignment strategy; goneli v0.5.0 members use librdkafka's "+
			"eager default and cannot share a group with cooperative-sticky ones: see docs/migrating.md)", d.config.LeaderGroupID)
	}
	d.throttle.Log(d.log.W(), client+":"+e.Code().String(), "goneli %s: Kafka %s: %v%s", d.config.Name, client, e, hint)
}

// # The machine's effects (machine.effects), carried out on Kafka's clients.

func (d *Driver) StoreOffsets(offsets []core.OffsetRef) ([]core.OffsetRef, error) {
	return d.storerOf(d.consumer)(offsets)
}

func (d *Driver) Produce(r *core.Role, h *core.Heartbeat) {
	d.beats = append(d.beats, wireBeat{p: r, h: h})
}

func (d *Driver) WriteMarker(p *core.Role, h *core.Heartbeat) {
	if err := d.produceRecord(p, h); err != nil {
		d.throttle.Log(d.log.W(), "produce", "goneli %s: cannot write the released marker of partition %d: %v", d.config.Name, p.ID, err)
	}
}

func (d *Driver) Commit(offsets []core.OffsetRef) {
	d.commits.start(d.offsetsOf(offsets), d.now())
}

func (d *Driver) Describe(tenures map[int32]uint64) error {
	d.check.began, d.check.sided = d.now(), d.viaSide()
	desc, release, err := d.describer(d.m.Check.Alone)
	if err != nil {
		return err
	}
	d.check.checker.start(desc, release, d.config.LeaderGroupID, *d.config.HeartbeatTimeout, tenures, d.sessionReader(desc))
	return nil
}

func (d *Driver) Deliver(r *core.Role, events []core.TenureEvent, dl *core.Delivery) {
	d.deliverTo(r, events, dl)
}

func (d *Driver) Note(level core.LogLevel, key, format string, args ...any) {
	logger := d.log.D()
	switch level {
	case core.LevelInfo:
		logger = d.log.I()
	case core.LevelWarn:
		logger = d.log.W()
	case core.LevelError:
		logger = d.log.E()
	}
	if key == "" {
		logger(format, args...)
		return
	}
	d.throttle.Log(logger, key, format, args...)
}

func (d *Driver) Unsubscribe() error {
	return d.consumer.Unsubscribe()
}

func (d *Driver) Subscribe() error {
	return d.consumer.Subscribe(d.topic, d.onRebalance)
}

func (d *Driver) Left(member string) {
	d.leftGroup(member)
}
