package core

import (
	"fmt"
	"strings"
	"time"
)

// The shell of a simulated member: what driver.go does around the machine, on the models. The
// machine decides; what is here hands it the models' events in the driver's order and carries out
// its effects (machine.effects), and makes the waits it leaves. See simMember.

// handle is driver.handle and the rebalance callback (driver.rebalanced) for one polled event.
func (m *simMember) handle(e simAppEvent) {
	switch e.kind {
	case appMessage:
		r := e.rec
		role := m.roles[r.partition]
		if r.hb.Kind == KindHeartbeat && r.writer.name == m.name {
			m.mach.ReadBack(role, r.hb, r.offset)
			return
		}
		m.mach.Foreign(role, r.hb)
	case appCommitted:
		if e.err == errNone && len(e.offsets) > 0 {
			m.autoAccepted, m.autoQueued, m.autoProcessed = e.accepted, e.queued, m.w.now
			m.note("OffsetsCommitted of %s processed (the coordinator accepted it at %s)", fmtOffsets(e.offsets), fmtDur(e.accepted))
		}
		m.renewal(false, e.offsets, func() { m.mach.AutoCommitted(m.answerOf(e.offsets, e.err)) })
	case appAssigned:
		m.inCallback = true
		m.assigned(e)
	case appRevoked:
		m.inCallback = true
		m.revoked(e)
	}
	if !m.blocked {
		m.inCallback = false
	}
}

// assigned is the rebalance callback for an assignment: the machine's assign; the read of the
// partitions' ends it asks for, over goneli's own connection, waited for up to
// HeartbeatTimeout/2 (driver.endsOf, tailsWait); takeAt; the stall the adversary may put before
// librdkafka's assign call; the assign call, and the tenures.
func (m *simMember) assigned(e simAppEvent) {
	partitions := e.parts.list()
	read, take := m.mach.Assign(partitions, m.memberName(), true, true)
	if !take {
		// confluent-kafka-go applies it itself, from the committed offsets; the fetch position
		// decides nothing once Close has begun.
		offsets := make([]OffsetRef, len(partitions))
		for i, p := range partitions {
			offsets[i] = OffsetRef{Partition: p, Offset: offsetTail(ReleaseLookback)}
		}
		m.rdk.assigned(offsets)
		return
	}
	if len(read) == 0 {
		m.takeAt(partitions, nil)
		return
	}
	q := &simReq{kind: reqListOffsets, from: m, parts: partsOf(read...)}
	m.note("the rebalance callback reads the ends of partitions %s", q.parts)
	m.endsConn.send(q)
	m.w.adv.endsAsked(m)
	m.block(m.prof.ht/2, func() bool { return m.endsGot == q || m.closing }, func() {
		var ends map[int32]int64
		if m.endsGot == q {
			ends = make(map[int32]int64, len(read))
			for _, p := range read {
				ends[p] = q.ends[p]
			}
			m.note("the ends of partitions %s are read: %v", q.parts, q.ends)
		} else {
			m.note("the ends of partitions %s are not read within %s: librdkafka resolves them", q.parts, fmtDur(m.prof.ht/2))
		}
		m.takeAt(partitions, ends)
	})
}

// takeAt is the rest of the callback once the ends are read, or not: the machine's takeAt, the
// stall the adversary may put before librdkafka's assign call, the assign call and taken.
func (m *simMember) takeAt(partitions []int32, ends map[int32]int64) {
	offsets := m.mach.TakeAt(ends)
	finish := func() {
		m.rdk.assigned(offsets)
		m.mach.Taken(nil)
		if m.w.tracing() {
			for _, p := range partitions {
				if l := m.roles[p].Lease; l.active() {
					_, name := l.Tenure()
					m.roleNote(p, "tenure %s begins (%s, vouched %v)", name, m.memberName(), m.mach.Group.member.Vouched)
				}
			}
		}
	}
	if stall := m.stallAssign; stall > 0 {
		m.stallAssign = 0
		m.stalledUntil = m.w.now + stall
		m.note("the rebalance callback stalls for %s before the assign call", fmtDur(stall))
		m.block(stall, func() bool { return false }, finish)
		return
	}
	finish()
}

// revoked is the rebalance callback for a revocation: the machine ends the tenures, the waits it
// leaves, then librdkafka's unassign.
func (m *simMember) revoked(e simAppEvent) {
	partitions := e.parts.list()
	var active simParts
	for _, p := range partitions {
		if m.roles[p].Lease.active() {
			active = active.add(p)
		}
	}
	w, _, give := m.mach.Revoke(partitions, e.lost, true)
	if !give {
		m.rdk.unassigned(e.parts)
		return
	}
	if active != 0 {
		m.note("tenures of partitions %s end (lost %v)", active, e.lost)
	}
	m.wait(w, nil, func() { m.rdk.unassigned(e.parts) })
}

func (m *simMember) memberName() string {
	if id := m.rdk.id(); id != 0 {
		return fmt.Sprintf("m%d", id)
	}
	return ""
}

// wait makes the waits w leaves (driver.waitReleases), calls then (what the machine left to follow
// them) and goes on with next. The loop is blocked meanwhile: inside a rebalance callback the
// consumer's poll does not return, and a yield's waits hold the cycle.
func (m *simMember) wait(w *ReleaseWait, then func(), next func()) {
	done := func() {
		if then != nil {
			then()
		}
		next()
	}
	if w == nil {
		done()
		return
	}
	barrier := func() {
		m.block(w.Limit, func() bool {
			for _, r := range w.Pending {
				if !r.Done.delivered() {
					return false
				}
			}
			return true
		}, done)
	}
	if !w.Markers {
		barrier()
		return
	}
	// The releasing markers, each written and waited for (driver.writeMarkers), within half a
	// lease (driver.releaseFlush).
	var qs []*simReq
	for _, r := range w.Pending {
		qs = append(qs, m.produceRecord(r.Role.ID, r.Marker))
	}
	written := func() bool {
		for _, q := range qs {
			if !q.answered || q.err != errNone {
				return false
			}
		}
		return true
	}
	m.block(m.prof.ht/2, func() bool {
		for _, q := range qs {
			if !q.answered {
				return false
			}
		}
		return true
	}, func() {
		if written() {
			done()
			return
		}
		barrier()
	})
}

// block holds the loop until ready or limit has passed, then runs then and goes on with the cycle
// (drain). A wait inside the consumer's poll is not counted against max.poll.interval.ms
// (pollAge).
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
		if m.inCallback {
			// The rebalance callback returns, and with it the consumer's poll: librdkafka counts
			// max.poll.interval.ms from here (rd_kafka_app_polled), not from before the callback.
			m.lastPoll = m.clock.local(m.w.now)
		}
		then()
		if !m.blocked {
			// Unless then waits on (the callback's stall after its read of the ends).
			m.inCallback = false
			m.drain()
		}
	}
	m.at(m.w.now, poll)
}

// renewal runs call, a machine call that may renew leases, and notes for the oracle whether it
// renewed each role by an explicit commit (offs are the commit's).
func (m *simMember) renewal(explicit bool, offs []simOffset, call func()) {
	var before [simMaxRoles]time.Duration
	for i, r := range m.roles {
		before[i] = r.Lease.Load().End
	}
	call()
	for i, r := range m.roles {
		if v := r.Lease.Load(); v.Leading && v.End != before[i] {
			rs := &m.rs[i]
			rs.renewedExplicitly, rs.renewedRestarted = explicit, false
			for _, o := range offs {
				if explicit && o.partition == int32(i) && o.offset == m.restartedAsk {
					rs.renewedRestarted = true
				}
			}
		}
	}
}

// answerOf is a commit's answer, as driver.commitAnswerOf translates librdkafka's: the coordinator
// judges the member and its generation once for the request, so every partition carries its error.
func (m *simMember) answerOf(offs []simOffset, err simErr) CommitAnswer {
	var a CommitAnswer
	for _, o := range offs {
		c := Committed{OffsetRef: OffsetRef{Partition: o.partition, Offset: o.offset, Tag: o.tag}}
		switch err {
		case errNone:
		case errUnknownMemberID, errFencedMemberEpoch:
			c.Err, c.Outcome = err, CommitGone
		case errIllegalGeneration:
			c.Err, c.Outcome = err, CommitGeneration
		default:
			c.Err, c.Outcome = err, CommitNotAccepted
		}
		a.Offsets = append(a.Offsets, c)
	}
	if err == errIllegalGeneration {
		// librdkafka reports a refused commit as the whole request's error as well.
		a.Err, a.Outcome = err, CommitGeneration
	}
	return a
}

// explicitAnswered is the committer goroutine's answer, for the next cycle.
func (m *simMember) explicitAnswered(offs []simOffset, err simErr) {
	m.commitAns = &simAnswer{offsets: offs, err: err}
}

// collectCommits is driver.collectCommits.
func (m *simMember) collectCommits() {
	a := m.commitAns
	if a == nil {
		return
	}
	m.commitAns = nil
	m.renewal(true, a.offsets, func() { m.mach.ExplicitAnswered(m.answerOf(a.offsets, a.err)) })
}

func (m *simMember) checkAnswered(q *simReq) {
	m.checkAns = &simAnswer{desc: q.desc, failed: q.err != errNone}
}

// collectGroupCheck is driver.collectGroupCheck.
func (m *simMember) collectGroupCheck() {
	a := m.checkAns
	if a == nil {
		return
	}
	m.checkAns = nil
	var err error
	if a.failed {
		err = errSimCheck
	}
	m.mach.Checked(m.checkTenures, a.desc, err, false, nil)
}

// errSimCheck is a group check that failed.
var errSimCheck = simError("group description failed")

type simError string

func (e simError) Error() string { return string(e) }

// mayProduce is driver.mayProduce: one round of heartbeats in flight. The delivery report is
// librdkafka's, within message.timeout.ms (HeartbeatTimeout) whether or not the broker answered;
// the driver's own fallback after HeartbeatTimeout and a poll interval is mirrored for a request
// that the simulated network lost.
func (m *simMember) mayProduce() bool {
	return m.lastBeat == nil || m.lastBeat.answered || m.dnow()-m.lastBeatAt > m.prof.ht
}

// sendBeats is driver.sendHeartbeats: the heartbeats the machine produced in this cycle go out.
func (m *simMember) sendBeats() {
	for _, b := range m.beats {
		m.lastBeat, m.lastBeatAt = m.produceRecord(b.role.ID, *b.hb), m.dnow()
		b.role.Lease.Sent()
	}
	clear(m.beats)
	m.beats = m.beats[:0]
}

func (m *simMember) produceRecord(p int32, h Heartbeat) *simReq {
	q := &simReq{kind: reqProduce, from: m, rec: &simRecord{writer: m, hb: h, partition: p}}
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

// The alarm (driver.ring).

// watchPending aims the alarm if the machine's deadline may have changed.
func (m *simMember) watchPending() {
	if m.mach.WatchPending() {
		m.aim()
	}
}

// aim sets the alarm at the machine's deadline: the earliest lease end, or the commit gate's next
// withdrawal. It rings whatever the loop does (the driver's alarm takes only the machine's lock).
func (m *simMember) aim() {
	at, ok := m.mach.Deadline()
	if !ok {
		return
	}
	m.alarmTok++
	tok := m.alarmTok
	m.atLocal(m.leaseBase+at, func() {
		if tok != m.alarmTok || m.closing {
			return
		}
		m.mach.Alarm()
		m.aim()
	})
}

// The dispatcher.

// dispatch delivers role p's queued barrier calls one at a time (each role has a dispatcher of its
// own); IsLeader counts a LeaderAcquired once its call has returned (neli.deliver).
func (m *simMember) dispatch(p int32) {
	rs := &m.rs[p]
	if rs.dispBusy || len(rs.disp) == 0 {
		return
	}
	d := rs.disp[0]
	rs.disp = rs.disp[1:]
	rs.dispBusy = true
	took := m.barrier
	if m.w.now < m.barrierSlowUntil {
		took += m.barrierSlowBy
	}
	m.at(m.clock.afterLocal(took), func() {
		if d.acquired {
			m.roles[p].Lease.AcquiredDelivered(d.epoch)
			m.roleNote(p, "barrier returned from LeaderAcquired: leads until %s", m.leaseEndNote(p))
		}
		if d.dl != nil {
			d.dl.Finish()
		}
		if m.rs[p].handing == d.dl {
			m.rs[p].handing = nil
		}
		m.rs[p].dispBusy = false
		m.dispatch(p)
	})
}

// Close.

// close is Close: IsLeader turns false at once, the machine ends the tenure (endAll), the markers
// are written once the barrier has returned or the rebalance timeout has passed (closer.go), the
// consumer leaves the group, and the process exits once its LeaveGroup is out.
func (m *simMember) close() {
	if m.closing || !m.alive {
		return
	}
	m.note("Close")
	m.closing = true
	m.finals = m.mach.EndAll()
	m.blocked = true
	deadline := m.clock.afterLocal(m.prof.timing.MaxPoll)
	var poll func()
	poll = func() {
		for _, r := range m.finals {
			if !r.Done.delivered() && m.w.now < deadline {
				m.at(min(deadline, m.w.now+time.Millisecond), poll)
				return
			}
		}
		m.blocked = false
		var busy []Release
		for _, r := range m.finals {
			switch {
			case r.Done.delivered():
				r.Marker.Kind = KindReleased
				m.produceRecord(r.Role.ID, r.Marker)
			default:
				busy = append(busy, r)
				if r.Fresh {
					m.produceRecord(r.Role.ID, r.Marker)
				}
			}
		}
		m.finals = busy
		m.rdk.unsubscribe()
		m.wakeLoop(m.w.now)
	}
	m.at(m.w.now, poll)
}

func (m *simMember) afterClosingCycle() {
	// The released markers of barriers that return after Close (closer.go writes them as they do).
	kept := m.finals[:0]
	for _, r := range m.finals {
		if r.Done.delivered() {
			r.Marker.Kind = KindReleased
			m.produceRecord(r.Role.ID, r.Marker)
			continue
		}
		kept = append(kept, r)
	}
	m.finals = kept
	if m.rdk.left() && len(m.finals) == 0 {
		m.note("closed")
		m.exit()
		return
	}
	m.wakeLoop(m.clock.afterLocal(m.prof.minPoll))
}

// The machine's effects (machine.effects) on the models.

// simFx carries the machine's effects out on a member's models.
type simFx struct{ m *simMember }

func (f simFx) StoreOffsets(offsets []OffsetRef) ([]OffsetRef, error) {
	m := f.m
	var stored []OffsetRef
	for _, o := range offsets {
		if int(o.Partition) >= len(m.roles) {
			continue
		}
		if o.Offset < 0 {
			m.rdk.withdraw(o.Partition)
			continue
		}
		if m.rdk.store(o.Partition, o.Offset, o.Tag) {
			stored = append(stored, o)
			m.storedCount++
			m.roleNote(o.Partition, "stores offset %d", o.Offset)
			m.w.adv.offsetStored(m)
		}
	}
	return stored, nil
}

func (f simFx) Produce(p *Role, h *Heartbeat) {
	f.m.beats = append(f.m.beats, simBeat{p, h})
}

func (f simFx) WriteMarker(p *Role, h *Heartbeat) {
	f.m.produceRecord(p.ID, *h)
}

func (f simFx) Commit(offsets []OffsetRef) {
	offs := make([]simOffset, 0, len(offsets))
	for _, o := range offsets {
		offs = append(offs, simOffset{o.Partition, o.Offset, o.Tag})
	}
	f.m.rdk.commit(offs)
}

func (f simFx) Describe(tenures map[int32]uint64) error {
	f.m.checkTenures = tenures
	f.m.checkConn.send(&simReq{kind: reqDescribe, from: f.m})
	return nil
}

func (f simFx) Deliver(p *Role, events []TenureEvent, dl *Delivery) {
	m := f.m
	rs := &m.rs[p.ID]
	for i, e := range events {
		d := &simDelivery{what: fmt.Sprint(e)}
		if i == len(events)-1 {
			d.dl = dl
		}
		switch e.(type) {
		case Acquired:
			d.acquired, d.epoch = true, p.Lease.newestEpoch()
			rs.appLeads = true
		case Fenced:
			rs.appLeads = false
		case Revoked:
			if rs.appLeads {
				if d.dl == nil {
					d.dl = NewDelivery()
				}
				rs.handing, rs.handedAt, rs.released = d.dl, m.w.now, false
			}
			rs.appLeads = false
		}
		if m.w.tracing() {
			switch e := e.(type) {
			case Acquired:
				m.roleNote(p.ID, "LeaderAcquired (lease to %s)", m.leaseEndNote(p.ID))
			case Fenced:
				m.roleNote(p.ID, "LeaderFenced: %s", e.Reason)
			case Revoked:
				m.roleNote(p.ID, "LeaderRevoked")
			}
		}
		rs.disp = append(rs.disp, d)
	}
	m.dispatch(p.ID)
	// IsLeader reads the published view without the driver's lock, so every state between two
	// transitions of one cycle is visible: the oracle looks at each.
	m.w.oracle.check(m.w)
}

// roleNote records a line of the timeline about role p, naming it when there are several.
func (m *simMember) roleNote(p int32, format string, args ...any) {
	if !m.w.tracing() {
		return
	}
	if m.w.roles > 1 {
		format = fmt.Sprintf("[p%d] ", p) + format
	}
	m.w.note(m.name, format, args...)
}

// fmtOffsets renders a commit's offsets for the timeline.
func fmtOffsets(offs []simOffset) string {
	var b strings.Builder
	for i, o := range offs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "p%d@%d", o.partition, o.offset)
	}
	return b.String()
}

func (f simFx) Note(_ LogLevel, _, format string, args ...any) {
	m := f.m
	if m.w.tracing() {
		m.w.note(m.name, "%s", strings.TrimPrefix(fmt.Sprintf(format, args...), "goneli "+m.name+": "))
	}
}

func (f simFx) Unsubscribe() error {
	f.m.rdk.unsubscribe()
	return nil
}

func (f simFx) Subscribe() error {
	f.m.rdk.subscribe()
	return nil
}

func (f simFx) Left(string) {}

func (f simFx) Live() bool {
	return f.m.alive && !f.m.closing
}
