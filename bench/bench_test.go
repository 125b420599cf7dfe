package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/member"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The short run starts its members by re-executing this test binary.
	runMemberIfAsked()
	goleak.VerifyTestMain(m)
}

// TestShortRun is the CI smoke test of the benchmark: it runs the short mode end to end, with
// member processes on the embedded broker, and checks that every figure was measured and that no
// two members ever acted as leader at once. It does not judge the figures: speed is for the full
// benchmark to print, not for a test to assert.
func TestShortRun(t *testing.T) {
	dir := t.TempDir()
	o, got, table := runBench(t, "--short", "--out", filepath.Join(dir, "bench.json"), "--svg", filepath.Join(dir, "bench.svg"))
	if got.Overlap.Count != 0 || got.Overlap.SpansChecked == 0 {
		t.Errorf("overlap check: %+v, want spans checked and none overlapping", got.Overlap)
	}
	if len(got.FirstLeader) != len(o.contenders) {
		t.Errorf("first leader figures for %d group sizes, want %d", len(got.FirstLeader), len(o.contenders))
	}
	for _, fl := range got.FirstLeader {
		if fl.LaunchToAcquired.N != o.firstReps || fl.LaunchToAcquired.Median <= 0 || fl.StartedToAcquired.N != o.firstReps {
			t.Errorf("first leader with %d contenders: %+v", fl.Contenders, fl)
		}
	}
	series := map[string]Series{}
	for _, s := range got.Series {
		series[s.Name] = s
	}
	want := map[string]int{
		seriesHandoff: o.trials, seriesHandoffLeft: o.trials, seriesFailover: o.trials, seriesCrashGap: o.trials,
		seriesFenceFenced: o.fenceTrials, seriesFenceLastAct: o.fenceTrials, seriesFenceNext: o.fenceTrials, seriesFenceGap: o.fenceTrials,
	}
	for name, n := range want {
		s, ok := series[name]
		if !ok || s.N != n || len(s.SamplesMs) != n || s.Median <= 0 || s.Max < s.P90 || s.P90 < s.Median {
			t.Errorf("series %s: %+v, want %d samples", name, s, n)
		}
	}
	if len(got.Cost) != len(o.contenders) {
		t.Errorf("cost figures for %d group sizes, want %d", len(got.Cost), len(o.contenders))
	}
	for _, c := range got.Cost {
		if c.HeartbeatsPerS <= 0 || c.RequestsPerS <= 0 || c.ProduceBytesPerS <= 0 || c.LeaderRSSMB <= 0 ||
			c.LeaderThreads <= 0 || c.LeaderCPUSPerMin <= 0 || (c.Instances > 1 && c.FollowerRSSMB <= 0) {
			t.Errorf("cost of %d instances: %+v", c.Instances, c)
		}
	}
	if c := got.IdleLeader; c == nil || c.Instances != o.groupSize || c.LeaderCPUSPerMin <= 0 {
		t.Errorf("idle leader: %+v, want the cost of a group of %d", c, o.groupSize)
	}
	if len(got.Timelines) == 0 {
		t.Error("no timelines")
	}
	if want := 2 * o.rollingTrials * len(o.leases); len(got.Rolling) != want {
		t.Errorf("%d rolling upgrades, want %d", len(got.Rolling), want)
	}
	for _, r := range got.Rolling {
		if len(r.Leaders) == 0 || r.Changes != len(r.Leaders)-1 || r.NewLeadsAtStep == 0 {
			t.Errorf("rolling upgrade: %+v", r)
		}
	}
	svg, err := os.ReadFile(o.svg)
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("bench.svg: %v, starts %q", err, svg[:min(len(svg), 20)])
	}
	if !strings.Contains(table, "Leadership overlap: none") {
		t.Error("the table does not report the overlap check")
	}
}

// runBench runs the benchmark in this process with args, which must include --out, and returns its
// options, the report it wrote there and the table it printed. It fails the test if the run
// failed or found two members acting as leader at once.
func runBench(t *testing.T, args ...string) (options, Report, string) {
	t.Helper()
	o, err := parseOptions(args, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep, err := run(o, args, &table)
	t.Log(table.String())
	if err != nil {
		t.Fatalf("run failed: %v", err)
	}
	if rep.Overlap.Count != 0 {
		t.Errorf("leadership overlap: %+v", rep.Overlap.Instances)
	}
	raw, err := os.ReadFile(o.out)
	if err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s: %v", o.out, err)
	}
	return o, got, table.String()
}

func TestParseOptionsShortKeepsExplicitFlags(t *testing.T) {
	o, err := parseOptions([]string{"--short", "--trials", "5"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.trials != 5 || o.fenceTrials != 1 || len(o.leases) != 1 {
		t.Errorf("got trials %d, fence trials %d, leases %v", o.trials, o.fenceTrials, o.leases)
	}
	if _, err := parseOptions([]string{"--heartbeat-timeouts", "100ms"}, &bytes.Buffer{}); err == nil {
		t.Error("accepted a HeartbeatTimeout below the minimum")
	}
}

func TestSummarise(t *testing.T) {
	var samples []float64
	for i := 20; i >= 1; i-- {
		samples = append(samples, float64(i))
	}
	s := summarise(samples)
	if s.N != 20 || s.Min != 1 || s.Median != 10 || s.P90 != 18 || s.Max != 20 {
		t.Errorf("%+v", s)
	}
}

// TestShortRolesRun is the CI smoke test of the roles scenarios: only they run, small, with member
// processes on the embedded broker. It checks that every roles figure was measured and that no
// two members ever acted for one role at once; like TestShortRun it does not judge the figures.
func TestShortRolesRun(t *testing.T) {
	o, got, table := runBench(t, "--short", "--roles-scenarios", "--contenders", "", "--trials", "0", "--fence-trials", "0",
		"--roles-trials", "1", "--cost-window", "2s", "--out", filepath.Join(t.TempDir(), "bench.json"))
	if got.Overlap.SpansChecked == 0 {
		t.Errorf("overlap check: %+v, want spans checked", got.Overlap)
	}
	if len(got.Series) != 0 || len(got.FirstLeader) != 0 || len(got.Cost) != 0 {
		t.Errorf("single-leader figures measured although not asked for: %d series, %d first leader, %d cost",
			len(got.Series), len(got.FirstLeader), len(got.Cost))
	}
	rr := got.Roles
	if rr == nil {
		t.Fatal("bench.json has no roles section")
	}
	if rr.Roles != o.roles || rr.HandoffRoles != o.handoffRoles || rr.HandoffMembers != o.groupSize {
		t.Errorf("roles section: %d roles, handoff %d roles over %d members; want %d, %d, %d",
			rr.Roles, rr.HandoffRoles, rr.HandoffMembers, o.roles, o.handoffRoles, o.groupSize)
	}
	wantSetups := map[string][2]int{setupOneRole: {1, 1}, setupRoles: {1, o.roles}, setupInstances: {o.roles, o.roles}}
	for _, c := range rr.Cost {
		w, ok := wantSetups[c.Setup]
		delete(wantSetups, c.Setup)
		if !ok || c.Processes != w[0] || c.Roles != w[1] || c.CPUSPerMin <= 0 || c.CPUSPerMinPerRole <= 0 || c.RSSMB <= 0 ||
			c.Threads <= 0 || c.HeartbeatsPerSPerRole <= 0 || c.RequestsPerSPerRole <= 0 || c.RSSMBTotal < c.RSSMB {
			t.Errorf("cost of %s: %+v, want %d processes leading %d roles, every figure measured", c.Setup, c, w[0], w[1])
		}
	}
	if len(wantSetups) > 0 {
		t.Errorf("no cost figures for %v", wantSetups)
	}
	series := map[string]Series{}
	for _, s := range rr.Series {
		series[s.Name] = s
	}
	// Each trial stops a member leading at least one role: one sample per role it led, and one for
	// all of them.
	for _, name := range []string{seriesRolesHandoff, seriesRolesFailover, seriesRolesCrashGap} {
		if s := series[name]; s.N < o.rolesTrials || s.Median <= 0 {
			t.Errorf("series %s: %+v, want at least %d samples", name, s, o.rolesTrials)
		}
	}
	for _, name := range []string{seriesRolesHandoffAll, seriesRolesFailoverAll} {
		if s := series[name]; s.N != o.rolesTrials || s.Median <= 0 {
			t.Errorf("series %s: %+v, want %d samples", name, s, o.rolesTrials)
		}
	}
	if len(rr.Group) != 1 {
		t.Fatalf("group figures: %+v, want one group", rr.Group)
	}
	g := rr.Group[0]
	if g.Members != o.rolesGroup || g.Roles != o.roles || g.LaunchToAllAcquiredMs <= 0 || g.LaunchToBalancedMs < g.LaunchToAllAcquiredMs {
		t.Errorf("group: %+v", g)
	}
	for _, m := range []RolesMove{g.Leave, g.Join} {
		if m.Member == "" || m.MemberRoles < 1 || m.Moved < m.MemberRoles || m.Interrupted < m.MemberRoles || m.ToMovedActedMs <= 0 || m.ToBalancedMs <= 0 {
			t.Errorf("roles moved when %s left or joined: %+v", m.Member, m)
		}
	}
	for _, want := range []string{"| Roles: cost", "| Roles: handoff of one role", "| Roles: a group of", "Leadership overlap: none"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
}

func TestBalanced(t *testing.T) {
	roles := []string{"0", "1", "2", "3", "4"}
	for _, c := range []struct {
		led  map[string]string
		n    int
		want bool
	}{
		{map[string]string{"0": "a", "1": "a", "2": "b", "3": "b", "4": "c"}, 3, true},
		{map[string]string{"0": "a", "1": "a", "2": "a", "3": "b", "4": "c"}, 3, false}, // 3, 1, 1
		{map[string]string{"0": "a", "1": "a", "2": "b", "3": "b"}, 3, false},           // role 4 unled
		{map[string]string{"0": "a", "1": "a", "2": "b", "3": "b", "4": "b"}, 3, false}, // c leads nothing
		{map[string]string{"0": "a", "1": "a", "2": "b", "3": "b", "4": "b"}, 2, true},
	} {
		if got := balanced(c.led, roles, c.n); got != c.want {
			t.Errorf("balanced(%v, %d members) = %v, want %v", c.led, c.n, got, c.want)
		}
	}
}

func TestLeadersFollowsEvents(t *testing.T) {
	lines := []member.Line{
		{Name: "a", Event: member.EventAcquired, Role: "0"},
		{Name: "a", Event: member.EventAcquired, Role: "1"},
		{Name: "b", Event: member.EventAcquired, Role: "0"}, // a has not reported its fencing yet
		{Name: "a", Event: member.EventFenced, Role: "0"},
		{Name: "c", Event: member.EventAcquired, Role: "2"},
		{Name: "c", Event: fleet.EventExit},
		{Name: "d", Event: member.EventAcquired},
	}
	got := leaders(lines)
	if want := map[string]string{"0": "b", "1": "a", "": "d"}; !maps.Equal(got, want) {
		t.Errorf("leaders = %v, want %v", got, want)
	}
	if got := describeLeaders(got); got != "0=b 1=a =d " {
		t.Errorf("describeLeaders = %q", got)
	}
}

func TestParseOptionsRoles(t *testing.T) {
	o, err := parseOptions([]string{"--short", "--roles-scenarios", "--trials", "3"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !o.rolesScenarios || o.roles != 8 || o.rolesGroup != 4 || o.handoffRoles != 6 || o.rolesTrials != 3 {
		t.Errorf("short roles options: %+v", o)
	}
	o, err = parseOptions([]string{"--roles-trials", "4", "--roles", "16"}, &bytes.Buffer{})
	if err != nil || o.rolesScenarios || o.roles != 16 || o.rolesTrials != 4 || o.rolesGroup != 10 {
		t.Errorf("roles options: %+v, %v", o, err)
	}
	if !slices.Equal(o.rolesSetups, rolesSetups) {
		t.Errorf("default roles setups: %q", o.rolesSetups)
	}
	o, err = parseOptions([]string{"--roles-setups", "roles", "--roles-group", "0"}, &bytes.Buffer{})
	if err != nil || !slices.Equal(o.rolesSetups, []string{setupRoles}) || o.rolesGroup != 0 {
		t.Errorf("roles options: %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"--roles", "0"}, {"--roles-group", "1"}, {"--roles-handoff", "0"}, {"--roles-setups", "roles,many"}} {
		if _, err := parseOptions(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parseOptions(%q) accepted", bad)
		}
	}
}

// The docs' pages come from the committed results: --render writes the page and rewrites the
// README's summary between its markers, leaving the rest of the file alone, and a report from
// before the session was recorded names no session rather than today's.
func TestRenderMarkdown(t *testing.T) {
	dir := t.TempDir()
	md, readme := filepath.Join(dir, "docs", "results.md"), filepath.Join(dir, "README.md")
	if err := os.MkdirAll(filepath.Dir(md), 0o755); err != nil {
		t.Fatal(err)
	}
	before, after := "# title\n\n"+summaryBegin+"\nstale\n", summaryEnd+"\n\nthe rest\n"
	if err := os.WriteFile(readme, []byte(before+after), 0o644); err != nil {
		t.Fatal(err)
	}
	// The report of 4df71e4, kept as it was written (docs/performance-results-4df71e4.md): it predates the session and private-memory
	// figures, so the page must render without them (results.json is rewritten by every run).
	o, err := parseOptions([]string{"--render", filepath.Join("reports", "4df71e4.json"), "--md", md, "--readme", readme}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if err := renderFile(o.render, o); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(md)
	for _, want := range []string{"## Summary", "| graceful handoff (Close -> successor acts), 5 s lease | 1572 ms (c) | 309 ms |",
		"| crash failover (SIGKILL -> successor acts), 5 s lease | 15.2-16.6 s (c) | 10.2 s |", "- (b) the run beside goneli when the handoff work of issue 11 began",
		"| Failover and fencing (3 contenders)", "session timeout + rebalance"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("page lacks %q", want)
		}
	}
	if bytes.Contains(page, []byte("private (anonymous)")) {
		t.Error("page shows private memory, which the report did not measure")
	}
	got, _ := os.ReadFile(readme)
	s := string(got)
	if !strings.HasPrefix(s, before[:len(before)-len("stale\n")]) || !strings.HasSuffix(s, after) || strings.Contains(s, "stale") {
		t.Errorf("README outside the markers changed, or the old summary stayed:\n%s", s)
	}
	if !strings.Contains(s, "[docs/results.md](docs/results.md)") || !strings.Contains(s, "| graceful handoff, 1 s lease | ~1120 ms (b) | 68 ms |") {
		t.Errorf("README summary:\n%s", s)
	}
}

// --load runs the load scenario alone unless another scenario is asked for, and its lists parse.
func TestParseOptionsLoad(t *testing.T) {
	o, err := parseOptions([]string{"--load"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !o.load || o.trials != 0 || o.fenceTrials != 0 || o.crashTrials != 0 || o.rollingTrials != 0 || len(o.contenders) != 0 {
		t.Errorf("--load alone: %+v", o)
	}
	if !slices.Equal(o.loadInstances, []int{1, 4, 16, 64}) || o.loadRoles != 1000 ||
		!slices.Equal(o.loadDelays, []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond, time.Second}) {
		t.Errorf("load defaults: instances %v, roles %d, delays %v", o.loadInstances, o.loadRoles, o.loadDelays)
	}
	// Any other scenario's flag makes it a full run with the load scenario added.
	o, err = parseOptions([]string{"--first-reps", "10", "--roles-scenarios", "--load"}, &bytes.Buffer{})
	if err != nil || o.trials == 0 || o.fenceTrials == 0 || len(o.contenders) == 0 || o.rollingTrials == 0 {
		t.Errorf("--load with other scenarios: %+v", o)
	}
	o, err = parseOptions([]string{"--load", "--trials", "3", "--load-delays", "0,250ms", "--load-instances", "2"}, &bytes.Buffer{})
	if err != nil || o.trials != 3 || !slices.Equal(o.loadDelays, []time.Duration{0, 250 * time.Millisecond}) || !slices.Equal(o.loadInstances, []int{2}) {
		t.Errorf("load options: %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"--load-delays", "soon"}, {"--load-delays", "-1s"}, {"--load-instances", "0"}, {"--load-roles", "-1"}, {"--load-lease", "100ms"}} {
		if _, err := parseOptions(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parseOptions(%q) accepted", bad)
		}
	}
}

// The load tables show, per setup and delay, every member's requests by name with the rest as
// "other", the commits in flight and the fences.
func TestPrintLoadTables(t *testing.T) {
	rep := &LoadReport{HeartbeatTimeoutMs: 5000, Delayed: "late", Rows: []LoadRow{
		{Instances: 4, Roles: 1, DelayMs: 0, PerMemberRequestsPerS: 8, PerMemberRequestsPerSByKey: map[string]float64{"Produce": 2, "Fetch": 2, "OffsetCommit": 2, "Heartbeat": 1.5, "Metadata": 0.5},
			MaxInFlightByKey: map[string]int{"OffsetCommit": 1}, Fences: 0, Leading: 4},
		{Instances: 4, Roles: 1, DelayMs: 400, PerMemberRequestsPerS: 6, PerMemberRequestsPerSByKey: map[string]float64{"Produce": 2, "Fetch": 2, "OffsetCommit": 1, "Heartbeat": 1},
			MaxInFlightByKey: map[string]int{"OffsetCommit": 1}, Fences: 2, Leading: 3},
	}}
	var b bytes.Buffer
	printLoadTables(func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }, rep)
	out := b.String()
	for _, want := range []string{"| 4 instances, one role each: broker delay", "| 0 ms | 2.00, 2.00, 2.00, 1.50, 0.50 (8.00) | 1 |", "| 400 ms |", "| 2 | 3 of 4 |", "\"other\" is Metadata."} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
