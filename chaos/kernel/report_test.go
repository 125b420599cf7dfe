package kernel

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/goneli/goneli/chaos"
	"github.com/goneli/goneli/internal/verdict"
)

// report is a trial's figures: per fault kind of the random mix, and per scenario.
type report struct {
	lease     time.Duration
	spans     int
	overlaps  int
	gap       time.Duration
	gapAfter  string
	kinds     []kindRow
	scenarios []scenario
}

// kindRow is one kind's faults: failover is from the fault's start to the next leader action, by
// another member (moved) or the victim after a pause (resumed).
type kindRow struct {
	kind                   string
	faults, moved, resumed int
	median, max            time.Duration
	overlaps               int
}

// scenario is one named scenario's outcome.
type scenario struct {
	name     string
	dur      time.Duration
	result   verdict.FaultResult
	changes  int           // leadership changes between the fault's start and its end
	led      time.Duration // how long anyone acted as leader between the fault's start and its end
	overlaps int
}

// metTarget reports whether another member led within failoverTarget.
func (s scenario) metTarget() bool {
	return s.result.Outcome == verdict.FailedOver && s.result.Failover <= failoverTarget
}

func (s scenario) outcome() string {
	switch s.result.Outcome {
	case verdict.FailedOver, verdict.Resumed:
		return fmt.Sprintf("%s after %v", s.result.Outcome, s.result.Failover.Round(time.Millisecond))
	}
	return s.result.Outcome.String()
}

// results sums up a trial's report and act spans; names[i] is fault i's scenario, "" for the
// random mix.
func results(r verdict.Report, spans []verdict.Span, names []string, lease time.Duration) report {
	out := report{lease: lease, spans: r.Spans, overlaps: len(r.Overlaps), gap: r.Gap, gapAfter: r.GapAfter}
	// Each overlap counts against the fault that was the last to begin before it.
	overlapsOf := make([]int, len(r.Faults))
	for _, o := range r.Overlaps {
		for i := len(r.Faults) - 1; i >= 0; i-- {
			if !r.Faults[i].At.After(o.From) {
				overlapsOf[i]++
				break
			}
		}
	}
	byKind := map[string]*kindRow{}
	failovers := map[string][]time.Duration{}
	for i, f := range r.Faults {
		if names[i] != "" {
			sc := scenario{name: names[i], dur: f.Healed.Sub(f.At), result: f, overlaps: overlapsOf[i]}
			sc.changes, sc.led = changes(spans, f.At, f.Healed)
			out.scenarios = append(out.scenarios, sc)
			continue
		}
		k := byKind[f.Kind]
		if k == nil {
			k = &kindRow{kind: f.Kind}
			byKind[f.Kind] = k
		}
		k.faults++
		k.overlaps += overlapsOf[i]
		switch f.Outcome {
		case verdict.FailedOver:
			k.moved++
		case verdict.Resumed:
			k.resumed++
		}
		if f.Outcome == verdict.FailedOver || f.Outcome == verdict.Resumed {
			failovers[f.Kind] = append(failovers[f.Kind], f.Failover)
		}
	}
	for _, k := range byKind {
		if ds := failovers[k.kind]; len(ds) > 0 {
			slices.Sort(ds)
			k.median, k.max = ds[(len(ds)-1)/2], ds[len(ds)-1]
		}
		out.kinds = append(out.kinds, *k)
	}
	slices.SortFunc(out.kinds, func(a, b kindRow) int { return strings.Compare(a.kind, b.kind) })
	return out
}

// changes counts the times leadership passed from one member to another within [from, to]: act
// spans of a different member following each other in time, starting from whoever acted last at
// or before from. led is how long anyone acted within [from, to].
func changes(spans []verdict.Span, from, to time.Time) (n int, led time.Duration) {
	var in []verdict.Span
	var before *verdict.Span // the span that reached furthest among those that end before from
	for i, s := range spans {
		switch {
		case s.To.Before(from):
			if before == nil || s.To.After(before.To) {
				before = &spans[i]
			}
		case !s.From.After(to):
			in = append(in, s)
			end, begin := s.To, s.From
			if end.After(to) {
				end = to
			}
			if begin.Before(from) {
				begin = from
			}
			led += end.Sub(begin)
		}
	}
	slices.SortFunc(in, func(a, b verdict.Span) int { return a.From.Compare(b.From) })
	if before != nil {
		in = append([]verdict.Span{*before}, in...)
	}
	for i := 1; i < len(in); i++ {
		if in[i].Who != in[i-1].Who {
			n++
		}
	}
	return n, led
}

func fmtDur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// print writes the report as text.
func (r report) print(w io.Writer) {
	fmt.Fprintf(w, "lease %v: act spans %d, overlaps (two members acting as leader at one instant) %d, worst leaderless gap %v (after %s)\n",
		r.lease, r.spans, r.overlaps, r.gap.Round(time.Millisecond), r.gapAfter)
	fmt.Fprintf(w, "%-12s %6s %6s %8s %10s %10s %8s\n", "kind", "faults", "moved", "resumed", "median", "max", "overlaps")
	for _, k := range r.kinds {
		fmt.Fprintf(w, "%-12s %6d %6d %8d %10s %10s %8d\n", k.kind, k.faults, k.moved, k.resumed, fmtDur(k.median), fmtDur(k.max), k.overlaps)
	}
	for _, s := range r.scenarios {
		fmt.Fprintf(w, "scenario %s for %v: %s; during it leadership changed hands %d times and someone led for %v; overlaps %d\n",
			s.name, s.dur.Round(time.Second), s.outcome(), s.changes, s.led.Round(100*time.Millisecond), s.overlaps)
	}
}

// runInfo is what a Markdown section says of its run besides the figures.
type runInfo struct {
	seed     uint64
	commit   string
	settings []string
	date     time.Time
	duration time.Duration
}

const reportTitle = "# Kernel fault results\n\n" +
	"<!-- Written by the kernel fault suite (KERNEL_REPORT=FILE, make chaos-kernel); do not edit: run it again. Each run appends a section. -->\n\n" +
	"[chaos.md](chaos.md#kernel-faults) says what the suite does. Failover is from the fault's start to the next leader action:\n" +
	"by another member (moved) or by the victim after a pause of 250 ms or more (resumed).\n"

// markdown writes the report as a section of a Markdown page.
func (r report) markdown(w io.Writer, run runInfo) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	faults := 0
	for _, k := range r.kinds {
		faults += k.faults
	}
	p("")
	p("## Lease %v, %d faults and %d scenarios", r.lease, faults, len(r.scenarios))
	p("")
	commit := ""
	if run.commit != "" {
		commit = " on commit " + run.commit
	}
	settings := ""
	if len(run.settings) > 0 {
		settings = ", with `" + strings.Join(run.settings, " ") + "`"
	}
	p("Run %s%s, %v, seed %d%s.", run.date.UTC().Format("2006-01-02 15:04 MST"), commit, run.duration.Round(time.Second), run.seed, settings)
	p("")
	p("| figure | value |")
	p("|---|---|")
	p("| overlaps (two members acting as leader at one instant) | %d |", r.overlaps)
	p("| act spans checked | %d |", r.spans)
	p("| worst leaderless gap | %v (after a `%s` fault) |", r.gap.Round(time.Millisecond), r.gapAfter)
	p("")
	p("| kind | faults | moved | resumed | failover median | failover max | overlaps |")
	p("|---|---|---|---|---|---|---|")
	for _, k := range r.kinds {
		p("| `%s` | %d | %d | %d | %s | %s | %d |", k.kind, k.faults, k.moved, k.resumed, fmtDur(k.median), fmtDur(k.max), k.overlaps)
	}
	if len(r.scenarios) > 0 {
		p("")
		p("| scenario | length | outcome (from the fault's start) | leadership changes during it | led during it | overlaps |")
		p("|---|---|---|---|---|---|")
		for _, s := range r.scenarios {
			p("| %s | %v | %s | %d | %v | %d |", s.name, s.dur.Round(time.Second), s.outcome(), s.changes, s.led.Round(100*time.Millisecond), s.overlaps)
		}
	}
}

// appendMarkdown appends the run's section to the page at path, starting the page if need be.
func (r report) appendMarkdown(path string, run runInfo) error {
	return chaos.AppendSection(path, reportTitle, func(w io.Writer) { r.markdown(w, run) })
}
