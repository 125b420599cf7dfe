package core

import (
	"fmt"
	"slices"
	"time"
)

// groupState is what the machine knows of its membership of the group.
type groupState struct {
	Parts      map[int32]bool // partitions of the leader topic the group has assigned to this member
	Rebalances int            // rebalance callbacks so far
	// owedCommit is set when a revocation took partitions with stored offsets, which librdkafka
	// commits once more, until that commit's result has been polled.
	OwedCommit bool
	// member says whether this membership of the group passed a group check (internal/driver, groupcheck.go).
	member Membership
}

// consumerRenewals are the replacements of a consumer that read nothing back (renewConsumer).
type consumerRenewals struct {
	last  time.Duration // when the consumer was last replaced
	count int
}

// release is a tenure that gave its partition up while the barrier still had its LeaderRevoked:
// once the barrier has returned from it (done), the released marker is written.
type Release struct {
	Role   *Role
	Marker Heartbeat
	Done   *Delivery
	Fresh  bool // made by Close: its releasing marker has not been written yet
}

// releaseWait is what ending tenures leaves the caller to wait for before it lets their partitions
// go (endTenures): the releasing markers of pending to be written (markers), or else the barrier to
// return from each one's LeaderRevoked, up to the rebalance timeout.
type ReleaseWait struct {
	Pending []Release
	Markers bool
	Limit   time.Duration
}

// releaseLookback is how many records before the end of a partition a new tenure starts reading,
// so that it sees a predecessor's release marker (lease.foreign). Only the partition's owner
// writes; a revoked owner writes nothing after its marker but the released one, and a tenure that
// waits on a marker writes one heartbeat until the wait is over, so the marker stays in reach
// through a chain of fifteen successors that came and went while it waited.
const ReleaseLookback = 16

// batchTailsFrom is the least number of partitions taken at once whose starts goneli reads itself.
// librdkafka resolves a logical offset such as OffsetTail with one ListOffsets request per
// partition, and a broker answers a connection's requests one at a time: an
// instance with a thousand roles that joins again sends a thousand of them, and on a broker that
// answers in a second they take it minutes. One partition costs librdkafka one request as it does
// goneli, and librdkafka's is not waited for in the rebalance callback, so a lone role keeps it.
const batchTailsFrom = 2

// offsetTail is librdkafka's logical offset for n records before the end of a partition
// (RD_KAFKA_OFFSET_TAIL, kafka.OffsetTail).
func offsetTail(n int64) int64 {
	return -2000 - n
}

// # An assignment
//
// The rebalance callback takes an assignment in three calls: assign, which says whose ends to read
// first (none, or a wait the callback makes for them); takeAt, which says where each tenure starts
// reading; taken, once librdkafka has the assignment. A revocation is revoke, then whatever it
// leaves to wait for, then the partitions given back.

// assign begins the assignment of partitions of the leader topic to this instance under member
// (empty if unknown), and returns those whose ends the callback should read before it takes them
// (startFrom), if any; take is false once Close has begun, when confluent-kafka-go applies the
// assignment itself and no tenure begins. canRead says whether goneli's own connection can read
// them.
func (m *Machine) Assign(partitions []int32, member string, cooperative, canRead bool) (readEnds []int32, take bool) {
	m.Group.Rebalances++
	if !cooperative {
		clear(m.Group.Parts)
	}
	for _, id := range partitions {
		m.Group.Parts[id] = true
	}
	m.Group.member.Assigned(member, len(m.Group.Parts) > 0)
	if !m.fx.Live() {
		return nil, false
	}
	m.assignment = m.assignment[:0]
	for _, id := range partitions {
		if m.partition(id) != nil {
			m.assignment = append(m.assignment, id)
		}
	}
	if len(m.assignment) < batchTailsFrom || !canRead || m.leadsAny() {
		return nil, true
	}
	return slices.Clone(m.assignment), true
}

// takeAt says where each tenure of the assignment starts reading: releaseLookback records before
// the end of its partition, so that it sees a predecessor's release marker (lease.foreign). ends
// are the ends the callback read (nil if none); a partition it could not read starts at
// OffsetTail, which librdkafka resolves.
//
// The end read comes before the fetch starts, so the start lies at or before the one librdkafka
// would resolve: the tenure reads the same records or a few more, never fewer. A start before the
// log's first offset, or past the end of a log that restarted since, is out of range and reset
// (auto.offset.reset, earliest by default), as OffsetTail's would be. Starting relative to the end,
// rather than from the group's committed offset, also keeps librdkafka from learning a committed
// offset that lies beyond the end of a log that restarted (a broker that lost its data, an unclean
// leader election): it auto-commits only offsets above the one it knows, so no heartbeat could be
// confirmed until the log grew past it.
func (m *Machine) TakeAt(ends map[int32]int64) []OffsetRef {
	out := make([]OffsetRef, len(m.assignment))
	for i, id := range m.assignment {
		if end, ok := ends[id]; ok {
			out[i] = OffsetRef{Partition: id, Offset: max(end-ReleaseLookback, 0)}
		} else {
			out[i] = OffsetRef{Partition: id, Offset: offsetTail(ReleaseLookback)}
		}
	}
	return out
}

// taken says that librdkafka has the assignment (err nil), and begins its tenures.
func (m *Machine) Taken(err error) {
	if err != nil {
		m.fx.Note(LevelError, "assign", "goneli %s: cannot take assignment: %v", m.name, err)
		return
	}
	// Judged once the assignment is taken, not when the callback began: librdkafka counts
	// itself steady from the Take on, so whatever came between (the wait for the ends in
	// startFrom, a stall of the process) is time in which a further rebalance may have begun
	// unheeded, and must count.
	m.heldAssignment()
	for _, id := range m.assignment {
		m.beginTenure(m.roles[id])
	}
}

// heldAssignment makes the leases hold their renewals back after an assignment that was taken
// late, more than the answer bound after goneli last found its queue empty (a loop paused or
// starved of CPU, or the rebalance callback's own wait for the ends of the partitions); or after
// librdkafka had committed nothing for that long, which shows it was rejoining all along, and may
// have had the assignment's answer late (a held connection) as well: a tenure's oldest offset still
// waiting for its commit was stored more than the answer bound ago. It is called once the
// assignment has been taken, so that every moment before that counts.
//
// librdkafka waits for the application to take a new assignment before its group is steady again,
// and while it waits it ignores what its group heartbeats say of a further rebalance
// (rd_kafka_cgrp_handle_Heartbeat: REBALANCE_IN_PROGRESS is dropped in the wait-assign-call state).
// Once the assignment is taken it counts as steady and auto-commits, although the coordinator may
// have begun that further rebalance any time since the assignment was made, and its commits, of the
// current generation, are accepted until then; it learns of the rebalance only from its next group
// heartbeat. So the anchor of the window, and the automatic commits' own renewals, rest on nothing
// until a group heartbeat interval (and an answer's bound) after the assignment was taken: the
// leases hold back the renewals of heartbeats sent from the poll before until then, and an offset
// stored meanwhile anchors nothing, whenever its heartbeat was sent (lease.committed: a heartbeat
// slow to come back is stored late). Without the first, the simulation found two leaders at a 500
// ms lease; judged before the wait for the ends, a review found two leaders for 175-286 ms at the
// default lease with four roles (issue 46).
func (m *Machine) heldAssignment() {
	now := m.now()
	bound := m.timing.AnswerBound(m.config)
	for _, p := range m.roles {
		from := m.drainedAt
		if stored, ok := p.Lease.oldestPending(); ok && stored < from {
			from = stored
		}
		if now-from > bound {
			p.Lease.holdRenewals(from, now+bound)
		}
	}
}

// beginTenure starts p's tenure.
func (m *Machine) beginTenure(p *Role) {
	if p.Lease.active() {
		return
	}
	p.member = m.Group.member.member
	// Under KIP-848 every tenure is checked, whatever its membership passed: the check reads the
	// broker's session for the group again (driver.checkSessionAgain).
	m.apply(p, p.Lease.Assign(m.Group.member.Vouched && m.timing.Classic))
	_, name := p.Lease.Tenure()
	m.fx.Note(levelDebug, "", "goneli %s: assigned partition %d (tenure %s)", m.name, p.ID, name)
}

// revoke takes partitions of the leader topic from this instance (lost: the group moved on
// without it), and returns what the callback must wait for before it gives them back (nil for
// nothing) and those it gives back; give is false once Close has begun, when confluent-kafka-go
// applies the change itself.
func (m *Machine) Revoke(partitions []int32, lost, cooperative bool) (wait *ReleaseWait, back []int32, give bool) {
	m.Group.Rebalances++
	for _, p := range m.roles {
		if m.Group.Parts[p.ID] && (!cooperative || slices.Contains(partitions, p.ID)) {
			// What is stored is withdrawn, so that the revocation commits nothing: the commit
			// would renew no tenure, and the unassign (and a LeaveGroup after it) would wait
			// for its answer.
			m.withdraw(p)
			m.Group.OwedCommit = m.Group.OwedCommit || (m.Gate.holds(p.ID) && !lost)
		}
	}
	if !cooperative {
		clear(m.Group.Parts)
	}
	for _, id := range partitions {
		delete(m.Group.Parts, id)
	}
	m.Group.member.Revoked(lost, cooperative, len(m.Group.Parts) > 0)
	if lost {
		m.Trouble()
	}
	if !m.fx.Live() {
		return nil, nil, false
	}
	var ending []*Role
	for _, id := range partitions {
		if p := m.partition(id); p != nil {
			ending = append(ending, p)
			back = append(back, id)
		}
	}
	return m.endTenures(ending, lost, true), back, true
}

// endTenures ends the tenures of parts. Unless the assignment was lost, a successor must not lead
// before the barrier has returned from LeaderRevoked (or the rebalance timeout has passed). Holding
// the revocation back until then would hold up the whole group, and with it the renewals of every
// other role, so instead each tenure whose LeaderRevoked is still on its way writes a releasing
// marker to its partition, which the successor waits on (lease.foreign), and a released marker
// once the barrier has returned (finishReleases). Only if the markers cannot be written in time is
// the revocation held back, as a rebalance would be, for up to the rebalance timeout; it ends
// early if Close begins, since Close may be waiting for it. The caller makes those waits
// (releaseWait) before it lets the partitions go.
//
// markers is false for a hand-over (handover.go): the instance leaves the group because it cannot
// renew, and its markers would most likely be as late as its heartbeats, so the revocation is held
// back at once rather than after the markers' wait. That holds up nothing else, as the instance
// is leaving the group with every role.
func (m *Machine) endTenures(roles []*Role, lost, markers bool) *ReleaseWait {
	var pending []Release
	for _, p := range roles {
		out := p.Lease.Revoke(lost)
		if out.release != nil {
			out.release.To = m.Tagging
		}
		dl := m.apply(p, out)
		if out.release != nil && dl != nil {
			pending = append(pending, Release{Role: p, Marker: *out.release, Done: dl})
		}
	}
	if len(pending) == 0 {
		return nil
	}
	if markers {
		// Released markers follow either way: a releasing marker that reaches the broker late
		// must not leave a successor waiting for the rebalance timeout.
		m.Releases = append(m.Releases, pending...)
	}
	return &ReleaseWait{Pending: pending, Markers: markers, Limit: m.timing.MaxPoll}
}

// finishReleases writes the released marker of every release whose barrier call has returned.
func (m *Machine) FinishReleases() {
	kept := m.Releases[:0]
	for _, r := range m.Releases {
		if r.Done.delivered() {
			r.Marker.Kind = KindReleased
			r.Marker.Seq++
			r.Marker.SentWall, r.Marker.SentMono = m.Clock.Now().UnixNano(), m.now()
			m.fx.WriteMarker(r.Role, &r.Marker)
			continue
		}
		kept = append(kept, r)
	}
	clear(m.Releases[len(kept):])
	m.Releases = kept
}

// endAll ends every tenure for Close, and returns every release whose released marker is still to
// be written, those just made first (fresh: their releasing marker is not written yet). What is
// stored is withdrawn first, so that leaving the group commits nothing.
func (m *Machine) EndAll() []Release {
	clear(m.storeAsks)
	m.Gate.withdrawAll()
	for _, p := range m.roles {
		out := p.Lease.Revoke(false)
		if dl := m.apply(p, out); dl != nil && out.release != nil {
			m.Releases = append(m.Releases, Release{Role: p, Marker: *out.release, Done: dl, Fresh: true})
		}
	}
	rs := m.Releases
	m.Releases = nil
	return rs
}

// # The group check

// groupDesc is a description of the group, as far as the group check reads it.
type GroupDesc struct {
	Group   string
	Members []GroupMember
}

// groupMember is a member of a described group: its client.id, member id and host, and the
// partitions it is assigned or is to be (a KIP-848 target assignment), with their topics where the
// description names them.
type GroupMember struct {
	ClientID, MemberID, Host string
	Parts                    []TopicPart
}

// topicPart is a partition of a topic; topic is empty where a description names only topic ids.
type TopicPart struct {
	Topic     string
	Partition int32
}

// startGroupCheck describes the group, off the pulsing goroutine, for every part whose lease has
// asked for a check; checked takes the result in a later cycle. One description is under way at a
// time and serves every part that asked before it began.
//
// While a client has just seen a broker connection fail, the check waits for a quiet checkQuiet
// (internal/driver, groupcheck.go), though never longer than checkQuietMax: a description sent as the
// coordinator's connection drops can abort the process.
func (m *Machine) StartGroupCheck() {
	if m.Check.busy || !slices.ContainsFunc(m.roles, func(p *Role) bool { return p.wantCheck }) {
		return
	}
	now := m.now()
	if now < m.Check.retryAt {
		// An inconclusive check waits its back-off (backOffInconclusive).
		return
	}
	if m.Check.Troubled && now-m.Check.TroubleAt < CheckQuiet {
		if !m.Check.deferring {
			m.Check.deferring, m.Check.deferSince = true, now
		}
		if now-m.Check.deferSince < checkQuietMax {
			return
		}
		m.fx.Note(LevelWarn, "check-unquiet", "goneli %s: broker connections have kept failing for %v; checking the group regardless",
			m.name, checkQuietMax)
	}
	m.Check.deferring = false
	m.Check.Count.Add(1)
	tenures := map[int32]uint64{}
	for _, p := range m.roles {
		if p.wantCheck {
			p.wantCheck = false
			tenures[p.ID], _ = p.Lease.Tenure()
		}
	}
	if err := m.fx.Describe(tenures); err != nil {
		m.fx.Note(LevelWarn, "check", "goneli %s: cannot check the group's members: %v", m.name, err)
		for _, id := range sortedKeys(tenures) {
			p := m.roles[id]
			m.apply(p, p.Lease.Checked(tenures[id], GroupCheck{err: err}))
		}
		return
	}
	m.Check.busy = true
}

// checked takes a group check's answer for tenures: the description, or why there is none (err;
// fallback says that goneli's own connection gave way to librdkafka, which says nothing of the
// brokers' connections), and sessionErr if the session the check read is too short for the lease.
func (m *Machine) Checked(tenures map[int32]uint64, desc GroupDesc, err error, fallback bool, sessionErr error) {
	m.Check.busy = false
	m.Check.Alone = err != nil
	if err != nil && !fallback {
		m.Trouble()
	}
	switch {
	case err != nil:
		m.fx.Note(LevelWarn, "check", "goneli %s: cannot describe group %s to check its members (%v); not leading until it can",
			m.name, desc.Group, err)
	default:
		if conflict := JudgeGroup(desc, m.topic, m.ClientID, "", 0).Conflict; conflict != nil {
			m.fx.Note(LevelError, "conflict", "goneli %s: not leading: %v", m.name, conflict)
		}
	}
	inconclusive := false
	defer func() { m.backOffInconclusive(inconclusive) }()
	for _, id := range sortedKeys(tenures) {
		p := m.roles[id]
		c := GroupCheck{err: err}
		if err == nil {
			c.Verdict = JudgeGroup(desc, m.topic, m.ClientID, p.member, id)
			inconclusive = inconclusive || c.Verdict.Conflict == nil && !c.Verdict.SawSelf
		}
		if sessionErr != nil {
			c.err = sessionErr
		}
		m.apply(p, p.Lease.Checked(tenures[id], c))
		if p.Lease.cleared(tenures[id]) {
			m.Group.member.Passed(p.member)
		}
	}
}

// backOffInconclusive spaces the checks that cannot see this instance's assignment. The lease asks
// again inconclusiveCheckRetry after each, which under the classic protocol, whose coordinator
// describes no assignment while the group rebalances (GroupMetadataManager.describeGroups gives
// members without metadata outside Stable), made about fifty descriptions a second per waiting
// instance for as long as a rebalance lasted (issue 46). The members rejoin at their next group
// heartbeats, so looking more often than once a group heartbeat interval learns nothing sooner: the
// pause doubles from inconclusiveCheckRetry up to that interval (and a tenth of the lease), which is
// all it can delay a tenure by. A conclusive check, or a failed one, which the lease spaces itself,
// ends it.
func (m *Machine) backOffInconclusive(inconclusive bool) {
	if !inconclusive {
		m.Check.inconclusive, m.Check.retryAt = 0, 0
		return
	}
	limit := min(m.timing.Heartbeat(), m.config.Lease/10)
	pause := min(inconclusiveCheckRetry<<min(m.Check.inconclusive, 16), limit)
	m.Check.inconclusive++
	m.Check.retryAt = m.now() + pause
}

// trouble marks now as a moment when the brokers' connections were unsettled (startGroupCheck).
func (m *Machine) Trouble() {
	m.Check.Troubled, m.Check.TroubleAt = true, m.now()
}

// sortedKeys returns the keys of a map by partition, in order: the machine walks maps so, as the
// simulation replays a schedule only if every choice is the same each time.
func sortedKeys[V any](m map[int32]V) []int32 {
	keys := make([]int32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// # A consumer that reads nothing back
//
// The consumer keeps the same stale leader epoch for the partitions it fetches (librdkafka #4898
// covers the producer; the consumer's fetcher behaves alike): after the topic is recreated its
// fetches go to the old broker, are answered NOT_LEADER_OR_FOLLOWER, and the metadata that would
// redirect them is ignored. The heartbeats then reach the log but are never read back, and the
// tenure can never renew. A consumer that has read back no own heartbeat of a tenure for two
// leases while the producer still delivers is therefore replaced: the instance leaves the group,
// as for a yield, and joins it again through a new handle. Its partitions go to others meanwhile,
// whose own handles may be as stale and are replaced in their turn.

// consumerRenewBackoff is the least time between two replacements of an instance's consumer.
func (m *Machine) consumerRenewBackoff() time.Duration {
	return 4 * m.config.Lease
}

// stuckConsumer returns why the consumer should be replaced, if a tenure reads nothing back
// although the producer delivers (delivering: it delivered a heartbeat within the last lease).
func (m *Machine) StuckConsumer(delivering bool) (string, bool) {
	lease := m.config.Lease
	if !m.mayRenewConsumer(m.now(), delivering) {
		return "", false
	}
	for _, p := range m.roles {
		if unread := p.Lease.unread(); unread > 2*lease {
			return fmt.Sprintf("partition %d has read back no own heartbeat for %v while the producer delivers them",
				p.ID, unread.Round(time.Millisecond)), true
		}
	}
	return "", false
}

// mayRenewConsumer reports whether the consumer would be replaced now, were a tenure to read
// nothing back: the producer delivers, and no replacement was made too recently.
func (m *Machine) mayRenewConsumer(now time.Duration, delivering bool) bool {
	return m.fx.Live() && !m.Yield.Unsubscribed && delivering &&
		!(m.renewals.count > 0 && now-m.renewals.last < m.consumerRenewBackoff())
}

// consumerSuspect reports whether p's trouble is for the consumer's replacement rather than a
// hand-over: p has read back none of its heartbeats for a lease although the producer delivers
// them, so the consumer itself is suspect, and leaving the group on the same handle would not mend
// it.
func (m *Machine) consumerSuspect(p *Role, now time.Duration, delivering bool) bool {
	return m.mayRenewConsumer(now, delivering) && p.Lease.unread() > m.config.Lease
}

// replacingConsumer ends every tenure before the consumer is replaced (driver.renewConsumer), and
// returns what to wait for before it leaves the group.
func (m *Machine) ReplacingConsumer() *ReleaseWait {
	m.renewals.last = m.now()
	m.renewals.count++
	w := m.endTenures(m.roles, false, true)
	m.Group.member.Left()
	// Nothing the old consumer holds is to be committed any more, and nothing is stored on it
	// from now on.
	m.Gate.withdrawAll()
	m.Gate.Close()
	return w
}

// consumerReplaced starts afresh with the new consumer, whose StoreOffsets st is.
func (m *Machine) ConsumerReplaced(st Storer) {
	m.NewGate(st)
	m.CommitsHeld, m.resetting = false, false
	m.explicit.busy = false
	clear(m.Group.Parts)
	clear(m.commitAsks)
	clear(m.resets)
	clear(m.storeAsks)
	m.Group.OwedCommit = false
}
