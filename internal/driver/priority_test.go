package driver

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/core"
)

// The client.id carries the priority so that the member ids Kafka makes of it (client.id, a dash,
// a UUID) sort the member of highest priority first, whatever the Names; priority 0 keeps the
// client.id of earlier versions; every derived client.id reads back as its Name and priority.
func TestPriorityClientIDs(t *testing.T) {
	if got := ClientIDFor("web-1", 0); got != "goneli-web-1" {
		t.Errorf("priority 0 gives %q, want the client.id of earlier versions, goneli-web-1", got)
	}
	names := []string{"a", "zeta", "Zeta", "0", "9z", "web.1", "m_2", "x y", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "z"}
	priorities := []int{MaxPriority, 100, 2, 1, 0, -1, -2, -100, MinPriority}
	type member struct {
		id       string
		priority int
		name     string
	}
	var members []member
	for _, p := range priorities {
		for _, n := range names {
			id := ClientIDFor(n, p)
			name, priority, ok := ParseClientID(id)
			if !ok || name != Sanitise(n) || priority != p {
				t.Errorf("ClientIDFor(%q, %d) = %q reads back as %q, %d, %v", n, p, id, name, priority, ok)
			}
			rolesID := id + core.RolesSuffix + "0a1b2c3d"
			if name, priority, _ := ParseClientID(rolesID); name != Sanitise(n) || priority != p {
				t.Errorf("%q reads back as %q, %d", rolesID, name, priority)
			}
			// As the coordinator makes member ids (ClassicGroup.generateMemberId).
			members = append(members, member{id: id + "-" + "6f1c2a5e-0d4b-4b43-9a51-1f8e1c1e9a01", priority: p, name: Sanitise(n)})
		}
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.id, b.id) })
	for i := 1; i < len(members); i++ {
		a, b := members[i-1], members[i]
		if a.priority < b.priority {
			t.Errorf("member id %q (priority %d) sorts before %q (priority %d)", a.id, a.priority, b.id, b.priority)
		}
		if a.priority == b.priority && strings.Compare(a.name, b.name) > 0 && !strings.HasPrefix(b.name, a.name) {
			t.Errorf("within priority %d, %q sorts before %q", a.priority, a.name, b.name)
		}
	}
	for _, id := range []string{"billing", "goneli", "consumer-1"} {
		if _, p, ok := ParseClientID(id); ok || p != 0 {
			t.Errorf("ParseClientID(%q) = %d, %v; want 0, false", id, p, ok)
		}
	}
	// Digits out of range are part of a Name, not a priority.
	if name, p, _ := ParseClientID("goneli--000-x"); p != 0 || name != "-000-x" {
		t.Errorf("goneli--000-x reads as %q, %d", name, p)
	}
}

// A leader hands over to a member of higher priority only once that member has been in the group
// for the settle time and the leader has led for it; equal and lower priorities never take it;
// a negative priority gives way to any other.
func TestPreferenceDecides(t *testing.T) {
	const settle = 2 * time.Second
	const self = "goneli-me"
	c := func(id string, priority int) contender {
		return contender{member: id + "-uuid", clientID: id, name: id, priority: priority}
	}
	cases := []struct {
		name    string
		mine    int
		members []contender
		ledFor  time.Duration
		wait    time.Duration // how long after it is first seen the member is looked at again
		hand    string
		wake    time.Duration // from the second description on
	}{
		{"equal priority never", 1, []contender{c("goneli-b", 1), c("goneli-c", 1)}, time.Hour, time.Hour, "", 0},
		{"lower priority never", 1, []contender{c("goneli-b", 0), c("goneli-c", -5)}, time.Hour, time.Hour, "", 0},
		{"higher, settled", 1, []contender{c("goneli-b", 2)}, time.Hour, settle, "goneli-b", 0},
		{"higher, not settled yet", 1, []contender{c("goneli-b", 2)}, time.Hour, settle - time.Millisecond, "", time.Millisecond},
		{"higher, settled, leader new", 1, []contender{c("goneli-b", 2)}, settle - 500*time.Millisecond, settle, "", 500 * time.Millisecond},
		{"the highest settled", 0, []contender{c("goneli-b", 1), c("goneli-c", 3), c("goneli-d", 2)}, time.Hour, settle, "goneli-c", 0},
		{"negative gives way to 0", -1, []contender{c("goneli-b", 0)}, time.Hour, settle, "goneli-b", 0},
		{"negative keeps it from lower", -1, []contender{c("goneli-b", -2)}, time.Hour, time.Hour, "", 0},
		{"own old membership ignored", -1, []contender{{member: self + "-old", clientID: self, priority: 5}}, time.Hour, time.Hour, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPreference(tc.mine, settle)
			t0 := time.Minute
			p.observe(t0, self, tc.members)
			if _, hand, _ := p.decide(t0, tc.ledFor); hand {
				t.Fatal("handed over to a member seen for the first time")
			}
			now := t0 + tc.wait
			p.observe(now, self, tc.members)
			to, hand, wake := p.decide(now, tc.ledFor)
			if got := map[bool]string{true: to.clientID}[hand]; got != tc.hand {
				t.Errorf("handed over to %q, want %q", got, tc.hand)
			}
			if tc.wake != 0 && wake != now+tc.wake {
				t.Errorf("wake at +%v, want +%v", wake-now, tc.wake)
			}
		})
	}
}

// A member that leaves and comes back (a new member id) starts its settle time again.
func TestPreferenceForgetsMembersThatLeft(t *testing.T) {
	const settle = 2 * time.Second
	p := newPreference(0, settle)
	b := contender{member: "goneli--999-b-1", clientID: "goneli--999-b", priority: 1}
	p.observe(0, "goneli-a", []contender{b})
	p.observe(settle/2, "goneli-a", nil)
	b.member = "goneli--999-b-2"
	p.observe(settle, "goneli-a", []contender{b})
	if _, hand, wake := p.decide(settle, time.Hour); hand || wake != 2*settle {
		t.Fatalf("decide = %v, wake %v; want no hand-over until %v", hand, wake, 2*settle)
	}
}

// A transfer goes only to a member of the group that nobody outranks; the leader stays out for
// longer the more members sort ahead of the target.
func TestPlanTransfer(t *testing.T) {
	const lease, hb = time.Second, 100 * time.Millisecond
	self := "goneli-a"
	cs := func(members ...string) []contender {
		var out []contender
		for _, m := range members {
			name, priority, _ := ParseClientID(m)
			out = append(out, contender{member: m + "-uuid", clientID: m, name: name, priority: priority})
		}
		slices.SortFunc(out, func(a, b contender) int { return strings.Compare(a.member, b.member) })
		return out
	}
	if hold, err := planTransfer(testErrors{}, cs(self, "goneli-b", "goneli-c"), self, 0, "this instance", "b", lease, hb); err != nil || hold != transferHold(lease, hb, 0) {
		t.Errorf("to b, next in line: %v, %v", hold, err)
	}
	if hold, err := planTransfer(testErrors{}, cs(self, "goneli-b", "goneli-c"), self, 0, "this instance", "c", lease, hb); err != nil || hold != transferHold(lease, hb, 1) {
		t.Errorf("to c, behind b: %v, %v", hold, err)
	}
	_, err := planTransfer(testErrors{}, cs(self, "goneli-b"), self, 0, "this instance", "gone", lease, hb)
	var te *apiError
	if !errors.Is(err, ErrNotMember) || !errors.As(err, &te) || !slices.Equal(te.Members, []string{"b"}) || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("to a departed member: %v", err)
	}
	if _, err := planTransfer(testErrors{}, cs(self, "goneli-b", ClientIDFor("c", 2)), self, 0, "this instance", "b", lease, hb); err == nil || !strings.Contains(err.Error(), "below the 2 of c") {
		t.Errorf("to a member that c outranks: %v", err)
	}
	if _, err := planTransfer(testErrors{}, cs(self, "goneli-b"), self, 1, "this instance", "b", lease, hb); err == nil || !strings.Contains(err.Error(), "below the 1 of this instance") {
		t.Errorf("to a member this instance outranks: %v", err)
	}
	if _, err := planTransfer(testErrors{}, cs(self, "goneli-b", ClientIDFor("b", 1)), self, 0, "this instance", "b", lease, hb); err == nil || !strings.Contains(err.Error(), "2 members") {
		t.Errorf("to a name two members share: %v", err)
	}
	if hold, err := planTransfer(testErrors{}, cs(self, ClientIDFor("b", -1), ClientIDFor("c", -1)), self, -1, "this instance", "c", lease, hb); err != nil || hold != transferHold(lease, hb, 1) {
		t.Errorf("among negative priorities: %v, %v", hold, err)
	}
}
