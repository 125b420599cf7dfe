package core

import (
	"fmt"
	"time"
)

// simRdk is librdkafka's consumer group client under the classic protocol with cooperative-sticky
// assignment (what goneli configures: config.go, clientConfigs), from src/rdkafka_cgrp.c of
// librdkafka v2.11.1: the join states, the heartbeat (rd_kafka_cgrp_join_state_serve: one in flight,
// every heartbeat.interval.ms, in the steady and assign-call states only), the JoinGroup rate limit
// (rkcg_join_intvl: a join at most once a second, a second more after a failed one), the answers'
// handling (rd_kafka_cgrp_handle_JoinGroup, _SyncGroup_memberstate, _Heartbeat,
// rd_kafka_cgrp_op_handle_OffsetCommit), the cooperative assignment's handling
// (rd_kafka_cgrp_handle_assignment_cooperative: what a new assignment lacks is revoked first, what
// it adds is assigned once that is done, and a revocation is followed by a rejoin without the rate
// limit: rd_kafka_cgrp_incr_unassign_done, rd_kafka_cgrp_assignment_done), the group leader's
// assignor (assign), the client's own session timeout (rd_kafka_cgrp_session_timeout_check, in
// the steady state only), max.poll.interval.ms, and the auto-commit timer
// (rd_kafka_cgrp_offset_commit_tmr_cb: only in the steady state, committing each stored offset
// that is above its committed one, so again at every tick until a commit of it is answered:
// simConsumer). Its threads run on while goneli's poll loop is paused, and stop only when the
// whole process does (simMember.do).
//
// Simplified: the coordinator never moves, so there is no FindCoordinator, NOT_COORDINATOR or
// coordinator reload (a reload gives every member a fresh session from the load, which only keeps
// a member longer); a commit that fails in transport is not deferred to the reconnection, but the
// stored offset goes out again at the next auto-commit tick, and an explicit one is asked for again
// by the lease (stalled), which is what a deferred one would do; metadata and fetch sessions are
// not modelled (simTopic pushes records over the fetcher's link). A JoinGroup or SyncGroup answer
// that comes in the wrong join state is dropped, as librdkafka drops an outdated one.
type simRdk struct {
	simConsumer

	memberID, gen int
	// groupParts is the group's assignment to this member (rkcg_group_assignment), and ownedGen
	// the generation of the SyncGroup that gave it (the sticky assignor's generation_id); the
	// consumer's own assignment follows once the application has served the rebalance event
	// (simConsumer).
	groupParts simParts
	ownedGen   int

	subscribed bool
	awaiting   bool // a JoinGroup or SyncGroup awaits its answer
	// rejoinAfterAssign says that the assignment under way follows a cooperative revocation, after
	// which the member rejoins at once (rd_kafka_cgrp_incr_unassign_done, the rejoin flag).
	rejoinAfterAssign bool
	// The JoinGroup rate limit, rd_interval_immediate(rkcg_join_intvl, 1 s), on the member's clock.
	joinLast    time.Duration
	joinSet     bool
	joinBackoff time.Duration
	hbInFlight  bool
	hbLast      time.Duration
	hbSet       bool
	sessionAt   time.Duration // the client's own session deadline; 0 while none runs
	maxPollOut  bool
}

type rdkState uint8

const (
	rdkInit rdkState = iota
	rdkWaitJoin
	rdkWaitSync
	rdkWaitAssignCall
	rdkWaitUnassignCall
	rdkWaitUnassignToComplete
	rdkSteady
)

func (s rdkState) String() string {
	return [...]string{"init", "wait-join", "wait-sync", "wait-assign-call", "wait-unassign-call", "wait-unassign-to-complete", "steady"}[s]
}

func newSimRdk(m *simMember, conn *simConn) *simRdk {
	r := &simRdk{gen: -1, ownedGen: -1}
	r.simConsumer = newSimConsumer(m, conn, func() (int, int) { return r.memberID, r.gen })
	return r
}

// rebalancing is RD_KAFKA_CGRP_REBALANCING: a join under way.
func (r *simRdk) rebalancing() bool {
	return r.state != rdkInit && r.state != rdkSteady
}

func (r *simRdk) subscribe() {
	r.subscribed = true
	r.serve()
}

// serveAt makes serve run when the member's clock reads local.
func (r *simRdk) serveAt(local time.Duration) { r.simConsumer.serveAt(local, r.serve) }

// serve is rd_kafka_cgrp_serve as far as the model goes.
func (r *simRdk) serve() {
	if !r.subscribed {
		return
	}
	now := r.now()
	p := r.m.prof
	if !r.maxPollOut && r.m.pollAge() > p.maxPoll {
		r.maxPollExceeded()
		return
	}
	if r.state == rdkSteady && r.sessionAt != 0 && now >= r.sessionAt {
		r.m.note("librdkafka: session timed out without a heartbeat answer: assignment lost")
		r.sessionAt = 0
		r.memberID = 0
		r.revokeAllRejoin(true)
		return
	}
	switch r.state {
	case rdkInit:
		if r.awaiting || r.maxPollOut {
			return
		}
		next := r.joinLast + time.Second + r.joinBackoff
		if r.joinSet && now <= next {
			r.serveAt(next + time.Microsecond)
			return
		}
		r.join()
	case rdkSteady, rdkWaitAssignCall, rdkWaitUnassignCall:
		if !r.hbInFlight {
			if !r.hbSet || now-r.hbLast >= p.hbInterval {
				r.heartbeat()
			}
			// The heartbeat goes out when the main thread next serves the group once the interval
			// is over (rd_kafka_cgrp_join_state_serve, rd_interval from the last one sent): at an
			// event, or at the latest at the next tick of the auto-commit timer, which runs from the
			// client's creation; so its phase drifts by a few milliseconds with each one.
			iv := p.commitInterval
			r.serveAt((r.hbLast + p.hbInterval + iv - 1) / iv * iv)
		}
		if r.state == rdkSteady && r.sessionAt != 0 {
			r.serveAt(r.sessionAt)
		}
	}
	r.serveAt(r.m.lastPoll + p.maxPoll + time.Millisecond)
}

func (r *simRdk) join() {
	r.joinLast, r.joinSet, r.joinBackoff = r.now(), true, 0
	r.state, r.awaiting = rdkWaitJoin, true
	// The cooperative-sticky metadata: the partitions the group assigned this member (none once
	// an assignment was lost), and the generation of its last assignment.
	q := &simReq{kind: reqJoin, from: r.m, member: r.memberID, gen: r.gen, owned: r.groupParts, ownedGen: r.ownedGen}
	r.m.note("librdkafka: JoinGroup (m%d, gen %d)", r.memberID, r.gen)
	r.w.adv.joinSent(r.m)
	r.conn.send(q)
}

func (r *simRdk) heartbeat() {
	r.hbInFlight, r.hbLast, r.hbSet = true, r.now(), true
	r.conn.send(&simReq{kind: reqHeartbeat, from: r.m, member: r.memberID, gen: r.gen})
}

// answer takes an answer from the coordinator connection.
func (r *simRdk) answer(q *simReq) {
	switch q.kind {
	case reqJoin:
		r.onJoin(q)
	case reqSync:
		r.onSync(q)
	case reqHeartbeat:
		r.onHeartbeat(q)
	case reqCommit:
		r.onCommit(q)
	case reqLeave:
	}
	r.serve()
}

// onJoin is rd_kafka_cgrp_handle_JoinGroup.
func (r *simRdk) onJoin(q *simReq) {
	if r.state != rdkWaitJoin {
		return
	}
	r.awaiting = false
	if q.err == errNone {
		r.memberID, r.gen = q.ansMember, q.ansGen
		s := &simReq{kind: reqSync, from: r.m, member: r.memberID, gen: r.gen}
		if q.leader {
			s.members = q.members
			s.assignment = r.assign(q.members)
		}
		r.state, r.awaiting = rdkWaitSync, true
		r.conn.send(s)
		return
	}
	r.m.note("librdkafka: JoinGroup failed: %s", q.err)
	r.joinBackoff = time.Second
	switch q.err {
	case errUnknownMemberID:
		r.memberID = 0
	case errIllegalGeneration:
		r.gen = -1
	case errMemberIDRequired:
		r.memberID = q.ansMember
		r.joinSet, r.joinBackoff = false, 0
	}
	if q.err == errIllegalGeneration || q.err == errMemberIDRequired {
		r.revokeAllRejoin(true)
		return
	}
	r.rejoin()
}

// assign is the group leader's cooperative-sticky assignment (rd_kafka_sticky_assignor_assign_cb,
// then rd_kafka_cooperative_protocol_adjust_assignment): each partition stays with the member
// that claims it in the newest generation (claims of one generation that clash void it:
// prepopulateCurrentAssignments), the rest are balanced by count (simBalance); then a partition
// that the assignor moves away from the member that still owns it (the last in the group's order
// to claim it) is assigned to nobody in this generation: its owner revokes it and rejoins, and
// the next generation assigns it. The result is each member's assignment, in members' order.
func (r *simRdk) assign(members []simJoinedMember) []simParts {
	n := r.w.roles
	current := make([]int, n)
	owner := make([]int, n)
	ids := make([]int, len(members))
	for i, m := range members {
		ids[i] = m.id
	}
	for p := int32(0); p < int32(n); p++ {
		best, bestGen, clash := 0, -1, false
		for i, m := range members {
			if !m.owned.has(p) {
				continue
			}
			owner[p] = m.id
			for _, o := range members[:i] {
				if o.owned.has(p) && o.ownedGen == m.ownedGen {
					clash = true
				}
			}
			if m.ownedGen > bestGen {
				best, bestGen = m.id, m.ownedGen
			}
		}
		if !clash {
			current[p] = best
		}
	}
	to := r.w.simBalance(n, ids, current)
	out := make([]simParts, len(members))
	for p := int32(0); p < int32(n); p++ {
		if owner[p] != 0 && owner[p] != to[p] {
			continue // revoked by its owner first
		}
		for i, id := range ids {
			if id == to[p] {
				out[i] = out[i].add(p)
			}
		}
	}
	return out
}

// onSync is rd_kafka_cgrp_handle_SyncGroup_memberstate and the cooperative assignment handling.
func (r *simRdk) onSync(q *simReq) {
	if r.state != rdkWaitSync {
		return
	}
	r.awaiting = false
	if q.err != errNone {
		r.m.note("librdkafka: SyncGroup failed: %s", q.err)
		switch q.err {
		case errIllegalGeneration:
			r.gen = -1
		case errUnknownMemberID:
			r.memberID = 0
		}
		if q.err == errIllegalGeneration || q.err == errUnknownMemberID {
			r.revokeAllRejoin(true)
			return
		}
		r.rejoin()
		return
	}
	r.sessionAt = r.now() + r.m.prof.session
	// rd_kafka_cgrp_handle_assignment_cooperative: what the new assignment lacks is revoked
	// first, and what it adds is assigned once the revocation is done, followed by a rejoin.
	had := r.groupParts
	revoked, added := had&^q.assigned, q.assigned&^had
	r.groupParts, r.ownedGen = q.assigned, r.gen
	if revoked != 0 {
		r.m.note("librdkafka: partitions %s revoked, %s added (gen %d)", revoked, added, r.gen)
		r.state = rdkWaitUnassignCall
		r.afterUnassign = func() {
			r.state, r.rejoinAfterAssign = rdkWaitAssignCall, true
			r.m.push(simAppEvent{kind: appAssigned, parts: added})
		}
		r.m.push(simAppEvent{kind: appRevoked, parts: revoked})
		return
	}
	if added != 0 {
		r.m.note("librdkafka: partitions %s assigned (gen %d)", added, r.gen)
	}
	r.state = rdkWaitAssignCall
	r.m.push(simAppEvent{kind: appAssigned, parts: added})
}

// onHeartbeat is rd_kafka_cgrp_handle_Heartbeat.
func (r *simRdk) onHeartbeat(q *simReq) {
	r.hbInFlight = false
	if q.err == errNone || q.err == errRebalanceInProgress {
		r.heartbeatAnswered(r.hbLast)
	}
	if q.err == errNone {
		if r.sessionAt != 0 {
			r.sessionAt = r.now() + r.m.prof.session
		}
		return
	}
	if r.state == rdkInit || r.state == rdkWaitJoin || r.state == rdkWaitSync {
		return
	}
	switch q.err {
	case errRebalanceInProgress:
		if r.sessionAt != 0 {
			r.sessionAt = r.now() + r.m.prof.session
		}
		if r.state == rdkWaitAssignCall || r.rebalancing() {
			return
		}
		r.m.note("librdkafka: heartbeat says the group rebalances: rejoining")
		r.rejoin()
	case errUnknownMemberID:
		r.m.note("librdkafka: heartbeat: UNKNOWN_MEMBER_ID: assignment lost")
		r.memberID = 0
		r.revokeAllRejoin(true)
	case errIllegalGeneration:
		r.m.note("librdkafka: heartbeat: ILLEGAL_GENERATION: assignment lost")
		r.gen = -1
		r.revokeAllRejoin(true)
	}
}

func (r *simRdk) rejoin() {
	r.state = rdkInit
}

// rejoinNow rejoins without the JoinGroup rate limit: rd_kafka_cgrp_incr_unassign_done and
// rd_kafka_cgrp_assignment_done reset it (rd_interval_reset) before the rejoin that follows a
// revocation.
func (r *simRdk) rejoinNow() {
	r.joinSet = false
	r.rejoin()
}

// revokeAllRejoin is rd_kafka_cgrp_revoke_all_rejoin: the application is told of the revocation
// (as lost, if so), and the client rejoins once it has served it.
func (r *simRdk) revokeAllRejoin(lost bool) {
	if lost {
		r.lost = true
	}
	if r.state == rdkWaitUnassignCall || r.state == rdkWaitUnassignToComplete {
		// A revocation is under way already: once it is done, whatever is still assigned is
		// revoked too, and the member rejoins.
		r.groupParts = 0
		r.rejoinAfterAssign = false
		r.afterUnassign = func() { r.revokeAllRejoin(lost) }
		return
	}
	parts := r.groupParts | r.taken
	if parts == 0 {
		r.rejoin()
		return
	}
	r.groupParts = 0
	r.rejoinAfterAssign = false
	r.state = rdkWaitUnassignCall
	r.afterUnassign = r.rejoinNow
	r.m.push(simAppEvent{kind: appRevoked, parts: parts, lost: lost})
}

// maxPollExceeded: goneli has not polled for max.poll.interval.ms; librdkafka leaves the group
// and rejoins only once it polls again.
func (r *simRdk) maxPollExceeded() {
	r.m.note("librdkafka: max.poll.interval.ms exceeded: leaving the group")
	r.maxPollOut = true
	r.leaveGroup()
	r.revokeAllRejoin(true)
}

// polled is called at every poll of the application's: what max.poll.interval.ms watches.
func (r *simRdk) polled() {
	if r.maxPollOut {
		r.maxPollOut = false
		r.serve()
	}
}

func (r *simRdk) leaveGroup() {
	if r.memberID != 0 {
		r.conn.send(&simReq{kind: reqLeave, from: r.m, member: r.memberID})
	}
	r.memberID, r.gen = 0, -1
}

// assigned is the application's incremental assign after an assignment event.
func (r *simRdk) assigned(offsets []OffsetRef) {
	if r.state != rdkWaitAssignCall {
		return
	}
	r.take(offsets)
	r.state = rdkSteady
	r.armTick()
	if r.rejoinAfterAssign {
		r.rejoinAfterAssign = false
		r.m.note("librdkafka: rejoining to redistribute the partitions revoked")
		r.rejoinNow()
	}
	r.serve()
}

// unassigned is the application's incremental unassign after a revocation: it goes on once every
// commit under way is answered.
func (r *simRdk) unassigned(parts simParts) {
	if r.state != rdkWaitUnassignCall {
		// Applied whatever the state, as librdkafka does (simRdk848.unassigned says why it matters).
		r.giveBack(parts)
		return
	}
	r.giveBack(parts)
	r.state = rdkWaitUnassignToComplete
	r.unassignDone()
}

func (r *simRdk) unassignDone() {
	if r.state != rdkWaitUnassignToComplete || r.waitCommits > 0 {
		return
	}
	r.lost = false
	next := r.afterUnassign
	r.afterUnassign = nil
	r.state = rdkInit
	if next != nil {
		next()
	}
	r.serve()
}

// unsubscribe leaves the group: the revocation first, then the LeaveGroup.
func (r *simRdk) unsubscribe() {
	r.subscribed = false
	leave := func() {
		r.leaveGroup()
		r.state = rdkInit
	}
	if parts := r.groupParts | r.taken; parts != 0 {
		r.groupParts = 0
		r.rejoinAfterAssign = false
		r.state = rdkWaitUnassignCall
		r.afterUnassign = leave
		r.m.push(simAppEvent{kind: appRevoked, parts: parts})
		return
	}
	leave()
}

// onCommit is rd_kafka_cgrp_op_handle_OffsetCommit: UNKNOWN_MEMBER_ID, and ILLEGAL_GENERATION
// outside a rebalance, lose the assignment; a transport error is retried, not reported.
func (r *simRdk) onCommit(q *simReq) {
	switch q.err {
	case errUnknownMemberID:
		r.memberID = 0
		r.revokeAllRejoin(true)
	case errIllegalGeneration:
		if !r.rebalancing() {
			r.gen = -1
			r.revokeAllRejoin(true)
		}
	}
	r.committedAnswer(q, q.err != errTransport)
	r.unassignDone()
}

func (r *simRdk) id() int    { return r.memberID }
func (r *simRdk) left() bool { return !r.subscribed && r.state == rdkInit && r.memberID == 0 }
func (r *simRdk) steady() bool {
	return r.subscribed && r.state == rdkSteady && r.memberID != 0 && !r.maxPollOut
}
func (r *simRdk) describe() string {
	return fmt.Sprintf("m%d gen %d %s", r.memberID, r.gen, r.state)
}
