package chaos

import (
	"bytes"
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
	s := Summary{Trials: 1, Reports: []verdict.Report{verdict.Check(lines, nil, faults)}}
	var out bytes.Buffer
	s.Print(&out)
	for _, want := range []string{"trials=1 faults=1", "sigkill=1", "overlaps (two processes acting as leader at one instant): 1",
		"  OVERLAP b and c from ", "worst leaderless gap: 100ms (after a sigkill fault)",
		"sigkill           1        1        1        0        0      100ms  100ms",
		`  VIOLATION c: events "A" break the order`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if s.Overlaps() != 1 {
		t.Errorf("Overlaps() = %d, want 1", s.Overlaps())
	}
}
