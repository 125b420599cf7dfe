package metrics

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// stuck is a leader whose lease ran out while it still believes it leads.
type stuck struct {
	goneli.MockNeli
	overdue time.Duration
}

func (s stuck) Stats() goneli.Stats {
	st := s.MockNeli.Stats()
	st.Leading, st.LeaseOverdue = true, s.overdue
	return st
}

func TestHealthReportsOverdueLease(t *testing.T) {
	m, _ := goneli.NewMock(goneli.MockConfig{})
	defer m.Close()
	for _, tc := range []struct {
		overdue time.Duration
		want    int
	}{{0, http.StatusOK}, {500 * time.Millisecond, http.StatusOK}, {2 * time.Second, http.StatusServiceUnavailable}} {
		code, body := get(t, HealthHandler(stuck{m, tc.overdue}, 0), "/healthz")
		if code != tc.want {
			t.Errorf("overdue %v: %d, want %d (%s)", tc.overdue, code, tc.want, body)
		}
		var parsed map[string]interface{}
		if err := json.Unmarshal([]byte(body), &parsed); err != nil {
			t.Errorf("body is not JSON: %s", body)
		}
	}
}

// cutOff is a Curator that has reached no broker for a while.
type cutOff struct {
	goneli.MockNeli
	since time.Time
}

func (c cutOff) Stats() goneli.Stats {
	st := c.MockNeli.Stats()
	st.UnreachableSince, st.UnreachableReason = c.since, "consumer: 1/1 brokers are down"
	return st
}

func TestHealthReportsUnreachableKafka(t *testing.T) {
	m, _ := goneli.NewMock(goneli.MockConfig{})
	defer m.Close()
	for _, tc := range []struct {
		ago  time.Duration
		want int
	}{{0, http.StatusOK}, {500 * time.Millisecond, http.StatusOK}, {time.Minute, http.StatusServiceUnavailable}} {
		c := cutOff{m, time.Time{}}
		if tc.ago > 0 {
			c.since = time.Now().Add(-tc.ago)
		}
		code, body := get(t, HealthHandler(c, 0), "/healthz")
		if code != tc.want {
			t.Errorf("unreachable for %v: %d, want %d (%s)", tc.ago, code, tc.want, body)
		}
		if tc.want != http.StatusOK && (!strings.Contains(body, "cannot reach Kafka since") || !strings.Contains(body, "brokers are down")) {
			t.Errorf("unreachable for %v: the body does not say since when and why: %s", tc.ago, body)
		}
		_, metrics := get(t, mustHandler(t, c), "/metrics")
		if got := lines(metrics, "goneli_kafka_unreachable_seconds"); len(got) != 1 || (tc.ago == 0) != strings.HasSuffix(got[0], " 0") {
			t.Errorf("unreachable for %v: goneli_kafka_unreachable_seconds is %q", tc.ago, got)
		}
	}
}

// idleOwner is a Curator that owns partition 0 and has not led it for a while: it cannot renew.
type idleOwner struct {
	goneli.MockNeli
	since time.Time
}

func (c idleOwner) Stats() goneli.Stats {
	st := c.MockNeli.Stats()
	st.Assigned, st.NotLeadingSince, st.HandOvers = true, c.since, 3
	return st
}

func TestHealthReportsAnOwnerThatDoesNotLead(t *testing.T) {
	m, _ := goneli.NewMock(goneli.MockConfig{})
	defer m.Close()
	for _, tc := range []struct {
		ago  time.Duration
		want int
	}{{0, http.StatusOK}, {500 * time.Millisecond, http.StatusOK}, {3 * time.Second, http.StatusServiceUnavailable}} {
		c := idleOwner{m, time.Time{}}
		if tc.ago > 0 {
			c.since = time.Now().Add(-tc.ago)
		}
		code, body := get(t, HealthHandler(c, 0), "/healthz")
		if code != tc.want {
			t.Errorf("not leading for %v: %d, want %d (%s)", tc.ago, code, tc.want, body)
		}
		if tc.want != http.StatusOK && !strings.Contains(body, "owns its partition but has not led it for") {
			t.Errorf("not leading for %v: the body does not say so: %s", tc.ago, body)
		}
		_, metrics := get(t, mustHandler(t, c), "/metrics")
		if got := lines(metrics, "goneli_assigned_not_leading_seconds"); len(got) != 1 || (tc.ago == 0) != strings.HasSuffix(got[0], " 0") {
			t.Errorf("not leading for %v: goneli_assigned_not_leading_seconds is %q", tc.ago, got)
		}
		if !has(metrics, "goneli_handovers_total 3") {
			t.Errorf("goneli_handovers_total not 3: %q", lines(metrics, "goneli_handovers_total"))
		}
	}
}

// mustHandler is Handler for c without constant labels.
func mustHandler(t *testing.T, c goneli.Curator) http.Handler {
	t.Helper()
	h, err := Handler(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// lines returns the sample lines of a /metrics body that start with prefix.
func lines(body, prefix string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// has reports whether body has the sample line want, exactly.
func has(body, want string) bool {
	for _, l := range strings.Split(body, "\n") {
		if l == want {
			return true
		}
	}
	return false
}

func TestRolesMetricsCarryTheRole(t *testing.T) {
	m, err := goneli.NewMockRoles(goneli.MockConfig{Address: "10.0.0.7:8080"}, []string{"billing", "audit", "search"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h, err := RolesHandler(m, map[string]string{"group": "g"})
	if err != nil {
		t.Fatal(err)
	}
	m.AcquireLeader("billing")
	m.RevokeLeader("billing")
	m.AcquireLeader("billing") // token 2
	m.AcquireLeader("audit")
	m.FenceLeader("audit")

	code, body := get(t, h, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`goneli_leader{group="g",role="billing"} 1`,
		`goneli_leader{group="g",role="audit"} 0`,
		`goneli_leader{group="g",role="search"} 0`,
		`goneli_assigned{group="g",role="audit"} 1`,
		`goneli_fencing_token{group="g",role="billing"} 2`,
		`goneli_fencing_token{group="g",role="audit"} 0`,
		`goneli_transitions_total{group="g",kind="acquired",role="billing"} 2`,
		`goneli_transitions_total{group="g",kind="revoked",role="billing"} 1`,
		`goneli_transitions_total{group="g",kind="fenced",role="audit"} 1`,
		`goneli_transitions_total{group="g",kind="fenced",role="search"} 0`,
		`goneli_live{group="g"} 1`,
		`goneli_yield_remaining_seconds{group="g"} 0`,
		`goneli_leader_info{address="10.0.0.7:8080",group="g",leader="mock",role="billing"} 1`,
	} {
		if !has(body, want) {
			t.Errorf("/metrics lacks the line %q", want)
		}
	}
	// Every per-role series once per role; the instance's own figures once, without a role.
	for prefix, n := range map[string]int{"goneli_leader{": 3, "goneli_heartbeats_sent_total{": 3, "goneli_transitions_total{": 9, "goneli_live{": 1, "goneli_leader_info{": 1} {
		if got := lines(body, prefix); len(got) != n {
			t.Errorf("%d %s lines, want %d: %q", len(got), prefix, n, got)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}

	code, body = get(t, h, "/healthz")
	var health struct {
		Healthy bool     `json:"healthy"`
		State   string   `json:"state"`
		Leading []string `json:"leading"`
		Roles   []struct {
			Role   string `json:"role"`
			Leader bool   `json:"leader"`
			Token  int64  `json:"token"`
		} `json:"roles"`
	}
	if err := json.Unmarshal([]byte(body), &health); err != nil || code != http.StatusOK || !health.Healthy || health.State != "Live" {
		t.Fatalf("/healthz: %d %s (%v)", code, body, err)
	}
	if len(health.Leading) != 1 || health.Leading[0] != "billing" || len(health.Roles) != 3 ||
		health.Roles[0].Role != "billing" || !health.Roles[0].Leader || health.Roles[0].Token != 2 || health.Roles[1].Leader {
		t.Fatalf("/healthz body %s: want billing alone led, with token 2", body)
	}

	_ = m.Close()
	if _, body := get(t, h, "/metrics"); !has(body, `goneli_live{group="g"} 0`) || !has(body, `goneli_transitions_total{group="g",kind="revoked",role="billing"} 2`) {
		t.Fatalf("/metrics after Close:\n%s", body)
	}
	if code, body := get(t, h, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not live") {
		t.Fatalf("/healthz of a closed instance: %d %s", code, body)
	}
}

// The single-leader exposition has no role label.
func TestCuratorMetricsHaveNoRole(t *testing.T) {
	m, _ := goneli.NewMock(goneli.MockConfig{})
	defer m.Close()
	m.AcquireLeader()
	h, err := Handler(m, map[string]string{"group": "g"})
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, h, "/metrics")
	if !has(body, `goneli_leader{group="g"} 1`) || strings.Contains(body, "role=") {
		t.Fatalf("/metrics of a Curator:\n%s", body)
	}
}

func TestRolesHandlerRejectsARoleConstLabel(t *testing.T) {
	m, _ := goneli.NewMockRoles(goneli.MockConfig{}, []string{"billing"})
	defer m.Close()
	if _, err := RolesHandler(m, map[string]string{"role": "x"}); err == nil {
		t.Fatal("a const label named role clashes with the role label; want an error")
	}
}

// stuckRoles is a Roles whose named roles believe they lead with a lease overdue by overdue.
type stuckRoles struct {
	goneli.MockRoles
	stuck   map[string]bool
	overdue time.Duration
}

type stuckRole struct {
	goneli.Role
	overdue time.Duration
}

func (s stuckRoles) All() []goneli.Role {
	all := s.MockRoles.All()
	for i, r := range all {
		if s.stuck[r.Name()] {
			all[i] = stuckRole{r, s.overdue}
		}
	}
	return all
}

func (s stuckRole) Stats() goneli.Stats {
	st := s.Role.Stats()
	st.Leading, st.LeaseOverdue = true, s.overdue
	return st
}

func TestRolesHealthReportsEveryOverdueRole(t *testing.T) {
	m, _ := goneli.NewMockRoles(goneli.MockConfig{}, []string{"billing", "audit", "search"})
	defer m.Close()
	for _, tc := range []struct {
		stuck   []string
		overdue time.Duration
		want    int
		names   []string
	}{
		{nil, 0, http.StatusOK, nil},
		{[]string{"audit"}, 500 * time.Millisecond, http.StatusOK, nil},
		{[]string{"audit"}, 2 * time.Second, http.StatusServiceUnavailable, []string{"role audit believes it leads but its lease ran out 2s ago"}},
		{[]string{"billing", "search"}, 3 * time.Second, http.StatusServiceUnavailable, []string{"role billing ", "role search "}},
	} {
		s := stuckRoles{m, map[string]bool{}, tc.overdue}
		for _, r := range tc.stuck {
			s.stuck[r] = true
		}
		code, body := get(t, RolesHealthHandler(s, 0), "/healthz")
		var parsed struct {
			Healthy bool   `json:"healthy"`
			Problem string `json:"problem"`
		}
		if err := json.Unmarshal([]byte(body), &parsed); err != nil {
			t.Errorf("body is not JSON: %s", body)
		}
		if code != tc.want || parsed.Healthy != (tc.want == http.StatusOK) {
			t.Errorf("%v overdue by %v: %d, want %d (%s)", tc.stuck, tc.overdue, code, tc.want, body)
		}
		for _, name := range tc.names {
			if !strings.Contains(parsed.Problem, name) {
				t.Errorf("%v overdue by %v: problem %q does not mention %q", tc.stuck, tc.overdue, parsed.Problem, name)
			}
		}
	}
}
