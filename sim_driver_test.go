package goneli

import (
	"fmt"
	"time"
)

// The driver's work within a simulated member's cycle, and beside it: the rebalance callback,
// the release markers, the heartbeat producer, the stored offsets, the explicit commits, the group
// check, the watchdog and the dispatcher (driver.go, commit.go, groupcheck.go, watchdog.go,
// dispatch.go): see simMember.

// simAnswer is an answer waiting to be collected by a cycle: an explicit commit's or a group check's.
type simAnswer struct {
	offset  int64
	tag     string
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

// handle is driver.handle and the rebalance callback.
func (m *simMember) handle(e simAppEvent) {
	switch e.kind {
	case appMessage:
		m.lease.onMessage(e.rec)
	case appCommitted:
		m.owedCommit = false
		m.gateAnswer()
		if e.err == errNone && e.offset >= 0 {
			m.autoAccepted, m.autoQueued, m.autoProcessed = e.accepted, e.queued, m.w.now
			m.note("OffsetsCommitted of offset %d processed (the coordinator accepted it at %s)", e.offset, fmtDur(e.accepted))
		}
		m.lease.onCommit(e.offset, e.tag, e.err, false)
		if e.err == errNone && e.offset >= 0 && !m.lease.holding() {
			m.commitsHeld = false // driver.autoCommitted
		}
	case appAssigned:
		// driver.heldAssignment
		bound, from := m.prof.timing.answerBound(m.prof.config), m.polledAt
		if stored, ok := m.lease.oldestPending(); ok && stored < from {
			from = stored
		}
		if m.dnow()-from > bound {
			m.lease.holdRenewals(from, m.dnow()+bound)
		}
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
			// driver.trackGroupAssignment: what is stored is withdrawn, so the revocation commits
			// nothing (the gate's withdrawal cannot fail here).
			m.withdraw()
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
	m.lease.assign(m.member.vouched && m.prof.timing.classic) // under KIP-848 every tenure is checked
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
	m.lastBeat, m.lastBeatAt = m.produceRecord(h), m.dnow()
}

// mayProduce is driver.mayProduce: one round of heartbeats in flight. The delivery report is
// librdkafka's, within message.timeout.ms (HeartbeatTimeout) whether or not the broker answered;
// the driver's own fallback after HeartbeatTimeout and a poll interval is mirrored for a request
// that the simulated network lost.
func (m *simMember) mayProduce() bool {
	return m.lastBeat == nil || m.lastBeat.answered || m.dnow()-m.lastBeatAt > m.prof.ht
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

// The commit gate (commitgate.go), simplified: one store at a time, withdrawn a little less than an
// auto-commit tick after it was made (or at once when a commit's answer comes first), then counted
// as in flight until an answer comes or until it is presumed never sent, after the patience learnt
// from the latest answer times (a group heartbeat interval before any), a quarter more and a tick,
// doubled by every presumption since the last answer up to a quarter lease, never beyond half; a
// presumed store's newest pending offset is stored again, and anchors where the first store since
// the last answer would have (lease.storedSince); a store after a presumption is made half a tick
// late if the store presumed was not (commitGate.store's shift). Not mirrored: the longer first
// hold of a consumer whose commits have not been answered yet, the heartbeat's round trip as a
// latency hint, late withdrawals (the timer here is never late), the longer patience of stores
// still unanswered when a store presumed unsent is answered after all, and matching answers to
// stores (any answer settles the store under way, as the gate's fallback does; one that comes while
// the last store is presumed unsent is that store's, and any other settles nothing).

// store is driver.startCommits' gate.store and lease.storedSince: the time is read before the
// store, and the chain's is that of the first store since the last answer (commitGate.store).
func (m *simMember) store(ask commitAsk) {
	at := m.dnow()
	chain := at
	if m.gateChained {
		chain = min(at, m.gateChainAt)
	} else {
		m.gateChainAt, m.gateChained = at, true
	}
	m.lease.storedSince(ask.offset, at, chain)
	m.storedCount++
	m.gateArmed, m.gatePending, m.gatePresumed, m.gateAt = true, false, false, at
	m.gateShifted, m.gatePlaced = m.gateDoubt > 0 && m.gateShift, false
	m.gateTok++
	tok, tick := m.gateTok, m.prof.commitInterval
	hold := tick - max(time.Millisecond, tick/25)
	place := func() {
		m.gateAt, m.gatePlaced = m.dnow(), true
		m.rdk.store(ask.offset, ask.tag)
		m.atLocal(m.leaseBase+m.gateAt+hold, func() {
			m.do(func() {
				if m.gateArmed && m.gateTok == tok {
					m.gateWithdraw()
				}
			})
		})
		m.w.adv.offsetStored(m)
	}
	if !m.gateShifted {
		place()
		m.note("stores offset %d (its chain of stores began at %s)", ask.offset, fmtDur(chain))
		return
	}
	m.note("stores offset %d half a tick late (its chain of stores began at %s)", ask.offset, fmtDur(chain))
	m.atLocal(m.leaseBase+at+tick/2, func() {
		m.do(func() {
			if m.gateArmed && m.gateTok == tok {
				place()
			}
		})
	})
}

// gateWithdraw is commitGate.end: the stored offset is withdrawn, and the store counts as in
// flight until an answer or the presumption (commitGate.patience).
func (m *simMember) gateWithdraw() {
	m.rdk.withdraw()
	m.gateArmed, m.gatePending = false, m.gatePlaced
	tick := m.prof.commitInterval
	l := tick
	if len(m.gateLatencies) == 0 {
		l = max(l, m.prof.timing.heartbeat())
	}
	for _, d := range m.gateLatencies {
		l = max(l, d)
	}
	base := l + l/4 + tick
	most := m.prof.ht / 4
	m.gatePresumeBy = m.dnow() + min(max(base, min(base<<min(m.gateDoubt, 5), most)), 2*most)
}

// gateSample is commitGate.sample, and an answer settles the chain of stores.
func (m *simMember) gateSample(d time.Duration) {
	m.gateLatencies = append(m.gateLatencies, d)
	if len(m.gateLatencies) > gateHistory {
		m.gateLatencies = m.gateLatencies[1:]
	}
	m.gateChained = false
}

// gateAnswer is commitGate.answer: any OffsetsCommitted settles the store under way. Its answer
// time is sampled as the gate does after a loop that polled late: only what the pause before the
// poll cannot account for.
func (m *simMember) gateAnswer() {
	if m.gateArmed {
		m.rdk.withdraw()
	}
	sample := func() {
		now, since := m.dnow(), m.polledAt
		switch {
		case now-since <= m.prof.timing.heartbeat():
			m.gateSample(now - m.gateAt)
		case since > m.gateAt:
			m.gateSample(since - m.gateAt)
		default:
			m.gateChained = false // an answer settles the chain, sampled or not
		}
	}
	switch {
	case m.gateArmed || m.gatePending:
		m.gateDoubt = 0
		sample()
	case m.gatePresumed:
		sample() // sent after all: the doubt stays
	}
	m.gateArmed, m.gatePending, m.gatePresumed = false, false, false
}

// gateBusy is commitGate.busy, with the presumed store's newest pending offset asked again.
func (m *simMember) gateBusy() bool {
	if m.gatePending && m.dnow() >= m.gatePresumeBy {
		m.gatePending, m.gatePresumed = false, true
		m.gateDoubt++
		m.gateShift = !m.gateShifted
		m.note("store presumed never committed")
		if ask, ok := m.lease.newestPending(); ok && !m.storeAsked {
			m.storeAsk, m.storeAsked = ask, true
		}
	}
	return m.gateArmed || m.gatePending
}

// withdraw is driver.withdraw: the store waiting for the gate is dropped, and what is stored
// withdrawn at once.
func (m *simMember) withdraw() {
	m.storeAsked = false
	if m.gateArmed {
		m.gateWithdraw()
	}
}

// startCommits is driver.startCommits with the committer's start: an explicit commit, or else the
// offset to store, only while the gate and the committer are idle.
func (m *simMember) startCommits() {
	busy := m.gateBusy() || m.commitBusy
	if off := m.commitAsk; off != 0 {
		m.commitAsk = 0
		if m.commitBusy && m.dnow()-m.commitSent > m.prof.hbInterval {
			m.holdCommits() // driver.holdCommits: the commit under way waits too long
		}
		if !busy && !m.commitsHeld {
			m.commitBusy, m.commitSent = true, m.dnow()
			m.lease.storedAt(off, m.commitSent)
			m.note("commits offset %d explicitly", off)
			m.rdk.commit(off, m.commitTag)
			busy = true
		}
	}
	if busy || !m.storeAsked {
		return
	}
	ask := m.storeAsk
	m.storeAsked = false
	if m.lease.storable(ask.offset) {
		m.store(ask)
	}
}

// explicitAnswered is the committer goroutine's answer, for the next cycle.
func (m *simMember) explicitAnswered(off int64, tag string, err simErr) {
	m.commitAns = &simAnswer{offset: off, tag: tag, err: err}
}

// collectCommits is driver.collectCommits.
func (m *simMember) collectCommits() {
	a := m.commitAns
	if a == nil {
		return
	}
	m.commitAns, m.commitBusy = nil, false
	m.gateSample(m.dnow() - m.commitSent) // commitGate.answered
	m.gateDoubt = 0
	if m.dnow()-m.commitSent > m.prof.hbInterval {
		m.holdCommits() // driver.collectCommits: answered later than a group heartbeat interval
	}
	m.lease.onCommit(a.offset, a.tag, a.err, true)
}

// holdCommits is driver.holdCommits: no explicit commits until an automatic one is accepted.
func (m *simMember) holdCommits() {
	if !m.commitsHeld {
		m.commitsHeld = true
		m.note("explicit commits held: one waited longer than a group heartbeat interval")
	}
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
