// Package verdict judges what member processes (internal/member) reported, read on one wall
// clock: whether two of them ever acted as leader at the same instant, whether each one's events
// came in the documented order, how long the group went without anyone acting, and what
// leadership did after each injected fault.
//
// Members that contend for several roles (goneli.NewRoles) are judged per role: two processes
// acting at one instant conflict only if they act for the same role, event order is per process
// and role, and gaps and failovers are per role. The single leader of goneli.New is the role "".
//
// It reads only the lines. How the processes were run (internal/fleet) and how they were
// disturbed is the caller's business, which is what lets the demo, the benchmarks and the chaos
// suite share one judge.
package verdict

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/member"
)

// Span is a stretch in which one process acted as leader: IsLeader was true at From and at To
// (member.Line's act semantics), with actions at least every flush interval in between. An
// Interval's stretch is carried in a Span too, with no runs.
type Span struct {
	Who      string // process incarnation
	Role     string // the role acted for: "" for the single leader
	From, To time.Time
	Runs     int64 // task runs the span covers
}

// Interval is a stretch from a LeaderAcquired to the LeaderFenced or LeaderRevoked that ended it,
// or to the process's death. It over-states leadership: the barrier hears of acquisition before
// IsLeader turns true and of fencing after, and a frozen process hears of nothing.
type Interval struct {
	Span
	Open bool // no end event: the process died or the run ended first
}

// Overlap is a range of instants at which two processes both claimed leadership.
type Overlap struct {
	A, B     Span      // the two claims; A began no later than B
	From, To time.Time // the instants both cover, a closed interval
}

// Duration is the length of the overlap; zero when the two claims share a single instant.
func (o Overlap) Duration() time.Duration { return o.To.Sub(o.From) }

func (o Overlap) String() string {
	role := ""
	if o.A.Role != "" {
		role = " for role " + o.A.Role
	}
	return fmt.Sprintf("%s and %s%s from %s for %v", o.A.Who, o.B.Who, role, o.From.Format("15:04:05.000000"), o.Duration())
}

// ByName groups a merged log by the Name of each line, keeping each process's lines in the order
// it wrote them.
func ByName(lines []member.Line) map[string][]member.Line {
	out := map[string][]member.Line{}
	for _, l := range lines {
		out[l.Name] = append(out[l.Name], l)
	}
	return out
}

// names returns the keys of lines in a fixed order, so that results do not depend on map order.
func names(lines map[string][]member.Line) []string {
	out := make([]string, 0, len(lines))
	for who := range lines {
		out = append(out, who)
	}
	sort.Strings(out)
	return out
}

// ActSpans collects every process's act spans, sorted by From.
func ActSpans(lines map[string][]member.Line) []Span {
	var spans []Span
	for _, who := range names(lines) {
		for _, l := range lines[who] {
			if l.Event == member.EventAct {
				spans = append(spans, Span{Who: who, Role: l.Role, From: time.Unix(0, l.From), To: time.Unix(0, l.To), Runs: l.Runs})
			}
		}
	}
	sortSpans(spans)
	return spans
}

func sortSpans(spans []Span) {
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].From.Before(spans[j].From) })
}

// Intervals collects every process's acquired..fenced/revoked intervals of every role, sorted by
// From. A tenure still open at the end of a process's lines ends at its death, if deaths has it
// before end, and at end otherwise.
func Intervals(lines map[string][]member.Line, deaths map[string]time.Time, end time.Time) []Interval {
	var out []Interval
	for _, who := range names(lines) {
		open := map[string]*Interval{} // by role
		var order []string             // roles in the order their first interval opened
		for _, l := range lines[who] {
			at := time.Unix(0, l.At)
			switch l.Event {
			case member.EventAcquired:
				if open[l.Role] == nil {
					if _, seen := open[l.Role]; !seen {
						order = append(order, l.Role)
					}
					open[l.Role] = &Interval{Span: Span{Who: who, Role: l.Role, From: at}}
				}
			case member.EventFenced, member.EventRevoked:
				if iv := open[l.Role]; iv != nil {
					iv.To = at
					out = append(out, *iv)
					open[l.Role] = nil
				}
			}
		}
		for _, role := range order {
			iv := open[role]
			if iv == nil {
				continue
			}
			iv.Open = true
			iv.To = end
			if d, ok := deaths[who]; ok && d.Before(end) {
				iv.To = d
			}
			out = append(out, *iv)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].From.Before(out[j].From) })
	return out
}

// Overlaps finds every pair of spans of different processes for the same role that share an
// instant; spans of different roles never conflict. Spans are closed intervals: one ending at the
// very instant another begins is an overlap of length zero, because IsLeader was true for both at
// that instant. The overlaps come role by role, in role order (see SortRoles).
func Overlaps(spans []Span) []Overlap {
	var out []Overlap
	for _, rs := range ByRole(spans) {
		out = append(out, overlaps(rs.Spans)...)
	}
	return out
}

// RoleSpans are the spans of one role.
type RoleSpans struct {
	Role  string
	Spans []Span // sorted by From
}

// ByRole splits spans by role, in role order (see SortRoles), each role's spans sorted by From.
func ByRole(spans []Span) []RoleSpans {
	by := map[string][]Span{}
	for _, s := range spans {
		by[s.Role] = append(by[s.Role], s)
	}
	roles := make([]string, 0, len(by))
	for r := range by {
		roles = append(roles, r)
	}
	SortRoles(roles)
	out := make([]RoleSpans, len(roles))
	for i, r := range roles {
		sortSpans(by[r])
		out[i] = RoleSpans{Role: r, Spans: by[r]}
	}
	return out
}

// SortRoles sorts role names, numbered ones (goneli.Shards) by number before the others by name.
func SortRoles(roles []string) {
	sort.SliceStable(roles, func(i, j int) bool { return roleLess(roles[i], roles[j]) })
}

func roleLess(a, b string) bool {
	na, errA := strconv.Atoi(a)
	nb, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return na < nb
	case errA == nil:
		return true
	case errB == nil:
		return false
	}
	return a < b
}

// overlaps is Overlaps for the spans of one role.
func overlaps(spans []Span) []Overlap {
	sorted := append([]Span(nil), spans...)
	sortSpans(sorted)
	var out []Overlap
	var active []Span // spans begun so far that reach at least the current one's start
	for _, s := range sorted {
		kept := active[:0]
		for _, a := range active {
			if a.To.Before(s.From) {
				continue
			}
			kept = append(kept, a)
			if a.Who != s.Who {
				end := s.To
				if a.To.Before(end) {
					end = a.To
				}
				out = append(out, Overlap{A: a, B: s, From: s.From, To: end})
			}
		}
		active = append(kept, s)
	}
	return out
}

// Pause is a stretch in which nobody acted for a role, between two act spans.
type Pause struct {
	Role          string
	From, To      time.Time // the last action before the pause and the first after it
	Before, After string    // who acted last before the pause and first after it
}

// Duration is the length of the pause.
func (p Pause) Duration() time.Duration { return p.To.Sub(p.From) }

// pauses lists the stretches without any action for a role, role by role in role order and each
// role's in time order, from the role's first action to its last.
func pauses(spans []Span) []Pause {
	var out []Pause
	for _, rs := range ByRole(spans) {
		out = append(out, rolePauses(rs.Spans)...)
	}
	return out
}

// rolePauses is pauses for the spans of one role, sorted by From.
func rolePauses(sorted []Span) []Pause {
	var out []Pause
	var last Span // the span that reached furthest so far
	for i, s := range sorted {
		if i > 0 && s.From.After(last.To) {
			out = append(out, Pause{Role: s.Role, From: last.To, To: s.From, Before: last.Who, After: s.Who})
		}
		if i == 0 || s.To.After(last.To) {
			last = s
		}
	}
	return out
}

// WorstGap is the longest pause between actions of anyone for one role; ok is false if there is
// none.
func WorstGap(spans []Span) (gap Pause, ok bool) {
	for _, p := range pauses(spans) {
		if !ok || p.Duration() > gap.Duration() {
			gap, ok = p, true
		}
	}
	return gap, ok
}

// ClosestHandover is the shortest pause after which a process other than the last one acted for a
// role; ok is false if leadership never passed without an overlap.
func ClosestHandover(spans []Span) (closest Pause, ok bool) {
	for _, p := range pauses(spans) {
		if p.Before != p.After && (!ok || p.Duration() < closest.Duration()) {
			closest, ok = p, true
		}
	}
	return closest, ok
}

// Acts totals act spans: the task runs they cover and how many processes acted.
func Acts(spans []Span) (runs int64, processes int) {
	seen := map[string]bool{}
	for _, s := range spans {
		runs += s.Runs
		seen[s.Who] = true
	}
	return runs, len(seen)
}

// LastActs returns the end of each process's latest act span, of any role, in a merged log.
func LastActs(lines []member.Line) map[string]time.Time {
	out := map[string]time.Time{}
	for _, l := range lines {
		if l.Event != member.EventAct {
			continue
		}
		if to := time.Unix(0, l.To); to.After(out[l.Name]) {
			out[l.Name] = to
		}
	}
	return out
}

// LastActor returns the index in names of the process whose latest act span ended last in a
// merged log, if it ended at or after since, and -1 otherwise: who leads now, judged by its actions.
func LastActor(lines []member.Line, names []string, since time.Time) int {
	last := LastActs(lines)
	best, bestAt := -1, time.Time{}
	for i, name := range names {
		if at := last[name]; at.After(bestAt) {
			best, bestAt = i, at
		}
	}
	if bestAt.Before(since) {
		return -1
	}
	return best
}

// Leaders returns, for each role, the process that acted for it last in a merged log, if that
// action was at or after since: who leads each role now, judged by its actions.
func Leaders(lines []member.Line, since time.Time) map[string]string {
	type last struct {
		who string
		to  int64
	}
	latest := map[string]last{}
	for _, l := range lines {
		if l.Event == member.EventAct && l.To >= latest[l.Role].to {
			latest[l.Role] = last{l.Name, l.To}
		}
	}
	out := map[string]string{}
	for role, l := range latest {
		if l.to >= since.UnixNano() {
			out[role] = l.who
		}
	}
	return out
}

// EventOrder checks that one process's leadership events follow the documented order for each
// role on its own, Acquired (Fenced Acquired)* [Fenced] Revoked, repeated. A process that died
// (died) may stop anywhere; one that closed must have ended every tenure. An error names the
// role, unless it is the single leader's ("").
func EventOrder(lines []member.Line, died bool) error {
	seqs := map[string]*strings.Builder{}
	var roles []string
	for _, l := range lines {
		var c byte
		switch l.Event {
		case member.EventAcquired:
			c = 'A'
		case member.EventFenced:
			c = 'F'
		case member.EventRevoked:
			c = 'R'
		default:
			continue
		}
		seq := seqs[l.Role]
		if seq == nil {
			seq = &strings.Builder{}
			seqs[l.Role] = seq
			roles = append(roles, l.Role)
		}
		seq.WriteByte(c)
	}
	SortRoles(roles)
	var errs []error
	for _, role := range roles {
		seq := seqs[role].String()
		if orderOK(seq, died) {
			continue
		}
		err := fmt.Errorf("events %q break the order Acquired (Fenced Acquired)* [Fenced] Revoked", seq)
		if role != "" {
			err = fmt.Errorf("role %s: %w", role, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// orderOK reports whether seq (A, F, R for acquired, fenced, revoked) follows the order.
func orderOK(seq string, mayBeCut bool) bool {
	// The state is what may come next: 'A' only Acquired (no tenure open), 'x' Fenced or Revoked
	// (leading), 'y' Acquired or Revoked (fenced).
	state := byte('A')
	for i := 0; i < len(seq); i++ {
		switch c := seq[i]; {
		case (state == 'A' || state == 'y') && c == 'A':
			state = 'x'
		case state == 'x' && c == 'F':
			state = 'y'
		case (state == 'x' || state == 'y') && c == 'R':
			state = 'A'
		default:
			return false
		}
	}
	return mayBeCut || state == 'A'
}
