package chaos

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/member"
)

var t0 = time.Unix(1_700_000_000, 0)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func act(from, to int) member.Line {
	return member.Line{At: ms(to).UnixNano(), Event: member.EventAct, From: ms(from).UnixNano(), To: ms(to).UnixNano()}
}

func ev(at int, event string) member.Line {
	return member.Line{At: ms(at).UnixNano(), Event: event}
}

func TestCheckFindsOverlappingActions(t *testing.T) {
	lines := map[string][]member.Line{
		"a": {ev(0, member.EventAcquired), act(1, 50), act(51, 100), ev(101, member.EventFenced), ev(102, member.EventRevoked)},
		// b's first action comes 1 ms before a's last: an instant both claimed.
		"b": {ev(90, member.EventAcquired), act(99, 150), act(151, 200), ev(300, member.EventRevoked)},
	}
	r := Check(lines, nil, nil)
	if len(r.Overlaps) != 1 {
		t.Fatalf("want one overlap, got %v", r.Overlaps)
	}
	if o := r.Overlaps[0]; o.From != ms(99) || o.To != ms(100) {
		t.Fatalf("overlap %v, want 99..100 ms", o)
	}
	if len(r.InfoOverlaps) != 1 {
		t.Fatalf("want the acquired..fenced intervals to overlap too, got %v", r.InfoOverlaps)
	}
	if len(r.Violations) != 0 {
		t.Fatalf("unexpected violations %v", r.Violations)
	}
}

func TestCheckAcceptsHandoffAndReportsGap(t *testing.T) {
	lines := map[string][]member.Line{
		"a": {ev(0, member.EventAcquired), act(1, 50), act(51, 100), ev(101, member.EventRevoked)},
		"b": {ev(110, member.EventAcquired), act(400, 450), ev(500, member.EventRevoked)},
		// c's span of its own does not count against itself.
		"c": {ev(600, member.EventAcquired), act(600, 700), act(650, 800), ev(801, member.EventRevoked)},
	}
	faults := []Fault{{Kind: "sigterm", Victim: "a", WasLeader: true, At: ms(60)}}
	r := Check(lines, nil, faults)
	if len(r.Overlaps) != 0 || len(r.InfoOverlaps) != 0 {
		t.Fatalf("no overlap expected: %v %v", r.Overlaps, r.InfoOverlaps)
	}
	if r.Gap != 300*time.Millisecond || r.GapAfter != "sigterm" {
		t.Fatalf("gap %v after %q, want 300ms after sigterm", r.Gap, r.GapAfter)
	}
	if f := r.Faults[0]; f.Outcome != FailedOver || f.Failover != 340*time.Millisecond {
		t.Fatalf("fault outcome %v after %v, want failed over after 340ms", f.Outcome, f.Failover)
	}
}

func TestCheckFailoverOutcomes(t *testing.T) {
	lines := map[string][]member.Line{
		"a": {ev(0, member.EventAcquired), act(1, 100), act(101, 200), act(800, 900), act(901, 1000)},
		"b": {},
	}
	faults := []Fault{
		{Kind: "slow", Victim: "a", WasLeader: true, At: ms(50)},   // a acts on without a pause
		{Kind: "stall", Victim: "a", WasLeader: true, At: ms(150)}, // a pauses 600 ms, then resumes
		{Kind: "refuse", Victim: "b", At: ms(950)},                 // b was not leading
	}
	r := Check(lines, map[string]time.Time{"a": ms(1000)}, faults)
	want := []struct {
		o Outcome
		d time.Duration
	}{{Unaffected, 0}, {Resumed, 650 * time.Millisecond}, {NotLeader, 0}}
	for i, w := range want {
		if f := r.Faults[i]; f.Outcome != w.o || f.Failover != w.d {
			t.Errorf("fault %d (%s): %v after %v, want %v after %v", i, f.Kind, f.Outcome, f.Failover, w.o, w.d)
		}
	}
}

func TestCheckEventOrder(t *testing.T) {
	for _, c := range []struct {
		seq  string
		died bool
		ok   bool
	}{
		{"", false, true},
		{"AR", false, true},
		{"AFAFR", false, true},
		{"AFRAR", false, true},
		{"AF", false, false}, // a process that closed must have ended its tenure
		{"AF", true, true},   // one that was killed may stop anywhere
		{"AA", true, false},
		{"R", false, false},
		{"AFF", true, false},
	} {
		if got := eventOrder(c.seq, c.died); got != c.ok {
			t.Errorf("eventOrder(%q, died=%v) = %v, want %v", c.seq, c.died, got, c.ok)
		}
	}
}

func TestSummaryPrintsFigures(t *testing.T) {
	lines := map[string][]member.Line{
		"a": {ev(0, member.EventAcquired), act(1, 100), ev(101, member.EventRevoked)},
		"b": {ev(150, member.EventAcquired), act(200, 300), act(250, 260), ev(301, member.EventRevoked)},
	}
	faults := []Fault{{Kind: "sigkill", Victim: "a", WasLeader: true, At: ms(100)}}
	s := Summary{Trials: 1, Reports: []Report{Check(lines, nil, faults)}}
	var out bytes.Buffer
	s.Print(&out)
	for _, want := range []string{"trials=1 faults=1", "sigkill=1", "overlaps (two processes acting as leader at one instant): 0",
		"worst leaderless gap: 100ms", "sigkill           1        1        1        0        0      100ms  100ms"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if s.Overlaps() != 0 {
		t.Errorf("Overlaps() = %d", s.Overlaps())
	}
}

func TestCheckEndsOpenIntervalAtDeath(t *testing.T) {
	lines := map[string][]member.Line{
		// a is killed at 100 ms while it leads; b acquires after that, then c acquires while b
		// still claims to lead.
		"a": {ev(0, member.EventAcquired), act(1, 90)},
		"b": {ev(200, member.EventAcquired), act(210, 300), ev(400, member.EventRevoked)},
		"c": {ev(350, member.EventAcquired), act(450, 500), ev(600, member.EventRevoked)},
	}
	r := Check(lines, map[string]time.Time{"a": ms(100)}, nil)
	if len(r.Overlaps) != 0 {
		t.Fatalf("no overlap of actions expected: %v", r.Overlaps)
	}
	if len(r.InfoOverlaps) != 1 || r.InfoOverlaps[0].A != "b" || r.InfoOverlaps[0].B != "c" {
		t.Fatalf("want only b's and c's intervals to overlap, got %v", r.InfoOverlaps)
	}
	if len(r.Violations) != 0 {
		t.Fatalf("a was killed, so its unfinished tenure is no violation: %v", r.Violations)
	}
}
