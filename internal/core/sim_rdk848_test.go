package core

import (
	"fmt"
	"time"
)

// simRdk848 is librdkafka's group client under KIP-848 (group.protocol=consumer), from
// src/rdkafka_cgrp.c of librdkafka v2.11.1: rd_kafka_cgrp_consumer_serve (a ConsumerGroupHeartbeat
// every interval the coordinator names, one in flight, sooner when expedited),
// rd_kafka_cgrp_handle_ConsumerGroupHeartbeat (the member epoch becomes the generation commits
// carry; an assignment that differs is reconciled through the application's rebalance callback and
// acknowledged by the next heartbeat; UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH lose the assignment
// and rejoin at epoch 0), and rd_kafka_cgrp_op_handle_OffsetCommit (STALE_MEMBER_EPOCH expedites a
// heartbeat). There is no client-side session timeout under KIP-848 in this version: the
// session check of the classic client reads a deadline that only the classic answers set. The
// auto-commit timer is the classic one: it commits only in the steady join state.
type simRdk848 struct {
	simConsumer

	memberID, epoch int
	subscribed      bool
	joined          bool     // has a member id and epoch from the coordinator
	groupParts      simParts // the assignment the coordinator gave (the target librdkafka reconciles to)
	interval        time.Duration
	hbInFlight      bool
	hbLast          time.Duration
	hbSet           bool
	expedite        bool
	waitRejoin      bool
	maxPollOut      bool
	full            bool // the next heartbeat is a full one
}

func newSimRdk848(m *simMember, conn *simConn) *simRdk848 {
	r := &simRdk848{interval: m.prof.hbInterval, full: true}
	r.simConsumer = newSimConsumer(m, conn, func() (int, int) {
		if !r.joined {
			return r.memberID, -1
		}
		return r.memberID, r.epoch
	})
	return r
}

func (r *simRdk848) id() int { return r.memberID }

func (r *simRdk848) left() bool { return !r.subscribed && !r.joined && !r.hbInFlight }

func (r *simRdk848) steady() bool {
	return r.subscribed && r.joined && r.state == rdkSteady && !r.waitRejoin && !r.maxPollOut
}

func (r *simRdk848) describe() string {
	return fmt.Sprintf("m%d epoch %d %s", r.memberID, r.epoch, r.state)
}

func (r *simRdk848) rebalancing() bool {
	return r.state != rdkInit && r.state != rdkSteady
}

func (r *simRdk848) subscribe() {
	r.subscribed, r.full = true, true
	r.serve()
}

func (r *simRdk848) serveAt(local time.Duration) { r.simConsumer.serveAt(local, r.serve) }

// serve is rd_kafka_cgrp_consumer_serve.
func (r *simRdk848) serve() {
	now := r.now()
	if r.subscribed && !r.maxPollOut && r.m.pollAge() > r.m.prof.maxPoll {
		r.m.note("librdkafka: max.poll.interval.ms exceeded: leaving the group")
		r.maxPollOut = true
		r.sendLeave()
		r.waitRejoin = true
	}
	if r.waitRejoin && !r.rebalancing() && !r.hbInFlight {
		r.waitRejoin = false
		r.revokeAllRejoin(true)
	}
	if !r.subscribed || r.hbInFlight || r.waitRejoin || r.maxPollOut {
		if r.subscribed {
			r.serveAt(r.m.lastPoll + r.m.prof.maxPoll + time.Millisecond)
		}
		return
	}
	if r.expedite || !r.hbSet || now-r.hbLast > r.interval {
		r.heartbeat(false)
	}
	r.serveAt(r.hbLast + r.interval + time.Microsecond)
	r.serveAt(r.m.lastPoll + r.m.prof.maxPoll + time.Millisecond)
}

func (r *simRdk848) heartbeat(leaving bool) {
	r.expedite = false
	r.hbInFlight, r.hbLast, r.hbSet = true, r.now(), true
	q := &simReq{kind: reqCGHeartbeat, from: r.m, member: r.memberID, gen: r.epoch, owned: r.taken, leaving: leaving, full: r.full}
	if !r.joined {
		q.gen = 0
	}
	r.conn.send(q)
}

func (r *simRdk848) sendLeave() {
	if r.joined {
		r.heartbeat(true)
	}
	r.joined, r.epoch = false, 0
}

func (r *simRdk848) answer(q *simReq) {
	switch q.kind {
	case reqCGHeartbeat:
		r.onHeartbeat(q)
	case reqCommit:
		r.onCommit(q)
	}
	r.serve()
}

// onHeartbeat is rd_kafka_cgrp_handle_ConsumerGroupHeartbeat.
func (r *simRdk848) onHeartbeat(q *simReq) {
	r.hbInFlight = false
	if q.leaving {
		return
	}
	switch q.err {
	case errNone:
	case errUnknownMemberID, errFencedMemberEpoch:
		r.m.note("librdkafka: heartbeat: %s: assignment lost, rejoining", q.err)
		r.waitRejoin = true
		return
	default:
		r.full = true
		return
	}
	if !r.subscribed {
		return
	}
	r.heartbeatAnswered(r.hbLast)
	r.full = false
	r.memberID, r.epoch, r.joined = q.ansMember, q.ansGen, true
	if q.interval > 0 {
		r.interval = q.interval
	}
	if q.assigns && q.assigned == 0 && r.state == rdkInit {
		// The first assignment of a membership, empty: the rebalance callback still hears of it,
		// and the join state becomes steady once the application has assigned nothing.
		r.state = rdkWaitAssignCall
		r.m.push(simAppEvent{kind: appAssigned})
		return
	}
	if !q.assigns || q.assigned == r.groupParts {
		return
	}
	if r.rebalancing() {
		// librdkafka keeps it as the next target; here the next heartbeat asks for it again.
		r.full = true
		return
	}
	// rd_kafka_cgrp_handle_assignment_cooperative, as under the classic protocol: what the new
	// assignment lacks is revoked first, what it adds assigned once that is done; the heartbeat
	// after acknowledges it.
	had := r.groupParts
	revoked, added := had&^q.assigned, q.assigned&^had
	r.groupParts = q.assigned
	if revoked == 0 {
		r.m.note("librdkafka: partitions %s assigned (epoch %d)", added, r.epoch)
		r.state = rdkWaitAssignCall
		r.m.push(simAppEvent{kind: appAssigned, parts: added})
		return
	}
	r.m.note("librdkafka: partitions %s revoked, %s added (epoch %d)", revoked, added, r.epoch)
	r.state = rdkWaitUnassignCall
	r.afterUnassign = func() {
		r.expedite = true
		r.state = rdkWaitAssignCall
		r.m.push(simAppEvent{kind: appAssigned, parts: added})
	}
	r.m.push(simAppEvent{kind: appRevoked, parts: revoked})
}

// revokeAllRejoin loses the assignment and joins again at epoch 0.
func (r *simRdk848) revokeAllRejoin(lost bool) {
	r.lost = r.lost || lost
	r.joined, r.epoch, r.full = false, 0, true
	if r.state == rdkWaitUnassignCall || r.state == rdkWaitUnassignToComplete {
		// A revocation is under way already: once it is done, whatever is still assigned is
		// revoked too.
		r.groupParts = 0
		r.afterUnassign = func() { r.revokeAllRejoin(lost) }
		return
	}
	parts := r.groupParts | r.taken
	if parts == 0 {
		r.state = rdkInit
		return
	}
	r.groupParts = 0
	r.state = rdkWaitUnassignCall
	r.afterUnassign = nil
	r.m.push(simAppEvent{kind: appRevoked, parts: parts, lost: lost})
}

func (r *simRdk848) polled() {
	if r.maxPollOut {
		r.maxPollOut = false
		r.serve()
	}
}

func (r *simRdk848) assigned(offsets []OffsetRef) {
	if r.state != rdkWaitAssignCall {
		return
	}
	r.take(offsets)
	r.state = rdkSteady
	r.expedite = true // the acknowledgement
	r.armTick()
	r.serve()
}

func (r *simRdk848) unassigned(parts simParts) {
	if r.state != rdkWaitUnassignCall {
		// librdkafka applies an incremental unassign whenever the application makes it; only its
		// own wait for one depends on its state. Two revocations in a row (a reconciliation's,
		// then an unsubscribe's) had the first unassign run the second's leave, and the second
		// was dropped: the consumer went on fetching partitions it had given back, and a later
		// assignment of one kept that fetch rather than starting a few records before the end,
		// so its successor's tenure never read the predecessor's releasing marker (a hand-over
		// violation the long search found, seed 60061149, ht1s-session2s-848).
		r.giveBack(parts)
		return
	}
	r.giveBack(parts)
	r.state = rdkWaitUnassignToComplete
	r.unassignDone()
}

func (r *simRdk848) unassignDone() {
	if r.state != rdkWaitUnassignToComplete || r.waitCommits > 0 {
		return
	}
	r.lost = false
	next := r.afterUnassign
	r.afterUnassign = nil
	r.state = rdkSteady
	if !r.joined {
		r.state = rdkInit
	}
	if next != nil {
		next()
	}
	r.serve()
}

func (r *simRdk848) unsubscribe() {
	r.subscribed = false
	if parts := r.groupParts | r.taken; parts != 0 {
		r.groupParts = 0
		r.state = rdkWaitUnassignCall
		r.afterUnassign = func() {
			r.sendLeave()
			r.state = rdkInit
		}
		r.m.push(simAppEvent{kind: appRevoked, parts: parts})
		return
	}
	r.sendLeave()
	r.state = rdkInit
}

// onCommit is rd_kafka_cgrp_op_handle_OffsetCommit under KIP-848: UNKNOWN_MEMBER_ID and
// STALE_MEMBER_EPOCH expedite a heartbeat; an automatic commit refused as stale, or lost in
// transport, is deferred and sent again (here by the next tick), not reported.
func (r *simRdk848) onCommit(q *simReq) {
	if q.err == errUnknownMemberID || q.err == errStaleMemberEpoch {
		r.expedite = true
	}
	r.committedAnswer(q, q.err != errStaleMemberEpoch && q.err != errTransport)
	r.unassignDone()
}
