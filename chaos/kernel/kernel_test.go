package kernel

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/chaos"
	"github.com/goneli/goneli/internal/verdict"
)

// The named scenarios of issue 29, each a fault on the leader (or everyone) lasting the window.
const (
	scenarioDelayLeader = "leader delayed"         // (a): another member must lead within failoverTarget
	scenarioDelayAll    = "every member delayed"   // (b): leadership should change hands rarely
	scenarioCutOut      = "leader cut one way out" // its packets to the broker lost
	scenarioCutIn       = "leader cut one way in"  // the broker's packets to it lost
)

// failoverTarget is how soon, at a 1 s lease, another member must lead once the leader alone is
// delayed (scenario a): fenced after a lease, it hands over after Config.HandOverAfter (a lease),
// and the rebalance that follows takes well under a second.
const failoverTarget = 3 * time.Second

// settings of a run, from the environment (docs/chaos.md).
type settings struct {
	faults  int // random faults; 0 is the short run: each kind once
	lease   time.Duration
	members int
	seed    uint64
	window  time.Duration // how long each scenario's fault lasts
	all     bool          // every scenario; the short run has only scenario (a)
	kinds   []string      // of the random mix
	args    []string
	logDir  string
	report  string
}

func readSettings(t *testing.T) settings {
	s := settings{lease: time.Second, members: 3, seed: uint64(time.Now().UnixNano()), window: 6 * time.Second}
	num := func(key string, into *int, lo int) {
		if v := os.Getenv(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < lo {
				t.Fatalf("%s=%q: want a number of at least %d", key, v, lo)
			}
			*into = n
		}
	}
	dur := func(key string, into *time.Duration) {
		if v := os.Getenv(key); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				t.Fatalf("%s=%q: want a positive duration such as 5s", key, v)
			}
			*into = d
		}
	}
	num("KERNEL_FAULTS", &s.faults, 0)
	num("KERNEL_MEMBERS", &s.members, 2)
	if s.faults > 0 {
		// The long run: the scenarios at their full length.
		s.window, s.all = 20*time.Second, true
	}
	dur("KERNEL_LEASE", &s.lease)
	dur("KERNEL_WINDOW", &s.window)
	if v := os.Getenv("KERNEL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("KERNEL_SEED=%q: want an unsigned number", v)
		}
		s.seed = n
	}
	s.kinds = kinds
	switch v := os.Getenv("KERNEL_KINDS"); v {
	case "":
	case "none":
		s.kinds = nil
	default:
		s.kinds = nil
		for _, k := range strings.Split(v, ",") {
			if !slices.Contains(kinds, k) {
				t.Fatalf("KERNEL_KINDS: unknown kind %q; kinds are %v, or none", k, kinds)
			}
			s.kinds = append(s.kinds, k)
		}
	}
	s.args = strings.Fields(os.Getenv("KERNEL_MEMBER_ARGS"))
	s.logDir = os.Getenv("KERNEL_LOGDIR")
	s.report = os.Getenv("KERNEL_REPORT")
	return s
}

// TestKernelFaults runs member processes in network namespaces and injects faults through the
// kernel on whoever leads, then the scenarios, and fails on any instant at which two
// members acted as leader. The short run (CI) injects each kind once and scenario (a) for 6 s;
// KERNEL_FAULTS=N draws N faults and runs every scenario for 20 s (make chaos-kernel).
func TestKernelFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	s := readSettings(t)
	t.Logf("kernel faults: seed %d (KERNEL_SEED), lease %v, %d members, %d random faults (0: each kind once), scenarios of %v",
		s.seed, s.lease, s.members, s.faults, s.window)
	start := time.Now()
	h := newHarness(t, options{lease: s.lease, members: s.members, seed: s.seed, args: s.args, logDir: s.logDir})
	var plan []planned
	switch {
	case len(s.kinds) == 0:
		// KERNEL_KINDS=none: the scenarios alone.
	case s.faults == 0:
		for _, k := range s.kinds {
			plan = append(plan, planned{kind: k, dur: h.between(h.lease/2, 3*h.lease)})
		}
		h.rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	default:
		for range s.faults {
			plan = append(plan, planned{kind: s.kinds[h.rng.IntN(len(s.kinds))], dur: h.between(h.lease/2, 3*h.lease)})
		}
	}
	plan = append(plan, planned{kind: kindDelay, dur: s.window, name: scenarioDelayLeader})
	if s.all {
		plan = append(plan, planned{kind: kindDelayAll, dur: s.window, name: scenarioDelayAll},
			planned{kind: kindOneWayOut, dur: s.window, name: scenarioCutOut},
			planned{kind: kindOneWayIn, dur: s.window, name: scenarioCutIn})
	}
	h.run(plan)
	r := h.finish()
	res := results(r, verdict.ActSpans(h.fleet.ByProcess()), h.names, s.lease)
	var out bytes.Buffer
	res.print(&out)
	t.Logf("kernel faults, seed %d, in %v:\n%s", s.seed, time.Since(start).Round(time.Second), out.String())
	for _, sc := range res.scenarios {
		if sc.name == scenarioDelayLeader && s.lease <= time.Second && !sc.metTarget() {
			// A timing, which a loaded CI machine can miss, with some 0.2-0.5 s to spare here
			// (docs/chaos.md): it fails the run only where asked to, so that CI stays a check of
			// mutual exclusion.
			report := t.Logf
			if os.Getenv("KERNEL_TARGETS") == "1" {
				report = t.Errorf
			}
			report("TARGET MISSED: %s for %v at a %v lease: %s; want another member leading within %v", sc.name, sc.dur.Round(time.Second), s.lease, sc.outcome(), failoverTarget)
		}
	}
	if s.report != "" {
		// KERNEL_REPORT and KERNEL_LOGDIR only say where output goes.
		run := runInfo{seed: s.seed, commit: chaos.GitCommit(), settings: chaos.Settings("KERNEL_", "KERNEL_REPORT", "KERNEL_LOGDIR"),
			date: start, duration: time.Since(start)}
		if err := res.appendMarkdown(s.report, run); err != nil {
			t.Errorf("writing report: %v", err)
		}
	}
}

// TestHealedCut measures, at KERNEL_HEAL_LEASE (default goneli's default lease), what leadership
// does after a blackhole of the leader that heals within its group session: whether it moves after
// the heal, and how long after. Opt-in (KERNEL_HEAL_CUTS=3s,4.5s,5.5s, each cut KERNEL_HEAL_REPS
// times, default 2), as each cut costs about half a minute.
func TestHealedCut(t *testing.T) {
	cuts := os.Getenv("KERNEL_HEAL_CUTS")
	if cuts == "" {
		t.Skip("KERNEL_HEAL_CUTS is not set")
	}
	s := readSettings(t)
	s.lease = goneli.DefaultHeartbeatTimeout
	if v := os.Getenv("KERNEL_HEAL_LEASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("KERNEL_HEAL_LEASE=%q: %v", v, err)
		}
		s.lease = d
	}
	reps := 2
	if v := os.Getenv("KERNEL_HEAL_REPS"); v != "" {
		reps, _ = strconv.Atoi(v)
	}
	h := newHarness(t, options{lease: s.lease, members: s.members, seed: s.seed, args: s.args, logDir: s.logDir})
	var plan []planned
	for _, c := range strings.Split(cuts, ",") {
		d, err := time.ParseDuration(c)
		if err != nil {
			t.Fatalf("KERNEL_HEAL_CUTS: %q: %v", c, err)
		}
		for range reps {
			plan = append(plan, planned{kind: kindBlackhole, dur: d, name: "cut " + d.String()})
		}
	}
	// Each cut starts from a settled group: the wait before it is two leases or more.
	for _, p := range plan {
		h.run([]planned{p})
		h.awaitSettledFor(2 * h.lease)
	}
	r := h.finish()
	rows := make([]healRow, len(r.Faults))
	for i, f := range r.Faults {
		rows[i] = healRow{cut: f.Healed.Sub(f.At), outcome: f.Outcome, events: fencedDuring(h, f, r.Faults, i)}
		if f.Outcome == verdict.FailedOver || f.Outcome == verdict.Resumed {
			rows[i].failover, rows[i].afterHeal = f.Failover, f.At.Add(f.Failover).Sub(f.Healed)
		}
	}
	var b strings.Builder
	printHeal(&b, s.lease, s.args, rows)
	t.Logf("healed cuts:\n%s", b.String())
	if s.report != "" {
		run := runInfo{seed: s.seed, commit: chaos.GitCommit(), settings: chaos.Settings("KERNEL_", "KERNEL_REPORT", "KERNEL_LOGDIR"), date: time.Now()}
		if err := chaos.AppendSection(s.report, reportTitle, func(w io.Writer) { healMarkdown(w, run, s.lease, s.args, rows) }); err != nil {
			t.Errorf("writing report: %v", err)
		}
	}
}

// healRow is one cut of TestHealedCut: how long, what leadership did, when (from the cut's start,
// and from the heal), and what the victim heard.
type healRow struct {
	cut, failover, afterHeal time.Duration
	outcome                  verdict.Outcome
	events                   string
}

func printHeal(w io.Writer, lease time.Duration, args []string, rows []healRow) {
	fmt.Fprintf(w, "lease %v, session %v, member flags %q\n", lease, goneli.SessionTimeout(lease), args)
	fmt.Fprintf(w, "%-10s %-12s %10s %14s  %s\n", "cut", "outcome", "failover", "after the heal", "victim's events from the cut")
	for _, r := range rows {
		fmt.Fprintf(w, "%-10s %-12s %10s %14s  %s\n", r.cut.Round(100*time.Millisecond), r.outcome, fmtDur(r.failover), fmtDur(r.afterHeal), r.events)
	}
}

func healMarkdown(w io.Writer, run runInfo, lease time.Duration, args []string, rows []healRow) {
	p := func(format string, a ...any) { _, _ = fmt.Fprintf(w, format+"\n", a...) }
	p("")
	p("## Healed cuts at a lease of %v (session %v)", lease, goneli.SessionTimeout(lease))
	p("")
	flags := "no extra member flags"
	if len(args) > 0 {
		flags = "member flags `" + strings.Join(args, " ") + "`"
	}
	commit := ""
	if run.commit != "" {
		commit = " on commit " + run.commit
	}
	p("`TestHealedCut`, run %s%s, %s: a blackhole of the leader, both ways, then the heal.", run.date.UTC().Format("2006-01-02 15:04 MST"), commit, flags)
	p("")
	p("| cut | outcome | failover (from the cut) | after the heal | the victim's events, from the cut |")
	p("|---|---|---|---|---|")
	for _, r := range rows {
		p("| %v | %s | %s | %s | %s |", r.cut.Round(100*time.Millisecond), r.outcome, fmtDur(r.failover), fmtDur(r.afterHeal), r.events)
	}
}

// awaitSettledFor lets the group run undisturbed for d.
func (h *harness) awaitSettledFor(d time.Duration) {
	// Nothing to wait on: this is the quiet time between two measured faults.
	time.Sleep(d)
}

// fencedDuring says when the victim of fault i heard it was fenced or revoked, relative to the
// fault's start, before the next fault.
func fencedDuring(h *harness, f verdict.FaultResult, all []verdict.FaultResult, i int) string {
	limit := time.Now()
	if i+1 < len(all) {
		limit = all[i+1].At
	}
	var parts []string
	for _, l := range h.fleet.ByProcess()[f.Victim] {
		at := time.Unix(0, l.At)
		if at.Before(f.At) || at.After(limit) {
			continue
		}
		switch l.Event {
		case "fenced", "revoked", "acquired":
			parts = append(parts, fmt.Sprintf("%s +%v", l.Event, at.Sub(f.At).Round(time.Millisecond)))
		}
	}
	return strings.Join(parts, ", ")
}
