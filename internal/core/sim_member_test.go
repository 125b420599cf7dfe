package core

import (
	"time"
)

// simMember is one goneli instance contending for the schedule's roles (NewRoles; New's single
// role when there is one): a process with its own clock, librdkafka's group client
// (simGroupClient), the heartbeat producer, the fetcher, goneli's own connection for the group
// check and for the ends of the partitions an assignment takes, and the instance's machine
// (machine.go), the very type the driver runs, which makes every decision. Around the machine the
// member carries out what the driver's shell does (sim_shell_test.go): it hands the machine
// librdkafka's events, makes the machine's effects happen on the models, and makes the waits the
// machine leaves to the shell.
//
// What the shell does, and how it is modelled:
//
//   - The pulse loop (neli.pulse, Background, driver.cycle): a full cycle when the poll deadline of
//     MinPollInterval has expired, else a step every proofPoll while a tenure proves its first
//     lease; a cycle applies a yield (and a transfer asked for: transfer.go's carryOut), polls
//     (PollDuration while it holds a partition), handles at most maxEventsPerCycle events, then
//     hands the machine the explicit commit's answer and the group check's, lets it finish
//     releases and see the time (tick), sends the heartbeats it produced, lets it check the
//     hand-over and start the group check and the commits, and aims the alarm.
//   - The rebalance callback (driver.rebalanced): the machine's assign; the read of the
//     partitions' ends it asks for (tails.go: a ListOffsets over goneli's own connection, answered
//     with each partition's end when the broker serves it, waited for with the loop blocked up to
//     HeartbeatTimeout/2, driver.tailsWait); takeAt with the ends read, or none; librdkafka's
//     assign call; taken. Or revoke, the waits it leaves (the releasing markers' delivery, up to
//     HeartbeatTimeout/2, or the barrier's return, up to the rebalance timeout) and the unassign.
//     The adversary can stall the callback between takeAt and the assign call (a process starved
//     of CPU), and slow or cut the connection that reads the ends.
//   - The committer (commit.go): one explicit commit at a time, its answer handed to the machine
//     by the next cycle. The group check (groupcheck.go): one description at a time over a
//     connection of its own, answered from the coordinator's state as Apache Kafka describes it
//     (simCoordinator.describe), judged by the machine (judgeGroup), by the next cycle. The
//     heartbeat producer: one round in flight (driver.mayProduce). The alarm (watchdog.go): the
//     machine's deadline, which fences leases and withdraws stored offsets whatever the loop does.
//     The dispatchers (dispatch.go): one per role, the barrier's calls one at a time, each taking
//     a while, and IsLeader only once the LeaderAcquired call has returned (neli.deliver).
//   - Yields (yield.go: Curator.Yield, the machine's requestYield, carried out by the next cycle's
//     applyYield), transfers (transfer.go's carryOut: a yield whose release markers name the
//     target), priority hand-overs and standby (groupwatch.go: yields of a recheck, extended while
//     a member of higher priority stays; standbyAtJoin: an instance of several roles that starts
//     out of the group): the adversary draws them (simAdversary).
//   - Close (closer.go): IsLeader turns false, the machine ends the tenures (endAll), the released
//     or releasing markers are written, the consumer unsubscribes and the process exits once its
//     LeaveGroup is out.
//
// Not modelled, and why none of it can hide an overlap (docs/testing.md lists them):
//
//   - A cycle takes no virtual time. A slower cycle is a pause of the loop, which the adversary
//     draws from a millisecond up.
//   - A member with no tenure, no release, no yield and nothing under way waits in its poll until
//     the next event comes (loop), where the driver would go round every MinPollInterval: such a
//     cycle finds nothing to do but take what the poll brings.
//   - The consumer's replacement when it reads nothing back (driver.renewConsumer), the producer's
//     recycling, goneli's own connection giving way to librdkafka (the ends are then not read, and
//     heartbeats of several roles go out one by one as here), and the check's wait for broker
//     connections to settle (checkQuiet): each only leaves the group, loses heartbeats or delays a
//     check. Reachability, logs, metrics and the observer decide nothing. What decides when a
//     priority hand-over, a standby's end or a transfer happens (descriptions of the group, the
//     settle time, a member that passes a transfer on: transfer.go's hops, the leave check of
//     groupwatch.go) is the driver's and not modelled: the adversary draws the yields they make.
type simMember struct {
	w     *simWorld
	idx   int
	name  string
	prof  *simProfile
	clock *simClock
	rdk   simGroupClient
	// mach is the instance's machine, and roles its roles, by partition.
	mach  *Machine
	roles []*Role
	rs    []simRoleState

	coordConn, prodConn, checkConn *simConn
	// endsConn is goneli's own connection to the leader topic's broker, which reads the ends of
	// the partitions an assignment takes (tails.go).
	endsConn  *simConn
	fetchLink *simLink
	leaseBase time.Duration // the machine's origin on the member's clock

	alive, frozen bool
	deferred      []func() // member events that came while the process was stopped
	closing       bool     // Close has begun: IsLeader is false
	startedAt     time.Duration

	// The pulse loop.
	pausedUntil  time.Duration // true time until which goneli's loop is paused
	lastPoll     time.Duration // the member's clock at its last poll (max.poll.interval.ms)
	deadlineAt   time.Duration // the member's clock at the last full cycle (the poll deadline)
	loopTok      int
	polling      bool
	pollTok      int
	blocked      bool // the loop waits in a rebalance callback, or for a yield's releases
	blockedSince time.Duration
	queue        []simAppEvent

	// The shell's state: the heartbeats the machine produced in this cycle, the round in flight
	// (driver.mayProduce), the answers waiting for the next cycle, the alarm, and the releases
	// Close left.
	beats        []simBeat
	lastBeat     *simReq
	lastBeatAt   time.Duration
	commitAns    *simAnswer
	checkAns     *simAnswer
	checkTenures map[int32]uint64
	alarmTok     int
	finals       []Release
	// transfer is a transfer asked for (transfer.go's pendingTransfer), carried out by the next
	// cycle: to names the target, hold is how long this instance then stays out.
	transfer *simTransfer
	// endsGot is the last ListOffsets answer that reached the instance (tails.go's EndOffsets).
	endsGot *simReq

	// barrier is how long the barrier takes with an event; the adversary may slow it.
	barrier          time.Duration
	barrierSlowUntil time.Duration
	barrierSlowBy    time.Duration

	// The adversary's hold on this instance's JoinGroups, and its stall of the next rebalance
	// callback between the machine's judgement and librdkafka's assign call.
	failJoins   int
	failJoinErr simErr
	stallAssign time.Duration
	// stalledUntil is when the stall of a rebalance callback under way ends (true time), and
	// inCallback says that the loop waits in a rebalance callback.
	stalledUntil time.Duration
	inCallback   bool

	// For the oracle and the adversary's triggers.
	// autoAccepted, autoQueued and autoProcessed are when the coordinator accepted the last
	// automatic commit whose result the driver processed, when its result reached the consumer's
	// queue, and when the driver processed it (true time).
	autoAccepted, autoQueued, autoProcessed time.Duration
	// restartedAsk is the offset of the explicit commit that a log restarted below the committed
	// offset asks for (lease.readBack).
	restartedAsk int64
	storedCount  int
}

// simRoleState is what the shell and the oracle keep of one role of a member.
type simRoleState struct {
	leading bool // IsLeader at the last check
	// renewedExplicitly says that the lease's last renewal came from an explicit commit, and
	// renewedRestarted from the one a log restarted below the committed offset asks for.
	renewedExplicitly, renewedRestarted bool
	tracedEnd                           time.Duration
	// appLeads says that the application has been told it leads: a LeaderAcquired was posted to
	// the barrier, and no LeaderFenced or LeaderRevoked since. handing is the LeaderRevoked of a
	// voluntary hand-over (the tenure led when it was revoked, without a fence: a yield, a
	// transfer, Close, a rebalance that moved the role) while the barrier has it, and handedAt
	// when it was posted: the hand-over check (simOracle.handOver).
	appLeads bool
	handing  *Delivery
	handedAt time.Duration
	// released says that the instance then gave the partition back to the group in an orderly way
	// (an unassign of an assignment not lost: simConsumer.giveBack), at releasedAt: only then may
	// a successor be assigned it before the instance's session or rebalance timeout runs out.
	released   bool
	releasedAt time.Duration
	// The role's dispatcher.
	disp     []*simDelivery
	dispBusy bool
}

// simBeat is a heartbeat the machine produced for a role in this cycle.
type simBeat struct {
	role *Role
	hb   *Heartbeat
}

// simTransfer is a transfer asked for (transfer.go's pendingTransfer).
type simTransfer struct {
	to     string
	hold   time.Duration
	tenure uint64
}

// simAnswer is an answer waiting to be collected by a cycle: an explicit commit's or a group check's.
type simAnswer struct {
	offsets []simOffset
	err     simErr
	desc    GroupDesc
	failed  bool
}

// simDelivery is one call of the barrier (dispatch.go's delivery).
type simDelivery struct {
	dl       *Delivery
	acquired bool
	epoch    uint64
	what     string
}

// simAppEvent is an event in the consumer's queue, which goneli reads with Poll.
type simAppEvent struct {
	kind    simAppKind
	rec     simRecord
	offsets []simOffset // appCommitted: the commit's offsets and their metadata
	err     simErr
	parts   simParts // appAssigned, appRevoked: the partitions added or revoked
	lost    bool     // appRevoked
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
	// assigned is the application's incremental assign, at the offsets takeAt named; unassigned
	// its incremental unassign of parts.
	assigned(offsets []OffsetRef)
	unassigned(parts simParts)
	store(p int32, off int64, tag string) bool
	withdraw(p int32)
	commit(offs []simOffset)
	id() int
	left() bool   // unsubscribed and its LeaveGroup is out
	steady() bool // in the group, steady: a healthy member
	fetching() []*simFetch
	lastHeartbeat() (sent, answered time.Duration)
	describe() string
}

// startMember starts a goneli instance now: its process, clock and connections, its machine as
// New makes it (NewRoles, NewMachine, and the broker's timing as join reads it), then New's
// subscribe, or, with standby set, New's standbyAtJoin: out of the group for that long.
func (w *simWorld) startMember(name string, ppm int64, standby time.Duration) *simMember {
	p := &w.prof
	m := &simMember{w: w, idx: len(w.members), name: name, prof: p, alive: true, startedAt: w.now}
	m.clock = &simClock{w: w, ppm: ppm, zero: time.Unix(1_700_000_000+int64(m.idx)*1000, 0)}
	m.leaseBase = m.clock.local(w.now)
	m.lastPoll = m.clock.local(w.now)
	m.deadlineAt = m.lastPoll - p.minPoll
	base := m.clock.Now()
	m.roles = NewRoles(p.settings, p.timing, w.roleNames, m.clock, base)
	m.rs = make([]simRoleState, len(m.roles))
	for _, r := range m.roles {
		// Tenure ids come from the schedule's random source rather than crypto/rand.
		r.Lease.random = w.rng.Uint64
	}
	config := p.settings
	config.Name = name
	fx := simFx{m}
	m.mach = NewMachine(config, p.timing, m.roles, fx, m.clock, base)
	m.mach.ClientID = name
	if len(w.roleNames) > 1 {
		m.mach.ClientID += RolesSuffix + RolesDigest(w.roleNames)
	}
	m.mach.UseTiming(p.timing)
	m.mach.NewGate(fx.StoreOffsets)
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
	m.endsConn = &simConn{w: w, up: lat(), down: lat(), serve: w.listOffsets, procDelay: w.adv.endsDelay,
		deliver: func(q *simReq) { m.do(func() { m.endsGot = q }) }}
	m.fetchLink = lat()
	if p.classic {
		m.rdk = newSimRdk(m, m.coordConn)
	} else {
		m.rdk = newSimRdk848(m, m.coordConn)
	}
	w.members = append(w.members, m)
	w.note(name, "starts (clock %+d ppm)", ppm)
	if standby > 0 {
		m.note("stands by for %s", fmtDur(standby))
		m.mach.Yield.Unsubscribed = true
		m.mach.ExtendYield(standby)
	} else {
		m.rdk.subscribe()
	}
	m.wakeLoop(w.now)
	return m
}

// appendRecord is the partition leader's Produce handler.
func (w *simWorld) appendRecord(q *simReq) {
	w.topic.append(*q.rec)
	q.conn.answer(q)
}

// listOffsets is the partition leader's ListOffsets handler: each partition's end as it is now.
func (w *simWorld) listOffsets(q *simReq) {
	q.ends = make([]int64, w.roles)
	for p := range q.ends {
		q.ends[p] = -1
	}
	for _, p := range q.parts.list() {
		q.ends[p] = w.topic.end(p)
	}
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
	m.coordConn.dead, m.prodConn.dead, m.checkConn.dead, m.endsConn.dead = true, true, true, true
	for _, f := range m.rdk.fetching() {
		if f != nil {
			f.stopped = true
		}
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

// pause stalls goneli's pulse loop for d (a GC pause of its goroutine, a slow call). The alarm
// and the dispatcher go on: they wait for no lock the loop holds (driver.go).
func (m *simMember) pause(d time.Duration) {
	if !m.alive {
		return
	}
	m.w.note(m.name, "goneli's loop paused for %s", fmtDur(d))
	until := m.w.now + d
	if until > m.pausedUntil {
		m.pausedUntil = until
	}
	m.w.at(until, func() {
		if m.alive && m.w.now >= m.pausedUntil {
			m.w.note(m.name, "goneli's loop resumes")
		}
	})
	// librdkafka checks max.poll.interval.ms on a timer of its own.
	m.at(m.clock.afterLocal(m.prof.timing.MaxPoll+time.Millisecond), m.rdk.serve)
}

// isLeader is IsLeader of role p: Live, not yielding, the lease announced and not run out.
func (m *simMember) isLeader(p int32) bool {
	if !m.alive || m.closing {
		return false
	}
	l := m.roles[p].Lease
	v := l.Load()
	// The yield last: the oracle asks after every event, and reading the machine's clock costs
	// more than the rest.
	return l.Announced(v) && m.clock.local(m.w.now) < m.leaseBase+v.End && !m.mach.Yielding()
}

// view is what role p's lease publishes.
func (m *simMember) view(p int32) *LeaseView { return m.roles[p].Lease.Load() }

// leaseEnd is the true time at which role p's current lease runs out.
func (m *simMember) leaseEnd(p int32) time.Duration {
	return m.clock.trueAt(m.leaseBase + m.view(p).End)
}

// leaseEndNote renders role p's lease end in true time, for the timeline.
func (m *simMember) leaseEndNote(p int32) string {
	return fmtDur(m.leaseEnd(p))
}

// leads counts the roles whose leases lead (whether or not announced yet).
func (m *simMember) leads() int {
	n := 0
	for _, r := range m.roles {
		if r.Lease.Load().Leading {
			n++
		}
	}
	return n
}
