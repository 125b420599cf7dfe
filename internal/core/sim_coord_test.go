package core

import (
	"fmt"
	"time"
)

// simCoordinator is the group coordinator: it takes the group requests of every member's
// coordinator connection, and answers the group check's descriptions.
type simCoordinator interface {
	serve(r *simReq)
	// describe is the group's description made now, as the group check reads it (groupDesc).
	describe() GroupDesc
}

// simClassic is the group coordinator of the classic protocol, written from Apache Kafka's
// GroupMetadataManager (classicGroupJoinToClassicGroup, classicGroupJoinExistingMember,
// prepareRebalance, completeClassicGroupJoin, classicGroupSyncToClassicGroup,
// classicGroupHeartbeatToClassicGroup, classicGroupLeaveToClassicGroup,
// expireClassicGroupMemberHeartbeat, expirePendingSync), ClassicGroup.validateOffsetCommit and
// OffsetMetadataManager.commitOffset (apache/kafka 1eb7644, group-coordinator/src/main/java/org/
// apache/kafka/coordinator/group). What it leaves out: static members, protocol selection (every
// member speaks cooperative-sticky), the group's log (appends succeed at once), and the initial
// rebalance delay (group.initial.rebalance.delay.ms, 3 s by default, taken as 0 here so that a
// schedule's group forms quickly: it only delays the first generation).
type simClassic struct {
	w       *simWorld
	clock   *simClock
	state   simGroupState
	prev    simGroupState
	gen     int
	members []*simClassicMember // in the order they joined
	pending []*simPendingMember // KIP-394: given an id by MEMBER_ID_REQUIRED, not yet rejoined with it
	leader  int
	nextID  int
	// joinTimer and syncTimer number the rebalance's join and sync deadlines; a deadline whose
	// number is no longer current was cancelled.
	joinTimer, syncTimer int
	// describeAll says that descriptions show assignments in every state of the group, as Apache
	// Kafka 4.0's coordinator does (ClassicGroupMember.describeNoMetadata sets the member's
	// assignment, which only the next SyncGroup replaces); else only while it is Stable, as 3.x's
	// did (GroupMetadata.summaryNoMetadata).
	describeAll bool
}

type simGroupState uint8

const (
	groupEmpty simGroupState = iota
	groupPreparingRebalance
	groupCompletingRebalance
	groupStable
)

func (s simGroupState) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable"}[s]
}

type simClassicMember struct {
	id                 int
	inst               *simMember
	session, rebalance time.Duration
	join, sync         *simReq // the JoinGroup and SyncGroup held until the rebalance gets that far
	isNew              bool
	owned              simParts // cooperative-sticky metadata of its last JoinGroup
	ownedGen           int
	// assignment is what the group leader's last SyncGroup gave this member
	// (ClassicGroupMember.assignment): set for every member when the leader's SyncGroup completes
	// the rebalance, emptied only when a rebalance begins before that (resetAndPropagateAssignmentWithError).
	assignment  simParts
	hbTimer     int // numbers the session deadline
	pendingSync bool
}

type simPendingMember struct {
	id    int
	timer int
}

func newSimClassic(w *simWorld, clock *simClock) *simClassic {
	return &simClassic{w: w, clock: clock, nextID: 1}
}

func (c *simClassic) member(id int) *simClassicMember {
	for _, m := range c.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

func (c *simClassic) pendingIndex(id int) int {
	for i, p := range c.pending {
		if p.id == id {
			return i
		}
	}
	return -1
}

// rebalanceTimeout is the largest rebalance timeout among the members (ClassicGroup.rebalanceTimeoutMs).
func (c *simClassic) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range c.members {
		d = max(d, m.rebalance)
	}
	return d
}

// allJoined is ClassicGroup.hasAllMembersJoined.
func (c *simClassic) allJoined() bool {
	if len(c.pending) > 0 {
		return false
	}
	for _, m := range c.members {
		if m.join == nil {
			return false
		}
	}
	return true
}

func (c *simClassic) describe() GroupDesc {
	d := GroupDesc{Group: c.w.prof.group}
	for _, m := range c.members {
		gm := GroupMember{ClientID: m.inst.mach.ClientID, MemberID: fmt.Sprintf("m%d", m.id)}
		if c.state == groupStable || c.describeAll {
			for _, p := range m.assignment.list() {
				gm.Parts = append(gm.Parts, TopicPart{Topic: c.w.prof.topic, Partition: p})
			}
		}
		d.Members = append(d.Members, gm)
	}
	return d
}

func (c *simClassic) note(format string, args ...any) {
	if c.w.tracing() {
		c.w.note("coord", "[gen %d %s] %s", c.gen, c.state, fmt.Sprintf(format, args...))
	}
}

func (c *simClassic) serve(r *simReq) {
	switch r.kind {
	case reqJoin:
		c.joinGroup(r)
	case reqSync:
		c.syncGroup(r)
	case reqHeartbeat:
		c.heartbeat(r)
	case reqCommit:
		c.commit(r)
	case reqLeave:
		c.leave(r)
	case reqDescribe:
		r.desc = c.describe()
		r.conn.answer(r)
	default:
		panic("classic coordinator: unexpected " + r.kind.String())
	}
}

func (c *simClassic) reply(r *simReq, err simErr) {
	r.err = err
	r.conn.answer(r)
}

// joinGroup is classicGroupJoinToClassicGroup with its new- and existing-member paths.
func (c *simClassic) joinGroup(r *simReq) {
	if in := r.from; in != nil && in.failJoins > 0 {
		// The adversary's failed JoinGroup: the broker answers an error without touching the
		// group, as a broker whose coordinator is loading or failing does.
		in.failJoins--
		c.note("JoinGroup of %s fails: %s (injected)", in.name, in.failJoinErr)
		c.reply(r, in.failJoinErr)
		return
	}
	if r.member == 0 {
		// classicGroupJoinNewDynamicMember: librdkafka speaks JoinGroup v4+, which needs a known
		// member id, so the member is told one and is pending until it rejoins with it.
		id := c.nextID
		c.nextID++
		p := &simPendingMember{id: id}
		c.pending = append(c.pending, p)
		c.schedulePendingExpiry(p, r.from.prof.session)
		r.ansMember = id
		c.note("JoinGroup of %s: MEMBER_ID_REQUIRED, id m%d", r.from.name, id)
		c.reply(r, errMemberIDRequired)
		return
	}
	if i := c.pendingIndex(r.member); i >= 0 {
		c.pending[i].timer++
		c.pending = append(c.pending[:i], c.pending[i+1:]...)
		m := &simClassicMember{id: r.member, inst: r.from, session: r.from.prof.session, rebalance: r.from.prof.maxPoll,
			join: r, isNew: true, owned: r.owned, ownedGen: r.ownedGen}
		c.members = append(c.members, m)
		// The new-member join timeout (group.classic.new.member.join.timeout, 5 minutes) outlasts
		// every schedule.
		c.scheduleHeartbeat(m, 5*time.Minute)
		c.note("member m%d (%s) added", m.id, r.from.name)
		c.maybePrepareRebalanceOrCompleteJoin(fmt.Sprintf("adding member m%d", m.id))
		return
	}
	m := c.member(r.member)
	if m == nil {
		c.note("JoinGroup of m%d: UNKNOWN_MEMBER_ID", r.member)
		c.reply(r, errUnknownMemberID)
		return
	}
	matches := m.owned == r.owned && m.ownedGen == r.ownedGen
	switch c.state {
	case groupPreparingRebalance:
		c.updateMember(m, r)
		c.maybePrepareRebalanceOrCompleteJoin("")
	case groupCompletingRebalance:
		if matches {
			c.answerJoin(m, r)
		} else {
			c.updateMember(m, r)
			c.maybePrepareRebalanceOrCompleteJoin(fmt.Sprintf("m%d changed its metadata", m.id))
		}
	case groupStable:
		if m.id == c.leader || !matches {
			c.updateMember(m, r)
			c.maybePrepareRebalanceOrCompleteJoin(fmt.Sprintf("m%d rejoins", m.id))
		} else {
			c.answerJoin(m, r)
		}
	default:
		c.reply(r, errUnknownMemberID)
	}
}

func (c *simClassic) updateMember(m *simClassicMember, r *simReq) {
	if m.join != nil && m.join != r {
		// A JoinGroup that replaces one still held: Kafka completes the old future with the new
		// one's answer later; the old connection is the same, so it cannot still be held here.
		m.join.conn.answer(m.join)
	}
	m.join, m.owned, m.ownedGen = r, r.owned, r.ownedGen
}

// answerJoin answers a JoinGroup with the current generation.
func (c *simClassic) answerJoin(m *simClassicMember, r *simReq) {
	r.ansMember, r.ansGen, r.leader = m.id, c.gen, m.id == c.leader
	if r.leader {
		r.members = c.joinedMembers()
	}
	c.reply(r, errNone)
}

func (c *simClassic) joinedMembers() []simJoinedMember {
	out := make([]simJoinedMember, 0, len(c.members))
	for _, m := range c.members {
		out = append(out, simJoinedMember{id: m.id, owned: m.owned, ownedGen: m.ownedGen})
	}
	return out
}

func (c *simClassic) maybePrepareRebalanceOrCompleteJoin(reason string) {
	switch c.state {
	case groupStable, groupCompletingRebalance, groupEmpty:
		c.prepareRebalance(reason)
	default:
		c.maybeCompleteJoinPhase()
	}
}

func (c *simClassic) maybeCompleteJoinPhase() {
	if c.state == groupPreparingRebalance && c.prev != groupEmpty && c.allJoined() {
		c.completeJoin()
	}
}

// prepareRebalance starts a rebalance: the members learn of it from their next heartbeat
// (REBALANCE_IN_PROGRESS) and have the rebalance timeout to rejoin.
func (c *simClassic) prepareRebalance(reason string) {
	if c.state == groupCompletingRebalance {
		// resetAndPropagateAssignmentWithError
		for _, m := range c.members {
			m.assignment = 0
		}
		for _, m := range c.members {
			if m.sync != nil {
				s := m.sync
				m.sync = nil
				c.scheduleHeartbeat(m, m.session)
				c.reply(s, errRebalanceInProgress)
			}
		}
	}
	for _, m := range c.members {
		m.pendingSync = false
	}
	c.syncTimer++
	initial := c.state == groupEmpty
	c.prev, c.state = c.state, groupPreparingRebalance
	c.note("rebalance starts: %s", reason)
	c.w.adv.rebalanceStarted()
	c.joinTimer++
	timer := c.joinTimer
	if initial {
		c.w.at(c.clock.afterLocal(0), func() {
			if timer == c.joinTimer {
				c.completeJoin()
			}
		})
		return
	}
	if c.allJoined() {
		c.completeJoin()
		return
	}
	c.w.at(c.clock.afterLocal(c.rebalanceTimeout()), func() {
		if timer == c.joinTimer {
			c.note("rebalance timeout")
			c.completeJoin()
		}
	})
}

// completeJoin ends the join phase: members that have not rejoined are removed, the generation
// is bumped and every held JoinGroup is answered.
func (c *simClassic) completeJoin() {
	c.joinTimer++
	kept := c.members[:0]
	for _, m := range c.members {
		if m.join == nil {
			m.hbTimer++
			c.note("m%d (%s) removed: it did not rejoin", m.id, m.inst.name)
			continue
		}
		kept = append(kept, m)
	}
	clear(c.members[len(kept):])
	c.members = kept
	c.gen++
	if len(c.members) == 0 {
		c.prev, c.state = c.state, groupEmpty
		c.leader = 0
		c.note("generation %d is empty", c.gen)
		return
	}
	if c.member(c.leader) == nil {
		c.leader = c.members[0].id
	}
	c.prev, c.state = c.state, groupCompletingRebalance
	if c.w.tracing() {
		ids := ""
		for _, m := range c.members {
			ids += fmt.Sprintf(" m%d", m.id)
		}
		c.note("generation %d formed: members%s, leader m%d", c.gen, ids, c.leader)
	}
	for _, m := range c.members {
		r := m.join
		m.join = nil
		c.scheduleHeartbeat(m, m.session)
		m.isNew = false
		m.pendingSync = true
		c.answerJoin(m, r)
	}
	c.syncTimer++
	timer, gen := c.syncTimer, c.gen
	c.w.at(c.clock.afterLocal(c.rebalanceTimeout()), func() {
		if timer == c.syncTimer {
			c.expirePendingSync(gen)
		}
	})
}

func (c *simClassic) expirePendingSync(gen int) {
	if gen != c.gen || (c.state != groupCompletingRebalance && c.state != groupStable) {
		return
	}
	var gone []int
	kept := c.members[:0]
	for _, m := range c.members {
		if m.pendingSync {
			m.hbTimer++
			gone = append(gone, m.id)
			continue
		}
		kept = append(kept, m)
	}
	clear(c.members[len(kept):])
	c.members = kept
	if len(gone) > 0 {
		c.prepareRebalance(fmt.Sprintf("removing %v on pending sync expiration", gone))
	}
}

// syncGroup is classicGroupSyncToClassicGroup; the group leader's assignment is stored at once.
func (c *simClassic) syncGroup(r *simReq) {
	if len(c.members) == 0 {
		c.reply(r, errUnknownMemberID)
		return
	}
	m := c.member(r.member)
	switch {
	case m == nil:
		c.reply(r, errUnknownMemberID)
		return
	case r.gen != c.gen:
		c.reply(r, errIllegalGeneration)
		return
	}
	switch c.state {
	case groupPreparingRebalance:
		c.reply(r, errRebalanceInProgress)
	case groupCompletingRebalance:
		m.sync = r
		m.pendingSync = false
		if m.id != c.leader {
			return
		}
		// setAndPropagateAssignment: the leader's assignment, empty for a member it does not
		// name.
		for _, x := range c.members {
			x.assignment = 0
			for i, j := range r.members {
				if j.id == x.id {
					x.assignment = r.assignment[i]
				}
			}
		}
		c.prev, c.state = c.state, groupStable
		if c.w.tracing() {
			a := ""
			for _, x := range c.members {
				a += fmt.Sprintf(" m%d:%s", x.id, x.assignment)
			}
			c.note("assignment of m%d:%s", m.id, a)
		}
		for _, x := range c.members {
			if s := x.sync; s != nil {
				x.sync = nil
				s.assigned = x.assignment
				c.scheduleHeartbeat(x, x.session)
				c.reply(s, errNone)
			}
		}
	case groupStable:
		m.pendingSync = false
		r.assigned = m.assignment
		c.reply(r, errNone)
	}
}

// heartbeat is classicGroupHeartbeatToClassicGroup.
func (c *simClassic) heartbeat(r *simReq) {
	m := c.member(r.member)
	switch {
	case m == nil:
		c.reply(r, errUnknownMemberID)
	case r.gen != c.gen:
		c.reply(r, errIllegalGeneration)
	case c.state == groupEmpty:
		c.reply(r, errUnknownMemberID)
	case c.state == groupPreparingRebalance:
		c.scheduleHeartbeat(m, m.session)
		c.reply(r, errRebalanceInProgress)
	default:
		c.scheduleHeartbeat(m, m.session)
		c.reply(r, errNone)
	}
}

// commit is ClassicGroup.validateOffsetCommit and OffsetMetadataManager.commitOffset: accepted at
// the current generation in Stable and PreparingRebalance, where it also keeps the member's session.
func (c *simClassic) commit(r *simReq) {
	m := c.member(r.member)
	err := errNone
	switch {
	case r.gen < 0 && c.state == groupEmpty:
	case r.gen >= 0 || r.member != 0:
		switch {
		case m == nil:
			err = errUnknownMemberID
		case r.gen != c.gen:
			err = errIllegalGeneration
		case c.state == groupCompletingRebalance:
			err = errRebalanceInProgress
		}
	case c.state != groupEmpty:
		err = errUnknownMemberID
	}
	if err == errNone && m != nil && (c.state == groupStable || c.state == groupPreparingRebalance) {
		c.scheduleHeartbeat(m, m.session)
	}
	if c.w.tracing() {
		kind := "explicit"
		if r.auto {
			kind = "auto"
		}
		if err == errNone {
			c.note("accepts %s commit of %s from m%d (%s, gen %d)", kind, fmtOffsets(r.offsets), r.member, r.from.name, r.gen)
		} else {
			c.note("refuses %s commit of %s from m%d (%s, gen %d): %s", kind, fmtOffsets(r.offsets), r.member, r.from.name, r.gen, err)
		}
	}
	if err == errNone {
		r.acceptedAt = c.w.now
		c.w.adv.commitAccepted(r.from)
	}
	c.reply(r, err)
}

// leave is classicGroupLeaveToClassicGroup.
func (c *simClassic) leave(r *simReq) {
	if i := c.pendingIndex(r.member); i >= 0 {
		c.pending[i].timer++
		c.pending = append(c.pending[:i], c.pending[i+1:]...)
		c.reply(r, errNone)
		c.maybeCompleteJoinPhase()
		return
	}
	m := c.member(r.member)
	if m == nil {
		c.reply(r, errUnknownMemberID)
		return
	}
	c.note("m%d (%s) leaves", m.id, m.inst.name)
	c.remove(m)
	c.reply(r, errNone)
	switch c.state {
	case groupStable, groupCompletingRebalance:
		c.maybePrepareRebalanceOrCompleteJoin(fmt.Sprintf("m%d left", m.id))
	case groupPreparingRebalance:
		c.maybeCompleteJoinPhase()
	}
}

// remove takes m out of the group, answering what it has held.
func (c *simClassic) remove(m *simClassicMember) {
	m.hbTimer++
	if j := m.join; j != nil {
		m.join = nil
		c.reply(j, errUnknownMemberID)
	}
	if s := m.sync; s != nil {
		m.sync = nil
		c.reply(s, errUnknownMemberID)
	}
	for i, x := range c.members {
		if x == m {
			c.members = append(c.members[:i], c.members[i+1:]...)
			break
		}
	}
}

// scheduleHeartbeat (re)starts m's session: rescheduleClassicGroupMemberHeartbeat.
func (c *simClassic) scheduleHeartbeat(m *simClassicMember, d time.Duration) {
	m.hbTimer++
	timer := m.hbTimer
	c.w.at(c.clock.afterLocal(d), func() {
		if timer == m.hbTimer {
			c.expireHeartbeat(m)
		}
	})
}

// expireHeartbeat is expireClassicGroupMemberHeartbeat: a member whose session ran out is removed
// unless it waits in a JoinGroup or SyncGroup (hasSatisfiedHeartbeat).
func (c *simClassic) expireHeartbeat(m *simClassicMember) {
	if c.member(m.id) != m {
		return
	}
	if !m.isNew && (m.join != nil || m.sync != nil) {
		return
	}
	c.note("session of m%d (%s) expired: removed", m.id, m.inst.name)
	c.remove(m)
	switch c.state {
	case groupStable, groupCompletingRebalance:
		c.maybePrepareRebalanceOrCompleteJoin(fmt.Sprintf("m%d's session expired", m.id))
	case groupPreparingRebalance:
		if c.allJoined() {
			c.completeJoin()
		}
	}
}

func (c *simClassic) schedulePendingExpiry(p *simPendingMember, d time.Duration) {
	p.timer++
	timer := p.timer
	c.w.at(c.clock.afterLocal(d), func() {
		i := c.pendingIndex(p.id)
		if i < 0 || c.pending[i] != p || timer != p.timer {
			return
		}
		c.pending = append(c.pending[:i], c.pending[i+1:]...)
		if c.state == groupPreparingRebalance && c.allJoined() {
			c.completeJoin()
		}
	})
}
