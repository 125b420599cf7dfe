package goneli

import (
	"fmt"
	"time"
)

// simMember is one goneli instance contending for the single role (New): a process with its own
// clock, librdkafka's group client (simGroupClient), the heartbeat producer, the fetcher, goneli's
// own connection for the group check, and a model of the driver (driver.go) around the real lease
// (through simLease, the adapter). What is modelled of the driver, and how:
//
//   - The pulse loop (neli.pulse, Background): a full cycle when the poll deadline of
//     MinPollInterval has expired, else a step every proofPoll while a tenure proves its first
//     lease; a cycle polls (PollDuration, or MinPollInterval while it holds no partition, woken
//     by the first event), handles at most maxEventsPerCycle events, then collects the explicit
//     commit's answer and the group check's, finishes releases, lets the lease see the time
//     (due), checks the hand-over, starts the group check and the explicit commit, and aims the
//     watchdog (driver.cycle). Cycles take no virtual time; the adversary's pauses are how they
//     are slow.
//   - The rebalance callback (driver.rebalanced): membership, tenures begun and ended with their
//     release markers (the revocation waits for the releasing marker's delivery, up to
//     HeartbeatTimeout/2, or for the barrier), then the assign or unassign librdkafka waits for.
//   - The committer (commit.go): one explicit commit at a time, its answer collected by the next
//     cycle. The group check (groupcheck.go): one description at a time over a connection of its
//     own, answered from the coordinator's state (sawSelf while the group, settled, shows this
//     member holding partition 0), collected by the next cycle. The watchdog (watchdog.go): a
//     timer on the lease end; expireLeases waits for the loop when a pause holds the driver's lock.
//     The dispatcher (dispatch.go): the barrier's calls one at a time, each taking a while, and
//     IsLeader only once the LeaderAcquired call has returned (neli.deliver).
//   - Hand-over and yield (handover.go, yield.go): the real handover type decides; the instance
//     leaves the group and rejoins after the back-off.
//   - Close (closer.go): IsLeader turns false, the tenure ends, the consumer unsubscribes and the
//     process exits once its LeaveGroup is out.
//
// Left out, because none of them can make a lease outlast the coordinator's view of the member:
// the consumer's replacement when it reads nothing back (checkReadBack: it only leaves the group),
// the producer's recycling and goneli's own heartbeat connection for roles (they only lose or delay
// heartbeats, which the adversary does anyway), reachability, logs and metrics, the observer, and
// roles (each role's lease is the same machine on its own partition).
type simMember struct {
	w     *simWorld
	idx   int
	name  string
	prof  *simProfile
	clock *simClock
	lease simLease
	rdk   simGroupClient

	coordConn, prodConn, checkConn *simConn
	fetchLink                      *simLink
	leaseBase                      time.Duration // the lease's origin on the member's clock

	alive, frozen bool
	deferred      []func() // member events that came while the process was stopped
	closing       bool     // Close has begun: IsLeader is false
	startedAt     time.Duration

	// The pulse loop.
	pausedUntil  time.Duration // true time until which goneli's loop is paused
	holdsLock    bool          // the pause holds the driver's lock (the watchdog waits for it)
	lastPoll     time.Duration // the member's clock at its last poll (max.poll.interval.ms)
	deadlineAt   time.Duration // the member's clock at the last full cycle (the poll deadline)
	loopTok      int
	polling      bool
	pollTok      int
	blocked      bool // a revocation waits for its releasing marker or the barrier
	blockedSince time.Duration
	queue        []simAppEvent

	// The driver's state.
	groupP0                   bool // d.group.parts[0]
	stored                    bool // part.stored
	owedCommit                bool
	member                    membership
	partMember                int // the member id under which the tenure began
	wantCheck                 bool
	commitAsk                 int64
	commitBusy                bool
	commitAns                 *simAnswer
	checkBusy                 bool
	checkTenure               uint64
	checkAns                  *simAnswer
	releases                  []simRelease
	unwatched                 bool
	watchTok                  int
	handover                  handover
	yieldUntil                time.Duration // on the driver's scale
	yieldAsked                bool
	unsubscribed, handingOver bool

	// The dispatcher.
	disp     []*simDelivery
	dispBusy bool
	// barrier is how long the barrier takes with an event; the adversary may slow it.
	barrier          time.Duration
	barrierSlowUntil time.Duration
	barrierSlowBy    time.Duration

	// The adversary's hold on this instance's JoinGroups.
	failJoins   int
	failJoinErr simErr

	// For the oracle and the adversary's triggers.
	leading bool // IsLeader at the last check
	// autoAccepted, autoQueued and autoProcessed are when the coordinator accepted the last
	// automatic commit whose result the driver processed, when its result reached the consumer's
	// queue, and when the driver processed it (true time).
	autoAccepted, autoQueued, autoProcessed time.Duration
	// renewedExplicitly says that the lease's last renewal came from an explicit commit.
	renewedExplicitly bool
	tracedEnd         time.Duration
	storedCount       int
}

// simAppEvent is an event in the consumer's queue, which goneli reads with Poll.
type simAppEvent struct {
	kind   simAppKind
	rec    simRecord
	offset int64
	err    simErr
	p0     bool // appAssigned: partition 0 is newly assigned
	lost   bool // appRevoked
	// accepted is when the coordinator accepted the commit (appCommitted), in true time; queued is
	// when the event entered the queue.
	accepted, queued time.Duration
}

type simAppKind uint8

const (
	appMessage simAppKind = iota
	appCommitted
	appAssigned
	appRevoked
)

// simAnswer is an answer waiting to be collected by a cycle: an explicit commit's or a group check's.
type simAnswer struct {
	offset  int64
	err     simErr
	sawSelf bool
	failed  bool
}

// simDelivery is one call of the barrier (dispatch.go's delivery).
type simDelivery struct {
	acquired bool
	epoch    uint64
	done     bool
	what     string
}

// simRelease is release of driver.go: a tenure whose released marker waits for the barrier.
type simRelease struct {
	marker heartbeat
	done   *simDelivery
}

// simGroupClient is librdkafka's group client, classic or KIP-848.
type simGroupClient interface {
	subscribe()
	unsubscribe()
	serve()
	polled()
	answer(q *simReq)
	assigned(p0 bool)
	unassigned()
	store(off int64)
	withdraw()
	commit(off int64)
	id() int
	left() bool   // unsubscribed and its LeaveGroup is out
	steady() bool // in the group, steady: a healthy member
	fetcher() *simFetch
	describe() string
}

func (r *simRdk) id() int    { return r.memberID }
func (r *simRdk) left() bool { return !r.subscribed && r.state == rdkInit && r.memberID == 0 }
func (r *simRdk) steady() bool {
	return r.subscribed && r.state == rdkSteady && r.memberID != 0 && !r.maxPollOut
}
func (r *simRdk) describe() string {
	return fmt.Sprintf("m%d gen %d %s", r.memberID, r.gen, r.state)
}

// startMember starts a goneli instance now: its process, clock and connections, then New's
// subscribe.
func (w *simWorld) startMember(name string, ppm int64) *simMember {
	p := &w.prof
	m := &simMember{w: w, idx: len(w.members), name: name, prof: p, alive: true, startedAt: w.now}
	m.clock = &simClock{w: w, ppm: ppm, zero: time.Unix(1_700_000_000+int64(m.idx)*1000, 0)}
	m.leaseBase = m.clock.local(w.now)
	m.lastPoll = m.clock.local(w.now)
	m.deadlineAt = m.lastPoll - p.minPoll
	m.lease = newSimLease(m)
	m.handover = newHandover(p.ht, p.handOverAfter)
	m.barrier = w.between(0, 2*time.Millisecond)
	lat := func() *simLink {
		return newSimLink(w, w.between(100*time.Microsecond, 2*time.Millisecond), w.between(0, time.Millisecond))
	}
	m.coordConn = &simConn{w: w, up: lat(), down: lat(), serve: w.coord.serve, procDelay: w.adv.coordDelay,
		deliver: func(q *simReq) { m.do(func() { m.rdk.answer(q) }) }}
	m.prodConn = &simConn{w: w, up: lat(), down: lat(), serve: w.appendRecord, procDelay: w.adv.appendDelay,
		deliver: func(q *simReq) { m.do(func() { m.produced(q) }) }}
	m.checkConn = &simConn{w: w, up: lat(), down: lat(), serve: w.coord.serve, procDelay: w.adv.coordDelay,
		deliver: func(q *simReq) { m.do(func() { m.checkAnswered(q) }) }}
	m.fetchLink = lat()
	if p.classic {
		m.rdk = newSimRdk(m, m.coordConn)
	} else {
		m.rdk = newSimRdk848(m, m.coordConn)
	}
	w.members = append(w.members, m)
	w.note(name, "starts (clock %+d ppm)", ppm)
	m.rdk.subscribe()
	m.wakeLoop(w.now)
	return m
}

// appendRecord is the partition leader's Produce handler.
func (w *simWorld) appendRecord(q *simReq) {
	w.topic.append(*q.rec)
	q.conn.answer(q)
}

// at runs fn at true time t in this process, unless it has died by then; while the process is
// stopped, fn waits for it to continue.
func (m *simMember) at(t time.Duration, fn func()) {
	m.w.atIn(t, m, fn)
}

// atLocal is at for an instant of the member's clock.
func (m *simMember) atLocal(local time.Duration, fn func()) {
	m.at(m.clock.trueAt(local), fn)
}

func (m *simMember) do(fn func()) {
	if !m.alive {
		return
	}
	if m.frozen {
		m.deferred = append(m.deferred, fn)
		return
	}
	fn()
}

func (m *simMember) note(format string, args ...any) {
	if m.w.tracing() {
		m.w.note(m.name, format, args...)
	}
}

// pollAge is how long ago the application last polled, as librdkafka's max.poll.interval.ms
// counts it: not at all while a poll is under way (waiting for an event, or in a rebalance
// callback that waits).
func (m *simMember) pollAge() time.Duration {
	if m.blocked || m.polling {
		return 0
	}
	return m.clock.local(m.w.now) - m.lastPoll
}

// dnow is the driver's now: the member's clock since the lease's origin.
func (m *simMember) dnow() time.Duration {
	return m.clock.local(m.w.now) - m.leaseBase
}

// The pulse loop.

// wakeLoop makes the loop run at true time t: the next pulse.
func (m *simMember) wakeLoop(t time.Duration) {
	m.loopTok++
	tok := m.loopTok
	m.at(t, func() {
		if tok == m.loopTok {
			m.loop()
		}
	})
}

func (m *simMember) loop() {
	if m.w.now < m.pausedUntil {
		m.wakeLoop(m.pausedUntil)
		return
	}
	if m.closing {
		m.cycleClosing()
		return
	}
	now := m.clock.local(m.w.now)
	switch {
	case now >= m.deadlineAt+m.prof.minPoll:
		m.deadlineAt = now
		m.cycle(m.pollFor())
	case m.proving():
		m.cycle(m.prof.pollDuration)
	default:
		m.wakeLoop(m.clock.trueAt(m.deadlineAt + m.prof.minPoll))
	}
}

// pollFor is driver.pollFor.
func (m *simMember) pollFor() time.Duration {
	if len(m.releases) > 0 || m.yielding() || m.lease.active() {
		return m.prof.pollDuration
	}
	return m.prof.minPoll
}

// idle reports whether a cycle would do nothing but poll (see cycle).
func (m *simMember) idle() bool {
	return !m.lease.active() && len(m.releases) == 0 && !m.yielding() && !m.unsubscribed && m.commitAns == nil &&
		m.checkAns == nil && !m.commitBusy && !m.checkBusy && m.commitAsk == 0 && !m.wantCheck
}

// proving is driver.proving.
func (m *simMember) proving() bool {
	v := m.lease.view()
	return v.proveBy > m.dnow() && !v.releasing
}

// cycle is driver.cycle: poll, then the rest (finish).
func (m *simMember) cycle(wait time.Duration) {
	m.applyYield()
	m.lastPoll = m.clock.local(m.w.now)
	m.rdk.polled()
	if len(m.queue) == 0 && wait > 0 {
		m.polling = true
		m.pollTok++
		if m.idle() {
			// An instance with no tenure, no release under way and no yield has nothing to do in
			// a cycle but take what the poll brings (its lease's due, the hand-over check and the
			// rest find nothing), and polls again at once: it waits in the poll for the next event.
			return
		}
		tok := m.pollTok
		m.at(m.clock.afterLocal(wait), func() {
			if m.polling && tok == m.pollTok {
				m.pollWake()
			}
		})
		return
	}
	m.drain()
}

// pollWake ends a poll's wait: an event came, or the wait is over.
func (m *simMember) pollWake() {
	if m.w.now < m.pausedUntil {
		tok := m.pollTok
		m.at(m.pausedUntil, func() {
			if m.polling && tok == m.pollTok {
				m.pollWake()
			}
		})
		return
	}
	m.polling = false
	m.pollTok++
	m.lastPoll = m.clock.local(m.w.now) // librdkafka counts a poll from its return (rd_kafka_app_polled)
	m.drain()
}

// push queues an event for goneli's next poll; one waiting in a poll takes it at once.
func (m *simMember) push(e simAppEvent) {
	e.queued = m.w.now
	m.queue = append(m.queue, e)
	if m.polling {
		tok := m.pollTok
		m.at(m.w.now, func() {
			if m.polling && tok == m.pollTok {
				m.pollWake()
			}
		})
	}
}

// drain handles the polled events, then finishes the cycle.
func (m *simMember) drain() {
	for n := 0; n < maxEventsPerCycle && len(m.queue) > 0 && !m.blocked; n++ {
		e := m.queue[0]
		m.queue = m.queue[1:]
		m.handle(e)
	}
	if m.blocked {
		return
	}
	m.finish()
}

func (m *simMember) finish() {
	if m.closing {
		m.afterClosingCycle()
		return
	}
	m.collectCommits()
	m.collectGroupCheck()
	m.finishReleases()
	if !m.closing {
		m.lease.due()
		m.checkHandOver()
		m.startGroupCheck()
		m.startCommits()
	}
	m.watchPending()
	next := m.clock.trueAt(m.deadlineAt + m.prof.minPoll)
	if m.proving() {
		next = min(next, m.clock.afterLocal(proofPoll))
	}
	m.wakeLoop(next)
}

// handle is driver.handle and the rebalance callback.
func (m *simMember) handle(e simAppEvent) {
	switch e.kind {
	case appMessage:
		m.lease.onMessage(e.rec)
	case appCommitted:
		m.owedCommit = false
		if e.err == errNone && e.offset >= 0 {
			m.autoAccepted, m.autoQueued, m.autoProcessed = e.accepted, e.queued, m.w.now
			m.note("OffsetsCommitted of offset %d processed (the coordinator accepted it at %s)", e.offset, fmtDur(e.accepted))
		}
		m.lease.onCommit(e.offset, e.err, false)
	case appAssigned:
		if e.p0 {
			m.groupP0 = true
		}
		m.member.assigned(m.memberName(), m.groupP0)
		m.rdk.assigned(e.p0)
		if e.p0 && !m.closing {
			m.beginTenure()
		}
	case appRevoked:
		if m.groupP0 {
			m.owedCommit = m.owedCommit || (m.stored && !e.lost)
			m.stored = false
			m.groupP0 = false
		}
		m.member.revoked(e.lost, true, false)
		if m.closing {
			m.rdk.unassigned()
			return
		}
		m.endTenure(e.lost, true, m.rdk.unassigned)
	}
}

func (m *simMember) memberName() string {
	if id := m.rdk.id(); id != 0 {
		return fmt.Sprintf("m%d", id)
	}
	return ""
}

// beginTenure is driver.beginTenure.
func (m *simMember) beginTenure() {
	if m.lease.active() {
		return
	}
	m.partMember = m.rdk.id()
	m.lease.assign(m.member.vouched)
	m.note("tenure %x begins (m%d, vouched %v)", m.lease.tenure(), m.partMember, m.member.vouched)
}

// endTenure is driver.endTenures for the one part: a tenure whose LeaderRevoked is still with the
// barrier writes a releasing marker and holds the revocation until it is delivered (up to
// HeartbeatTimeout/2), or else, as a hand-over does at once, until the barrier has returned (up
// to the rebalance timeout). then is what the rebalance callback does next.
func (m *simMember) endTenure(lost, markers bool, then func()) {
	wasActive := m.lease.active()
	release, dl := m.lease.revoke(lost)
	if wasActive {
		m.note("tenure ends (lost %v)", lost)
	}
	if release == nil || dl == nil {
		then()
		return
	}
	holdForBarrier := func(limit time.Duration) {
		m.block(limit, func() bool { return dl.done }, then)
	}
	if !markers {
		holdForBarrier(m.prof.timing.maxPoll)
		return
	}
	r := simRelease{marker: *release, done: dl}
	m.releases = append(m.releases, r)
	q := m.produceRecord(r.marker)
	m.block(m.prof.ht/2, func() bool { return q.answered && q.err == errNone }, func() {
		if q.answered && q.err == errNone {
			then()
			return
		}
		holdForBarrier(m.prof.timing.maxPoll)
	})
}

// block holds the loop (and its lock) until ready or limit has passed, then runs then and goes
// on with the cycle.
//
// The wait is inside the consumer's poll (the rebalance callback), which librdkafka does not count
// against max.poll.interval.ms (pollAge).
func (m *simMember) block(limit time.Duration, ready func() bool, then func()) {
	m.blocked = true
	deadline := m.clock.afterLocal(limit)
	var poll func()
	poll = func() {
		if !ready() && m.w.now < deadline {
			m.at(min(deadline, m.w.now+time.Millisecond), poll)
			return
		}
		m.blocked = false
		then()
		m.drain()
	}
	m.at(m.w.now, poll)
}

// finishReleases is driver.finishReleases.
func (m *simMember) finishReleases() {
	kept := m.releases[:0]
	for _, r := range m.releases {
		if r.done.done {
			r.marker.kind = kindReleased
			r.marker.seq++
			r.marker.sentWall, r.marker.sentMono = m.clock.Now().UnixNano(), m.dnow()
			m.produceRecord(r.marker)
			continue
		}
		kept = append(kept, r)
	}
	m.releases = kept
}

// produce sends a heartbeat to partition 0 (driver.produce).
func (m *simMember) produce(h heartbeat) {
	m.produceRecord(h)
}

func (m *simMember) produceRecord(h heartbeat) *simReq {
	q := &simReq{kind: reqProduce, from: m, rec: &simRecord{writer: m, hb: h}}
	m.prodConn.send(q)
	return q
}

func (m *simMember) produced(q *simReq) {}

// fetched takes a record from the fetcher into the consumer's queue.
func (m *simMember) fetched(f *simFetch, r simRecord) {
	m.do(func() {
		if !f.stopped {
			m.push(simAppEvent{kind: appMessage, rec: r})
		}
	})
}

// store is driver.store.
func (m *simMember) store(off int64) {
	m.rdk.store(off)
	m.stored = true
	m.storedCount++
	m.note("stores offset %d", off)
	m.w.adv.offsetStored(m)
}

// withdraw is driver.withdraw.
func (m *simMember) withdraw() {
	if !m.stored {
		return
	}
	m.rdk.withdraw()
	m.stored = false
}

// startCommits is driver.startCommits with the committer's start.
func (m *simMember) startCommits() {
	off := m.commitAsk
	m.commitAsk = 0
	if off == 0 || m.commitBusy {
		return
	}
	m.commitBusy = true
	m.note("commits offset %d explicitly", off)
	m.rdk.commit(off)
}

// explicitAnswered is the committer goroutine's answer, for the next cycle.
func (m *simMember) explicitAnswered(off int64, err simErr) {
	m.commitAns = &simAnswer{offset: off, err: err}
}

// collectCommits is driver.collectCommits.
func (m *simMember) collectCommits() {
	a := m.commitAns
	if a == nil {
		return
	}
	m.commitAns, m.commitBusy = nil, false
	m.lease.onCommit(a.offset, a.err, true)
}

// startGroupCheck is driver.startGroupCheck.
func (m *simMember) startGroupCheck() {
	if m.checkBusy || !m.wantCheck {
		return
	}
	m.wantCheck = false
	m.checkBusy, m.checkTenure = true, m.lease.tenure()
	m.checkConn.send(&simReq{kind: reqDescribe, from: m, member: m.partMember})
}

func (m *simMember) checkAnswered(q *simReq) {
	m.checkAns = &simAnswer{sawSelf: q.sawSelf, failed: q.err != errNone}
}

// collectGroupCheck is driver.collectGroupCheck.
func (m *simMember) collectGroupCheck() {
	a := m.checkAns
	if a == nil {
		return
	}
	m.checkAns, m.checkBusy = nil, false
	m.lease.checked(m.checkTenure, a.sawSelf, a.failed)
	if m.lease.cleared(m.checkTenure) {
		m.member.passed(fmt.Sprintf("m%d", m.partMember))
	}
}

// The watchdog.

// watchPending is driver.watchPending; watch aims the watchdog at the lease end.
func (m *simMember) watchPending() {
	if m.unwatched {
		m.unwatched = false
		m.watch()
	}
}

func (m *simMember) watch() {
	end, ok := m.lease.deadline()
	if !ok {
		return
	}
	m.watchTok++
	tok := m.watchTok
	var fire func()
	fire = func() {
		if tok != m.watchTok {
			return
		}
		if m.holdsLock && m.w.now < m.pausedUntil {
			m.at(m.pausedUntil, fire)
			return
		}
		if !m.closing {
			m.lease.expire()
			m.watch()
		}
	}
	m.atLocal(m.leaseBase+end, fire)
}

// The dispatcher.

// deliver is neli.deliver: the events go to the barrier in order; IsLeader counts a LeaderAcquired
// once its call has returned. It returns the last event's delivery.
func (m *simMember) deliver(events []Event) *simDelivery {
	var last *simDelivery
	for _, e := range events {
		d := &simDelivery{what: fmt.Sprint(e)}
		if _, ok := e.(LeaderAcquired); ok {
			d.acquired, d.epoch = true, m.lease.newestEpoch()
		}
		if m.w.tracing() {
			switch e.(type) {
			case LeaderAcquired:
				m.note("LeaderAcquired (lease to %s)", m.leaseEndNote())
			case LeaderFenced:
				m.note("LeaderFenced: %s", e.(LeaderFenced).Reason)
			case LeaderRevoked:
				m.note("LeaderRevoked")
			}
		}
		m.disp = append(m.disp, d)
		last = d
	}
	m.dispatch()
	return last
}

func (m *simMember) dispatch() {
	if m.dispBusy || len(m.disp) == 0 {
		return
	}
	d := m.disp[0]
	m.disp = m.disp[1:]
	m.dispBusy = true
	took := m.barrier
	if m.w.now < m.barrierSlowUntil {
		took += m.barrierSlowBy
	}
	m.at(m.clock.afterLocal(took), func() {
		if d.acquired {
			m.lease.delivered(d.epoch)
			m.note("barrier returned from LeaderAcquired: leads until %s", m.leaseEndNote())
		}
		d.done = true
		m.dispBusy = false
		m.dispatch()
	})
}

// leaseEndNote renders the lease end in true time, for the timeline.
func (m *simMember) leaseEndNote() string {
	v := m.lease.view()
	return fmtDur(m.clock.trueAt(m.leaseBase + v.end))
}

// Hand-over, yield and Close.

// checkHandOver is driver.checkHandOver for the one role.
func (m *simMember) checkHandOver() {
	if m.unsubscribed {
		return
	}
	now := m.dnow()
	v := m.lease.view()
	r := roleLease{assigned: v.assigned, leading: v.leading, fresh: v.token == 0, since: v.idle}
	if v.leading {
		r.since = v.led
	}
	r.readsBack = m.lease.readsBack()
	if m.lease.quiesce(m.handover.quiet(now, r)) {
		m.withdraw()
	}
	if m.yielding() {
		return
	}
	backoff, ok := m.handover.decide(now, []roleLease{r})
	if !ok {
		return
	}
	m.note("hands over, out for %s", fmtDur(backoff))
	m.yieldUntil = max(m.yieldUntil, now+backoff)
	m.yieldAsked, m.handingOver = true, true
	m.applyYield()
}

// yielding is driver.yielding.
func (m *simMember) yielding() bool {
	return m.yieldAsked || m.yieldUntil > m.dnow()
}

// applyYield is driver.applyYield.
func (m *simMember) applyYield() {
	yielding := m.yieldUntil > m.dnow()
	switch {
	case (yielding || m.yieldAsked) && !m.unsubscribed:
		markers := !m.handingOver
		m.handingOver = false
		m.member.left()
		m.yieldAsked, m.unsubscribed = false, true
		m.endTenure(false, markers, m.rdk.unsubscribe)
	case !yielding && m.unsubscribed:
		m.unsubscribed = false
		m.note("yield over, contending again")
		m.rdk.subscribe()
	case !yielding && !m.unsubscribed:
		if !m.lease.active() && m.groupP0 {
			m.beginTenure()
		}
	}
}

// close is Close: IsLeader turns false at once, the tenure ends, the consumer leaves the group,
// and the process exits once its LeaveGroup is out.
func (m *simMember) close() {
	if m.closing || !m.alive {
		return
	}
	m.note("Close")
	m.closing = true
	m.endTenure(false, true, m.rdk.unsubscribe)
	m.wakeLoop(m.w.now)
}

func (m *simMember) cycleClosing() {
	m.lastPoll = m.clock.local(m.w.now)
	m.rdk.polled()
	m.drain()
}

func (m *simMember) afterClosingCycle() {
	m.finishReleases()
	if m.rdk.left() && len(m.releases) == 0 {
		m.note("closed")
		m.exit()
		return
	}
	m.wakeLoop(m.clock.afterLocal(m.prof.minPoll))
}

// exit ends the process: nothing it holds is answered any more.
func (m *simMember) exit() {
	m.alive = false
	m.coordConn.dead, m.prodConn.dead, m.checkConn.dead = true, true, true
	if f := m.rdk.fetcher(); f != nil {
		f.stopped = true
	}
}

// crash kills the process.
func (m *simMember) crash() {
	if !m.alive {
		return
	}
	m.w.note(m.name, "crashes")
	m.exit()
}

// stop stops the whole process (SIGSTOP) for d: librdkafka's threads, the watchdog and the
// dispatcher too; what arrives meanwhile is served once it continues.
func (m *simMember) stop(d time.Duration) {
	if !m.alive || m.frozen {
		return
	}
	m.w.note(m.name, "SIGSTOP for %s", fmtDur(d))
	m.frozen = true
	m.w.after(d, func() {
		if !m.alive {
			return
		}
		m.w.note(m.name, "SIGCONT")
		m.frozen = false
		todo := m.deferred
		m.deferred = nil
		for _, fn := range todo {
			m.do(fn)
		}
	})
}

// pause stalls goneli's pulse loop for d (a GC pause, a slow call); holdsLock says that it stalls
// inside a cycle, with the driver's lock held, so that the watchdog waits too.
func (m *simMember) pause(d time.Duration, holdsLock bool) {
	if !m.alive {
		return
	}
	m.w.note(m.name, "goneli's loop paused for %s (lock held: %v)", fmtDur(d), holdsLock)
	until := m.w.now + d
	if until > m.pausedUntil {
		m.pausedUntil = until
		m.holdsLock = holdsLock || m.polling
	}
	m.w.at(until, func() {
		if m.alive && m.w.now >= m.pausedUntil {
			m.w.note(m.name, "goneli's loop resumes")
		}
	})
	// librdkafka checks max.poll.interval.ms on a timer of its own.
	m.at(m.clock.afterLocal(m.prof.timing.maxPoll+time.Millisecond), m.rdk.serve)
}

// isLeader is IsLeader: Live, not yielding, the lease announced and not run out.
func (m *simMember) isLeader() bool {
	if !m.alive || m.closing || m.yielding() {
		return false
	}
	v := m.lease.view()
	return m.lease.announced(v) && m.clock.local(m.w.now) < m.leaseBase+v.end
}

// leaseEnd is the true time at which the current lease runs out.
func (m *simMember) leaseEnd() time.Duration {
	return m.clock.trueAt(m.leaseBase + m.lease.view().end)
}
