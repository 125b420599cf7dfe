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
	WasLeader bool   // the victim was acting as leader when the fault began
	At        time.Time
	Healed    time.Time // when the fault was undone (or the killed process restarted)
	Detail    string
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

// Report is the verdict on one run.
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
// deaths of processes that could not report their own end (keyed by incarnation), and the faults
// in the order injected.
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
			r.Violations = append(r.Violations, fmt.Sprintf("%s: %v", who, err))
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

	if gap, ok := WorstGap(spans); ok {
		r.Gap, r.GapAt = gap.Duration(), gap.From
		for _, f := range faults {
			if !f.At.After(gap.To) {
				r.GapAfter = f.Kind
			}
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

// failover walks the actions (sorted by From) after fault f, up to limit, until leadership moved
// or was interrupted and resumed.
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
