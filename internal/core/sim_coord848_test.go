package core

import (
	"fmt"
	"time"
)

// simCG is the group coordinator of the KIP-848 consumer protocol, written from Apache Kafka's
// GroupMetadataManager (consumerGroupHeartbeat, maybeReconcile, consumerGroupFenceMember,
// scheduleConsumerGroupSessionTimeout, scheduleConsumerGroupRebalanceTimeout,
// throwIfConsumerGroupMemberEpochIsInvalid), CurrentAssignmentBuilder (build,
// computeNextAssignment) and ConsumerGroup.validateOffsetCommit (apache/kafka 1eb7644). Sessions
// are kept by ConsumerGroupHeartbeats alone: OffsetMetadataManager.commitOffset refreshes a
// session only for classic groups. A partition moves only once its owner has revoked it (or was
// fenced), within the rebalance timeout. The server-side assignor (UniformAssignor) computes the
// target assignment at each bump of the group epoch: a partition stays with its target owner while
// that one is a member, and the rest are balanced by count (simBalance).
type simCG struct {
	w          *simWorld
	clock      *simClock
	groupEpoch int
	target     []int // the member the target assignment gives each partition; 0 for none
	members    []*simCGMember
	nextID     int
}

type simCGMember struct {
	id           int
	inst         *simMember
	epoch, prev  int
	state        cgMemberState
	assigned     simParts // the member's assigned partitions
	revoking     simParts // its partitions pending revocation
	sessionTimer int
	rebalTimer   int
	rebalance    time.Duration
}

type cgMemberState uint8

const (
	cgStable cgMemberState = iota
	cgUnrevoked
	cgUnreleased
)

func newSimCG(w *simWorld, clock *simClock) *simCG {
	return &simCG{w: w, clock: clock, nextID: 1, target: make([]int, w.roles)}
}

func (c *simCG) member(id int) *simCGMember {
	for _, m := range c.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

// describe is ConsumerGroupDescribe: every member with its assigned partitions, whatever the
// group's epoch (Apache Kafka describes a consumer group's assignments in every state).
func (c *simCG) describe() GroupDesc {
	d := GroupDesc{Group: c.w.prof.group}
	for _, m := range c.members {
		gm := GroupMember{ClientID: m.inst.mach.ClientID, MemberID: fmt.Sprintf("m%d", m.id)}
		for _, p := range m.assigned.list() {
			gm.Parts = append(gm.Parts, TopicPart{Topic: c.w.prof.topic, Partition: p})
		}
		d.Members = append(d.Members, gm)
	}
	return d
}

func (c *simCG) note(format string, args ...any) {
	if c.w.tracing() {
		c.w.note("coord", "[epoch %d] %s", c.groupEpoch, fmt.Sprintf(format, args...))
	}
}

func (c *simCG) serve(r *simReq) {
	switch r.kind {
	case reqCGHeartbeat:
		c.heartbeat(r)
	case reqCommit:
		c.commit(r)
	case reqDescribe:
		r.desc = c.describe()
		r.conn.answer(r)
	default:
		panic("KIP-848 coordinator: unexpected " + r.kind.String())
	}
}

// bump raises the group epoch and recomputes the target assignment.
func (c *simCG) bump(reason string) {
	c.groupEpoch++
	ids := make([]int, len(c.members))
	for i, m := range c.members {
		ids[i] = m.id
	}
	c.target = c.w.simBalance(len(c.target), ids, c.target)
	if c.w.tracing() {
		c.note("%s: target assignment %v", reason, c.target)
	}
	c.w.adv.rebalanceStarted()
}

// targetOf is m's target assignment.
func (c *simCG) targetOf(m *simCGMember) simParts {
	var s simParts
	for p, id := range c.target {
		if id == m.id {
			s = s.add(int32(p))
		}
	}
	return s
}

// owned is the partitions whose currentPartitionEpoch is not -1: some member has them assigned or
// pending revocation.
func (c *simCG) owned() simParts {
	var s simParts
	for _, m := range c.members {
		s |= m.assigned | m.revoking
	}
	return s
}

func (c *simCG) heartbeat(r *simReq) {
	if r.leaving {
		if m := c.member(r.member); m != nil {
			c.note("m%d (%s) leaves", m.id, m.inst.name)
			c.fence(m, "left")
		}
		r.ansMember, r.ansGen = r.member, -1
		r.conn.answer(r)
		return
	}
	m := c.member(r.member)
	switch {
	case r.gen == 0:
		if m == nil {
			id := r.member
			if id == 0 {
				id = c.nextID
				c.nextID++
			}
			m = &simCGMember{id: id, inst: r.from, rebalance: r.from.prof.maxPoll}
			c.members = append(c.members, m)
			c.note("member m%d (%s) joins", m.id, r.from.name)
			c.bump(fmt.Sprintf("m%d joined", m.id))
		} else if m.epoch != 0 && (m.prev != 0 || !r.owned.subsetOf(m.assigned)) {
			r.err = errFencedMemberEpoch
			r.conn.answer(r)
			return
		}
	case m == nil:
		r.err = errUnknownMemberID
		r.conn.answer(r)
		return
	case r.gen > m.epoch:
		r.err = errFencedMemberEpoch
		r.conn.answer(r)
		return
	case r.gen < m.epoch && (r.gen != m.prev || !r.owned.subsetOf(m.assigned)):
		r.err = errFencedMemberEpoch
		r.conn.answer(r)
		return
	}
	before := m.assigned
	c.reconcile(m, r.owned)
	c.scheduleSession(m)
	r.ansMember, r.ansGen, r.interval = m.id, m.epoch, c.w.prof.hbInterval
	if r.gen == 0 || before != m.assigned || r.full {
		r.assigns, r.assigned = true, m.assigned
	}
	r.conn.answer(r)
}

// reconcile is maybeReconcile with CurrentAssignmentBuilder.build.
func (c *simCG) reconcile(m *simCGMember, owned simParts) {
	if m.state == cgStable && m.epoch == c.groupEpoch {
		return
	}
	was := *m
	switch m.state {
	case cgStable:
		c.next(m, m.epoch, owned)
	case cgUnrevoked:
		if owned&m.revoking != 0 {
			return
		}
		c.next(m, m.epoch+1, owned)
	case cgUnreleased:
		c.next(m, m.epoch, owned)
	}
	if m.state == cgUnrevoked && (was.state != cgUnrevoked || was.epoch != m.epoch) {
		m.rebalTimer++
		timer, epoch := m.rebalTimer, m.epoch
		c.w.at(c.clock.afterLocal(m.rebalance), func() {
			if timer == m.rebalTimer && c.member(m.id) == m && m.epoch == epoch {
				c.note("m%d (%s) fenced: it did not revoke within the rebalance timeout", m.id, m.inst.name)
				c.fence(m, "rebalance timeout")
			}
		})
	} else if m.state != cgUnrevoked {
		m.rebalTimer++
	}
	if c.w.tracing() && (was.epoch != m.epoch || was.assigned != m.assigned || was.state != m.state) {
		c.note("m%d (%s) now at epoch %d, state %d, partitions %s (revoking %s)", m.id, m.inst.name, m.epoch, m.state, m.assigned, m.revoking)
	}
}

// next is computeNextAssignment: what m keeps of its target, what it must revoke first (while it
// still owns it), and what it is given of the rest once no other member owns it.
func (c *simCG) next(m *simCGMember, epoch int, owned simParts) {
	target := c.targetOf(m)
	keep := m.assigned & target
	revoke := m.assigned &^ keep
	pending := target &^ keep
	unreleased := pending & c.owned()
	pending &^= unreleased
	setEpoch := func(e int) {
		if e != m.epoch {
			m.prev, m.epoch = m.epoch, e
		}
	}
	switch {
	case revoke != 0 && owned&revoke != 0:
		m.state, m.assigned, m.revoking = cgUnrevoked, keep, revoke
		setEpoch(epoch)
	case pending != 0:
		m.state, m.assigned, m.revoking = cgStable, keep|pending, 0
		if unreleased != 0 {
			m.state = cgUnreleased
		}
		setEpoch(c.groupEpoch)
	case unreleased != 0:
		m.state, m.assigned, m.revoking = cgUnreleased, keep, 0
		setEpoch(c.groupEpoch)
	default:
		m.state, m.assigned, m.revoking = cgStable, keep, 0
		setEpoch(c.groupEpoch)
	}
}

// fence removes m (consumerGroupFenceMember): the group epoch is bumped and its partitions are free.
func (c *simCG) fence(m *simCGMember, why string) {
	m.sessionTimer++
	m.rebalTimer++
	for i, x := range c.members {
		if x == m {
			c.members = append(c.members[:i], c.members[i+1:]...)
			break
		}
	}
	c.bump(fmt.Sprintf("m%d fenced (%s)", m.id, why))
}

func (c *simCG) scheduleSession(m *simCGMember) {
	m.sessionTimer++
	timer := m.sessionTimer
	c.w.at(c.clock.afterLocal(c.w.prof.session), func() {
		if timer == m.sessionTimer && c.member(m.id) == m {
			c.note("session of m%d (%s) expired", m.id, m.inst.name)
			c.fence(m, "session expired")
		}
	})
}

// commit is ConsumerGroup.validateOffsetCommit: the member must exist at the epoch it commits with.
// It keeps no session.
func (c *simCG) commit(r *simReq) {
	m := c.member(r.member)
	err := errNone
	switch {
	case r.gen < 0 && len(c.members) == 0:
	case m == nil:
		err = errUnknownMemberID
	case r.gen != m.epoch:
		err = errStaleMemberEpoch
	}
	if c.w.tracing() {
		kind := "explicit"
		if r.auto {
			kind = "auto"
		}
		if err == errNone {
			c.note("accepts %s commit of %s from m%d (%s, epoch %d)", kind, fmtOffsets(r.offsets), r.member, r.from.name, r.gen)
		} else {
			c.note("refuses %s commit of %s from m%d (%s, epoch %d): %s", kind, fmtOffsets(r.offsets), r.member, r.from.name, r.gen, err)
		}
	}
	if err == errNone {
		r.acceptedAt = c.w.now
		c.w.adv.commitAccepted(r.from)
	}
	r.err = err
	r.conn.answer(r)
}
