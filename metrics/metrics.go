// Package metrics exports a goneli Curator's state as Prometheus metrics and serves a health
// check. It lives apart from goneli so that programs that do not use Prometheus do not link it.
package metrics

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/goneli/goneli"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Collector reads a Curator's Stats at every scrape. Register it with a prometheus.Registerer.
type Collector struct {
	c      goneli.Curator
	gauges []gauge
	counts []counter
	trans  *prometheus.Desc
}

type gauge struct {
	desc *prometheus.Desc
	get  func(goneli.Stats) float64
}

type counter struct {
	desc *prometheus.Desc
	get  func(goneli.Stats) uint64
}

// NewCollector returns a collector for c. Every metric carries constLabels (for example the
// group and instance name), and is named goneli_*.
func NewCollector(c goneli.Curator, constLabels prometheus.Labels) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("goneli_"+name, help, labels, constLabels)
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	secs := func(f func(goneli.Stats) time.Duration) func(goneli.Stats) float64 {
		return func(s goneli.Stats) float64 { return f(s).Seconds() }
	}
	return &Collector{
		c: c,
		gauges: []gauge{
			{d("leader", "1 while the lease is valid (IsLeader)."), func(s goneli.Stats) float64 { return b(s.Leader) }},
			{d("leading", "1 while the instance believes it leads: acquired and not since fenced or revoked."), func(s goneli.Stats) float64 { return b(s.Leading) }},
			{d("assigned", "1 while the instance owns partition 0 of the leader topic."), func(s goneli.Stats) float64 { return b(s.Assigned) }},
			{d("live", "1 until Close begins."), func(s goneli.Stats) float64 { return b(s.State == goneli.Live) }},
			{d("fencing_token", "Fencing token of the current tenure while leading, else 0."), func(s goneli.Stats) float64 { return float64(s.Token) }},
			{d("lease_remaining_seconds", "Time left on the current lease."), secs(func(s goneli.Stats) time.Duration { return s.LeaseRemaining })},
			{d("lease_age_seconds", "Age of the heartbeat behind the current lease."), secs(func(s goneli.Stats) time.Duration { return s.LeaseAge })},
			{d("lease_overdue_seconds", "How long ago the lease ran out while the instance still believed it led; above zero for more than milliseconds means it is stuck."), secs(func(s goneli.Stats) time.Duration { return s.LeaseOverdue })},
			{d("heartbeat_rtt_seconds", "Send-to-read-back time of the newest confirmed heartbeat."), secs(func(s goneli.Stats) time.Duration { return s.HeartbeatRTT })},
			{d("renewal_lag_seconds", "Time from sending a heartbeat to the coordinator accepting its offset, for the newest renewal."), secs(func(s goneli.Stats) time.Duration { return s.RenewalLag })},
			{d("yield_remaining_seconds", "Time left out of the group after Yield."), secs(func(s goneli.Stats) time.Duration { return s.YieldRemaining })},
		},
		counts: []counter{
			{d("heartbeats_sent_total", "Heartbeats handed to the producer."), func(s goneli.Stats) uint64 { return s.HeartbeatsSent }},
			{d("heartbeats_confirmed_total", "Own heartbeats of the current tenure read back."), func(s goneli.Stats) uint64 { return s.HeartbeatsConfirmed }},
			{d("heartbeats_stale_total", "Own heartbeats ignored as belonging to an earlier tenure or arriving out of order."), func(s goneli.Stats) uint64 { return s.StaleHeartbeats }},
			{d("heartbeats_late_total", "Own heartbeats confirmed too late to renew the lease."), func(s goneli.Stats) uint64 { return s.LateHeartbeats }},
			{d("commit_rejections_total", "Heartbeat offset commits refused by the group coordinator."), func(s goneli.Stats) uint64 { return s.CommitRejections }},
		},
		trans: d("transitions_total", "Leadership events delivered, by kind: acquired, fenced, revoked.", "kind"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
	for _, k := range c.counts {
		ch <- k.desc
	}
	ch <- c.trans
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.c.Stats()
	for _, g := range c.gauges {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.get(s))
	}
	for _, k := range c.counts {
		ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, float64(k.get(s)))
	}
	ch <- prometheus.MustNewConstMetric(c.trans, prometheus.CounterValue, float64(s.Acquired), "acquired")
	ch <- prometheus.MustNewConstMetric(c.trans, prometheus.CounterValue, float64(s.Fenced), "fenced")
	ch <- prometheus.MustNewConstMetric(c.trans, prometheus.CounterValue, float64(s.Revoked), "revoked")
}

// DefaultTolerance is how long a lease may stay overdue before HealthHandler reports it. The lease
// watchdog fences within milliseconds of expiry unless the instance is stuck.
const DefaultTolerance = time.Second

// HealthHandler answers 200 while c is healthy and 503 when it believes it leads but its lease ran
// out more than tolerance ago (something holds up the pulse loop or the barrier, so it cannot fence
// itself), or once it is closing. A tolerance of zero means DefaultTolerance. The body is a JSON
// summary of the state.
func HealthHandler(c goneli.Curator, tolerance time.Duration) http.Handler {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s := c.Stats()
		status, problem := http.StatusOK, ""
		switch {
		case s.LeaseOverdue > tolerance:
			status, problem = http.StatusServiceUnavailable,
				fmt.Sprintf("believes it leads but its lease ran out %v ago", s.LeaseOverdue.Round(time.Millisecond))
		case s.State != goneli.Live:
			status, problem = http.StatusServiceUnavailable, "not live: "+s.State.String()
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(struct {
			Healthy bool   `json:"healthy"`
			Problem string `json:"problem,omitempty"`
			State   string `json:"state"`
			Leader  bool   `json:"leader"`
			Token   int64  `json:"token,omitempty"`
		}{status == http.StatusOK, problem, s.State.String(), s.Leader, s.Token})
	})
}

// Handler serves /metrics for c (with its own registry) and /healthz. It is what the neli
// command's --metrics-addr listens with.
func Handler(c goneli.Curator, constLabels prometheus.Labels) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(NewCollector(c, constLabels)); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/healthz", HealthHandler(c, 0))
	return mux, nil
}
