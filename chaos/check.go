// Package chaos is goneli's chaos suite: contender processes (internal/member) run against the
// embedded broker while faults are injected at random, and an independent checker reads what every
// process reported, on one wall clock, and judges mutual exclusion, leaderless gaps and failover.
//
// The suite itself is in chaos_test.go; this file holds the checker, which knows nothing of how
// the faults were made.
package chaos

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/member"
)

// Span is a stretch in which one process acted as leader: IsLeader was true at From and at To
// (member.Line's act semantics), with actions at least every flush interval in between.
type Span struct {
	Who      string // process incarnation
	From, To time.Time
}

// Interval is a stretch from a LeaderAcquired to the LeaderFenced or LeaderRevoked that ended it,
// or to the process's death. It over-states leadership: the barrier hears of acquisition before
// IsLeader turns true and of fencing after, and a frozen process hears of nothing.
type Interval struct {
	Who      string
	From, To time.Time
	Open     bool // no end event: the process died or the run ended first
}

// Fault is one injected fault as the harness recorded it.
type Fault struct {
	Kind      string
	Victim    string // process incarnation hit, or "" for a broker-wide fault with no leader
	WasLeader bool   // the victim was acting as leader when the fault began
	At        time.Time
	Healed    time.Time // when the fault was undone (or the killed process restarted)
	Detail    string
}

// Overlap is an instant range in which two processes both claimed leadership.
type Overlap struct {
	A, B     string
	From, To time.Time
}

// Duration is the length of the overlap.
func (o Overlap) Duration() time.Duration { return o.To.Sub(o.From) }

func (o Overlap) String() string {
	return fmt.Sprintf("%s and %s from %s for %v", o.A, o.B, o.From.Format("15:04:05.000000"), o.Duration())
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
	Outcome Outcome
	// Failover is the time from the fault to the first action after the interruption (by another
	// process for FailedOver, by the victim for Resumed).
	Failover time.Duration
}

// Report is the checker's verdict on one run.
type Report struct {
	Start, End   time.Time
	Spans        int
	Overlaps     []Overlap // act spans of two processes overlapping: the safety property
	InfoOverlaps []Overlap // acquired..fenced intervals of two processes overlapping: information
	Gap          time.Duration
	GapAt        time.Time
	GapAfter     string // the last fault kind injected before the gap ended
	Faults       []FaultResult
	Violations   []string // other broken promises (event order)
}

// interruption is the shortest pause in a leader's actions that counts as leadership lost and
// regained. A healthy leader acts every few milliseconds and reports a span every 50 ms, so a pause
// this long means the lease lapsed or the process was held up.
const interruption = 250 * time.Millisecond

// Check judges a run from every process's lines (keyed by incarnation, in the order written), the
// deaths of processes that could not report their own end (keyed by incarnation), and the faults.
func Check(lines map[string][]member.Line, deaths map[string]time.Time, faults []Fault) Report {
	var r Report
	var spans []Span
	var intervals []Interval
	whos := make([]string, 0, len(lines))
	for who := range lines {
		whos = append(whos, who)
	}
	sort.Strings(whos)
	for _, who := range whos {
		for _, l := range lines[who] {
			at := time.Unix(0, l.At)
			if r.Start.IsZero() || at.Before(r.Start) {
				r.Start = at
			}
			if at.After(r.End) {
				r.End = at
			}
		}
	}
	for _, who := range whos {
		var open *Interval
		var seq strings.Builder
		for _, l := range lines[who] {
			at := time.Unix(0, l.At)
			switch l.Event {
			case member.EventAct:
				spans = append(spans, Span{Who: who, From: time.Unix(0, l.From), To: time.Unix(0, l.To)})
			case member.EventAcquired:
				seq.WriteByte('A')
				if open == nil {
					open = &Interval{Who: who, From: at}
				}
			case member.EventFenced, member.EventRevoked:
				seq.WriteByte(map[string]byte{member.EventFenced: 'F', member.EventRevoked: 'R'}[l.Event])
				if open != nil {
					open.To = at
					intervals = append(intervals, *open)
					open = nil
				}
			}
		}
		if open != nil {
			// The process died, or the run ended, while it led.
			open.Open = true
			open.To = r.End
			if d, ok := deaths[who]; ok && d.Before(r.End) {
				open.To = d
			}
			intervals = append(intervals, *open)
		}
		_, died := deaths[who]
		if !eventOrder(seq.String(), died) {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: events %q break the order Acquired (Fenced Acquired)* [Fenced] Revoked", who, seq.String()))
		}
	}
	r.Spans = len(spans)
	sort.Slice(spans, func(i, j int) bool { return spans[i].From.Before(spans[j].From) })
	r.Overlaps = overlaps(spans, func(s Span) (string, time.Time, time.Time) { return s.Who, s.From, s.To })
	sort.Slice(intervals, func(i, j int) bool { return intervals[i].From.Before(intervals[j].From) })
	r.InfoOverlaps = overlaps(intervals, func(s Interval) (string, time.Time, time.Time) { return s.Who, s.From, s.To })

	// The worst leaderless gap is the longest time between consecutive actions of anyone, from
	// the first action to the last.
	var maxTo time.Time
	for _, s := range spans {
		if !maxTo.IsZero() && s.From.Sub(maxTo) > r.Gap {
			r.Gap, r.GapAt = s.From.Sub(maxTo), maxTo
			r.GapAfter = ""
			for _, f := range faults {
				if !f.At.After(s.From) {
					r.GapAfter = f.Kind
				}
			}
		}
		if s.To.After(maxTo) {
			maxTo = s.To
		}
	}

	for i, f := range faults {
		res := FaultResult{Fault: f, Outcome: NotLeader}
		if f.WasLeader {
			limit := r.End
			if i+1 < len(faults) {
				limit = faults[i+1].At
			}
			res.Outcome, res.Failover = failover(spans, f, limit)
		}
		r.Faults = append(r.Faults, res)
	}
	return r
}

// failover walks the actions after fault f (up to limit) until leadership moved or was
// interrupted and resumed.
func failover(spans []Span, f Fault, limit time.Time) (Outcome, time.Duration) {
	var last time.Time // the latest action seen so far, starting with the victim's before the fault
	for _, s := range spans {
		if s.To.Before(f.At) {
			if s.To.After(last) {
				last = s.To
			}
			continue
		}
		if s.From.After(limit) {
			break
		}
		from := s.From
		if from.Before(f.At) {
			from = f.At
		}
		if s.Who != f.Victim {
			return FailedOver, from.Sub(f.At)
		}
		if !last.IsZero() && from.Sub(last) >= interruption && from.After(f.At) {
			return Resumed, from.Sub(f.At)
		}
		if s.To.After(last) {
			last = s.To
		}
	}
	return Unaffected, 0
}

// overlaps finds pairs of items of different processes whose [from, to] ranges share an instant.
// items must be sorted by from.
func overlaps[T any](items []T, get func(T) (string, time.Time, time.Time)) []Overlap {
	var out []Overlap
	var active []T
	for _, it := range items {
		who, from, to := get(it)
		kept := active[:0]
		for _, a := range active {
			aw, _, ato := get(a)
			if ato.Before(from) {
				continue
			}
			kept = append(kept, a)
			if aw != who {
				end := to
				if ato.Before(end) {
					end = ato
				}
				out = append(out, Overlap{A: aw, B: who, From: from, To: end})
			}
		}
		active = append(kept, it)
	}
	return out
}

// eventOrder reports whether seq (A, F, R for acquired, fenced, revoked) follows the documented
// order. A process that died may stop anywhere.
func eventOrder(seq string, mayBeCut bool) bool {
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

// Summary aggregates the reports of several trials.
type Summary struct {
	Trials  int
	Reports []Report
}

// Overlaps counts safety violations over all trials.
func (s Summary) Overlaps() int {
	n := 0
	for _, r := range s.Reports {
		n += len(r.Overlaps)
	}
	return n
}

// Print writes the summary: trials, faults by kind, overlaps, worst gap, failover per kind.
func (s Summary) Print(w io.Writer) {
	byKind := map[string][]FaultResult{}
	var infos []Overlap
	var gap time.Duration
	gapAfter := ""
	faults, spans := 0, 0
	var dur time.Duration
	for _, r := range s.Reports {
		for _, f := range r.Faults {
			byKind[f.Kind] = append(byKind[f.Kind], f)
		}
		faults += len(r.Faults)
		spans += r.Spans
		infos = append(infos, r.InfoOverlaps...)
		if r.Gap > gap {
			gap, gapAfter = r.Gap, r.GapAfter
		}
		dur += r.End.Sub(r.Start)
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "chaos summary: trials=%d faults=%d duration=%v act spans=%d\n", s.Trials, faults, dur.Round(time.Second), spans)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, len(byKind[k])))
	}
	fmt.Fprintf(w, "faults by kind: %s\n", strings.Join(parts, " "))
	fmt.Fprintf(w, "overlaps (two processes acting as leader at one instant): %d\n", s.Overlaps())
	for _, r := range s.Reports {
		for _, o := range r.Overlaps {
			fmt.Fprintf(w, "  OVERLAP %v\n", o)
		}
	}
	longest := time.Duration(0)
	for _, o := range infos {
		longest = max(longest, o.Duration())
	}
	fmt.Fprintf(w, "overlaps of acquired..fenced/revoked intervals (information only; a frozen or cut process hears late): %d, longest %v\n",
		len(infos), longest.Round(time.Millisecond))
	fmt.Fprintf(w, "worst leaderless gap: %v (after a %s fault)\n", gap.Round(time.Millisecond), gapAfter)
	fmt.Fprintf(w, "%-12s %6s %8s %8s %8s %8s %10s  %s\n", "kind", "faults", "leader", "moved", "resumed", "unaff.", "median", "max (injection to next leader action)")
	for _, k := range kinds {
		var ds []time.Duration
		counts := map[Outcome]int{}
		for _, f := range byKind[k] {
			counts[f.Outcome]++
			if f.Outcome == FailedOver || f.Outcome == Resumed {
				ds = append(ds, f.Failover)
			}
		}
		med, mx := "-", "-"
		if len(ds) > 0 {
			slices.Sort(ds)
			med = ds[(len(ds)-1)/2].Round(time.Millisecond).String()
			mx = ds[len(ds)-1].Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "%-12s %6d %8d %8d %8d %8d %10s  %s\n", k, len(byKind[k]), len(byKind[k])-counts[NotLeader],
			counts[FailedOver], counts[Resumed], counts[Unaffected], med, mx)
	}
	for _, r := range s.Reports {
		for _, v := range r.Violations {
			fmt.Fprintf(w, "  VIOLATION %s\n", v)
		}
	}
}
