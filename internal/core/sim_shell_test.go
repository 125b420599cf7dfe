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
		if r.hb.Kind == KindHeartbeat && r.writer.name == m.name {
			m.mach.ReadBack(m.part, r.hb, r.offset)
			return
		}
		m.mach.Foreign(m.part, r.hb)
	case appCommitted:
		if e.err == errNone && e.offset >= 0 {
			m.autoAccepted, m.autoQueued, m.autoProcessed = e.accepted, e.queued, m.w.now
			m.note("OffsetsCommitted of offset %d processed (the coordinator accepted it at %s)", e.offset, fmtDur(e.accepted))
		}
		m.renewal(false, 0, func() { m.mach.AutoCommitted(m.answerOf(e.offset, e.tag, e.err)) })
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

// assigned is the rebalance callback for an assignment: the machine's judgement, the stall the
// adversary may put between it and librdkafka's assign call, the assign call, and the tenure.
func (m *simMember) assigned(e simAppEvent) {
	var partitions []int32
	if e.p0 {
		m.groupP0 = true
		partitions = []int32{0}
	}
	_, take := m.mach.Assign(partitions, m.memberName(), true, false)
	if !take {
		m.rdk.assigned(e.p0) // confluent-kafka-go applies it itself
		return
	}
	m.mach.TakeAt(nil)
	finish := func() {
		m.rdk.assigned(e.p0)
		m.mach.Taken(nil)
		if e.p0 {
			_, name := m.part.Lease.Tenure()
			m.note("tenure %s begins (%s, vouched %v)", name, m.memberName(), m.mach.Group.member.Vouched)
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

// revoked is the rebalance callback for a revocation: the machine ends the tenure, the waits it
// leaves, then librdkafka's unassign.
func (m *simMember) revoked(e simAppEvent) {
	var partitions []int32
	if m.groupP0 {
		partitions = []int32{0}
		m.groupP0 = false
	}
	active := m.part.Lease.active()
	w, _, give := m.mach.Revoke(partitions, e.lost, true)
	if !give {
		m.rdk.unassigned()
		return
	}
	if active {
		m.note("tenure ends (lost %v)", e.lost)
	}
	m.wait(w, nil, m.rdk.unassigned)
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
		qs = append(qs, m.produceRecord(r.Marker))
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
			m.inCallback = false
			m.lastPoll = m.clock.local(m.w.now)
		}
		then()
		if !m.blocked {
			m.drain()
		}
	}
	m.at(m.w.now, poll)
}

// renewal runs call, a machine call that may renew the lease, and notes for the oracle whether it
// did by an explicit commit (offset, if explicit, is the commit's).
func (m *simMember) renewal(explicit bool, offset int64, call func()) {
	before := m.view().End
	call()
	if v := m.view(); v.Leading && v.End != before {
		m.renewedExplicitly = explicit
		m.renewedRestarted = explicit && offset == m.restartedAsk
	}
}

// answerOf is a commit's answer for partition 0, as driver.commitAnswerOf translates librdkafka's.
func (m *simMember) answerOf(offset int64, tag string, err simErr) CommitAnswer {
	c := Committed{OffsetRef: OffsetRef{Partition: 0, Offset: offset, Tag: tag}}
	switch err {
	case errNone:
	case errUnknownMemberID, errFencedMemberEpoch:
		c.Err, c.Outcome = err, CommitGone
	case errIllegalGeneration:
		c.Err, c.Outcome = err, CommitGeneration
	default:
		c.Err, c.Outcome = err, CommitNotAccepted
	}
	if err == errIllegalGeneration {
		// librdkafka reports a refused commit as the whole request's error as well.
		return CommitAnswer{Offsets: []Committed{c}, Err: err, Outcome: CommitGeneration}
	}
	return CommitAnswer{Offsets: []Committed{c}}
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
	m.commitAns = nil
	m.renewal(true, a.offset, func() { m.mach.ExplicitAnswered(m.answerOf(a.offset, a.tag, a.err)) })
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
	for _, h := range m.beats {
		m.lastBeat, m.lastBeatAt = m.produceRecord(*h), m.dnow()
		m.part.Lease.Sent()
	}
	m.beats = m.beats[:0]
}

func (m *simMember) produceRecord(h Heartbeat) *simReq {
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

// dispatch delivers the queued barrier calls one at a time; IsLeader counts a LeaderAcquired once
// its call has returned (neli.deliver).
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
			m.part.Lease.AcquiredDelivered(d.epoch)
			m.note("barrier returned from LeaderAcquired: leads until %s", m.leaseEndNote())
		}
		if d.dl != nil {
			d.dl.Finish()
		}
		m.dispBusy = false
		m.dispatch()
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
				m.produceRecord(r.Marker)
			default:
				busy = append(busy, r)
				if r.Fresh {
					m.produceRecord(r.Marker)
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
			m.produceRecord(r.Marker)
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
		if o.Partition != 0 {
			continue
		}
		if o.Offset < 0 {
			m.rdk.withdraw()
			continue
		}
		if m.rdk.store(o.Offset, o.Tag) {
			stored = append(stored, o)
			m.storedCount++
			m.note("stores offset %d", o.Offset)
			m.w.adv.offsetStored(m)
		}
	}
	return stored, nil
}

func (f simFx) Produce(p *Role, h *Heartbeat) {
	f.m.beats = append(f.m.beats, h)
}

func (f simFx) WriteMarker(p *Role, h *Heartbeat) {
	f.m.produceRecord(*h)
}

func (f simFx) Commit(offsets []OffsetRef) {
	m := f.m
	for _, o := range offsets {
		if o.Partition == 0 {
			m.rdk.commit(o.Offset, o.Tag)
		}
	}
}

func (f simFx) Describe(tenures map[int32]uint64) error {
	f.m.checkTenures = tenures
	f.m.checkConn.send(&simReq{kind: reqDescribe, from: f.m})
	return nil
}

func (f simFx) Deliver(p *Role, events []TenureEvent, dl *Delivery) {
	m := f.m
	for i, e := range events {
		d := &simDelivery{what: fmt.Sprint(e)}
		if i == len(events)-1 {
			d.dl = dl
		}
		if _, ok := e.(Acquired); ok {
			d.acquired, d.epoch = true, p.Lease.newestEpoch()
		}
		if m.w.tracing() {
			switch e := e.(type) {
			case Acquired:
				m.note("LeaderAcquired (lease to %s)", m.leaseEndNote())
			case Fenced:
				m.note("LeaderFenced: %s", e.Reason)
			case Revoked:
				m.note("LeaderRevoked")
			}
		}
		m.disp = append(m.disp, d)
	}
	m.dispatch()
	// IsLeader reads the published view without the driver's lock, so every state between two
	// transitions of one cycle is visible: the oracle looks at each.
	m.w.oracle.check(m.w)
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
