package verdict

import (
	"fmt"
	"time"

	"github.com/goneli/goneli/internal/member"
)

// Fault is one injected fault as the harness recorded it.
type Fault struct {
	Kind      string
	Victim    string // process incarnation hit, or "" for a broker-wide fault with no leader
	WasLeader bool   // the victim was acting as leader (of any role) when the fault began
	// Roles, for members with roles, maps each role the fault hit to the process that led it when
	// the fault began: the victim's roles for a fault of one process, every led role for a fault
	// of the broker. Without roles it is empty, and Victim and WasLeader say whom it hit.
	Roles  map[string]string
	At     time.Time
	Healed time.Time // when the fault was undone (or the killed process restarted)
	Detail string
	// Reset says that the broker lost its state at At (its data was wiped): fencing tokens and
	// transactional producers' epochs start over, so tenures before and after are not compared.
	Reset bool
}

// Outcome says what leadership did after a fault that hit the leader.
type Outcome int

const (
	// Unaffected means the victim went on acting without a noticeable gap.
	Unaffected Outcome = iota
	// FailedOver means another process acted next.
	FailedOver
	// Resumed means the victim stopped acting for a while and then acted again before anyone else.
	Resumed
	// NotLeader means the victim was not the leader, so there was nothing to fail over.
	NotLeader
)

func (o Outcome) String() string {
	return [...]string{"unaffected", "failed over", "resumed", "not leader"}[o]
}

// FaultResult is a fault with what the checker made of it.
type FaultResult struct {
	Fault
	// Outcome and Failover are for the fault as a whole. Without roles they are the leader's.
	// With roles they sum up Roles: FailedOver if any role moved, else Resumed if any resumed,
	// else Unaffected, or NotLeader if the fault hit no role; Failover is the longest of the
	// roles', the time until every role hit was led again.
	Outcome Outcome
	// Failover is the time from the fault to the first action after the interruption (by another
	// process for FailedOver, by the victim for Resumed).
	Failover time.Duration
	// Roles is the outcome for each leadership the fault hit, in role order: every role of
	// Fault.Roles, or without roles the single leadership (role "") if the victim led.
	Roles []RoleResult
}

// RoleResult is what leadership of one role did after a fault.
type RoleResult struct {
	Role     string
	Leader   string // who led the role when the fault began
	Outcome  Outcome
	Failover time.Duration
}

// RoleReport is the verdict on one role of a run.
type RoleReport struct {
	Role     string
	Spans    int
	Overlaps int           // pairs of act spans of two processes for this role sharing an instant
	Gap      time.Duration // the longest stretch in which nobody acted for this role
	GapAt    time.Time
	GapAfter string // the last fault kind injected before the gap ended
}

// Report is the verdict on one run.
type Report struct {
	Start, End   time.Time
	Spans        int
	Overlaps     []Overlap // act spans of two processes for one role overlapping: the safety property
	InfoOverlaps []Overlap // acquired..fenced intervals of two processes overlapping: information
	// Gap is the longest leaderless stretch of any role, GapRole that role ("" without roles).
	Gap        time.Duration
	GapAt      time.Time
	GapAfter   string // the last fault kind injected before the gap ended
	GapRole    string
	Roles      []RoleReport // every role acted for, in role order (one, "", without roles)
	Faults     []FaultResult
	Violations []string // other broken promises (event order)
	// LateCommits are fenced writes committed although a later tenure of their role had fenced
	// them before their commit call: the broker should have refused each (see LateCommits).
	LateCommits []LateCommit
	Commits     int // committed fenced writes whose commit call was timed (member.EventCommit lines)
}

// HasRoles reports whether the members contended for named roles rather than the single
// leadership.
func (r Report) HasRoles() bool {
	return len(r.Roles) > 1 || (len(r.Roles) == 1 && r.Roles[0].Role != "")
}

// interruption is the shortest pause in a leader's actions that counts as leadership lost and
// regained. A healthy leader acts every few milliseconds and reports a span every 50 ms, so a pause
// this long means the lease lapsed or the process was held up.
const interruption = 250 * time.Millisecond

// Check judges a run from every process's lines (keyed by incarnation, in the order written), the
// deaths of processes that could not report their own end (keyed by incarnation), and the faults
// in the order injected. Every role is judged on its own.
func Check(lines map[string][]member.Line, deaths map[string]time.Time, faults []Fault) Report {
	var r Report
	for _, ls := range lines {
		for _, l := range ls {
			at := time.Unix(0, l.At)
			if r.Start.IsZero() || at.Before(r.Start) {
				r.Start = at
			}
			if at.After(r.End) {
				r.End = at
			}
		}
	}
	for _, who := range names(lines) {
		_, died := deaths[who]
		if err := EventOrder(lines[who], died); err != nil {
			for _, e := range splitJoined(err) {
				r.Violations = append(r.Violations, fmt.Sprintf("%s: %v", who, e))
			}
		}
	}
	var resets []time.Time
	for _, f := range faults {
		if f.Reset {
			resets = append(resets, f.At)
		}
	}
	r.LateCommits = LateCommits(lines, resets...)
	for _, ls := range lines {
		for _, l := range ls {
			if l.Event == member.EventCommit {
				r.Commits++
			}
		}
	}
	spans := ActSpans(lines)
	r.Spans = len(spans)
	r.Overlaps = Overlaps(spans)
	var tenures []Span
	for _, iv := range Intervals(lines, deaths, r.End) {
		tenures = append(tenures, iv.Span)
	}
	r.InfoOverlaps = Overlaps(tenures)

	byRole := ByRole(spans)
	for _, rs := range byRole {
		rr := RoleReport{Role: rs.Role, Spans: len(rs.Spans), Overlaps: len(overlaps(rs.Spans))}
		if gap, ok := WorstGap(rs.Spans); ok {
			rr.Gap, rr.GapAt = gap.Duration(), gap.From
			for _, f := range faults {
				if !f.At.After(gap.To) {
					rr.GapAfter = f.Kind
				}
			}
			if rr.Gap > r.Gap {
				r.Gap, r.GapAt, r.GapAfter, r.GapRole = rr.Gap, rr.GapAt, rr.GapAfter, rr.Role
			}
		}
		r.Roles = append(r.Roles, rr)
	}

	roleSpans := map[string][]Span{}
	for _, rs := range byRole {
		roleSpans[rs.Role] = rs.Spans
	}
	for i, f := range faults {
		limit := r.End
		if i+1 < len(faults) {
			limit = faults[i+1].At
		}
		r.Faults = append(r.Faults, judge(f, roleSpans, limit))
	}
	return r
}

// splitJoined undoes errors.Join, so that each role's broken order is a violation of its own.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// judge works out what leadership of every role f hit did until limit.
func judge(f Fault, spans map[string][]Span, limit time.Time) FaultResult {
	res := FaultResult{Fault: f, Outcome: NotLeader}
	hit := f.Roles
	if len(hit) == 0 && f.WasLeader {
		hit = map[string]string{"": f.Victim}
	}
	roles := make([]string, 0, len(hit))
	for role := range hit {
		roles = append(roles, role)
	}
	SortRoles(roles)
	for _, role := range roles {
		rr := RoleResult{Role: role, Leader: hit[role]}
		rr.Outcome, rr.Failover = failover(spans[role], rr.Leader, f.At, limit)
		res.Roles = append(res.Roles, rr)
	}
	for _, rr := range res.Roles {
		if rank(rr.Outcome) > rank(res.Outcome) {
			res.Outcome = rr.Outcome
		}
		if rr.Outcome == FailedOver || rr.Outcome == Resumed {
			res.Failover = max(res.Failover, rr.Failover)
		}
	}
	return res
}

// rank orders outcomes for summing up several roles: a move outweighs a resumption, which
// outweighs nothing noticeable.
func rank(o Outcome) int {
	return map[Outcome]int{NotLeader: 0, Unaffected: 1, Resumed: 2, FailedOver: 3}[o]
}

// failover walks one role's actions (sorted by From) after a fault at at that hit its leader
// victim, up to limit, until leadership moved or was interrupted and resumed.
func failover(spans []Span, victim string, at, limit time.Time) (Outcome, time.Duration) {
	var last time.Time // the latest action seen so far, starting with the victim's before the fault
	for _, s := range spans {
		if s.To.Before(at) {
			if s.To.After(last) {
				last = s.To
			}
			continue
		}
		if s.From.After(limit) {
			break
		}
		from := s.From
		if from.Before(at) {
			from = at
		}
		if s.Who != victim {
			return FailedOver, from.Sub(at)
		}
		if !last.IsZero() && from.Sub(last) >= interruption && from.After(at) {
			return Resumed, from.Sub(at)
		}
		if s.To.After(last) {
			last = s.To
		}
	}
	return Unaffected, 0
}
