// Package metrics exports the state of a goneli Curator, or of every role of a Roles, as
// Prometheus metrics and serves a health check. It lives apart from goneli so that programs that do not use Prometheus do not link it.
package metrics

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/goneli/goneli"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Collector reads the Stats of a Curator (NewCollector) or of every role of a Roles
// (NewRolesCollector) at every scrape. Register it with a prometheus.Registerer.
type Collector struct {
	// stats returns the figures to export: one Stats for a Curator, one per role for Roles.
	stats func() []goneli.Stats
	// leaders returns the leader each role's Leader() knows of, in the order of stats.
	leaders func() []leaderSeen
	roles   bool // label per-role metrics with the role
	gauges  []gauge
	counts  []counter
	trans   *prometheus.Desc
	info    *prometheus.Desc
}

type leaderSeen struct {
	role  string
	info  goneli.LeaderInfo
	known bool
}

type gauge struct {
	desc *prometheus.Desc
	get  func(goneli.Stats) float64
	// shared marks a figure of the whole instance (its state, its yield), which Roles reports
	// once rather than once per role.
	shared bool
}

type counter struct {
	desc   *prometheus.Desc
	get    func(goneli.Stats) uint64
	shared bool // as for gauge
}

// NewCollector returns a collector for c. Every metric carries constLabels (for example the
// group and instance name), and is named goneli_*.
//
// goneli_leader_info{leader, address} is 1 for the leader that Curator.Leader reports, so followers
// show where to forward work; it is absent while no leader is known, and a follower knows one only
// with Config.ObserveLeader or OnLeaderChange set.
func NewCollector(c goneli.Curator, constLabels prometheus.Labels) *Collector {
	col := newCollector(func() []goneli.Stats { return []goneli.Stats{c.Stats()} }, false, constLabels)
	col.leaders = func() []leaderSeen {
		info, ok := c.Leader()
		return []leaderSeen{{info: info, known: ok}}
	}
	return col
}

// NewRolesCollector returns a collector for every role of r: the metrics of NewCollector, each
// per-role one once per role with a "role" label naming it (goneli_leader{role="billing"}), so
// that sum(goneli_leader) counts the roles led. goneli_live, goneli_yield_remaining_seconds,
// goneli_kafka_unreachable_seconds and goneli_handovers_total describe the whole instance and
// carry no role label. constLabels must not include "role".
func NewRolesCollector(r goneli.Roles, constLabels prometheus.Labels) *Collector {
	col := newCollector(func() []goneli.Stats { return rolesStats(r) }, true, constLabels)
	col.leaders = func() []leaderSeen {
		all := r.All()
		out := make([]leaderSeen, len(all))
		for i, role := range all {
			info, ok := role.Leader()
			out[i] = leaderSeen{role: role.Name(), info: info, known: ok}
		}
		return out
	}
	return col
}

// rolesStats returns the Stats of r's roles, in partition order, each labelled with its role.
func rolesStats(r goneli.Roles) []goneli.Stats {
	all := r.All()
	out := make([]goneli.Stats, len(all))
	for i, role := range all {
		out[i] = role.Stats()
		out[i].Role = role.Name()
	}
	return out
}

func newCollector(stats func() []goneli.Stats, roles bool, constLabels prometheus.Labels) *Collector {
	d := func(name, help string, shared bool, labels ...string) *prometheus.Desc {
		if roles && !shared {
			labels = append([]string{"role"}, labels...)
		}
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
	g := func(name, help string, get func(goneli.Stats) float64) gauge {
		return gauge{desc: d(name, help, false), get: get}
	}
	shared := func(name, help string, get func(goneli.Stats) float64) gauge {
		return gauge{desc: d(name, help, true), get: get, shared: true}
	}
	k := func(name, help string, get func(goneli.Stats) uint64) counter {
		return counter{desc: d(name, help, false), get: get}
	}
	sharedK := func(name, help string, get func(goneli.Stats) uint64) counter {
		return counter{desc: d(name, help, true), get: get, shared: true}
	}
	assignedHelp := "1 while the instance owns partition 0 of the leader topic."
	if roles {
		assignedHelp = "1 while the instance owns the role's partition of the leader topic."
	}
	return &Collector{
		stats: stats,
		roles: roles,
		gauges: []gauge{
			g("leader", "1 while the lease is valid (IsLeader).", func(s goneli.Stats) float64 { return b(s.Leader) }),
			g("leading", "1 while the instance believes it leads: acquired and not since fenced or revoked.", func(s goneli.Stats) float64 { return b(s.Leading) }),
			g("assigned", assignedHelp, func(s goneli.Stats) float64 { return b(s.Assigned) }),
			shared("live", "1 until Close begins.", func(s goneli.Stats) float64 { return b(s.State == goneli.Live) }),
			g("fencing_token", "Fencing token of the current tenure while leading, else 0.", func(s goneli.Stats) float64 { return float64(s.Token) }),
			g("lease_remaining_seconds", "Time left on the current lease.", secs(func(s goneli.Stats) time.Duration { return s.LeaseRemaining })),
			g("lease_age_seconds", "Age of the heartbeat behind the current lease.", secs(func(s goneli.Stats) time.Duration { return s.LeaseAge })),
			g("lease_overdue_seconds", "How long ago the lease ran out while the instance still believed it led; above zero for more than milliseconds means it is stuck.", secs(func(s goneli.Stats) time.Duration { return s.LeaseOverdue })),
			g("heartbeat_rtt_seconds", "Send-to-read-back time of the newest confirmed heartbeat.", secs(func(s goneli.Stats) time.Duration { return s.HeartbeatRTT })),
			g("renewal_lag_seconds", "Time from sending a heartbeat to the coordinator accepting its offset, for the newest renewal.", secs(func(s goneli.Stats) time.Duration { return s.RenewalLag })),
			shared("yield_remaining_seconds", "Time left out of the group after Yield.", secs(func(s goneli.Stats) time.Duration { return s.YieldRemaining })),
			g("assigned_not_leading_seconds", "How long the instance has owned the partition without leading it (Stats.NotLeadingSince); 0 while it leads or does not own it. After HeartbeatTimeout it hands over.",
				secs(func(s goneli.Stats) time.Duration { return notLeadingFor(s) })),
			shared("standby", "1 while the instance stays out of the group because a member of higher priority is in it (Stats.Standby).",
				func(s goneli.Stats) float64 { return b(s.Standby) }),
			shared("kafka_unreachable_seconds", "How long the instance has reached no Kafka broker (Stats.UnreachableSince); 0 while Kafka answers.",
				secs(func(s goneli.Stats) time.Duration { return unreachableFor(s) })),
		},
		counts: []counter{
			k("heartbeats_sent_total", "Heartbeats handed to the producer.", func(s goneli.Stats) uint64 { return s.HeartbeatsSent }),
			k("heartbeats_confirmed_total", "Own heartbeats of the current tenure read back.", func(s goneli.Stats) uint64 { return s.HeartbeatsConfirmed }),
			k("heartbeats_stale_total", "Own heartbeats ignored as belonging to an earlier tenure or arriving out of order.", func(s goneli.Stats) uint64 { return s.StaleHeartbeats }),
			k("heartbeats_late_total", "Own heartbeats confirmed too late to renew the lease.", func(s goneli.Stats) uint64 { return s.LateHeartbeats }),
			k("commit_rejections_total", "Heartbeat offset commits refused by the group coordinator.", func(s goneli.Stats) uint64 { return s.CommitRejections }),
			sharedK("handovers_total", "Times the instance left the group because it owned a partition it could not lead (Stats.HandOvers).",
				func(s goneli.Stats) uint64 { return s.HandOvers }),
			sharedK("transfers_total", "Times the instance handed leadership over to a member of higher priority or on TransferTo (Stats.Transfers).",
				func(s goneli.Stats) uint64 { return s.Transfers }),
		},
		trans: d("transitions_total", "Leadership events delivered, by kind: acquired, fenced, revoked.", false, "kind"),
		info:  d("leader_info", "1 for the leader this instance knows of (itself, or as observed), by its name and Config.Address.", false, "leader", "address"),
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
	ch <- c.info
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	all := c.stats()
	if len(all) == 0 {
		return
	}
	for _, g := range c.gauges {
		if g.shared {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.get(all[0]))
		}
	}
	for _, k := range c.counts {
		if k.shared {
			ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, float64(k.get(all[0])))
		}
	}
	for _, s := range all {
		// The role label comes first, as the descriptors list it.
		var role []string
		if c.roles {
			role = []string{s.Role}
		}
		for _, g := range c.gauges {
			if !g.shared {
				ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.get(s), role...)
			}
		}
		for _, k := range c.counts {
			if !k.shared {
				ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, float64(k.get(s)), role...)
			}
		}
		for _, t := range []struct {
			kind string
			n    uint64
		}{{"acquired", s.Acquired}, {"fenced", s.Fenced}, {"revoked", s.Revoked}} {
			ch <- prometheus.MustNewConstMetric(c.trans, prometheus.CounterValue, float64(t.n), append(role, t.kind)...)
		}
	}
	if c.leaders == nil {
		return
	}
	for _, l := range c.leaders() {
		if !l.known || l.info.Name == "" {
			continue
		}
		var labels []string
		if c.roles {
			labels = []string{l.role}
		}
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, append(labels, l.info.Name, l.info.Address)...)
	}
}

// DefaultTolerance is how long a lease may stay overdue before HealthHandler reports it. The lease
// watchdog fences within milliseconds of expiry unless the instance is stuck.
const DefaultTolerance = time.Second

// HealthHandler answers 200 while c is healthy and 503 when it believes it leads but its lease ran
// out more than tolerance ago (something holds up the pulse loop or the barrier, so it cannot fence
// itself), once it is closing, or when it has reached no Kafka broker for more than tolerance
// (Stats.UnreachableSince; the problem names since when and the last error), or when it has owned
// partition 0 without leading for more than tolerance (Stats.NotLeadingSince: it cannot renew, or
// a long rebalance holds its commits; it hands over after Config.HandOverAfter if its heartbeats
// do not come back promptly). A restart does not
// bring Kafka back, so use it as a readiness check, or give a liveness check a long threshold. A tolerance of zero means DefaultTolerance. The body is a JSON
// summary of the state.
func HealthHandler(c goneli.Curator, tolerance time.Duration) http.Handler {
	return healthHandler(tolerance, func() []goneli.Stats { return []goneli.Stats{c.Stats()} },
		func(v verdict, all []goneli.Stats) any {
			return struct {
				verdict
				Leader bool  `json:"leader"`
				Token  int64 `json:"token,omitempty"`
			}{v, all[0].Leader, all[0].Token}
		})
}

// RolesHealthHandler is HealthHandler for every role of r: it answers 503 if any role believes it
// leads while its lease ran out more than tolerance ago, or has owned its partition without leading
// it for more than tolerance, naming the roles, once r is closing, or while Kafka is unreachable.
// The body lists the roles led and each role's leadership and token.
func RolesHealthHandler(r goneli.Roles, tolerance time.Duration) http.Handler {
	type role struct {
		Role   string `json:"role"`
		Leader bool   `json:"leader"`
		Token  int64  `json:"token,omitempty"`
	}
	return healthHandler(tolerance, func() []goneli.Stats { return rolesStats(r) },
		func(v verdict, all []goneli.Stats) any {
			leading, roles := []string{}, make([]role, len(all))
			for i, s := range all {
				roles[i] = role{s.Role, s.Leader, s.Token}
				if s.Leader {
					leading = append(leading, s.Role)
				}
			}
			return struct {
				verdict
				Leading []string `json:"leading"`
				Roles   []role   `json:"roles"`
			}{v, leading, roles}
		})
}

// notLeadingFor is how long s has reported its partition owned but not led.
func notLeadingFor(s goneli.Stats) time.Duration {
	if s.NotLeadingSince.IsZero() {
		return 0
	}
	return max(time.Since(s.NotLeadingSince), 0)
}

// unreachableFor is how long s has reported Kafka unreachable.
func unreachableFor(s goneli.Stats) time.Duration {
	if s.UnreachableSince.IsZero() {
		return 0
	}
	return max(time.Since(s.UnreachableSince), 0)
}

// verdict is what every health body starts with.
type verdict struct {
	Healthy bool   `json:"healthy"`
	Problem string `json:"problem,omitempty"`
	State   string `json:"state"`
}

// healthHandler judges the Stats that read returns, one or one per role, and answers with the
// JSON of body.
func healthHandler(tolerance time.Duration, read func() []goneli.Stats, body func(verdict, []goneli.Stats) any) http.Handler {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		all := read()
		var overdue, stuck []string
		state := goneli.Closed // what a Roles without roles would be; NewRoles makes none
		unreachable := ""
		for _, s := range all {
			state = s.State
			if d := notLeadingFor(s); d > tolerance {
				what := fmt.Sprintf("owns its partition but has not led it for %v", d.Round(time.Millisecond))
				if s.Role != "" {
					what = "role " + s.Role + " " + what
				}
				stuck = append(stuck, what)
			}
			if d := unreachableFor(s); d > tolerance {
				unreachable = fmt.Sprintf("cannot reach Kafka since %s (%v ago): %s",
					s.UnreachableSince.UTC().Format(time.RFC3339), d.Round(time.Millisecond), s.UnreachableReason)
			}
			if s.LeaseOverdue > tolerance {
				what := fmt.Sprintf("believes it leads but its lease ran out %v ago", s.LeaseOverdue.Round(time.Millisecond))
				if s.Role != "" {
					what = "role " + s.Role + " " + what
				}
				overdue = append(overdue, what)
			}
		}
		status, problem := http.StatusOK, ""
		switch {
		case len(overdue) > 0:
			status, problem = http.StatusServiceUnavailable, strings.Join(overdue, "; ")
		case state != goneli.Live:
			status, problem = http.StatusServiceUnavailable, "not live: "+state.String()
		case unreachable != "":
			status, problem = http.StatusServiceUnavailable, unreachable
		case len(stuck) > 0:
			status, problem = http.StatusServiceUnavailable, strings.Join(stuck, "; ")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body(verdict{status == http.StatusOK, problem, state.String()}, all))
	})
}

// Handler serves /metrics for c (with its own registry) and /healthz. It is what the neli
// command's --metrics-addr listens with.
func Handler(c goneli.Curator, constLabels prometheus.Labels) (http.Handler, error) {
	return handler(NewCollector(c, constLabels), HealthHandler(c, 0))
}

// RolesHandler is Handler for every role of r: /metrics from NewRolesCollector and /healthz from
// RolesHealthHandler. It is what neli run --roles and --role serve with --metrics-addr.
func RolesHandler(r goneli.Roles, constLabels prometheus.Labels) (http.Handler, error) {
	return handler(NewRolesCollector(r, constLabels), RolesHealthHandler(r, 0))
}

func handler(c *Collector, health http.Handler) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/healthz", health)
	return mux, nil
}
