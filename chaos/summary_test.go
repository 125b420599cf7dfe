package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/member"
	"github.com/goneli/goneli/internal/verdict"
)

func TestSummaryPrintsFigures(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) int64 { return t0.Add(time.Duration(n) * time.Millisecond).UnixNano() }
	act := func(from, to int) member.Line {
		return member.Line{At: ms(to), Event: member.EventAct, From: ms(from), To: ms(to)}
	}
	ev := func(at int, event string) member.Line { return member.Line{At: ms(at), Event: event} }
	lines := map[string][]member.Line{
		"a": {ev(0, member.EventAcquired), act(1, 100), ev(101, member.EventRevoked)},
		"b": {ev(150, member.EventAcquired), act(200, 300), act(250, 260), ev(301, member.EventRevoked)},
		"c": {ev(310, member.EventAcquired), act(300, 320)}, // overlaps b at 300 and ends without a revoke
	}
	faults := []verdict.Fault{{Kind: "sigkill", Victim: "a", WasLeader: true, At: time.Unix(0, ms(100))}}
	s := Summary{Brokers: 3, Trials: 1, Reports: []verdict.Report{verdict.Check(lines, nil, faults)}}
	var out bytes.Buffer
	s.Print(&out)
	for _, want := range []string{"chaos summary: brokers=3 trials=1 faults=1", "sigkill=1", "overlaps (two processes acting as leader at one instant): 1",
		"  OVERLAP b and c from ", "worst leaderless gap: 100ms (after a sigkill fault)",
		"sigkill              1        1        1        0        0      100ms  100ms",
		`  VIOLATION c: events "A" break the order`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if s.Overlaps() != 1 {
		t.Errorf("Overlaps() = %d, want 1", s.Overlaps())
	}
}

func TestSummaryPrintsRoleFigures(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) int64 { return t0.Add(time.Duration(n) * time.Millisecond).UnixNano() }
	act := func(role string, from, to int) member.Line {
		return member.Line{At: ms(to), Event: member.EventAct, From: ms(from), To: ms(to), Role: role}
	}
	ev := func(role string, at int, event string) member.Line {
		return member.Line{At: ms(at), Event: event, Role: role}
	}
	lines := map[string][]member.Line{
		// a leads roles 0 and 1 and is killed at 100 ms.
		"a": {ev("0", 0, member.EventAcquired), ev("1", 0, member.EventAcquired), act("0", 1, 100), act("1", 1, 100)},
		// b takes role 0 after 200 ms and role 1 after 400 ms, while c acts for role 1 at once:
		// an overlap of role 1 only.
		"b": {ev("0", 250, member.EventAcquired), act("0", 300, 600), ev("1", 450, member.EventAcquired), act("1", 500, 600),
			ev("0", 700, member.EventRevoked), ev("1", 700, member.EventRevoked)},
		"c": {ev("2", 0, member.EventAcquired), act("2", 0, 600), act("1", 550, 560), ev("2", 700, member.EventRevoked)},
	}
	faults := []verdict.Fault{{Kind: "sigkill", Victim: "a", WasLeader: true, At: time.Unix(0, ms(100)),
		Roles: map[string]string{"0": "a", "1": "a"}}}
	s := Summary{Brokers: 1, Trials: 1, Reports: []verdict.Report{verdict.Check(lines, map[string]time.Time{"a": time.Unix(0, ms(100))}, faults)}}
	var out bytes.Buffer
	s.Print(&out)
	for _, want := range []string{"chaos summary (3 roles): brokers=1 trials=1 faults=1",
		"overlaps (two processes acting as leader of one role at one instant): 1",
		"overlaps per role: 0=0 1=1 2=0", "  OVERLAP b and c for role 1 from ",
		"worst leaderless gap of one role: 400ms (role 1, after a sigkill fault)",
		"sigkill              1        1      2        2        0        0      200ms  400ms",
		"1             3        1      400ms  sigkill"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	// a was killed, and c never acquired or revoked role 1: no event-order violation.
	if strings.Contains(out.String(), "VIOLATION") {
		t.Errorf("summary reports a violation:\n%s", out.String())
	}
	if s.Overlaps() != 1 {
		t.Errorf("Overlaps() = %d, want 1", s.Overlaps())
	}
}

// singleLeaderSummary is the trial of TestSummaryPrintsFigures: a sigkill of the leader, and an
// overlap of b and c.
func singleLeaderSummary() Summary {
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) int64 { return t0.Add(time.Duration(n) * time.Millisecond).UnixNano() }
	act := func(from, to int) member.Line {
		return member.Line{At: ms(to), Event: member.EventAct, From: ms(from), To: ms(to)}
	}
	ev := func(at int, event string) member.Line { return member.Line{At: ms(at), Event: event} }
	lines := map[string][]member.Line{
		"a": {ev(0, member.EventAcquired), act(1, 100), ev(101, member.EventRevoked)},
		"b": {ev(150, member.EventAcquired), act(200, 300), ev(301, member.EventRevoked)},
		"c": {ev(310, member.EventAcquired), act(300, 320), ev(330, member.EventRevoked)},
	}
	faults := []verdict.Fault{{Kind: "sigkill", Victim: "a", WasLeader: true, At: time.Unix(0, ms(100))}}
	return Summary{Brokers: 3, Trials: 1, Reports: []verdict.Report{verdict.Check(lines, nil, faults)}}
}

// The Markdown report holds Print's figures as tables, with what it takes to replay the run.
func TestSummaryMarkdown(t *testing.T) {
	var out bytes.Buffer
	run := RunInfo{Seed: 42, Commit: "abc1234", Settings: []string{"CHAOS_BROKERS=3", "CHAOS_FAULTS=1"}, Date: time.Date(2026, 11, 26, 3, 4, 0, 0, time.UTC)}
	singleLeaderSummary().Markdown(&out, run)
	for _, want := range []string{
		"## single leader, 3 broker(s), 1 faults",
		"Run 2026-11-26 03:04 UTC on commit abc1234: 1 trial(s) in 0s, seed 42 (trial *i* uses seed + *i*), with `CHAOS_BROKERS=3 CHAOS_FAULTS=1`.",
		"| overlaps (two processes acting as leader at one instant) | 1 |",
		"| worst leaderless gap | 100ms (after a `sigkill` fault) |",
		"| kind | faults | hit the leader | moved | resumed | unaffected | median | max (injection to next leader action) |",
		"| `sigkill` | 1 | 1 | 1 | 0 | 0 | 100ms | 100ms |",
		"```\n  OVERLAP b and c from ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSummaryMarkdownRoles(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) int64 { return t0.Add(time.Duration(n) * time.Millisecond).UnixNano() }
	act := func(role string, from, to int) member.Line {
		return member.Line{At: ms(to), Event: member.EventAct, From: ms(from), To: ms(to), Role: role}
	}
	ev := func(role string, at int, event string) member.Line {
		return member.Line{At: ms(at), Event: event, Role: role}
	}
	lines := map[string][]member.Line{
		"a": {ev("0", 0, member.EventAcquired), ev("1", 0, member.EventAcquired), act("0", 1, 100), act("1", 1, 100)},
		"b": {ev("0", 250, member.EventAcquired), act("0", 300, 600), ev("1", 450, member.EventAcquired), act("1", 500, 600),
			ev("0", 700, member.EventRevoked), ev("1", 700, member.EventRevoked)},
	}
	faults := []verdict.Fault{{Kind: "sigkill", Victim: "a", WasLeader: true, At: time.Unix(0, ms(100)),
		Roles: map[string]string{"0": "a", "1": "a"}}}
	s := Summary{Brokers: 1, Trials: 1, Reports: []verdict.Report{verdict.Check(lines, map[string]time.Time{"a": time.Unix(0, ms(100))}, faults)}}
	var out bytes.Buffer
	s.Markdown(&out, RunInfo{Seed: 7})
	for _, want := range []string{
		"## 2 roles, 1 broker(s), 1 faults",
		"| overlaps per role | 0=0 1=0 |",
		"| worst leaderless gap of one role | 400ms (role 1, after a `sigkill` fault) |",
		"| `sigkill` | 1 | 1 | 2 | 2 | 0 | 0 | 200ms | 400ms |",
		"| 1 | 2 | 0 | 400ms | `sigkill` |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "OVERLAP") || strings.Contains(out.String(), "on commit") {
		t.Errorf("report names an overlap or a commit it does not have:\n%s", out.String())
	}
}

// Runs append their sections to one page, which the first one starts.
func TestSummaryAppendMarkdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chaos-results.md")
	s := singleLeaderSummary()
	for range 2 {
		if err := s.AppendMarkdown(path, RunInfo{Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if !strings.HasPrefix(page, "# Chaos results\n") || strings.Count(page, "# Chaos results") != 1 || strings.Count(page, "\n## single leader") != 2 {
		t.Errorf("page:\n%s", page)
	}
}

// A run on Apache Kafka (TestChaosReal) names the version in both forms of the summary, and its
// page has a title of its own, so that its figures are never read as kfake's.
func TestSummaryRealKafka(t *testing.T) {
	s := singleLeaderSummary()
	s.Kafka = "4.4.0"
	var out bytes.Buffer
	s.Print(&out)
	if !strings.Contains(out.String(), "brokers=3 kafka=4.4.0 trials=1") {
		t.Errorf("summary does not name the Kafka:\n%s", out.String())
	}
	path := filepath.Join(t.TempDir(), "chaos-real-results.md")
	if err := s.AppendMarkdown(path, RunInfo{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if !strings.HasPrefix(page, "# Chaos results on Apache Kafka\n") || !strings.Contains(page, "\n## single leader, 3 node(s) of Apache Kafka 4.4.0, 1 faults\n") {
		t.Errorf("page:\n%s", page)
	}
}

func TestSummaryWriteFigures(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) int64 { return t0.Add(time.Duration(n) * time.Millisecond).UnixNano() }
	acquired := func(at int, token int64) member.Line {
		return member.Line{At: ms(at), Event: member.EventAcquired, Token: token, Init: true}
	}
	commit := func(at int, token int64) member.Line {
		return member.Line{At: ms(at), Event: member.EventCommit, Token: token}
	}
	lines := map[string][]member.Line{
		"a": {acquired(0, 5), commit(10, 5), commit(900, 5)}, // the second after b's tenure fenced it
		"b": {acquired(500, 6), commit(510, 6)},
	}
	s := Summary{Brokers: 1, Trials: 1, Reports: []verdict.Report{verdict.Check(lines, nil, nil)},
		WritesChecked: true, CommittedWrites: 3}
	var out bytes.Buffer
	s.Print(&out)
	for _, want := range []string{"interleaved committed writes: 0 (of 3 committed records)",
		"commits after their tenure's end: 1 (of 3 commit calls timed)", "  LATE COMMIT a's commit for tenure 5"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	s.Markdown(&out, RunInfo{Date: t0})
	for _, want := range []string{"| interleaved committed writes (a record read_committed after one of a later tenure) | 0 of 3 records |",
		"| commits after their tenure's end (commit called after a later tenure fenced it) | 1 of 3 commits |",
		"  LATE COMMIT a's commit for tenure 5"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
