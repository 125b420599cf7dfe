package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/member"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The load scenario (--load) runs N instances, each leading one role in a group of its own, and
// one instance leading --load-roles roles, on the embedded broker, and makes the broker answer
// every request later and later (--load-delays, delayAnswers): what each instance asks of the
// broker must not grow as the broker slows (a slow broker that gets more requests answers slower
// still, and every leader of every group on it fences), and at the default lease no leader may
// fence while nothing but load is applied. The members keep running while the delay steps up;
// after each step they settle for --load-settle and are measured over --load-window.

// LoadReport is what the load scenario measured.
type LoadReport struct {
	HeartbeatTimeoutMs int64 `json:"heartbeat_timeout_ms"`
	// Delayed says which requests the broker answered late, and how.
	Delayed string    `json:"delayed"`
	Rows    []LoadRow `json:"rows"`
}

// LoadRow is one setup at one delay.
type LoadRow struct {
	Instances int     `json:"instances"`
	Roles     int     `json:"roles_per_instance"`
	DelayMs   float64 `json:"delay_ms"`
	WindowS   float64 `json:"window_s"`
	// Requests a member sent a second, by request name: the mean over the members.
	PerMemberRequestsPerSByKey map[string]float64 `json:"per_member_requests_per_s_by_key"`
	PerMemberRequestsPerS      float64            `json:"per_member_requests_per_s"`
	// The most requests of a name that one member had sent and the broker not yet answered, at
	// once, in the window.
	MaxInFlightByKey map[string]int `json:"max_in_flight_by_key"`
	// CPU: every member together, the median member, and the embedded broker with the harness.
	MembersCPUSPerMin   float64 `json:"members_cpu_s_per_min"`
	PerMemberCPUSPerMin float64 `json:"per_member_cpu_s_per_min"`
	BrokerCPUSPerMin    float64 `json:"broker_cpu_s_per_min"`
	// Fences are the LeaderFenced events in the window (no fault is applied); Leading the roles
	// led at its end, of Instances x Roles.
	Fences  int `json:"fences"`
	Leading int `json:"leading"`
	// The least lease left that any member saw while leading (its renewal margin), the median of
	// the members' least, and the longest renewal lag.
	MarginMinMs    float64 `json:"margin_min_ms"`
	MarginMedianMs float64 `json:"margin_median_ms"`
	LagMaxMs       float64 `json:"lag_max_ms"`
	// Stores that missed librdkafka's tick and withdrawals that came late, in the window, in all.
	StoresMissed    uint64  `json:"stores_missed"`
	LateWithdrawals uint64  `json:"late_withdrawals"`
	LoadAvg         float64 `json:"load_avg_end_of_window"`
}

// loadStagger is the pause between two launches of the load scenario's members.
const loadStagger = 100 * time.Millisecond

// loadKeys are the request names the load tables show by name; the rest add up as "other".
var loadKeys = []string{"Produce", "Fetch", "OffsetCommit", "Heartbeat"}

// runLoad runs the load scenario and returns the errors of its setups.
func (r *runner) runLoad() []error {
	o := r.e.opts
	if r.e.wire == nil {
		r.printf("load scenario skipped: it needs the embedded broker")
		return nil
	}
	r.rep.Load = &LoadReport{HeartbeatTimeoutMs: o.loadLease.Milliseconds(),
		Delayed: "every request but ApiVersions and SASL, by a control function that sleeps before the broker handles it; a connection's requests wait for one another, as Kafka serves a connection one request at a time"}
	var errs []error
	setups := [][2]int{}
	for _, n := range o.loadInstances {
		setups = append(setups, [2]int{n, 1})
	}
	if o.loadRoles > 0 {
		setups = append(setups, [2]int{1, o.loadRoles})
	}
	for _, s := range setups {
		if err := r.loadSetup(s[0], s[1]); err != nil {
			errs = append(errs, err)
			r.printf("error: %v", err)
		}
	}
	r.e.delay.Store(0)
	return errs
}

// loadSetup runs n instances of roles roles each (one role: goneli.New) through every delay.
func (r *runner) loadSetup(n, roles int) error {
	o := r.e.opts
	r.e.delay.Store(0)
	scenario := fmt.Sprintf("load-%dx%d", n, roles)
	return r.withFleet(scenario, o.loadLease, o.loadTask, func(f *memberFleet) error {
		f.ownGroups = true
		if roles > 1 {
			f.roles = goneli.Shards(roles)
		}
		f.extra = []string{"--stats-every", "1s"}
		launch := time.Now()
		for i := range n {
			if i > 0 {
				// Sixty-four processes starting at once on two cores starve the first leaders of
				// CPU for longer than a lease; deployments do not start that way, and the scenario
				// measures what the instances cost once running. A pause between launches is the
				// harness's pacing, not a measurement.
				time.Sleep(loadStagger)
			}
			if _, err := f.spawn(); err != nil {
				return err
			}
		}
		acted := map[string]bool{}
		if _, _, err := f.waitFor(0, startLimit(n, o.loadLease)+time.Duration(roles)*10*time.Millisecond, "every role acted for", func(l member.Line) bool {
			if l.Event == member.EventAct {
				acted[l.Name+"/"+l.Role] = true
			}
			return len(acted) == n*roles
		}); err != nil {
			return err
		}
		r.printf("%s: %d instances leading %d roles each after %v", scenario, n, roles, time.Since(launch).Round(time.Millisecond))
		for _, d := range o.loadDelays {
			r.e.delay.Store(int64(d))
			time.Sleep(o.loadSettle) // the members settle at the new delay: a measurement's lead-in
			row, err := r.loadWindow(f, n, roles, d)
			if err != nil {
				return err
			}
			r.rep.Load.Rows = append(r.rep.Load.Rows, row)
			r.printf("%s at %v: %.1f requests/s per member (%s), %d commits in flight at most, %.2f CPU s/min per member, %d fences, margin %.0f ms at least",
				scenario, d, row.PerMemberRequestsPerS, topRequests(row.PerMemberRequestsPerSByKey, 4), row.MaxInFlightByKey["OffsetCommit"],
				row.PerMemberCPUSPerMin, row.Fences, row.MarginMinMs)
		}
		// The members leave at a prompt broker, so that the next setup starts from one.
		r.e.delay.Store(0)
		return nil
	})
}

// loadWindow measures f's members over the load window at delay d.
func (r *runner) loadWindow(f *memberFleet, n, roles int, d time.Duration) (LoadRow, error) {
	o := r.e.opts
	row := LoadRow{Instances: n, Roles: roles, DelayMs: ms(d)}
	clients := map[string]bool{}
	for _, p := range f.Procs() {
		clients["goneli-"+goneli.Sanitise(p.Name)] = true
	}
	// An instance with roles gives its consumer the client.id of the others with a suffix that
	// names its role list (goneli's groupcheck.go); the requests are the instance's all the same.
	ours := func(client string) bool {
		if i := strings.Index(client, "--roles-"); i >= 0 {
			client = client[:i]
		}
		return clients[client]
	}
	from := f.Cursor()
	before := r.e.wire.Totals()
	r.e.wire.Reset()
	w, err := r.measureWindow(f, o.loadWindow, nil)
	if err != nil {
		return row, err
	}
	after, most := r.e.wire.Totals(), r.e.wire.Most()
	row.WindowS = w.elapsed.Seconds()
	row.LoadAvg = loadAverage()
	row.PerMemberRequestsPerSByKey = map[string]float64{}
	row.MaxInFlightByKey = map[string]int{}
	for k, v := range after {
		if !ours(k.Client) {
			continue
		}
		name := kmsg.NameForKey(k.Key)
		rate := w.perS(v-before[k]) / float64(n)
		row.PerMemberRequestsPerSByKey[name] += rate
		row.PerMemberRequestsPerS += rate
	}
	for k, v := range most {
		if ours(k.Client) {
			name := kmsg.NameForKey(k.Key)
			row.MaxInFlightByKey[name] = max(row.MaxInFlightByKey[name], v)
		}
	}
	var ticks int64
	var cpu []float64
	for _, p := range w.procs {
		ticks += p.ticks
		cpu = append(cpu, w.perMin(p.ticks))
	}
	row.MembersCPUSPerMin = w.perMin(ticks)
	row.PerMemberCPUSPerMin = summarise(cpu).Median
	row.BrokerCPUSPerMin = w.perMin(w.harnessTicks)
	margins := map[string]float64{}
	first, last := map[string]*member.Stat{}, map[string]*member.Stat{}
	for _, l := range f.Lines()[from:] {
		switch {
		case l.Event == member.EventFenced:
			row.Fences++
		case l.Event == member.EventStats && l.Stat != nil:
			st := l.Stat
			if first[l.Name] == nil {
				first[l.Name] = st
			}
			last[l.Name] = st
			if st.MarginMs >= 0 {
				if m, ok := margins[l.Name]; !ok || st.MarginMs < m {
					margins[l.Name] = st.MarginMs
				}
			}
			row.LagMaxMs = max(row.LagMaxMs, st.LagMs)
		}
	}
	var ms []float64
	for _, m := range margins {
		ms = append(ms, m)
	}
	if s := summarise(ms); s.N > 0 {
		row.MarginMinMs, row.MarginMedianMs = s.Min, s.Median
	}
	for _, p := range f.Procs() {
		if last[p.Name] == nil {
			// A member that reports nothing would count as leading no role with no margin: a
			// broken harness, not a figure.
			return row, fmt.Errorf("%s wrote no stats line in the %v window", p.Name, o.loadWindow)
		}
	}
	for name, l := range last {
		row.Leading += l.Leading
		row.StoresMissed += l.Missed - first[name].Missed
		row.LateWithdrawals += l.Late - first[name].Late
	}
	return row, nil
}

// printLoadTables renders the load scenario: one table per setup, a row per delay.
func printLoadTables(p func(format string, args ...any), rep *LoadReport) {
	if rep == nil || len(rep.Rows) == 0 {
		return
	}
	lease := time.Duration(rep.HeartbeatTimeoutMs) * time.Millisecond
	type setup struct{ n, roles int }
	var order []setup
	for _, row := range rep.Rows {
		if s := (setup{row.Instances, row.Roles}); !slices.Contains(order, s) {
			order = append(order, s)
		}
	}
	p("")
	p("Load: HeartbeatTimeout %v; the broker answers %s.", lease, rep.Delayed)
	for _, s := range order {
		what := fmt.Sprintf("%d instances, one role each", s.n)
		if s.n == 1 {
			what = "1 instance, one role"
		}
		if s.roles > 1 {
			what = fmt.Sprintf("%d instance, %d roles", s.n, s.roles)
		}
		p("")
		p("| %s: broker delay | requests/s per member: %s, other | commits in flight, most | CPU s/min: members, per member, broker | fences | leading | lease left at least (median member) | renewal lag, most | stores missed, late withdrawals |",
			what, strings.Join(loadKeys, ", "))
		p("|---|---|---|---|---|---|---|---|---|")
		for _, row := range rep.Rows {
			if row.Instances != s.n || row.Roles != s.roles {
				continue
			}
			var parts []string
			other := row.PerMemberRequestsPerS
			for _, k := range loadKeys {
				parts = append(parts, fmt.Sprintf("%.2f", row.PerMemberRequestsPerSByKey[k]))
				other -= row.PerMemberRequestsPerSByKey[k]
			}
			parts = append(parts, fmt.Sprintf("%.2f", max(other, 0)))
			p("| %s | %s (%.2f) | %d | %.2f, %.2f, %.2f | %d | %d of %d | %s (%s) | %s | %d, %d |",
				msStr(row.DelayMs), strings.Join(parts, ", "), row.PerMemberRequestsPerS, row.MaxInFlightByKey["OffsetCommit"],
				row.MembersCPUSPerMin, row.PerMemberCPUSPerMin, row.BrokerCPUSPerMin, row.Fences, row.Leading, row.Instances*row.Roles,
				msStr(row.MarginMinMs), msStr(row.MarginMedianMs), msStr(row.LagMaxMs), row.StoresMissed, row.LateWithdrawals)
		}
	}
	var others []string
	seen := map[string]bool{}
	for _, row := range rep.Rows {
		for k := range row.PerMemberRequestsPerSByKey {
			if !slices.Contains(loadKeys, k) && !seen[k] {
				seen[k] = true
				others = append(others, k)
			}
		}
	}
	sort.Strings(others)
	if len(others) > 0 {
		p("")
		p("\"other\" is %s.", strings.Join(others, ", "))
	}
}

// parseDelays reads a comma-separated list of broker delays; "0" is no delay.
func parseDelays(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("--load-delays: bad delay %q (a duration such as 400ms, or 0)", f)
		}
		out = append(out, d)
	}
	return out, nil
}
