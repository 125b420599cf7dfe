package verdict

import (
	"reflect"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/member"
)

// acquired is an acquired line of role's tenure token; init says its producer initialised first.
func acquired(role string, at int, token int64, init bool) member.Line {
	return member.Line{At: ms(at).UnixNano(), Event: member.EventAcquired, Role: role, Token: token, Init: init}
}

// acquiredSince is an acquired line written at at, after its producer initialised, of a tenure
// that first acquired at since.
func acquiredSince(role string, at, since int, token int64) member.Line {
	l := acquired(role, at, token, true)
	l.Since = ms(since).UnixNano()
	return l
}

// commit is a committed transaction of role's tenure token whose commit call began at at.
func commit(role string, at int, token int64) member.Line {
	return member.Line{At: ms(at).UnixNano(), Event: member.EventCommit, Role: role, Token: token}
}

func TestLateCommits(t *testing.T) {
	type late struct {
		who, role  string
		token      int64
		at         int
		successor  string
		succToken  int64
		fencedAtMs int
	}
	for _, c := range []struct {
		name   string
		lines  map[string][]member.Line
		resets []int
		want   []late
	}{
		{"none", nil, nil, nil},
		{"one tenure", map[string][]member.Line{
			"a": {acquired("", 0, 5, true), commit("", 10, 5), commit("", 30, 5)},
		}, nil, nil},
		{"handover after the last commit", map[string][]member.Line{
			"a": {acquired("", 0, 5, true), commit("", 10, 5), commit("", 30, 5)},
			"b": {acquired("", 40, 6, true), commit("", 45, 6)},
		}, nil, nil},
		// A commit called at the instant the successor's line was written is not after it.
		{"commit at the fence's instant", map[string][]member.Line{
			"a": {acquired("", 0, 5, true), commit("", 40, 5)},
			"b": {acquired("", 40, 6, true)},
		}, nil, nil},
		{"frozen leader commits after the successor acquired", map[string][]member.Line{
			"a": {acquired("", 0, 5, true), commit("", 10, 5), commit("", 900, 5)},
			"b": {acquired("", 500, 6, true), commit("", 510, 6)},
		}, nil, []late{{"a", "", 5, 900, "b", 6, 500}}},
		// Without Init the successor's producer initialised only before its first commit: that is
		// the fence.
		{"fence at the successor's first commit", map[string][]member.Line{
			"a": {acquired("", 0, 5, true), commit("", 600, 5), commit("", 800, 5)},
			"b": {acquired("", 500, 6, false), commit("", 700, 6)},
		}, nil, []late{{"a", "", 5, 800, "b", 6, 700}}},
		{"successor never initialised", map[string][]member.Line{
			"a": {acquired("", 0, 5, true), commit("", 900, 5)},
			"b": {acquired("", 500, 6, false)},
		}, nil, nil},
		// The earliest later fence counts, even of a tenure after the next.
		{"two successors", map[string][]member.Line{
			"a": {acquired("", 0, 5, true), commit("", 900, 5)},
			"b": {acquired("", 600, 6, true)},
			"c": {acquired("", 300, 7, false), commit("", 400, 7)},
		}, nil, []late{{"a", "", 5, 900, "c", 7, 400}}},
		// A resumed leader's second acquired line of the same tenure fences nobody of that tenure.
		{"same tenure resumed", map[string][]member.Line{
			"a": {acquired("", 0, 5, true), commit("", 10, 5), acquired("", 300, 5, true), commit("", 400, 5)},
		}, nil, nil},
		{"roles are apart", map[string][]member.Line{
			"a": {acquired("0", 0, 5, true), commit("0", 900, 5)},
			"b": {acquired("1", 500, 6, true), commit("1", 510, 6)},
		}, nil, nil},
		{"late in one role", map[string][]member.Line{
			"a": {acquired("0", 0, 5, true), acquired("1", 0, 6, true), commit("1", 800, 6), commit("0", 900, 5)},
			"b": {acquired("1", 100, 7, true), acquired("0", 850, 8, true)},
		}, nil, []late{{"a", "1", 6, 800, "b", 7, 100}, {"a", "0", 5, 900, "b", 8, 850}}},
		// A wiped broker starts tokens over: tenures on either side of it are not compared.
		{"tokens start over after a reset", map[string][]member.Line{
			"a": {acquired("", 0, 34, true), commit("", 100, 34)},
			"b": {acquired("", 600, 2, true), commit("", 700, 2)},
		}, []int{400}, nil},
		{"late after a reset", map[string][]member.Line{
			"a": {acquired("", 0, 34, true), acquired("", 500, 2, true), commit("", 900, 2)},
			"b": {acquired("", 600, 3, true), commit("", 700, 3)},
		}, []int{400}, []late{{"a", "", 2, 900, "b", 3, 600}}},
		// chaos 3 brokers, seed 20261132: b acquired before a wipe, and its producer initialised
		// after it, once the broker was back; a's tenure of the new log, with a smaller token, then
		// initialised and committed. b's token is of the old log and fences nobody in the new one,
		// and b's own commits after the wipe are not judged against a's token either.
		{"acquired before a reset, initialised after it", map[string][]member.Line{
			"a": {acquired("", 700, 15, true), commit("", 750, 15), commit("", 900, 15)},
			"b": {acquiredSince("", 600, 300, 215), commit("", 650, 215)},
		}, []int{400}, nil},
		// chaos 1 broker, seed 1795706137687160654: after several wipes, a process acquired a
		// token it had held in an earlier log; its commits belong to the later tenure, not to the
		// earlier one, whose log had seen a larger token.
		{"same token again after a reset", map[string][]member.Line{
			"a": {acquired("", 0, 18, true), commit("", 100, 18), acquired("", 600, 18, true), commit("", 700, 18), commit("", 900, 18)},
			"b": {acquired("", 200, 48, true), commit("", 250, 48)},
		}, []int{400}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var resets []time.Time
			for _, r := range c.resets {
				resets = append(resets, ms(r))
			}
			var got []late
			for _, l := range LateCommits(c.lines, resets...) {
				got = append(got, late{l.Who, l.Role, l.Token, int(l.At.Sub(t0).Milliseconds()), l.Successor, l.SuccessorToken,
					int(l.FencedAt.Sub(t0).Milliseconds())})
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestCheckReportsLateCommits(t *testing.T) {
	lines := map[string][]member.Line{
		"a": {acquired("", 0, 5, true), act(1, 400), commit("", 10, 5), commit("", 900, 5)},
		"b": {acquired("", 500, 6, true), act(501, 1000), commit("", 510, 6)},
	}
	r := Check(lines, nil, nil)
	if len(r.LateCommits) != 1 || r.LateCommits[0].Who != "a" {
		t.Fatalf("late commits %v, want a's at 900 ms", r.LateCommits)
	}
	if s := r.LateCommits[0].String(); s == "" {
		t.Error("empty description")
	}
}

func TestWriteOrder(t *testing.T) {
	rec := func(who, role string, token, seq int64) member.WriteRecord {
		return member.WriteRecord{Member: who, Role: role, Token: token, Seq: seq}
	}
	for _, c := range []struct {
		name    string
		records []member.WriteRecord
		bad     []int64 // offsets of the interleaved records
	}{
		{"none", nil, nil},
		{"one tenure after another", []member.WriteRecord{rec("a", "", 5, 1), rec("a", "", 5, 2), rec("b", "", 6, 1)}, nil},
		{"an earlier tenure after a later one", []member.WriteRecord{rec("a", "", 5, 1), rec("b", "", 6, 1), rec("a", "", 5, 2), rec("b", "", 6, 2)}, []int64{2}},
		{"roles are apart", []member.WriteRecord{rec("a", "0", 5, 1), rec("b", "1", 6, 1), rec("a", "0", 5, 2)}, nil},
		{"interleaved in one role", []member.WriteRecord{rec("a", "0", 7, 1), rec("b", "1", 6, 1), rec("c", "0", 3, 1)}, []int64{2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var o WriteOrder
			for i, r := range c.records {
				o.Add(int64(i), r)
			}
			var bad []int64
			for _, i := range o.Interleaved {
				bad = append(bad, i.Offset)
			}
			if !reflect.DeepEqual(bad, c.bad) || o.Records != len(c.records) {
				t.Errorf("interleaved at %v of %d, want %v of %d", bad, o.Records, c.bad, len(c.records))
			}
		})
	}
}
