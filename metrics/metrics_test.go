package metrics

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/obsidiandynamics/libstdgo/scribe"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func quiet() scribe.Scribe {
	return scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)})
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestLeaderMetricsAndHealth(t *testing.T) {
	b, err := kafkatest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	acquired := make(chan struct{})
	c, err := goneli.NewCurator(goneli.Config{
		KafkaConfig:      goneli.KafkaConfigMap{"bootstrap.servers": b.Addr},
		LeaderGroupID:    "metrics",
		Name:             "m",
		HeartbeatTimeout: goneli.Duration(time.Second),
		Scribe:           quiet(),
	}, func(e goneli.Event) {
		if _, ok := e.(goneli.LeaderAcquired); ok {
			close(acquired)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Background(func() { time.Sleep(time.Millisecond) })
	<-acquired

	h, err := Handler(c, map[string]string{"group": "metrics"})
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, h, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{`goneli_leader{group="metrics"} 1`, `goneli_transitions_total{group="metrics",kind="acquired"} 1`,
		`goneli_heartbeats_confirmed_total{group="metrics"}`, `goneli_lease_remaining_seconds{group="metrics"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if code, body := get(t, h, "/healthz"); code != http.StatusOK || !strings.Contains(body, `"leader":true`) {
		t.Fatalf("/healthz of a healthy leader: %d %s", code, body)
	}

	p.Close()
	_ = p.Await()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, h, "/metrics"); !strings.Contains(body, `goneli_leader{group="metrics"} 0`) ||
		!strings.Contains(body, `goneli_transitions_total{group="metrics",kind="revoked"} 1`) {
		t.Fatalf("/metrics after Close:\n%s", body)
	}
	if code, _ := get(t, h, "/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz of a closed instance: %d", code)
	}
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
