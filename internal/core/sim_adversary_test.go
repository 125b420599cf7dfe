package core

import (
	"fmt"
	"time"
)

// simAdversary draws a schedule: how many roles the members contend for, how many members start
// and how their clocks run, and a few faults, each of a kind drawn from the menu below with random
// parameters, aimed at the leader (mostly: the member leading the most roles) or another member,
// and fired either at a random moment of the fault window or by a trigger: just after the target
// stores an offset, after the coordinator accepts one of its commits, after a rebalance starts,
// after it sends a JoinGroup, after a member acquires, or after it asks for the ends of the
// partitions an assignment gives it. The
// triggers bias the search toward the moments where the protocol's timing is tight, as
// TigerBeetle's VOPR biases its faults; nothing in a schedule is written for a particular hole.
type simAdversary struct {
	w       *simWorld
	faults  []*simFault
	started bool // the first leader was elected: the fault window runs
	window  time.Duration
	lastAt  time.Duration // when the last fault fired
	names   int

	coordSlowUntil, coordSlowBy   time.Duration
	appendSlowUntil, appendSlowBy time.Duration
	// endsSlow bounds how long the leader topic's broker takes to answer a ListOffsets in this
	// schedule (endsDelay).
	endsSlow time.Duration
}

// simFault is one planned fault.
type simFault struct {
	kind    simFaultKind
	target  simTarget
	trigger simTrigger
	armAt   time.Duration // when it may fire (its trigger counts from then)
	delay   time.Duration // after the trigger
	dur     time.Duration
	extra   time.Duration
	count   int
	flag    bool
	err     simErr
	link    int
	pick    int // which other member, when it aims at another
	// asker is the member whose ask for the ends fired a fault triggered so, which a fault aimed
	// at another member hits: the one that asks leads nothing, so it is never "the leader".
	asker   *simMember
	fired   bool
	planned bool // its firing is scheduled
}

type simFaultKind uint8

const (
	faultPause simFaultKind = iota
	faultStop
	faultCrash
	faultJoin
	faultLeave
	faultJoinFail
	faultSlowLink
	faultLinkDown
	faultCoordSlow
	faultAppendSlow
	faultBarrierSlow
	faultConnReset
	faultLogRestart
	// faultYield is Curator.Yield, a priority hand-over or the leave check's hold (groupwatch.go):
	// the instance leaves the group for a while.
	faultYield
	// faultTransfer is TransferTo another member (transfer.go): a yield whose release markers name
	// it. Only a single role can be transferred; with several, it is a yield.
	faultTransfer
	// faultStandby is a member that joins in standby (groupwatch.go's standbyAtJoin: an instance of
	// several roles outranked by a member of the group), out of the group until it is no longer
	// outranked. With a single role, it is a join.
	faultStandby
	faultKinds
)

var simFaultWeights = [faultKinds]int{
	faultPause: 26, faultStop: 8, faultCrash: 7, faultJoin: 16, faultLeave: 6, faultJoinFail: 14,
	faultSlowLink: 10, faultLinkDown: 5, faultCoordSlow: 4, faultAppendSlow: 3, faultBarrierSlow: 3, faultConnReset: 4,
	faultLogRestart: 2, faultYield: 8, faultTransfer: 4, faultStandby: 3,
}

func (k simFaultKind) String() string {
	return [...]string{"pause", "sigstop", "crash", "join", "leave", "join-fail", "slow-link", "link-down", "coord-slow",
		"append-slow", "barrier-slow", "conn-reset", "log-restart", "yield", "transfer", "standby-join"}[k]
}

type simTarget uint8

const (
	targetLeader simTarget = iota
	targetOther
)

type simTrigger uint8

const (
	trigNone simTrigger = iota
	trigStored
	trigCommitAccepted
	trigRebalance
	trigJoinSent
	trigAcquired
	trigEndsAsked
)

func (t simTrigger) String() string {
	return [...]string{"at once", "after it stores an offset", "after a commit of it is accepted", "after a rebalance starts",
		"after it sends a JoinGroup", "after a member acquires", "after it asks for the ends of its new partitions"}[t]
}

// The links a slow-link or link-down fault can hit.
const (
	linkCoordUp = iota
	linkCoordDown
	linkFetch
	linkProduce
	linkCheck
	linkEnds // goneli's own connection that reads the ends of the partitions an assignment takes
	linkKinds
)

func newSimAdversary(w *simWorld) *simAdversary {
	return &simAdversary{w: w, window: w.prof.faultWindow}
}

// plan draws the schedule's setting and faults, and starts the first members.
func (a *simAdversary) plan() {
	w := a.w
	p := &w.prof
	// The roles every member contends for (NewRoles; one is New's single leader): as often one as
	// several, so that both the single leader's paths and those of several roles (the ends read in
	// the rebalance callback, partitions that move between members) are searched.
	roles := 1
	if w.chance(0.5) {
		roles = 2 + w.rng.IntN(3)
	}
	w.setRoles(roles)
	ppm := func() int64 {
		if w.chance(0.4) {
			return 0
		}
		half := p.rateBound / 2
		if w.chance(0.6) {
			if w.chance(0.5) {
				return -half
			}
			return half
		}
		return w.rng.Int64N(2*half+1) - half
	}
	w.coordClock = &simClock{w: w, ppm: ppm(), zero: time.Unix(1_600_000_000, 0)}
	if p.classic {
		c := newSimClassic(w, w.coordClock)
		// Apache Kafka 4.0's group coordinator describes a classic member's assignment in every
		// state of the group (ClassicGroupMember.describeNoMetadata), 3.x's only while it is
		// Stable: both are drawn.
		c.describeAll = w.chance(0.7)
		w.coord = c
	} else {
		w.coord = newSimCG(w, w.coordClock)
	}
	w.topic = newSimTopic(w, w.roles, a.appendDelay)
	if w.roles > 1 && w.chance(0.4) {
		// A broker slow to answer the ends (a loaded one, or a metadata request before the
		// ListOffsets on goneli's connection: tails.go), up to a lease: the callback's wait
		// for them then often runs long, or out.
		a.endsSlow = w.between(0, p.ht)
	}
	n := 2 + w.rng.IntN(3)
	w.startMembers = n
	for i := 0; i < n; i++ {
		rate := ppm()
		w.after(w.between(0, 50*time.Millisecond), func() { w.startMember(a.name(), rate, 0) })
	}
	k := 1 + w.rng.IntN(4)
	for i := 0; i < k; i++ {
		a.faults = append(a.faults, a.draw())
	}
	// Until the first leader is elected the schedule only warms up; if none is, it ends here.
	w.end = 3*p.session + 2*p.maxPoll + 2*time.Second
}

// setRoles makes every member contend for n roles: New's single one, or n named ones (NewRoles).
func (w *simWorld) setRoles(n int) {
	w.roles = n
	w.roleNames = []string{""}
	if n > 1 {
		w.roleNames = make([]string, n)
		for i := range w.roleNames {
			w.roleNames[i] = fmt.Sprintf("role%d", i)
		}
	}
}

func (a *simAdversary) name() string {
	n := a.names
	a.names++
	if n < 26 {
		return string(rune('a' + n))
	}
	return fmt.Sprintf("z%d", n)
}

// draw draws one fault.
func (a *simAdversary) draw() *simFault {
	w := a.w
	p := &w.prof
	f := &simFault{kind: simFaultKind(w.pick(simFaultWeights[:]...))}
	f.armAt = w.between(0, a.window)
	if w.chance(0.7) {
		f.target = targetLeader
	} else {
		f.target = targetOther
	}
	ends := 0
	if w.roles > 1 {
		ends = 15 // a single partition's end is never read
	}
	f.trigger = simTrigger(w.pick(40, 20, 10, 15, 10, 5, ends))
	f.pick = w.rng.IntN(16)
	if w.chance(0.7) {
		f.delay = w.between(0, 2*p.minPoll)
	} else {
		f.delay = w.between(0, p.ht)
	}
	// A duration: mostly under a lease, sometimes around it, rarely beyond the rebalance timeout.
	dur := func() time.Duration {
		switch w.pick(45, 40, 15) {
		case 0:
			return w.between(time.Millisecond, p.ht/2)
		case 1:
			return w.between(p.ht/2, 2*p.ht)
		}
		return w.between(2*p.ht, p.maxPoll+p.session)
	}
	switch f.kind {
	case faultPause:
		f.dur, f.flag = dur(), w.chance(0.3)
	case faultStop:
		f.dur = dur()
	case faultCrash:
		f.flag = w.chance(0.5) // restart
		f.dur = w.between(0, p.session)
	case faultJoinFail:
		f.count = 1 + w.rng.IntN(3)
		if w.chance(0.3) {
			// Until the coordinator removes the member for not rejoining (issue 46's JoinGroup
			// failures: a member that keeps its leases on explicit commits meanwhile).
			f.count = 1 << 20
		}
		f.err = errUnknownServerError
		if w.chance(0.3) {
			f.err = errCoordinatorLoadInProgress
		}
	case faultSlowLink, faultLinkDown:
		f.link = w.rng.IntN(linkKinds)
		f.dur, f.extra = dur(), dur()
		f.flag = w.chance(0.5) // linkEnds: the request's way rather than the answer's
	case faultCoordSlow, faultAppendSlow, faultBarrierSlow:
		f.dur, f.extra = dur(), w.between(0, p.ht/2)
	case faultYield, faultStandby:
		// A priority hand-over's yield of a recheck (groupwatch.go), an application's yield of
		// about a lease, or a standby as long as a member of higher priority stays.
		recheck := max(p.hbInterval, 100*time.Millisecond)
		switch w.pick(40, 40, 20) {
		case 0:
			f.dur = w.between(time.Millisecond, recheck)
		case 1:
			f.dur = w.between(recheck, 2*p.ht)
		default:
			f.dur = w.between(2*p.ht, p.maxPoll+p.session)
		}
	case faultTransfer:
		// transferHold: two leases, and a hand-over for each member ahead of the target.
		f.count = w.rng.IntN(3)
		f.dur = 2*p.ht + time.Duration(f.count)*(time.Second+2*p.hbInterval)
	}
	return f
}

// start begins the fault window when the first leader is elected.
func (a *simAdversary) start() {
	w := a.w
	a.started = true
	w.end = w.now + a.window + w.prof.tail
	for _, f := range a.faults {
		f.armAt += w.now
		if f.trigger == trigNone {
			a.schedule(f, f.armAt)
		}
	}
}

func (a *simAdversary) schedule(f *simFault, at time.Duration) {
	f.planned = true
	a.w.at(at+f.delay, func() { a.fire(f) })
}

// The triggers, called by the models.

func (a *simAdversary) offsetStored(m *simMember)   { a.triggered(trigStored, m) }
func (a *simAdversary) commitAccepted(m *simMember) { a.triggered(trigCommitAccepted, m) }
func (a *simAdversary) joinSent(m *simMember)       { a.triggered(trigJoinSent, m) }
func (a *simAdversary) rebalanceStarted() {
	a.w.rebalanceAt = a.w.now
	a.triggered(trigRebalance, nil)
}

func (a *simAdversary) endsAsked(m *simMember) { a.triggered(trigEndsAsked, m) }

func (a *simAdversary) acquired(m *simMember) {
	if !a.started {
		a.start()
	}
	a.triggered(trigAcquired, m)
}

func (a *simAdversary) triggered(t simTrigger, m *simMember) {
	if !a.started {
		return
	}
	for _, f := range a.faults {
		if f.planned || f.trigger != t || a.w.now < f.armAt {
			continue
		}
		if t == trigEndsAsked {
			f.asker = m
		} else if m != nil && t != trigAcquired && a.resolve(f) != m {
			continue
		}
		a.schedule(f, a.w.now)
	}
}

// leader is the member that leads the most roles now, or else that leads the most by its leases
// (it may not have announced them yet, or be yielding).
func (a *simAdversary) leader() *simMember {
	var best, last *simMember
	most, mostLast := 0, 0
	for _, m := range a.w.members {
		if !m.alive {
			continue
		}
		n := 0
		for p := range m.rs {
			if m.rs[p].leading {
				n++
			}
		}
		if n > most {
			best, most = m, n
		}
		if n := m.leads(); n > mostLast {
			last, mostLast = m, n
		}
	}
	if best != nil {
		return best
	}
	return last
}

func (a *simAdversary) resolve(f *simFault) *simMember {
	if f.target == targetOther && f.asker != nil && f.asker.alive {
		return f.asker
	}
	l := a.leader()
	if f.target == targetLeader && l != nil {
		return l
	}
	var others []*simMember
	for _, m := range a.w.members {
		if m.alive && !m.closing && m != l {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return l
	}
	return others[f.pick%len(others)]
}

// fire carries a fault out.
func (a *simAdversary) fire(f *simFault) {
	w := a.w
	if f.fired {
		return
	}
	f.fired = true
	a.lastAt = w.now
	m := a.resolve(f)
	w.oracle.unwatch()
	who := "-"
	if m != nil {
		who = m.name
	}
	if w.tracing() {
		w.note("adv", "fault %s on %s (%s, armed at %s, +%s)", f.kind, who, f.trigger, fmtDur(f.armAt), fmtDur(f.delay))
	}
	if m == nil && f.kind != faultJoin && f.kind != faultStandby && f.kind != faultCoordSlow && f.kind != faultAppendSlow &&
		f.kind != faultLogRestart {
		return
	}
	switch f.kind {
	case faultPause:
		// In the process: a stopped one pauses once it continues.
		m.do(func() {
			if f.flag {
				// Inside a cycle: the loop's next rebalance callback stalls between the machine's
				// takeAt and librdkafka's assign call (a process starved of CPU).
				m.stallAssign = f.dur
				if w.tracing() {
					w.note(m.name, "the next rebalance callback stalls for %s before the assign call", fmtDur(f.dur))
				}
			} else {
				m.pause(f.dur)
			}
		})
	case faultStop:
		m.stop(f.dur)
	case faultCrash:
		var led simParts
		for p := int32(0); p < int32(w.roles); p++ {
			if m.isLeader(p) {
				led = led.add(p)
			}
		}
		m.crash()
		if f.flag {
			name := m.name
			w.after(f.dur, func() { w.startMember(name+"'", 0, 0) })
		}
		if led != 0 && a.quiet() {
			w.oracle.watchFailover(w, m, led)
			w.end = max(w.end, w.oracle.liveBy+time.Millisecond)
		}
	case faultJoin:
		w.startMember(a.name(), 0, 0)
	case faultStandby:
		var standby time.Duration
		if w.roles > 1 {
			standby = f.dur
		}
		w.startMember(a.name(), 0, standby)
	case faultYield:
		m.do(func() { m.requestYield(f.dur) })
	case faultTransfer:
		m.do(func() { a.transfer(f, m) })
	case faultLeave:
		m.do(m.close) // Close is the application's call, in the process
	case faultJoinFail:
		m.failJoins, m.failJoinErr = f.count, f.err
	case faultSlowLink, faultLinkDown:
		var l *simLink
		switch f.link {
		case linkCoordUp:
			l = m.coordConn.up
		case linkCoordDown:
			l = m.coordConn.down
		case linkFetch:
			l = m.fetchLink
		case linkProduce:
			l = m.prodConn.up
		case linkCheck:
			l = m.checkConn.down
		case linkEnds:
			l = m.endsConn.down
			if f.flag {
				l = m.endsConn.up
			}
		}
		l.spike(f.dur, f.extra, f.kind == faultLinkDown)
		if w.tracing() {
			w.note("adv", "link %d of %s: +%s for %s (down %v)", f.link, m.name, fmtDur(f.extra), fmtDur(f.dur), f.kind == faultLinkDown)
		}
	case faultCoordSlow:
		a.coordSlowUntil, a.coordSlowBy = w.now+f.dur, f.extra
	case faultAppendSlow:
		a.appendSlowUntil, a.appendSlowBy = w.now+f.dur, f.extra
	case faultBarrierSlow:
		m.barrierSlowUntil, m.barrierSlowBy = w.now+f.dur, f.extra
	case faultConnReset:
		m.coordConn.reset()
	case faultLogRestart:
		w.topic.restart(int32(f.pick % w.roles))
	}
}

// transfer is TransferTo on m (transfer.go): refused unless m leads the single role and another
// member is there to take it; carried out by m's next cycle (carryOut).
func (a *simAdversary) transfer(f *simFault, m *simMember) {
	w := a.w
	if w.roles > 1 {
		m.requestYield(f.dur)
		return
	}
	var others []*simMember
	for _, o := range w.members {
		if o.alive && !o.closing && o != m {
			others = append(others, o)
		}
	}
	if !m.isLeader(0) || len(others) == 0 {
		m.note("TransferTo refused: it does not lead, or no other member is there")
		return
	}
	to := others[f.pick%len(others)]
	m.transfer = &simTransfer{to: to.name, hold: f.dur, tenure: m.view(0).Tenure}
	m.note("TransferTo %s", to.name)
	m.wakePoll()
}

// quiet reports whether nothing the adversary did still holds the system back, and every member
// left is healthy (in the group, steady, not paused), so that a failover can be held to the
// liveness bound.
func (a *simAdversary) quiet() bool {
	w := a.w
	if w.now < a.coordSlowUntil || w.now < a.appendSlowUntil {
		return false
	}
	for _, f := range a.faults {
		if !f.fired && f.planned {
			return false
		}
	}
	healthy := 0
	for _, m := range w.members {
		// A crashed member's requests still on their way count too: a heartbeat held up by a slow
		// link keeps its session when it lands.
		for _, l := range []*simLink{m.coordConn.up, m.coordConn.down, m.fetchLink, m.prodConn.up, m.prodConn.down, m.checkConn.up,
			m.checkConn.down, m.endsConn.up, m.endsConn.down} {
			for _, s := range l.spikes {
				if w.now < s.to+s.extra {
					return false
				}
			}
		}
		if !m.alive {
			continue
		}
		if m.frozen || w.now < m.pausedUntil || m.failJoins > 0 || m.closing || w.now < m.barrierSlowUntil || !m.rdk.steady() ||
			m.stallAssign > 0 || w.now < m.stalledUntil || m.transfer != nil || m.mach.Yielding() || m.mach.Yield.Unsubscribed {
			return false
		}
		healthy++
	}
	return healthy > 0
}

// The broker's delays.

func (a *simAdversary) coordDelay() time.Duration {
	d := a.w.between(0, 200*time.Microsecond)
	if a.w.now < a.coordSlowUntil {
		d += a.coordSlowBy
	}
	return d
}

// endsDelay is the broker's time to answer a ListOffsets.
func (a *simAdversary) endsDelay() time.Duration {
	return a.coordDelay() + a.w.between(0, a.endsSlow)
}

func (a *simAdversary) appendDelay() time.Duration {
	d := a.w.between(0, 500*time.Microsecond)
	if a.w.now < a.appendSlowUntil {
		d += a.appendSlowBy
	}
	return d
}

// describe renders the plan, for reports.
func (a *simAdversary) describe() string {
	s := ""
	for _, f := range a.faults {
		s += fmt.Sprintf("\n  %s on %s, %s from %s (+%s), duration %s, extra %s, count %d, flag %v, fired %v",
			f.kind, [...]string{"the leader", "another member"}[f.target], f.trigger, fmtDur(f.armAt), fmtDur(f.delay),
			fmtDur(f.dur), fmtDur(f.extra), f.count, f.flag, f.fired)
	}
	return s
}
