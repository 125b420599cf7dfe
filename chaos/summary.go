// Package chaos is goneli's chaos suite: contender processes (internal/member) run against the
// embedded broker while faults are injected at random, and an independent checker
// (internal/verdict) reads what every process reported, on one wall clock, and judges mutual
// exclusion, leaderless gaps and failover.
//
// The suite itself is in chaos_test.go; this file aggregates the checker's reports of several
// trials into the summary the suite prints.
package chaos

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/verdict"
)

// Summary aggregates the reports of several trials.
type Summary struct {
	Trials  int
	Reports []verdict.Report
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
	byKind := map[string][]verdict.FaultResult{}
	var infos []verdict.Overlap
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
		counts := map[verdict.Outcome]int{}
		for _, f := range byKind[k] {
			counts[f.Outcome]++
			if f.Outcome == verdict.FailedOver || f.Outcome == verdict.Resumed {
				ds = append(ds, f.Failover)
			}
		}
		med, mx := "-", "-"
		if len(ds) > 0 {
			slices.Sort(ds)
			med = ds[(len(ds)-1)/2].Round(time.Millisecond).String()
			mx = ds[len(ds)-1].Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "%-12s %6d %8d %8d %8d %8d %10s  %s\n", k, len(byKind[k]), len(byKind[k])-counts[verdict.NotLeader],
			counts[verdict.FailedOver], counts[verdict.Resumed], counts[verdict.Unaffected], med, mx)
	}
	for _, r := range s.Reports {
		for _, v := range r.Violations {
			fmt.Fprintf(w, "  VIOLATION %s\n", v)
		}
	}
}
