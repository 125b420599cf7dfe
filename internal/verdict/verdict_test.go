package verdict

import (
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/member"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Unix(1_700_000_000, 0)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func act(from, to int) member.Line {
	return member.Line{At: ms(to).UnixNano(), Event: member.EventAct, From: ms(from).UnixNano(), To: ms(to).UnixNano(), Runs: 1}
}

func ev(at int, event string) member.Line {
	return member.Line{At: ms(at).UnixNano(), Event: event}
}

func span(who string, from, to int) Span { return Span{Who: who, From: ms(from), To: ms(to)} }

func TestOverlaps(t *testing.T) {
	type pair struct {
		role, a, b string
		from, to   int
	}
	for _, c := range []struct {
		name  string
		spans []Span
		want  []pair
	}{
		{"none", nil, nil},
		{"back to back", []Span{span("a", 100, 200), span("b", 201, 300)}, nil},
		{"one shared instant", []Span{span("a", 100, 200), span("b", 200, 300)}, []pair{{"", "a", "b", 200, 200}}},
		{"inside another", []Span{span("a", 100, 200), span("b", 201, 300), span("a", 250, 260)}, []pair{{"", "b", "a", 250, 260}}},
		{"same process twice", []Span{span("a", 400, 500), span("a", 450, 600)}, nil},
		{"unsorted input", []Span{span("b", 150, 160), span("a", 100, 200)}, []pair{{"", "a", "b", 150, 160}}},
		{"three at once", []Span{span("a", 0, 100), span("b", 50, 150), span("c", 90, 95)},
			[]pair{{"", "a", "b", 50, 100}, {"", "a", "c", 90, 95}, {"", "b", "c", 90, 95}}},
		{"ended long before", []Span{span("a", 0, 10), span("b", 20, 30), span("c", 25, 40)}, []pair{{"", "b", "c", 25, 30}}},
		// With roles, spans conflict only with spans of other processes for the same role.
		{"different roles at once", []Span{roleSpan("a", "0", 100, 200), roleSpan("b", "1", 150, 250)}, nil},
		{"same role at once", []Span{roleSpan("a", "0", 100, 200), roleSpan("b", "0", 150, 250)}, []pair{{"0", "a", "b", 150, 200}}},
		{"one process leading two roles", []Span{roleSpan("a", "0", 0, 100), roleSpan("a", "1", 0, 100)}, nil},
		{"one shared instant of one role", []Span{roleSpan("a", "x", 0, 100), roleSpan("b", "y", 50, 150),
			roleSpan("b", "x", 100, 120), roleSpan("c", "y", 160, 200)}, []pair{{"x", "a", "b", 100, 100}}},
		{"handover per role, swapped", []Span{roleSpan("a", "0", 0, 100), roleSpan("b", "1", 0, 100),
			roleSpan("b", "0", 101, 200), roleSpan("a", "1", 101, 200)}, nil},
		// Role order is numeric for numbered roles: 2 before 10.
		{"overlaps in two roles", []Span{roleSpan("a", "10", 0, 100), roleSpan("b", "10", 90, 110),
			roleSpan("c", "2", 500, 600), roleSpan("a", "2", 550, 560)}, []pair{{"2", "c", "a", 550, 560}, {"10", "a", "b", 90, 100}}},
		{"single leader and a role are apart", []Span{roleSpan("a", "", 0, 100), roleSpan("b", "0", 0, 100)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Overlaps(c.spans)
			if len(got) != len(c.want) {
				t.Fatalf("Overlaps = %v, want %d", got, len(c.want))
			}
			for i, w := range c.want {
				o := got[i]
				if o.A.Role != w.role || o.B.Role != w.role || o.A.Who != w.a || o.B.Who != w.b || !o.From.Equal(ms(w.from)) || !o.To.Equal(ms(w.to)) {
					t.Errorf("overlap %d = %v (%s..%s), want %s and %s for role %q %d..%d ms", i, o, o.From.Sub(t0), o.To.Sub(t0), w.a, w.b, w.role, w.from, w.to)
				}
				if names := strings.Contains(o.String(), "for role "+w.role); names != (w.role != "") {
					t.Errorf("overlap %d reads %q; want it to name role %q", i, o, w.role)
				}
			}
		})
	}
}

func TestPauses(t *testing.T) {
	for _, c := range []struct {
		name             string
		spans            []Span
		gap, closest     time.Duration // -1: none
		gapFrom, gapNext string
	}{
		{"no spans", nil, -1, -1, "", ""},
		{"one leader", []Span{span("a", 0, 50), span("a", 60, 100)}, 10 * time.Millisecond, -1, "a", "a"},
		{"handover", []Span{span("a", 0, 100), span("a", 120, 200), span("b", 500, 600), span("c", 610, 700)},
			300 * time.Millisecond, 10 * time.Millisecond, "a", "b"},
		// b's short span ends before a's long one, so the pause after runs from a's end.
		{"nested span", []Span{span("a", 0, 300), span("b", 100, 110), span("c", 400, 500)},
			100 * time.Millisecond, 100 * time.Millisecond, "a", "c"},
		{"overlap is no handover", []Span{span("a", 0, 100), span("b", 100, 200)}, -1, -1, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			gap, ok := WorstGap(c.spans)
			if ok != (c.gap >= 0) || (ok && (gap.Duration() != c.gap || gap.Before != c.gapFrom || gap.After != c.gapNext)) {
				t.Errorf("WorstGap = %+v (%v), %v; want %v from %s to %s", gap, gap.Duration(), ok, c.gap, c.gapFrom, c.gapNext)
			}
			closest, ok := ClosestHandover(c.spans)
			if ok != (c.closest >= 0) || (ok && closest.Duration() != c.closest) {
				t.Errorf("ClosestHandover = %v, %v; want %v", closest.Duration(), ok, c.closest)
			}
		})
	}
}

func TestActsAndLastActs(t *testing.T) {
	lines := []member.Line{
		{Name: "a", Event: member.EventAct, From: 10, To: 20, Runs: 3},
		{Name: "b", Event: member.EventAct, From: 30, To: 40, Runs: 4},
		{Name: "a", Event: member.EventAct, From: 50, To: 60, Runs: 5},
		{Name: "a", Event: member.EventRevoked, At: 70},
	}
	by := ByName(lines)
	if len(by["a"]) != 3 || len(by["b"]) != 1 {
		t.Fatalf("ByName = %v", by)
	}
	runs, who := Acts(ActSpans(by))
	if runs != 12 || who != 2 {
		t.Errorf("Acts = %d runs by %d, want 12 by 2", runs, who)
	}
	last := LastActs(lines)
	if last["a"].UnixNano() != 60 || last["b"].UnixNano() != 40 || len(last) != 2 {
		t.Errorf("LastActs = %v", last)
	}
	names := []string{"b", "a", "c"}
	if i := LastActor(lines, names, time.Unix(0, 60)); i != 1 {
		t.Errorf("LastActor since 60 = %d, want 1 (a)", i)
	}
	if i := LastActor(lines, names, time.Unix(0, 61)); i != -1 {
		t.Errorf("LastActor since 61 = %d, want -1", i)
	}
	if i := LastActor(lines, names[:1], time.Unix(0, 0)); i != 0 {
		t.Errorf("LastActor of b alone = %d, want 0", i)
	}
}

func TestEventOrder(t *testing.T) {
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
		{"ARF", true, false},
	} {
		var lines []member.Line
		for i, e := range c.seq {
			event := map[rune]string{'A': member.EventAcquired, 'F': member.EventFenced, 'R': member.EventRevoked}[e]
			// Other events between do not count.
			lines = append(lines, ev(i, member.EventStarted), act(i, i), ev(i, event))
		}
		err := EventOrder(lines, c.died)
		if (err == nil) != c.ok {
			t.Errorf("EventOrder(%q, died=%v) = %v, want ok %v", c.seq, c.died, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), `"`+c.seq+`"`) {
			t.Errorf("EventOrder(%q): error %q does not quote the events", c.seq, err)
		}
	}
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
	if o := r.Overlaps[0]; !o.From.Equal(ms(99)) || !o.To.Equal(ms(100)) || o.A.Who != "a" || o.B.Who != "b" {
		t.Fatalf("overlap %v, want a and b 99..100 ms", o)
	}
	if len(r.InfoOverlaps) != 1 {
		t.Fatalf("want the acquired..fenced intervals to overlap too, got %v", r.InfoOverlaps)
	}
	if r.Spans != 4 || !r.Start.Equal(ms(0)) || !r.End.Equal(ms(300)) {
		t.Fatalf("spans %d from %v to %v, want 4 from 0 to 300 ms", r.Spans, r.Start.Sub(t0), r.End.Sub(t0))
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
	if r.Gap != 300*time.Millisecond || r.GapAfter != "sigterm" || !r.GapAt.Equal(ms(100)) {
		t.Fatalf("gap %v at %v after %q, want 300ms at 100ms after sigterm", r.Gap, r.GapAt.Sub(t0), r.GapAfter)
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
	if len(r.Violations) != 0 {
		t.Errorf("a died, so its open tenure is no violation: %v", r.Violations)
	}
}

func TestCheckReportsEventOrderViolations(t *testing.T) {
	lines := map[string][]member.Line{
		"a": {ev(0, member.EventAcquired), act(1, 100), ev(101, member.EventFenced)}, // closed while fenced
		"b": {ev(200, member.EventAcquired), ev(201, member.EventAcquired)},          // acquired twice
		"c": {ev(300, member.EventAcquired), act(300, 400)},                          // killed while leading
	}
	r := Check(lines, map[string]time.Time{"c": ms(450)}, nil)
	if len(r.Violations) != 2 || !strings.HasPrefix(r.Violations[0], `a: events "AF"`) || !strings.HasPrefix(r.Violations[1], `b: events "AA"`) {
		t.Fatalf("violations %q, want a's and b's", r.Violations)
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
	if len(r.InfoOverlaps) != 1 || r.InfoOverlaps[0].A.Who != "b" || r.InfoOverlaps[0].B.Who != "c" {
		t.Fatalf("want only b's and c's intervals to overlap, got %v", r.InfoOverlaps)
	}
	if len(r.Violations) != 0 {
		t.Fatalf("a was killed, so its unfinished tenure is no violation: %v", r.Violations)
	}
	// Without the death, a's tenure runs to the end of the run and overlaps both.
	r = Check(lines, nil, nil)
	if len(r.InfoOverlaps) != 3 || len(r.Violations) != 1 {
		t.Fatalf("without a's death: info overlaps %v, violations %v; want 3 and 1", r.InfoOverlaps, r.Violations)
	}
}

func TestIntervals(t *testing.T) {
	lines := map[string][]member.Line{
		"a": {ev(0, member.EventAcquired), ev(10, member.EventFenced), ev(20, member.EventAcquired), ev(30, member.EventRevoked)},
		"b": {ev(40, member.EventAcquired)},
	}
	got := Intervals(lines, nil, ms(100))
	want := []Interval{
		{Span: span("a", 0, 10)},
		{Span: span("a", 20, 30)},
		{Span: span("b", 40, 100), Open: true},
	}
	if len(got) != len(want) {
		t.Fatalf("Intervals = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Who != want[i].Who || !got[i].From.Equal(want[i].From) || !got[i].To.Equal(want[i].To) || got[i].Open != want[i].Open {
			t.Errorf("interval %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func roleSpan(who, role string, from, to int) Span {
	return Span{Who: who, Role: role, From: ms(from), To: ms(to)}
}

func roleAct(role string, from, to int) member.Line {
	l := act(from, to)
	l.Role = role
	return l
}

func roleEv(role string, at int, event string) member.Line {
	l := ev(at, event)
	l.Role = role
	return l
}

func TestSortRoles(t *testing.T) {
	roles := []string{"b", "10", "", "2", "a", "0"}
	SortRoles(roles)
	if want := []string{"0", "2", "10", "", "a", "b"}; strings.Join(roles, ",") != strings.Join(want, ",") {
		t.Errorf("SortRoles = %q, want %q", roles, want)
	}
}

func TestPausesPerRole(t *testing.T) {
	// Role 0 pauses 300 ms between a and b; role 1 is acted on throughout by c, so the run as a
	// whole never lacks an action, yet role 0 went without a leader.
	spans := []Span{roleSpan("a", "0", 0, 100), roleSpan("b", "0", 400, 500),
		roleSpan("c", "1", 0, 250), roleSpan("c", "1", 260, 500)}
	gap, ok := WorstGap(spans)
	if !ok || gap.Role != "0" || gap.Duration() != 300*time.Millisecond || gap.Before != "a" || gap.After != "b" {
		t.Errorf("WorstGap = %+v, %v; want role 0's 300ms from a to b", gap, ok)
	}
	closest, ok := ClosestHandover(spans)
	if !ok || closest.Role != "0" || closest.Duration() != 300*time.Millisecond {
		t.Errorf("ClosestHandover = %+v, %v; want role 0's (role 1 never changed hands)", closest, ok)
	}
}

func TestEventOrderPerRole(t *testing.T) {
	for _, c := range []struct {
		name  string
		lines []member.Line
		died  bool
		want  []string // parts of the error; none: no error
	}{
		{"interleaved roles", []member.Line{roleEv("0", 0, member.EventAcquired), roleEv("1", 1, member.EventAcquired),
			roleEv("0", 2, member.EventFenced), roleEv("1", 3, member.EventRevoked), roleEv("0", 4, member.EventRevoked)}, false, nil},
		{"one role left open", []member.Line{roleEv("0", 0, member.EventAcquired), roleEv("1", 1, member.EventAcquired),
			roleEv("0", 2, member.EventRevoked)}, false, []string{`role 1: events "A"`}},
		{"one role left open by a death", []member.Line{roleEv("0", 0, member.EventAcquired), roleEv("1", 1, member.EventAcquired),
			roleEv("0", 2, member.EventRevoked)}, true, nil},
		{"two roles broken", []member.Line{roleEv("b", 0, member.EventRevoked), roleEv("a", 1, member.EventAcquired),
			roleEv("a", 2, member.EventAcquired)}, true, []string{`role a: events "AA"`, `role b: events "R"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := EventOrder(c.lines, c.died)
			if (err == nil) != (len(c.want) == 0) {
				t.Fatalf("EventOrder = %v, want errors %q", err, c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("EventOrder = %q, lacks %q", err, w)
				}
			}
		})
	}
}

func TestLeaders(t *testing.T) {
	lines := []member.Line{
		{Name: "a", Event: member.EventAct, Role: "0", From: 10, To: 20},
		{Name: "b", Event: member.EventAct, Role: "0", From: 30, To: 40},
		{Name: "a", Event: member.EventAct, Role: "1", From: 30, To: 35},
		{Name: "c", Event: member.EventAct, Role: "2", From: 5, To: 9},
		{Name: "c", Event: member.EventRevoked, Role: "2", At: 50},
	}
	got := Leaders(lines, time.Unix(0, 30))
	if len(got) != 2 || got["0"] != "b" || got["1"] != "a" {
		t.Errorf("Leaders = %v, want b for 0, a for 1, and nobody for 2 (last act too old)", got)
	}
}

func TestIntervalsPerRole(t *testing.T) {
	lines := map[string][]member.Line{
		"a": {roleEv("0", 0, member.EventAcquired), roleEv("1", 5, member.EventAcquired), roleEv("0", 10, member.EventRevoked)},
		"b": {roleEv("0", 20, member.EventAcquired), roleEv("0", 30, member.EventRevoked)},
	}
	got := Intervals(lines, map[string]time.Time{"a": ms(50)}, ms(100))
	want := []Interval{
		{Span: roleSpan("a", "0", 0, 10)},
		{Span: roleSpan("a", "1", 5, 50), Open: true},
		{Span: roleSpan("b", "0", 20, 30)},
	}
	if len(got) != len(want) {
		t.Fatalf("Intervals = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Span != want[i].Span || got[i].Open != want[i].Open {
			t.Errorf("interval %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestCheckPerRole runs the whole check on members with roles: a process acting for two roles at
// once is fine, two processes acting for one role at once are not, and gaps, event order and
// failovers are each role's own.
func TestCheckPerRole(t *testing.T) {
	lines := map[string][]member.Line{
		// a leads roles 0 and 1 until it is killed at 200 ms.
		"a": {roleEv("0", 0, member.EventAcquired), roleEv("1", 0, member.EventAcquired),
			roleAct("0", 1, 100), roleAct("1", 1, 100), roleAct("0", 101, 190), roleAct("1", 101, 190)},
		// b takes role 0 over 300 ms after the fault, then role 1 600 ms after it; both while
		// c acts for role 2 all along, which is no conflict.
		"b": {roleEv("0", 450, member.EventAcquired), roleAct("0", 500, 900),
			roleEv("1", 750, member.EventAcquired), roleAct("1", 800, 900),
			roleEv("0", 950, member.EventRevoked), roleEv("1", 950, member.EventRevoked)},
		// c leads role 2 throughout, and once acts for role 1 while b does: an overlap of role 1.
		"c": {roleEv("2", 0, member.EventAcquired), roleAct("2", 1, 500), roleAct("2", 501, 900), roleAct("1", 850, 860),
			roleEv("2", 950, member.EventRevoked), roleEv("1", 960, member.EventRevoked)},
	}
	faults := []Fault{
		{Kind: "sigkill", Victim: "a", WasLeader: true, At: ms(200), Roles: map[string]string{"0": "a", "1": "a"}},
		{Kind: "refuse", Victim: "b", At: ms(940)},
	}
	r := Check(lines, map[string]time.Time{"a": ms(200)}, faults)
	if !r.HasRoles() {
		t.Error("HasRoles() = false")
	}
	if len(r.Overlaps) != 1 || r.Overlaps[0].A.Role != "1" || r.Overlaps[0].A.Who != "b" || r.Overlaps[0].B.Who != "c" {
		t.Fatalf("overlaps %v, want only b's and c's of role 1", r.Overlaps)
	}
	if len(r.Violations) != 1 || r.Violations[0] != `c: role 1: events "R" break the order Acquired (Fenced Acquired)* [Fenced] Revoked` {
		t.Errorf("violations %q, want only c's revocation of role 1 it never acquired", r.Violations)
	}
	wantRoles := []RoleReport{
		{Role: "0", Spans: 3, Gap: 310 * time.Millisecond, GapAt: ms(190), GapAfter: "sigkill"},
		{Role: "1", Spans: 4, Overlaps: 1, Gap: 610 * time.Millisecond, GapAt: ms(190), GapAfter: "sigkill"},
		{Role: "2", Spans: 2, Gap: time.Millisecond, GapAt: ms(500), GapAfter: "sigkill"},
	}
	if len(r.Roles) != len(wantRoles) {
		t.Fatalf("role reports %+v, want %+v", r.Roles, wantRoles)
	}
	for i, w := range wantRoles {
		if g := r.Roles[i]; g.Role != w.Role || g.Spans != w.Spans || g.Overlaps != w.Overlaps || g.Gap != w.Gap || !g.GapAt.Equal(w.GapAt) || g.GapAfter != w.GapAfter {
			t.Errorf("role report %d = %+v, want %+v", i, g, w)
		}
	}
	if r.Gap != 610*time.Millisecond || r.GapRole != "1" || r.GapAfter != "sigkill" {
		t.Errorf("worst gap %v of role %q after %q, want 610ms of role 1 after sigkill", r.Gap, r.GapRole, r.GapAfter)
	}
	kill := r.Faults[0]
	if kill.Outcome != FailedOver || kill.Failover != 600*time.Millisecond || len(kill.Roles) != 2 {
		t.Fatalf("sigkill: %v after %v, roles %+v; want failed over, every role after 600ms", kill.Outcome, kill.Failover, kill.Roles)
	}
	for i, w := range []RoleResult{{"0", "a", FailedOver, 300 * time.Millisecond}, {"1", "a", FailedOver, 600 * time.Millisecond}} {
		if kill.Roles[i] != w {
			t.Errorf("sigkill role %d: %+v, want %+v", i, kill.Roles[i], w)
		}
	}
	if f := r.Faults[1]; f.Outcome != NotLeader || len(f.Roles) != 0 {
		t.Errorf("refuse of a process leading nothing: %v, roles %+v", f.Outcome, f.Roles)
	}
}

func TestCheckSumsUpRoleOutcomes(t *testing.T) {
	lines := map[string][]member.Line{
		// a leads 0, 1 and 2. After the fault at 100 ms it acts on for 0 without a pause, pauses
		// 400 ms for 1, and loses 2 to b.
		"a": {roleAct("0", 0, 90), roleAct("1", 0, 90), roleAct("2", 0, 90), roleAct("0", 91, 600), roleAct("1", 490, 600)},
		"b": {roleAct("2", 300, 600)},
	}
	for _, c := range []struct {
		roles    map[string]string
		outcome  Outcome
		failover time.Duration
	}{
		{map[string]string{"0": "a"}, Unaffected, 0},
		{map[string]string{"0": "a", "1": "a"}, Resumed, 390 * time.Millisecond},
		{map[string]string{"0": "a", "1": "a", "2": "a"}, FailedOver, 390 * time.Millisecond},
		{map[string]string{"2": "a"}, FailedOver, 200 * time.Millisecond},
	} {
		r := Check(lines, nil, []Fault{{Kind: "stall", Victim: "a", WasLeader: true, At: ms(100), Roles: c.roles}})
		if f := r.Faults[0]; f.Outcome != c.outcome || f.Failover != c.failover || len(f.Roles) != len(c.roles) {
			t.Errorf("roles %v: %v after %v (%+v), want %v after %v", c.roles, f.Outcome, f.Failover, f.Roles, c.outcome, c.failover)
		}
	}
}
