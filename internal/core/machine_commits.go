package core

import (
	"slices"
	"time"
)

// commitAsk is an offset a lease asked to have committed, stored or explicitly: the offset and its
// metadata (confirmed.tag).
type commitAsk struct {
	offset int64
	tag    string
}

// commitAnswer is a commit's answer as the machine needs it: each partition's offset, metadata and
// outcome, or, if the whole commit failed, why (err and outcome).
type CommitAnswer struct {
	Offsets []Committed
	Err     error
	Outcome CommitOutcome
}

// committed is one partition of a commit's answer.
type Committed struct {
	OffsetRef
	Err     error
	Outcome CommitOutcome
}

// commitOutcome sorts a commit's error by what it means for the lease.
type CommitOutcome uint8

const (
	CommitOK CommitOutcome = iota
	// commitNoOffset: nothing new was committed (NO_OFFSET).
	CommitNoOffset
	// commitGone: the member is gone from the group (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
	// FENCED_MEMBER_EPOCH).
	CommitGone
	// commitGeneration: the member's generation is over (ILLEGAL_GENERATION).
	CommitGeneration
	// commitNotAccepted: any other error of Kafka's (REBALANCE_IN_PROGRESS, KIP-848's
	// STALE_MEMBER_EPOCH, which says the member is still in the group at a newer epoch, ...):
	// the commit renews nothing.
	CommitNotAccepted
	// commitFailed: the commit failed before Kafka answered (a client error).
	CommitFailed
)

// offsetsOf returns the offsets an answer names.
func (a CommitAnswer) offsetsOf() []OffsetRef {
	out := make([]OffsetRef, len(a.Offsets))
	for i, c := range a.Offsets {
		out[i] = c.OffsetRef
	}
	return out
}

// autoCommitted takes an answer to one of librdkafka's automatic commits (an OffsetsCommitted
// event): the gate learns that its commit was answered, each lease what was committed, and an
// accepted one ends a hold on explicit commits.
func (m *Machine) AutoCommitted(a CommitAnswer) {
	m.Group.OwedCommit = false
	m.Gate.answer(a.offsetsOf(), m.drainedAt)
	m.onCommit(a, false)
	if !m.CommitsHeld || a.Err != nil || slices.ContainsFunc(m.roles, func(p *Role) bool { return p.Lease.holding() }) {
		// An answer seen while the leases count the connection as holding answers back may be
		// one of those held: it shows librdkafka steady again only once that is over.
		return
	}
	for _, c := range a.Offsets {
		if c.Err == nil && c.Offset >= 0 && m.partition(c.Partition) != nil {
			m.CommitsHeld = false
			return
		}
	}
}

// withdraw takes back the offset stored for p, if any, so that librdkafka's auto-commit does not
// send it and the partition's revocation commits nothing (lease.quiesce, a revocation), and drops
// one waiting to be stored: librdkafka commits only a stored offset above the one it committed
// last, and on revocation only a stored offset that is not a logical one (librdkafka 2.11.1,
// rd_kafka_assignment_serve_removals).
func (m *Machine) withdraw(p *Role) {
	delete(m.storeAsks, p.ID)
	m.Gate.withdraw(p.ID)
}

func (m *Machine) onCommit(a CommitAnswer, explicit bool) {
	if a.Err != nil {
		// The whole commit failed: it carried every partition's offset.
		for _, p := range m.roles {
			m.onCommitError(p, a.Err, a.Outcome)
		}
		return
	}
	for _, c := range a.Offsets {
		p := m.partition(c.Partition)
		if p == nil {
			continue
		}
		if c.Err != nil {
			m.onCommitError(p, c.Err, c.Outcome)
			continue
		}
		m.apply(p, p.Lease.Committed(c.Offset, c.Tag, explicit))
	}
}

func (m *Machine) onCommitError(p *Role, err error, outcome CommitOutcome) {
	switch outcome {
	case CommitNoOffset:
	case CommitGone, CommitGeneration:
		m.apply(p, p.Lease.rejected(err.Error()))
	case CommitFailed:
		m.fx.Note(LevelWarn, "commit", "goneli %s: heartbeat offset commit failed: %v", m.name, err)
	default:
		// Includes REBALANCE_IN_PROGRESS, and KIP-848's STALE_MEMBER_EPOCH, which says the member
		// is still in the group at a newer epoch: the lease simply goes unrenewed by this commit.
		m.fx.Note(levelDebug, "commit:"+err.Error(), "goneli %s: heartbeat offset commit not accepted: %v", m.name, err)
	}
}

// startCommits starts what the leases asked for in this cycle, as long as the consumer has no
// commit in flight (commitgate.go): the explicit commits as one request, unless explicit commits
// are held (holdCommits), or else the offsets to store for librdkafka's auto-commit. Explicit
// commits go first: a lease asks for one only when an offset it stored has waited for its
// automatic commit for the stall (lease.stalled). An explicit commit that cannot start now is
// dropped, and its lease asks again after the stall; an offset to store waits for the gate.
func (m *Machine) StartCommits() {
	now := m.now()
	busy, presumed := m.Gate.busy(now)
	for _, s := range presumed {
		// Presumed never committed (its tick fell after the withdrawal, or librdkafka was
		// rejoining): the newest offset each of its partitions waits for is stored again.
		for _, o := range s.stored {
			if p := m.partition(o.Partition); p != nil {
				if _, asked := m.storeAsks[p.ID]; !asked {
					if ask, ok := p.Lease.newestPending(); ok {
						m.storeAsks[p.ID] = ask
					}
				}
			}
		}
	}
	busy = busy || m.explicit.busy
	if len(m.commitAsks) > 0 {
		if m.explicit.busy && now-m.explicit.sentAt > m.timing.Heartbeat() {
			m.holdCommits(now - m.explicit.sentAt)
		}
		if !busy {
			// While explicit commits are held, only those that reset librdkafka's committed offset
			// below a restarted log go out, and their answers renew nothing (explicitAnswered):
			// librdkafka auto-commits only offsets above the one it committed last, so without
			// them no automatic commit could ever be accepted again to end the hold.
			offsets := make([]OffsetRef, 0, len(m.commitAsks))
			for id, ask := range m.commitAsks {
				if !m.CommitsHeld || m.resets[id] {
					offsets = append(offsets, OffsetRef{Partition: id, Offset: ask.offset, Tag: ask.tag})
				}
			}
			if len(offsets) > 0 {
				slices.SortFunc(offsets, func(a, b OffsetRef) int { return int(a.Partition - b.Partition) })
				busy, m.resetting = true, m.CommitsHeld
				m.explicit.busy, m.explicit.sentAt = true, now
				m.fx.Commit(offsets)
				// An offset sent in an explicit commit has been handed to librdkafka: its answer's
				// lateness counts from now (lease.storedAt, heldAnswers).
				for _, o := range offsets {
					m.roles[o.Partition].Lease.StoredAt(o.Offset, now)
				}
				m.fx.Note(levelDebug, "explicit commit", "goneli %s: committing heartbeat offsets %v explicitly", m.name, offsets)
			}
		}
		clear(m.commitAsks)
		clear(m.resets)
	}
	if busy || len(m.storeAsks) == 0 {
		return
	}
	offsets := make([]OffsetRef, 0, len(m.storeAsks))
	var hint time.Duration
	for id, ask := range m.storeAsks {
		p := m.roles[id]
		if !p.Lease.storable(ask.offset) {
			continue
		}
		offsets = append(offsets, OffsetRef{Partition: id, Offset: ask.offset, Tag: ask.tag})
		hint = max(hint, p.Lease.Load().RTT)
	}
	clear(m.storeAsks)
	slices.SortFunc(offsets, func(a, b OffsetRef) int { return int(a.Partition - b.Partition) })
	// The store time is read by the gate before its StoreOffsets call and recorded for what the call
	// may have stored, with the time its chain of stores began (lease.storedAt and storedSince give
	// the argument).
	at, chain, stored, err := m.Gate.Store(offsets, hint)
	for _, o := range stored {
		m.roles[o.Partition].Lease.storedSince(o.Offset, at, chain)
	}
	if err != nil {
		m.fx.Note(LevelWarn, "store", "goneli %s: cannot store heartbeat offsets: %v", m.name, err)
	}
	m.unwatched = true // the gate's withdrawal is due within a tick
}

// explicitAnswered takes the answer to the explicit commit under way.
func (m *Machine) ExplicitAnswered(a CommitAnswer) {
	took := m.now() - m.explicit.sentAt
	m.explicit.busy = false
	m.Gate.answered(took)
	if took > m.timing.Heartbeat() {
		m.holdCommits(took)
	}
	if a.Err != nil && a.Outcome == CommitGeneration {
		// An explicit commit can go out behind the JoinGroup that ends the rebalance, still
		// carrying the generation it was made with, and reach the coordinator after the new one
		// began: the member is in the group all the same, unlike when librdkafka's own commit is
		// refused so. It renews nothing, and the lease runs out on its own if nothing else renews it.
		m.fx.Note(levelDebug, "explicit commit generation", "goneli %s: explicit heartbeat commit overtaken by a rebalance: %v", m.name, a.Err)
		return
	}
	if m.resetting {
		m.resetting = false
		for _, c := range a.Offsets {
			if p := m.partition(c.Partition); p != nil && c.Err == nil && a.Err == nil {
				p.Lease.resetCommitted(c.Offset)
			}
		}
		return
	}
	m.onCommit(a, true)
}

// holdCommits stops explicit commits because one waited for its answer for longer than a group
// heartbeat interval, until librdkafka's auto-commit is accepted again (autoCommitted).
//
// The window for explicit commits (commitWindow in lease.go) leaves one group heartbeat interval
// for the answer that tells librdkafka of a rebalance, since it auto-commits until that answer
// comes. librdkafka shows goneli neither its group heartbeats nor their answers, but it sends them
// on the connection to the coordinator that carries goneli's explicit commits, and a broker answers
// a connection's requests in order: a commit answered late means that whatever went before it on
// that connection, group heartbeats included, may have been answered as late. Explicit commits
// then stop, and the lease lives on librdkafka's own commits, whose acceptance shows it steady in
// the group again. What goneli cannot see is a heartbeat's answer held up while no explicit commit
// was under way; the package doc states that assumption.
func (m *Machine) holdCommits(took time.Duration) {
	if !m.CommitsHeld {
		m.CommitsHeld = true
		m.fx.Note(levelDebug, "", "goneli %s: an explicit commit has waited %v for its answer, more than a group heartbeat interval (%v): no explicit commits until librdkafka's own is accepted",
			m.name, took.Round(time.Millisecond), m.timing.Heartbeat())
	}
}
