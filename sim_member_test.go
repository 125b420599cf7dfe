package goneli

import (
	"time"
)

// simMember is one goneli instance contending for the single role (New): a process with its own
// clock, librdkafka's group client (simGroupClient), the heartbeat producer, the fetcher, goneli's
// own connection for the group check, and a model of the driver (driver.go) around the real lease
// (through simLease, the adapter). What is modelled of the driver, and how:
//
//   - The pulse loop (neli.pulse, Background): a full cycle when the poll deadline of
//     MinPollInterval has expired, else a step every proofPoll while a tenure proves its first
//     lease; a cycle polls (PollDuration while it holds a partition), handles at most
//     maxEventsPerCycle events, then collects the explicit commit's answer and the group check's,
//     finishes releases, lets the lease see the time (due), checks the hand-over, starts the group
//     check and the explicit commit, and aims the watchdog (driver.cycle).
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
//   - The commit gate (commitgate.go): one store or explicit commit at a time, the store withdrawn
//     a little less than a tick after it was made and counted as in flight until an answer or a
//     presumption, the presumed store's newest offset stored again; one round of heartbeats in
//     flight (driver.mayProduce). What of the gate is simplified is said at simMember.store.
//   - Hand-over and yield (handover.go, yield.go): the real handover type decides; the instance
//     leaves the group and rejoins after the back-off.
//   - Close (closer.go): IsLeader turns false, the tenure ends, the consumer unsubscribes and the
//     process exits once its LeaveGroup is out.
//
// Simplified, and why none of it can hide an overlap:
//
//   - A cycle takes no virtual time. A slower cycle is a pause of the loop, which the adversary
//     draws from a millisecond up, with the driver's lock held or not.
//   - A member with no tenure, no release, no yield and nothing under way waits in its poll until
//     the next event comes (loop), where the driver would go round every MinPollInterval: such a
//     cycle finds nothing to do but take what the poll brings.
//   - The group check is answered from the coordinator's state at the moment the description
//     arrives. A real description can also fail or come back inconclusive, which only delays
//     leading (and a slow check connection is among the adversary's faults); every member uses
//     the one leader topic, so the check never finds a conflict. Its wait for broker connections
//     to settle (checkQuiet) only delays it too.
//   - Left out: the consumer's replacement when it reads nothing back (checkReadBack) and the
//     producer's recycling, which only leave the group or lose heartbeats; reachability, logs,
//     metrics and the observer, which decide nothing; and roles: the simulation runs New's one
//     role. Each role's lease is the same machine on a partition of its own, renewed on shared
//     ticks (renewalTick), which changes when heartbeats go out, not what renews a lease.
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
	groupP0 bool // d.group.parts[0]
	// The commit gate (commitgate.go), for the one partition: storeAsk waits for it (storeAsked);
	// gateArmed says an offset is stored and its withdrawal due (gateTok names that store);
	// gatePending that a withdrawn store may have been sent and is unanswered until gatePresumeBy.
	// gateAt is when the store was made; gateLatencies the latest answer times, gateDoubt the
	// stores presumed unsent since the last answer, which learn and double the patience; gateChainAt
	// the time of the first store since the last answer (gateChained), which the stores after
	// presumptions anchor at (lease.storedSince). lastBeat is the newest heartbeat produced, for
	// driver.mayProduce.
	storeAsk               commitAsk
	storeAsked             bool
	gateArmed, gatePending bool
	gatePresumed           bool // the last store was presumed unsent and is unanswered
	gateTok                int
	gateAt, gatePresumeBy  time.Duration
	gateLatencies          []time.Duration
	gateDoubt              int
	gateChainAt            time.Duration
	gateChained            bool
	// gateShifted says the store under way is made half a tick late and gatePlaced whether it has
	// been made yet (at gateAt, then); gateShift that the next store after a presumption is.
	gateShifted, gatePlaced, gateShift bool
	lastBeat                           *simReq
	lastBeatAt                         time.Duration
	owedCommit                         bool
	member                             membership
	partMember                         int // the member id under which the tenure began
	wantCheck                          bool
	commitAsk                          int64
	commitTag                          string
	commitBusy                         bool
	// commitSent is when the explicit commit under way started, and commitsHeld driver.commitsHeld.
	commitSent  time.Duration
	commitsHeld bool
	// polledAt is driver.polledAt: when the last Poll returned, on the driver's clock.
	polledAt                  time.Duration
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
	// renewedExplicitly says that the lease's last renewal came from an explicit commit, and
	// renewedRestarted from the one a log restarted below the committed offset asks for
	// (lease.readBack), whose offset restartedAsk is.
	renewedExplicitly, renewedRestarted bool
	restartedAsk                        int64
	tracedEnd                           time.Duration
	storedCount                         int
}

// simAppEvent is an event in the consumer's queue, which goneli reads with Poll.
type simAppEvent struct {
	kind   simAppKind
	rec    simRecord
	offset int64
	tag    string // appCommitted: the commit's metadata, as librdkafka hands it back
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

// simGroupClient is librdkafka's group client, classic or KIP-848.
type simGroupClient interface {
	subscribe()
	unsubscribe()
	serve()
	polled()
	answer(q *simReq)
	assigned(p0 bool)
	unassigned()
	store(off int64, tag string)
	withdraw()
	commit(off int64, tag string)
	id() int
	left() bool   // unsubscribed and its LeaveGroup is out
	steady() bool // in the group, steady: a healthy member
	fetcher() *simFetch
	lastHeartbeat() (sent, answered time.Duration)
	describe() string
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
