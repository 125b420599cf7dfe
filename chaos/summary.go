// Package chaos is goneli's chaos suite: contender processes (internal/member) run against the
// embedded broker while faults are injected at random, and an independent checker
// (internal/verdict) reads what every process reported, on one wall clock, and judges mutual
// exclusion, leaderless gaps and failover.
//
// With CHAOS_ROLES=N every member contends for N numbered roles (goneli.NewRoles) instead of the
// single leadership of goneli.New, and every fault kind runs against them. Each role is checked
// for overlap on its own (acting for different roles at once is no conflict), faults aimed at a
// member prefer the one that leads the most roles, and the summary gives the failover figures
// across every role a fault hit, and the overlaps and worst gap of each role. TestChaosRoles is a
// short run of that mode, one trial with a few kinds, that the default `go test ./chaos/` (CI)
// includes.
//
// With CHAOS_BROKERS=3 the members run against a three-broker embedded cluster, and more kinds
// move the group's coordinator and the leader topic's partitions between brokers, cut one broker
// off, take one away, restart them in turn, or cut the coordinator off as a rebalance begins; those
// that stall elections are drawn only when CHAOS_KINDS names them (outOfBrokerMix says why). The
// summary's first line gives the number of brokers.
//
// With CHAOS_REAL=1 (`make chaos-real`, TestChaosReal in real_test.go) the members run against a
// KRaft cluster of Apache Kafka's own brokers (internal/realkafka) instead, with the fault kinds
// that real Kafka can be given; the summary then names Kafka's version.
//
// The suite itself is in chaos_test.go; this file aggregates the checker's reports of several
// trials into the summary the suite prints.
package chaos

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/verdict"
)

// Summary aggregates the reports of several trials.
type Summary struct {
	Brokers int // nodes of the cluster
	// Kafka is the version of Apache Kafka the members ran against (TestChaosReal); "" for the
	// embedded cluster (kfake).
	Kafka   string
	Trials  int
	Reports []verdict.Report
	// LibrdkafkaAborts counts members that librdkafka's admin use-after-free aborted (see
	// knownAbort in chaos_test.go). The harness restarts such a member as after a crash, and the
	// trial fails: goneli must keep librdkafka from aborting.
	LibrdkafkaAborts int
	// WritesChecked is set when the members wrote through FencedProducers; CommittedWrites counts
	// the records read back as committed and InterleavedWrites those that followed a record of a
	// later tenure of their role, which fenced writes promise never happens.
	WritesChecked                      bool
	CommittedWrites, InterleavedWrites int
}

// Overlaps counts safety violations over all trials.
func (s Summary) Overlaps() int {
	n := 0
	for _, r := range s.Reports {
		n += len(r.Overlaps)
	}
	return n
}

// hasRoles reports whether the members contended for roles.
func (s Summary) hasRoles() bool {
	for _, r := range s.Reports {
		if r.HasRoles() {
			return true
		}
	}
	return false
}

// totals are the figures of all trials together.
type totals struct {
	byKind        map[string][]verdict.FaultResult
	kinds         []string // sorted
	faults, spans int
	duration      time.Duration
	infos         int           // overlaps of acquired..fenced/revoked intervals
	longestInfo   time.Duration // the longest of them
	gap           time.Duration // the worst leaderless gap (of one role)
	gapAfter      string
	gapRole       string
	roles         []string // in role order
	byRole        map[string]*roleFigures
}

// roleFigures are one role's figures over all trials.
type roleFigures struct {
	spans, overlaps int
	gap             time.Duration
	gapAfter        string
}

func (s Summary) totals() totals {
	t := totals{byKind: map[string][]verdict.FaultResult{}, byRole: map[string]*roleFigures{}}
	for _, r := range s.Reports {
		for _, f := range r.Faults {
			t.byKind[f.Kind] = append(t.byKind[f.Kind], f)
		}
		t.faults += len(r.Faults)
		t.spans += r.Spans
		t.infos += len(r.InfoOverlaps)
		for _, o := range r.InfoOverlaps {
			t.longestInfo = max(t.longestInfo, o.Duration())
		}
		if r.Gap > t.gap {
			t.gap, t.gapAfter, t.gapRole = r.Gap, r.GapAfter, r.GapRole
		}
		t.duration += r.End.Sub(r.Start)
		for _, rr := range r.Roles {
			f := t.byRole[rr.Role]
			if f == nil {
				f = &roleFigures{}
				t.byRole[rr.Role] = f
				t.roles = append(t.roles, rr.Role)
			}
			f.spans += rr.Spans
			f.overlaps += rr.Overlaps
			if rr.Gap > f.gap {
				f.gap, f.gapAfter = rr.Gap, rr.GapAfter
			}
		}
	}
	t.kinds = slices.Sorted(maps.Keys(t.byKind))
	verdict.SortRoles(t.roles)
	return t
}

// printHead writes what both forms of the summary begin with: the run, the faults by kind and the
// overlaps of act spans, for one leader or for one role.
func (s Summary) printHead(w io.Writer, t totals, title, what string) {
	fmt.Fprintf(w, "%s: brokers=%d%s trials=%d faults=%d duration=%v act spans=%d\n", title, s.Brokers, s.kafkaField(), s.Trials, t.faults, t.duration.Round(time.Second), t.spans)
	var parts []string
	for _, k := range t.kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, len(t.byKind[k])))
	}
	fmt.Fprintf(w, "faults by kind: %s\n", strings.Join(parts, " "))
	fmt.Fprintf(w, "overlaps (two processes acting as %s at one instant): %d\n", what, s.Overlaps())
	fmt.Fprintf(w, "members aborted by librdkafka's admin use-after-free (confluentinc/librdkafka#4605): %d\n", s.LibrdkafkaAborts)
}

// kafkaField is " kafka=<version>" for a run on Apache Kafka, else nothing.
func (s Summary) kafkaField() string {
	if s.Kafka == "" {
		return ""
	}
	return " kafka=" + s.Kafka
}

// brokersText names the cluster for the report: "3 broker(s)", or "3 node(s) of Apache Kafka 4.4.0".
func (s Summary) brokersText() string {
	if s.Kafka == "" {
		return fmt.Sprintf("%d broker(s)", s.Brokers)
	}
	return fmt.Sprintf("%d node(s) of Apache Kafka %s", s.Brokers, s.Kafka)
}

// printOverlaps writes every overlap of act spans.
func (s Summary) printOverlaps(w io.Writer) {
	for _, r := range s.Reports {
		for _, o := range r.Overlaps {
			fmt.Fprintf(w, "  OVERLAP %v\n", o)
		}
	}
}

// LateCommits counts, over all trials, the fenced writes that committed although their commit
// call began after a later tenure of their role had fenced them (verdict.LateCommits).
func (s Summary) LateCommits() int {
	n := 0
	for _, r := range s.Reports {
		n += len(r.LateCommits)
	}
	return n
}

// timedCommits counts the committed fenced writes whose commit call the members timed.
func (s Summary) timedCommits() int {
	n := 0
	for _, r := range s.Reports {
		n += r.Commits
	}
	return n
}

// printWrites writes the fenced-write check's figures, when it ran.
func (s Summary) printWrites(w io.Writer) {
	if s.WritesChecked {
		fmt.Fprintf(w, "interleaved committed writes: %d (of %d committed records)\n", s.InterleavedWrites, s.CommittedWrites)
		fmt.Fprintf(w, "commits after their tenure's end: %d (of %d commit calls timed)\n", s.LateCommits(), s.timedCommits())
		s.printLateCommits(w)
	}
}

// printLateCommits writes every late commit.
func (s Summary) printLateCommits(w io.Writer) {
	for _, r := range s.Reports {
		for _, c := range r.LateCommits {
			fmt.Fprintf(w, "  LATE COMMIT %v\n", c)
		}
	}
}

// printViolations writes every broken event order.
func (s Summary) printViolations(w io.Writer) {
	for _, r := range s.Reports {
		for _, v := range r.Violations {
			fmt.Fprintf(w, "  VIOLATION %s\n", v)
		}
	}
}

// Print writes the summary: trials, faults by kind, overlaps, worst gap, failover per kind; with
// roles, figures across every role a fault hit and each role's overlaps and worst gap.
func (s Summary) Print(w io.Writer) {
	t := s.totals()
	if s.hasRoles() {
		s.printRoles(w, t)
		return
	}
	s.printHead(w, t, "chaos summary", "leader")
	s.printOverlaps(w)
	s.printWrites(w)
	fmt.Fprintf(w, "overlaps of acquired..fenced/revoked intervals (information only; a frozen or cut process hears late): %d, longest %v\n",
		t.infos, t.longestInfo.Round(time.Millisecond))
	fmt.Fprintf(w, "worst leaderless gap: %v (after a %s fault)\n", t.gap.Round(time.Millisecond), t.gapAfter)
	fmt.Fprintf(w, "%-15s %6s %8s %8s %8s %8s %10s  %s\n", "kind", "faults", "leader", "moved", "resumed", "unaff.", "median", "max (injection to next leader action)")
	for _, r := range t.kindRows(false) {
		fmt.Fprintf(w, "%-15s %6d %8d %8d %8d %8d %10s  %s\n", r.kind, r.faults, r.leader, r.moved, r.resumed, r.unaffected, r.median, r.max)
	}
	s.printViolations(w)
}

// kindRow is one fault kind's line of the summary. With roles, its outcomes and failover times
// count every role a fault hit, and hit says how many roles that was.
type kindRow struct {
	kind                                            string
	faults, leader, hit, moved, resumed, unaffected int
	median, max                                     string
}

// kindRows aggregates the faults of each kind, per fault or, with roles, per role hit.
func (t totals) kindRows(roles bool) []kindRow {
	var rows []kindRow
	for _, k := range t.kinds {
		var ds []time.Duration
		counts := map[verdict.Outcome]int{}
		row := kindRow{kind: k, faults: len(t.byKind[k])}
		count := func(o verdict.Outcome, d time.Duration) {
			counts[o]++
			if o == verdict.FailedOver || o == verdict.Resumed {
				ds = append(ds, d)
			}
		}
		for _, f := range t.byKind[k] {
			if !roles {
				count(f.Outcome, f.Failover)
				continue
			}
			if len(f.Roles) > 0 {
				row.leader++
			}
			for _, rr := range f.Roles {
				row.hit++
				count(rr.Outcome, rr.Failover)
			}
		}
		if !roles {
			row.leader = row.faults - counts[verdict.NotLeader]
		}
		row.moved, row.resumed, row.unaffected = counts[verdict.FailedOver], counts[verdict.Resumed], counts[verdict.Unaffected]
		row.median, row.max = medianMax(ds)
		rows = append(rows, row)
	}
	return rows
}

// printRoles is Print for members with roles.
func (s Summary) printRoles(w io.Writer, t totals) {
	s.printHead(w, t, fmt.Sprintf("chaos summary (%d roles)", len(t.roles)), "leader of one role")
	var parts []string
	for _, r := range t.roles {
		parts = append(parts, fmt.Sprintf("%s=%d", r, t.byRole[r].overlaps))
	}
	fmt.Fprintf(w, "overlaps per role: %s\n", strings.Join(parts, " "))
	s.printOverlaps(w)
	s.printWrites(w)
	fmt.Fprintf(w, "overlaps of acquired..fenced/revoked intervals of one role (information only; a frozen or cut process hears late): %d, longest %v\n",
		t.infos, t.longestInfo.Round(time.Millisecond))
	fmt.Fprintf(w, "worst leaderless gap of one role: %v (role %s, after a %s fault)\n", t.gap.Round(time.Millisecond), t.gapRole, t.gapAfter)
	fmt.Fprintf(w, "%-15s %6s %8s %6s %8s %8s %8s %10s  %s\n", "kind", "faults", "leader", "roles", "moved", "resumed", "unaff.", "median", "max (injection to next action, per role hit)")
	for _, r := range t.kindRows(true) {
		fmt.Fprintf(w, "%-15s %6d %8d %6d %8d %8d %8d %10s  %s\n", r.kind, r.faults, r.leader, r.hit,
			r.moved, r.resumed, r.unaffected, r.median, r.max)
	}
	fmt.Fprintf(w, "%-6s %8s %8s %10s  %s\n", "role", "spans", "overlaps", "worst gap", "after")
	for _, r := range t.roles {
		f := t.byRole[r]
		fmt.Fprintf(w, "%-6s %8d %8d %10s  %s\n", r, f.spans, f.overlaps, f.gap.Round(time.Millisecond), f.gapAfter)
	}
	s.printViolations(w)
}

// medianMax renders the median and the maximum of ds, or dashes if it is empty.
func medianMax(ds []time.Duration) (string, string) {
	if len(ds) == 0 {
		return "-", "-"
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)/2].Round(time.Millisecond).String(), ds[len(ds)-1].Round(time.Millisecond).String()
}
