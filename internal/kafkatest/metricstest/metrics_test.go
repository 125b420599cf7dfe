// Package metricstest holds the tests of package metrics that need a Kafka broker, on the embedded
// one (kafkatest), so that the metrics module does not require the embedded broker's modules.
package metricstest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	. "github.com/goneli/goneli/metrics"
	"github.com/obsidiandynamics/libstdgo/scribe"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func quiet() scribe.Scribe {
	return scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)})
}

// testConfig is a quiet instance m of group on b, with a short lease.
func testConfig(b *kafkatest.Broker, group string) goneli.Config {
	return goneli.Config{
		KafkaConfig:      goneli.KafkaConfigMap{"bootstrap.servers": b.Addr},
		LeaderGroupID:    group,
		Name:             "m",
		HeartbeatTimeout: goneli.Duration(time.Second),
		Scribe:           quiet(),
	}
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
	config := testConfig(b, "metrics")
	config.Address = "http://metrics.example:8080"
	c, err := goneli.NewCurator(config, func(e goneli.Event) {
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
		`goneli_heartbeats_confirmed_total{group="metrics"}`, `goneli_lease_remaining_seconds{group="metrics"}`,
		`goneli_leader_info{address="http://metrics.example:8080",group="metrics",leader="` + config.Name + `"} 1`} {
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
	if _, body := get(t, h, "/metrics"); !strings.Contains(body, `goneli_leader{group="metrics"} 0`) || strings.Contains(body, "goneli_leader_info{") ||
		!strings.Contains(body, `goneli_transitions_total{group="metrics",kind="revoked"} 1`) {
		t.Fatalf("/metrics after Close:\n%s", body)
	}
	if code, _ := get(t, h, "/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz of a closed instance: %d", code)
	}
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

// TestRolesMetricsOfRealRoles scrapes a real Roles instance that leads both its roles.
func TestRolesMetricsOfRealRoles(t *testing.T) {
	b, err := kafkatest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	acquired := make(chan string, 2)
	r, err := goneli.NewRoles(testConfig(b, "roles-metrics"), goneli.Shards(2), func(e goneli.Event) {
		if a, ok := e.(goneli.LeaderAcquired); ok {
			acquired <- a.Role
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Background(func(string) { time.Sleep(time.Millisecond) })
	if err != nil {
		t.Fatal(err)
	}
	<-acquired
	<-acquired
	h, err := RolesHandler(r, map[string]string{"group": "roles-metrics"})
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, h, "/metrics")
	for _, role := range []string{"0", "1"} {
		tok := r.Role(role).Token()
		for _, want := range []string{
			`goneli_leader{group="roles-metrics",role="` + role + `"} 1`,
			`goneli_fencing_token{group="roles-metrics",role="` + role + `"} ` + strconv.FormatInt(tok, 10),
		} {
			if tok <= 0 || !has(body, want) {
				t.Errorf("/metrics lacks %q (token %d)", want, tok)
			}
		}
	}
	if code, body := get(t, h, "/healthz"); code != http.StatusOK || !strings.Contains(body, `"leading":["0","1"]`) {
		t.Errorf("/healthz: %d %s", code, body)
	}
	p.Close()
	_ = p.Await()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, h, "/metrics"); !has(body, `goneli_leader{group="roles-metrics",role="1"} 0`) {
		t.Errorf("/metrics after Close:\n%s", body)
	}
}
