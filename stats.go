package goneli

import (
	"fmt"
	"strconv"
	"time"
)

// Curator is a Neli with what goneli v0.5.0 lacked: a fencing token, the identity of whoever leads,
// yielding, and statistics. Every Neli returned by New is a Curator; NewCurator returns one
// without a type assertion. Neli itself is unchanged, so that code implementing it still compiles.
type Curator interface {
	Neli

	// Token returns the fencing token of the current tenure while this instance leads, and 0
	// otherwise. Tokens strictly increase from tenure to tenure across the whole group, whoever
	// holds them: stamp writes to a downstream store with the token and have the store refuse any
	// token lower than the highest it has seen, and a deposed leader that still believes it leads
	// (after a long pause, say) cannot overwrite its successor's work. The token is the offset in
	// partition 0 of the tenure's first confirmed heartbeat, plus one.
	Token() int64

	// Leader returns the last known leader and whether one is known. An instance always knows
	// when it leads itself; to learn of others it needs Config.ObserveLeader (or OnLeaderChange).
	// A leader whose heartbeats have not been seen for HeartbeatTimeout is no longer known.
	Leader() (LeaderInfo, bool)

	// Yield gives up leadership on purpose and keeps this instance out of the running for d: it
	// stops leading at once (LeaderRevoked follows if it led), leaves the group so that a
	// successor is elected within a group heartbeat interval, and rejoins once d has passed. Use
	// it for rolling deploys, or when an instance knows it is unhealthy. A Yield during a yield
	// extends it. However short d is, the instance leaves the group once; a d too long to add to
	// the clock keeps it out for good. If it cannot leave the group (Kafka refuses the
	// unsubscribe), it keeps trying while d lasts and contends again afterwards.
	Yield(d time.Duration) error

	// TransferTo hands leadership over to the member whose Config.Name is name, gracefully: this
	// instance stops leading (LeaderRevoked follows), leaves the group, and the member leads once
	// the group has assigned it the partition and it has proved its lease; it stays out of the
	// group until then (a few leases at most). It is refused, with a *TransferError, on an
	// instance that does not lead (ErrNotLeader: see Transfer for asking from elsewhere), for a
	// name that is not a member of the group (ErrNotMember), for a member that another member
	// outranks (Config.Priority), within the settle time (two HeartbeatTimeouts) of this tenure's
	// start, and for an instance of several roles (ErrRolesTransfer). It describes the group first,
	// so it may take up to a HeartbeatTimeout, and returns once the hand-over has begun. See the
	// package doc, Transfers.
	TransferTo(name string) error

	// Stats returns counters and timings for metrics and health checks. It never blocks, even
	// while the barrier does.
	Stats() Stats
}

// NewCurator is New, returning the Curator interface.
func NewCurator(config Config, barrier ...Barrier) (Curator, error) {
	n, err := New(config, barrier...)
	if err != nil {
		return nil, err
	}
	return n.(Curator), nil
}

// LeaderInfo describes a leader as its heartbeats show it.
type LeaderInfo struct {
	// Role is the role led, as its heartbeats name it: empty for the single leader of New.
	Role string
	// Partition is the role's partition of the leader topic.
	Partition int32
	// Name is the leader's Config.Name; empty when no leader is known.
	Name string
	// Address is the leader's Config.Address, empty if it set none.
	Address string
	// Tenure and Token are those of the leader's LeaderAcquired event.
	Tenure string
	Token  int64
	// Since is when the tenure acquired leadership, by the leader's wall clock.
	Since time.Time
	// LastHeartbeat is the send time of the newest heartbeat seen, by the leader's wall clock.
	LastHeartbeat time.Time
}

// String describes the leader.
func (l LeaderInfo) String() string {
	if l.Name == "" {
		return "LeaderInfo[none]"
	}
	addr := ""
	if l.Address != "" {
		addr = ", Address=" + l.Address
	}
	return fmt.Sprintf("LeaderInfo[Name=%s%s, Tenure=%s, Token=%d, Since=%s]", l.Name, addr, l.Tenure, l.Token, l.Since.Format(time.RFC3339Nano))
}

// Stats is a snapshot of a Curator's state and counters. Durations are zero when they do not apply.
type Stats struct {
	// Role is the role these figures are for: empty for the single leader of New.
	Role  string
	State State
	// Leader is IsLeader(): the lease is valid now.
	Leader bool
	// Leading is what the protocol believes: LeaderAcquired was delivered and neither LeaderFenced
	// nor LeaderRevoked since. It differs from Leader only while a lapsed lease waits to be
	// fenced, which takes milliseconds unless the instance is stuck (see LeaseOverdue).
	Leading bool
	// Assigned is true while this instance owns partition 0 (a tenure is active).
	Assigned bool
	Tenure   string
	Token    int64
	Since    time.Time
	// LeaseRemaining is how long the current lease has left.
	LeaseRemaining time.Duration
	// LeaseAge is how long ago the heartbeat behind the current lease was sent.
	LeaseAge time.Duration
	// LeaseOverdue is how long ago the lease ran out while the instance still believed it led.
	LeaseOverdue time.Duration
	// HeartbeatRTT is the time from sending the newest confirmed heartbeat to reading it back.
	HeartbeatRTT time.Duration
	// RenewalLag is the time from sending the heartbeat behind the newest renewal to the
	// coordinator's acceptance of its offset: the lease is always at least this much shorter than
	// HeartbeatTimeout.
	RenewalLag time.Duration
	// YieldRemaining is how long this instance stays out of the group after Yield, or after it
	// handed its roles over (HandOvers).
	YieldRemaining time.Duration
	// NotLeadingSince is set while this instance owns the role's partition and does not lead it:
	// since its assignment, or since it was fenced, whichever came last (a lead regained after a
	// fence that no renewal extended before the next fence does not count). It is zero while the
	// instance leads, does not own the partition, waits for the previous holder to release it
	// (Releasing), or waits for the group check to clear it (one that failed, or found a
	// GroupConflict), none of which a hand-over would mend. A tenure normally leads within a few
	// round trips of its assignment and is renewed before its lease runs out, so a time more than
	// moments ago means that this instance cannot renew, or that a rebalance holds its commits:
	// once it is Config.HandOverAfter ago (twice that for a tenure that has yet to lead), the
	// instance hands every role over (HandOvers) unless its heartbeats come back promptly, and
	// the time in which they did does not count toward that bound.
	NotLeadingSince time.Time
	// Releasing is set while this instance owns the role's partition but waits for the previous
	// holder's barrier to return from LeaderRevoked (at most the rebalance timeout).
	Releasing bool
	// GroupConflict is set while this instance owns the role's partition but will not lead
	// because members of its group use another leader topic or other roles.
	GroupConflict *GroupConflictError
	// UnreachableSince is when this instance found that it could reach no Kafka broker, and
	// UnreachableReason the newest failure, with the client that saw it. Both are zero while
	// Kafka answers. They are set when New could not fetch the leader topic's metadata or when a
	// client reports every broker connection down, and cleared by the next answer: a heartbeat
	// delivered or read back, a commit accepted, a rebalance, or the metadata probe that an
	// instance marked unreachable sends every RenewInterval. A follower that shows neither is
	// in touch with the cluster as far as librdkafka can tell.
	UnreachableSince  time.Time
	UnreachableReason string

	Acquired, Fenced, Revoked uint64 // leadership transitions delivered, by kind
	HeartbeatsSent            uint64 // heartbeats handed to the producer
	HeartbeatsConfirmed       uint64 // own heartbeats of the current tenure read back
	StaleHeartbeats           uint64 // own heartbeats ignored: earlier tenure or out of order
	LateHeartbeats            uint64 // own heartbeats confirmed too late to renew the lease
	CommitRejections          uint64 // heartbeat commits the coordinator refused (member or generation gone)
	// HandOvers counts the times this instance (all its roles together) left the group because a
	// role it held had gone without leading for Config.HandOverAfter (NotLeadingSince), counting
	// only the time in which its heartbeats did not come back within a quarter lease, so that a
	// member that can renew would lead it. Each time it stays out of the group for a back-off
	// (YieldRemaining) that starts at twice HeartbeatTimeout and doubles with every hand-over that
	// follows the last without a tenure that led for four leases in between, up to sixteen leases.
	HandOvers uint64
	// GroupChecks counts the descriptions of the group that the instance (all its roles together)
	// asked the coordinator for to check its members' topics and roles, New's included: about two
	// per membership of the group while nothing is wrong (see GroupConflictError).
	GroupChecks uint64
	// GroupDescriptions counts the other descriptions of the group the instance asked for, to
	// follow who is in it: while it leads, one after each rebalance (every half settle time under
	// KIP-848) and one when a member of higher priority settles (Config.Priority); while it
	// stands by (Standby), one per HeartbeatTimeout; after it left the group (Yield, a hand-over),
	// until the member it left under is gone, normally one; one per TransferTo or transfer
	// request. See the package doc, Preferred leaders.
	GroupDescriptions uint64
	// Transfers counts the times this instance (all its roles together) handed leadership over to
	// a member of higher priority (Config.Priority) or on TransferTo.
	Transfers uint64
	// Standby is set while this instance stays out of the group because it handed over to a
	// member of higher priority that is still in it; it rejoins once no such member is.
	Standby bool
	// CommitStoresMissed counts the heartbeat offsets that the instance (all its roles together)
	// stored for librdkafka's auto-commit and then presumed never committed: the auto-commit timer
	// ticked only after the offset was withdrawn again, or librdkafka was rejoining the group. Each
	// costs a renewal some latency. LateWithdrawals counts the stored offsets withdrawn a whole
	// auto-commit interval or more after they were stored, because the instance was short of CPU:
	// librdkafka may have sent such an offset twice. The package doc (Cost) says why offsets are
	// withdrawn at all.
	CommitStoresMissed, LateWithdrawals uint64
}

func (n *neli) Stats() Stats {
	return n.statsOf(n.parts[0])
}

// statsOf is Stats for one role.
func (n *neli) statsOf(p *part) Stats {
	l := p.Lease
	v := l.Load()
	now := l.Now()
	c := v.Counts
	m, dc := n.d.Machine(), n.d.Counters()
	s := Stats{
		Role:                p.Name,
		State:               n.State(),
		Leader:              n.isLeaderOf(p),
		Leading:             l.Announced(v),
		Assigned:            v.Assigned,
		HeartbeatRTT:        v.RTT,
		RenewalLag:          v.Lag,
		Acquired:            c.Acquired,
		Fenced:              c.Fenced,
		Revoked:             c.Revoked,
		HeartbeatsSent:      c.Sent,
		HeartbeatsConfirmed: c.Confirmed,
		StaleHeartbeats:     c.Stale,
		LateHeartbeats:      c.Late,
		CommitRejections:    c.Rejected,
		GroupChecks:         m.Check.Count.Load(),
		CommitStoresMissed:  m.GateCounts.Presumed.Load(),
		LateWithdrawals:     m.GateCounts.Doubled.Load(),
		HandOvers:           m.HandOvers.Load(),
		GroupDescriptions:   dc.GroupDescriptions,
		Transfers:           dc.Transfers,
		Standby:             dc.Standby,
		UnreachableSince:    dc.UnreachableSince,
		UnreachableReason:   dc.UnreachableReason,
	}
	if s.Assigned {
		s.Tenure = strconv.FormatUint(v.Tenure, 16)
		s.GroupConflict = v.Conflict
		s.Releasing = v.Releasing
		if !v.Leading && !v.Excused {
			s.NotLeadingSince = n.d.Base().Add(v.Idle)
		}
	}
	if s.Leading {
		s.Token = v.Token
		s.Since = v.Since
		s.LeaseAge = now - (v.End - *n.config.HeartbeatTimeout)
		if v.End > now {
			s.LeaseRemaining = v.End - now
		} else {
			s.LeaseOverdue = now - v.End
		}
	}
	if !s.Leader {
		s.LeaseRemaining = 0
	}
	if y := time.Duration(m.Yield.Until.Load()); y > now {
		s.YieldRemaining = y - now
	}
	return s
}

func (n *neli) Token() int64 {
	return n.tokenOf(n.parts[0])
}

// tokenOf is Token for one role.
func (n *neli) tokenOf(p *part) int64 {
	v := p.Lease.Load()
	if !n.isLeaderOf(p) {
		return 0
	}
	return v.Token
}

func (n *neli) Leader() (LeaderInfo, bool) {
	return n.leaderOf(n.parts[0])
}

// leaderOf is Leader for one role.
func (n *neli) leaderOf(p *part) (LeaderInfo, bool) {
	v := p.Lease.Load()
	if n.isLeaderOf(p) {
		return LeaderInfo{
			Role:          p.Name,
			Partition:     p.ID,
			Name:          n.config.Name,
			Address:       n.config.Address,
			Tenure:        strconv.FormatUint(v.Tenure, 16),
			Token:         v.Token,
			Since:         v.Since,
			LastHeartbeat: time.Now(),
		}, true
	}
	l, ok := n.d.Leader(p.ID)
	return LeaderInfo(l), ok
}

func (n *neli) Yield(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("goneli: Yield needs a positive duration, got %v", d)
	}
	if n.State() != Live {
		return ErrNonLivePulse
	}
	n.d.RequestYield(d, n.events.inCall())
	return nil
}
