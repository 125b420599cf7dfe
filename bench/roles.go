package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/member"
	"github.com/goneli/goneli/internal/verdict"
)

// The roles scenarios (--roles-scenarios) measure goneli.NewRoles: what one instance leading many
// roles costs next to as many single-leader instances, how one role hands off when its leader
// stops or crashes, and how a larger group spreads roles and moves them when members come and go.

// RolesReport is what the roles scenarios measured.
type RolesReport struct {
	Roles int `json:"roles"` // roles in the cost and group scenarios (--roles)
	// Cost compares one instance leading one role (New), one instance leading every role
	// (NewRoles) and as many single-leader instances as roles, each in a group of its own.
	Cost []RolesCost `json:"cost"`
	// HandoffRoles and HandoffMembers are the roles and members of the handoff trials.
	HandoffRoles   int `json:"handoff_roles"`
	HandoffMembers int `json:"handoff_members"`
	// Series are the handoff figures; see the seriesRoles* constants.
	Series []Series     `json:"series"`
	Group  []RolesGroup `json:"group,omitempty"`
}

// The roles cost setups.
const (
	setupOneRole   = "one-role"  // one instance, New
	setupRoles     = "roles"     // one instance, NewRoles with every role
	setupInstances = "instances" // one New instance per role, each in a group of its own
)

// rolesSetups are the setups of the roles cost scenario, in the order they run.
var rolesSetups = []string{setupOneRole, setupRoles, setupInstances}

// RolesCost is the steady-state cost of one setup of the roles cost scenario, measured over a
// window in which leadership did not change.
type RolesCost struct {
	Setup     string  `json:"setup"` // see the setup* constants
	Processes int     `json:"processes"`
	Roles     int     `json:"roles"` // roles led in all
	WindowS   float64 `json:"window_s"`
	// CPU of every member process together, and per role led.
	CPUSPerMin        float64 `json:"cpu_s_per_min"`
	CPUSPerMinPerRole float64 `json:"cpu_s_per_min_per_role"`
	// The broker (the embedded one, or the JVMs of --kafka real) and the harness reading the
	// members' output.
	HarnessCPUSPerMin        float64 `json:"harness_cpu_s_per_min"`
	HarnessCPUSPerMinPerRole float64 `json:"harness_cpu_s_per_min_per_role"`
	// Memory at the end of the window: per process (the median with several) and in all.
	RSSMB        float64 `json:"rss_mb"`
	Threads      int64   `json:"threads"`
	RSSMBTotal   float64 `json:"rss_mb_total"`
	ThreadsTotal int64   `json:"threads_total"`
	// Heartbeats appended to the leader topics' partitions.
	HeartbeatsPerS        float64 `json:"heartbeats_per_s"`
	HeartbeatsPerSPerRole float64 `json:"heartbeats_per_s_per_role"`
	// Requests the broker received: the embedded broker's count, or the counting proxy's with
	// --kafka real (none with --kafka host:port).
	RequestsPerS        float64            `json:"broker_requests_per_s,omitempty"`
	RequestsPerSPerRole float64            `json:"broker_requests_per_s_per_role,omitempty"`
	RequestsPerSByKey   map[string]float64 `json:"broker_requests_per_s_by_key,omitempty"`
	LeaderChanges       int                `json:"leader_changes_in_window"`
	LoadAvgDuringWindow float64            `json:"load_avg_end_of_window"`
}

// RolesGroup is a group of members spreading roles: how long until every role was led, and what
// moved when one member left and when one joined.
type RolesGroup struct {
	Members int `json:"members"`
	Roles   int `json:"roles"`
	// From launching the processes to the first LeaderAcquired of every role, to an action for
	// every role, and to every role led with the roles spread evenly.
	LaunchToAllAcquiredMs float64   `json:"launch_to_all_acquired_ms"`
	LaunchToAllActedMs    float64   `json:"launch_to_all_acted_ms"`
	LaunchToBalancedMs    float64   `json:"launch_to_balanced_ms"`
	Leave                 RolesMove `json:"leave"`
	Join                  RolesMove `json:"join"`
}

// RolesMove is what happened to the roles when one member left (SIGTERM) or joined.
type RolesMove struct {
	Member string `json:"member"`
	// MemberRoles is what had to move: the roles the leaver led, or the roles the newcomer leads
	// once the group is balanced.
	MemberRoles int `json:"member_roles"`
	// Moved counts the roles whose leader differs between the balanced states before and after.
	Moved int `json:"moved"`
	// Interrupted counts the roles whose leader gave them up (revoked or fenced) in between,
	// whether or not they moved; with an ideal assignor it equals MemberRoles.
	Interrupted int `json:"interrupted"`
	// From the SIGTERM (or the launch) to every moved role acted for by its new leader, and to the
	// group balanced again with every role led.
	ToMovedActedMs float64 `json:"to_moved_acted_ms"`
	ToBalancedMs   float64 `json:"to_balanced_ms"`
}

// Names of the roles series.
const (
	seriesRolesHandoff     = "roles-graceful-handoff"     // per role moved
	seriesRolesHandoffAll  = "roles-graceful-handoff-all" // every role of the leader
	seriesRolesFailover    = "roles-crash-failover"
	seriesRolesFailoverAll = "roles-crash-failover-all"
	seriesRolesCrashGap    = "roles-leaderless-gap-after-crash"
)

// rolesReport returns the report's roles section, making it if need be.
func (r *runner) rolesReport() *RolesReport {
	if r.rep.Roles == nil {
		r.rep.Roles = &RolesReport{Roles: r.e.opts.roles, HandoffRoles: r.e.opts.handoffRoles, HandoffMembers: r.e.opts.groupSize}
	}
	return r.rep.Roles
}

// runRoles runs every roles scenario and returns the errors of those that failed.
func (r *runner) runRoles() []error {
	o := r.e.opts
	r.rolesReport()
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
			r.printf("error: %v", err)
		}
	}
	for _, setup := range o.rolesSetups {
		note(r.rolesCost(setup, o.roles))
	}
	for _, lease := range o.leases {
		note(r.rolesFailover(false, lease, o.rolesTrials))
		note(r.rolesFailover(true, lease, o.rolesTrials))
	}
	if o.rolesGroup > 0 {
		note(r.rolesGroup(o.roles, o.rolesGroup))
	}
	return errs
}

// describeLeaders renders who leads each role, in role order, to compare two states.
func describeLeaders(led map[string]string) string {
	roles := slices.Collect(maps.Keys(led))
	verdict.SortRoles(roles)
	var sb strings.Builder
	for _, role := range roles {
		fmt.Fprintf(&sb, "%s=%s ", role, led[role])
	}
	return sb.String()
}

// balanced reports whether every one of roles is led and the n members lead floor or ceil of
// len(roles)/n each, as the cooperative-sticky assignor spreads them.
func balanced(led map[string]string, roles []string, n int) bool {
	per := map[string]int{}
	for _, role := range roles {
		who, ok := led[role]
		if !ok {
			return false
		}
		per[who]++
	}
	lo := len(roles) / n
	hi := lo
	if len(roles)%n != 0 {
		hi++
	}
	if len(per) != min(n, len(roles)) {
		return false
	}
	for _, k := range per {
		if k < lo || k > hi {
			return false
		}
	}
	return true
}

// awaitRolesSteady waits until the group is stable with n members, every role is led with the
// roles spread evenly over them, and every role's leader has acted for it since the group was
// stable; it returns who leads each role.
func (r *runner) awaitRolesSteady(f *memberFleet, n int, limit time.Duration) (map[string]string, error) {
	deadline := time.Now().Add(limit)
	if err := r.e.waitStable(f.group, n, limit); err != nil {
		return nil, fmt.Errorf("%s: %w%s", f.scenario, err, f.Diagnostics())
	}
	since := time.Now().UnixNano()
	lines := f.Lines()
	t := newLeaderTracker()
	for _, l := range lines {
		t.add(l)
	}
	actor := map[string]string{} // role -> who acted for it last since the group was stable
	var led map[string]string
	_, _, err := f.waitFor(len(lines), time.Until(deadline), fmt.Sprintf("every role led, spread over %d members, and acted for by its leader", n),
		func(l member.Line) bool {
			t.add(l)
			if l.Event == member.EventAct && l.To >= since {
				actor[l.Role] = l.Name
			}
			if len(actor) < len(f.roles) {
				return false
			}
			led = t.leaders()
			for _, role := range f.roles {
				if actor[role] != led[role] {
					return false
				}
			}
			return balanced(led, f.roles, n)
		})
	if err != nil {
		return nil, fmt.Errorf("%w; leaders: %s", err, describeLeaders(t.leaders()))
	}
	return led, nil
}

// rolesCost measures one setup of the cost comparison: n roles led by one instance, by n
// instances, or a single role by one instance.
func (r *runner) rolesCost(setup string, n int) error {
	lease := goneli.DefaultHeartbeatTimeout
	scenario := "rolescost-" + setup
	return r.withFleet(scenario, lease, r.e.opts.costTask, func(f *memberFleet) error {
		procs, keys := 1, 1 // processes, and roles or processes that must act before the window
		switch setup {
		case setupRoles:
			f.roles = goneli.Shards(n)
			keys = n
		case setupInstances:
			f.ownGroups = true
			procs, keys = n, n
		}
		launch := time.Now()
		for range procs {
			if _, err := f.spawn(); err != nil {
				return err
			}
		}
		// One member per group: there is no rebalance to wait out, only every leadership's first
		// action. A process acts for one role, so the key is the role with NewRoles and the
		// process otherwise.
		acted := map[string]bool{}
		if _, _, err := f.waitFor(0, startLimit(procs, lease), "every role acted for", func(l member.Line) bool {
			if l.Event == member.EventAct {
				acted[l.Name+"/"+l.Role] = true
			}
			return len(acted) == keys
		}); err != nil {
			return err
		}
		r.printf("%s: %d processes leading %d roles in all after %v", scenario, procs, max(keys, len(f.roles)), time.Since(launch).Round(time.Millisecond))
		var parts []topicPartition
		for _, p := range f.Procs() {
			topic := f.group + ".neli"
			if f.ownGroups {
				topic = f.memberGroup(p.Name) + ".neli"
			}
			for i := range max(len(f.roles), 1) {
				parts = append(parts, topicPartition{topic, int32(i)})
			}
		}
		w, err := r.measureWindow(f, r.e.opts.costWindow, parts)
		if err != nil {
			return err
		}
		c := RolesCost{Setup: setup, Processes: procs, Roles: max(len(f.roles), procs), WindowS: w.elapsed.Seconds(),
			LeaderChanges: w.changes, LoadAvgDuringWindow: loadAverage()}
		var ticks int64
		var rss, threads []float64
		for _, p := range w.procs {
			ticks += p.ticks
			rss = append(rss, p.rssMB())
			threads = append(threads, float64(p.threads))
			c.RSSMBTotal += p.rssMB()
			c.ThreadsTotal += p.threads
		}
		roles := float64(c.Roles)
		c.CPUSPerMin = w.perMin(ticks)
		c.CPUSPerMinPerRole = c.CPUSPerMin / roles
		c.HarnessCPUSPerMin = w.perMin(w.harnessTicks + w.brokerTicks)
		c.HarnessCPUSPerMinPerRole = c.HarnessCPUSPerMin / roles
		c.RSSMB = summarise(rss).Median
		c.Threads = int64(summarise(threads).Median)
		c.HeartbeatsPerS = w.perS(w.heartbeats)
		c.HeartbeatsPerSPerRole = c.HeartbeatsPerS / roles
		if r.e.counter != nil {
			c.RequestsPerS = w.perS(w.requests())
			c.RequestsPerSPerRole = c.RequestsPerS / roles
			c.RequestsPerSByKey = w.requestsPerSByKey()
		}
		rep := r.rolesReport()
		rep.Cost = append(rep.Cost, c)
		r.printf("%s over %.0f s: %.2f CPU s/min (%.3f per role), %.0f MB and %d threads per process, %.1f heartbeats/s, %.0f requests/s (%.1f per role)",
			scenario, c.WindowS, c.CPUSPerMin, c.CPUSPerMinPerRole, c.RSSMB, c.Threads, c.HeartbeatsPerS, c.RequestsPerS, c.RequestsPerSPerRole)
		return nil
	})
}

// rolesFailover runs trials in which the leader of the first role in a settled group of
// --group-size members over --roles-handoff roles is stopped with SIGTERM (graceful) or SIGKILL
// (crash), and measures how long until another member acts for each role it led.
func (r *runner) rolesFailover(crash bool, lease time.Duration, trials int) error {
	kind, sig := "graceful", syscall.SIGTERM
	one := newSeries(seriesRolesHandoff, "leader sent SIGTERM (Close) -> another member's first act for the role, per role it led", lease)
	all := newSeries(seriesRolesHandoffAll, "leader sent SIGTERM (Close) -> other members have acted for every role it led", lease)
	if crash {
		kind, sig = "crash", syscall.SIGKILL
		one = newSeries(seriesRolesFailover, "leader sent SIGKILL -> another member's first act for the role, per role it led", lease)
		all = newSeries(seriesRolesFailoverAll, "leader sent SIGKILL -> other members have acted for every role it led", lease)
	}
	gap := newSeries(seriesRolesCrashGap, "leader's last act for the role -> another member's first act for it, per role it led", lease)
	scenario := "roles-" + kind + "-" + leaseLabel(lease)
	roles := goneli.Shards(r.e.opts.handoffRoles)
	return r.trialLoop(scenario, lease, trials, roles, []*Series{&one, &all, &gap}, func(f *memberFleet, n int, p *fleet.Proc) error {
		var mine []string
		for role, who := range leaders(f.Lines()) {
			if who == p.Name {
				mine = append(mine, role)
			}
		}
		verdict.SortRoles(mine)
		from := f.Cursor()
		t0 := f.signal(p, sig)
		next := map[string]member.Line{}
		if _, _, err := f.waitFor(from, trialLimit(lease), "other members to act for every role of "+p.Name, func(l member.Line) bool {
			if _, seen := next[l.Role]; !seen && l.Event == member.EventAct && l.Name != p.Name && l.From >= t0.UnixNano() && slices.Contains(mine, l.Role) {
				next[l.Role] = l
			}
			return len(next) == len(mine)
		}); err != nil {
			return err
		}
		if _, _, err := f.waitFor(from, trialLimit(lease), p.Name+" to exit", func(l member.Line) bool {
			return l.Event == fleet.EventExit && l.Name == p.Name
		}); err != nil {
			return err
		}
		lastAct := map[string]int64{}
		for _, l := range f.Lines() {
			if l.Event == member.EventAct && l.Name == p.Name {
				lastAct[l.Role] = max(lastAct[l.Role], l.To)
			}
		}
		var slowest float64
		var took []string
		for _, role := range mine {
			d := ms(time.Duration(next[role].From - t0.UnixNano()))
			one.SamplesMs = append(one.SamplesMs, d)
			slowest = max(slowest, d)
			if crash {
				gap.SamplesMs = append(gap.SamplesMs, ms(time.Duration(next[role].From-lastAct[role])))
			}
			took = append(took, fmt.Sprintf("role %s -> %s in %.0f ms", role, next[role].Name, d))
		}
		all.SamplesMs = append(all.SamplesMs, slowest)
		r.printf("%s trial %d/%d: %s led roles %v: %s", scenario, n, trials, p.Name, mine, strings.Join(took, ", "))
		return nil
	})
}

// rolesGroup starts members contending for n roles, measures how long until every role is led,
// then stops one member and starts another, counting the roles that moved each time.
func (r *runner) rolesGroup(n, members int) error {
	lease := goneli.DefaultHeartbeatTimeout
	scenario := fmt.Sprintf("roles%d-group%d", n, members)
	g := RolesGroup{Members: members, Roles: n}
	err := r.withFleet(scenario, lease, r.e.opts.task, func(f *memberFleet) error {
		f.roles = goneli.Shards(n)
		limit := startLimit(members, lease)
		launch := time.Now()
		for range members {
			if _, err := f.spawn(); err != nil {
				return err
			}
		}
		acquired, acted := map[string]bool{}, map[string]bool{}
		var lastAcquired, lastActed int64
		if _, _, err := f.waitFor(0, limit, "every role acquired and acted for", func(l member.Line) bool {
			switch {
			case l.Event == member.EventAcquired && !acquired[l.Role]:
				acquired[l.Role], lastAcquired = true, l.At
			case l.Event == member.EventAct && !acted[l.Role]:
				acted[l.Role], lastActed = true, l.From
			}
			return len(acquired) == n && len(acted) == n
		}); err != nil {
			return err
		}
		before, err := r.awaitRolesSteady(f, members, limit)
		if err != nil {
			return err
		}
		g.LaunchToAllAcquiredMs = ms(time.Duration(lastAcquired - launch.UnixNano()))
		g.LaunchToAllActedMs = ms(time.Duration(lastActed - launch.UnixNano()))
		g.LaunchToBalancedMs = ms(time.Since(launch))
		r.printf("%s: every role acquired %.0f ms after launch, acted for after %.0f ms, balanced after %.0f ms",
			scenario, g.LaunchToAllAcquiredMs, g.LaunchToAllActedMs, g.LaunchToBalancedMs)

		// One member leaves, the leader of the first role, gracefully; then one joins.
		var after map[string]string
		g.Leave, after, err = r.rolesChange(f, before, members-1, limit, "left", func() (string, time.Time, error) {
			p := f.Proc(before[f.roles[0]])
			t0 := f.signal(p, syscall.SIGTERM)
			<-p.Done()
			return p.Name, t0, nil
		})
		if err != nil {
			return err
		}
		g.Join, _, err = r.rolesChange(f, after, members, limit, "joined", func() (string, time.Time, error) {
			t0 := time.Now()
			q, err := f.spawn()
			if err != nil {
				return "", t0, err
			}
			return q.Name, t0, nil
		})
		if err != nil {
			return err
		}
		return nil
	})
	if g.Leave.Member != "" {
		rep := r.rolesReport()
		rep.Group = append(rep.Group, g)
	}
	return err
}

// rolesChange lets the group settle, makes a member leave or join with change, which returns the
// member and when it was told to leave or started, waits until n members lead every role evenly
// again, and reports what moved and who leads each role now.
func (r *runner) rolesChange(f *memberFleet, before map[string]string, n int, limit time.Duration, verb string,
	change func() (string, time.Time, error)) (RolesMove, map[string]string, error) {
	r.settle(f.lease)
	from := f.Cursor()
	who, t0, err := change()
	if err != nil {
		return RolesMove{}, nil, err
	}
	after, err := r.awaitRolesSteady(f, n, limit)
	if err != nil {
		return RolesMove{}, nil, err
	}
	m := moves(f.Lines()[from:], who, before, after, t0)
	// The leaver's roles before, or the newcomer's after.
	m.MemberRoles = countLed(before, who) + countLed(after, who)
	r.printf("%s: %s %s (%d roles its own): %d moved, %d interrupted, the moved ones acted for after %.0f ms, spread evenly after %.0f ms",
		f.scenario, who, verb, m.MemberRoles, m.Moved, m.Interrupted, m.ToMovedActedMs, m.ToBalancedMs)
	return m, after, nil
}

// moves compares who led each role before and after a member left or joined at t0, from the lines
// logged since.
func moves(lines []member.Line, who string, before, after map[string]string, t0 time.Time) RolesMove {
	m := RolesMove{Member: who, ToBalancedMs: ms(time.Since(t0))}
	moved := map[string]bool{}
	for role, now := range after {
		if before[role] != now {
			moved[role] = true
		}
	}
	m.Moved = len(moved)
	interrupted := map[string]bool{}
	acted := map[string]bool{}
	var lastActed int64
	for _, l := range lines {
		switch {
		case l.Event == member.EventRevoked || l.Event == member.EventFenced:
			interrupted[l.Role] = true
		case l.Event == member.EventAct && moved[l.Role] && !acted[l.Role] && l.Name == after[l.Role] && l.From >= t0.UnixNano():
			acted[l.Role] = true
			lastActed = max(lastActed, l.From)
		}
	}
	m.Interrupted = len(interrupted)
	if lastActed > 0 {
		m.ToMovedActedMs = ms(time.Duration(lastActed - t0.UnixNano()))
	}
	return m
}

// countLed counts the roles who leads.
func countLed(led map[string]string, who string) int {
	n := 0
	for _, w := range led {
		if w == who {
			n++
		}
	}
	return n
}

// printRolesTables renders the roles section of the report.
func printRolesTables(w io.Writer, rr *RolesReport) {
	if rr == nil {
		return
	}
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	if len(rr.Cost) > 0 {
		p("")
		p("| Roles: cost (HeartbeatTimeout 5s) | processes | roles | CPU s/min | CPU s/min per role | broker + harness CPU s/min per role | broker requests/s | requests/s per role | heartbeats/s per role | RSS MB / threads per process | RSS MB / threads in all |")
		p("|---|---|---|---|---|---|---|---|---|---|---|")
		for _, c := range rr.Cost {
			p("| %s | %d | %d | %.2f | %.3f | %.3f | %.0f | %.1f | %.2f | %.0f / %d | %.0f / %d |", setupTitle(c), c.Processes, c.Roles,
				c.CPUSPerMin, c.CPUSPerMinPerRole, c.HarnessCPUSPerMinPerRole, c.RequestsPerS, c.RequestsPerSPerRole,
				c.HeartbeatsPerSPerRole, c.RSSMB, c.Threads, c.RSSMBTotal, c.ThreadsTotal)
		}
	}
	if len(rr.Series) > 0 {
		p("")
		p("| Roles: handoff of one role (%d members, %d roles) | HeartbeatTimeout | samples | median | p90 | max | bounded by |", rr.HandoffMembers, rr.HandoffRoles)
		p("|---|---|---|---|---|---|---|")
		for _, s := range rr.Series {
			lease := time.Duration(s.HeartbeatTimeoutMs) * time.Millisecond
			p("| %s | %v | %d | %s | %s | %s | %s |", seriesTitle(s.Name), lease, s.N,
				msStr(s.Median), msStr(s.P90), msStr(s.Max), seriesBound(s, lease))
		}
	}
	for _, g := range rr.Group {
		p("")
		p("| Roles: a group of %d members over %d roles (HeartbeatTimeout 5s) | roles it led / leads | roles moved | roles interrupted | time |", g.Members, g.Roles)
		p("|---|---|---|---|---|")
		p("| processes launched -> every role `acquired` | | | | %s |", msStr(g.LaunchToAllAcquiredMs))
		p("| processes launched -> every role acted for | | | | %s |", msStr(g.LaunchToAllActedMs))
		p("| processes launched -> roles spread evenly, every one acted for | | | | %s |", msStr(g.LaunchToBalancedMs))
		for _, m := range []struct {
			what string
			RolesMove
		}{{"one member leaves (SIGTERM)", g.Leave}, {"one member joins", g.Join}} {
			p("| %s -> moved roles acted for by their new leaders | %d | %d | %d | %s |", m.what, m.MemberRoles, m.Moved, m.Interrupted, msStr(m.ToMovedActedMs))
			p("| %s -> spread evenly again | | | | %s |", m.what, msStr(m.ToBalancedMs))
		}
	}
}

func setupTitle(c RolesCost) string {
	switch c.Setup {
	case setupOneRole:
		return "one instance, one role (New)"
	case setupRoles:
		return fmt.Sprintf("one instance, %d roles (NewRoles)", c.Roles)
	case setupInstances:
		return fmt.Sprintf("%d instances, one role each (New, a group each)", c.Processes)
	}
	return c.Setup
}

// validateRoles checks the roles options.
func validateRoles(o options) error {
	switch {
	case o.roles < 1:
		return errors.New("--roles must be at least 1")
	case o.handoffRoles < 1:
		return errors.New("--roles-handoff must be at least 1")
	case o.rolesGroup == 1 || o.rolesGroup < 0:
		return errors.New("--roles-group must be 0 (none) or at least 2: a member leaves")
	}
	return nil
}
