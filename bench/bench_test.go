package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	args := []string{"--short", "--out", filepath.Join(dir, "bench.json"), "--svg", filepath.Join(dir, "bench.svg")}
	o, err := parseOptions(args, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep, err := run(o, args, &table)
	t.Log(table.String())
	if err != nil {
		t.Fatalf("short run failed: %v", err)
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
		t.Fatalf("bench.json: %v", err)
	}
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
	if len(got.Timelines) == 0 {
		t.Error("no timelines")
	}
	svg, err := os.ReadFile(o.svg)
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("bench.svg: %v, starts %q", err, svg[:min(len(svg), 20)])
	}
	if !strings.Contains(table.String(), "Leadership overlap: none") {
		t.Error("the table does not report the overlap check")
	}
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
