package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/member"
	"github.com/goneli/goneli/internal/verdict"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// runner runs the scenarios one after another and fills in the report.
type runner struct {
	e   *env
	out io.Writer
	rep *Report
}

func (r *runner) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(r.out, format+"\n", args...)
}

// withFleet runs body with a fresh fleet in its own group, then stops the fleet and checks every
// act span it printed for overlap.
func (r *runner) withFleet(scenario string, lease, task time.Duration, body func(f *memberFleet) error) error {
	f := newFleet(r.e, scenario, lease, task)
	err := body(f)
	if err != nil {
		f.KillAll()
	} else {
		err = f.close()
	}
	lines := f.Lines()
	cut := map[string]bool{}
	for _, l := range lines {
		if l.Event == evCut {
			cut[l.Name] = true
		}
	}
	for _, l := range lines {
		if l.Event == member.EventFenced && !cut[l.Name] {
			r.rep.UncutFences = append(r.rep.UncutFences, UncutFence{Scenario: scenario, Name: l.Name, At: l.At, Reason: l.Info})
		}
	}
	spans := verdict.ActSpans(verdict.ByName(lines))
	if f.ownGroups {
		// Members of different groups do not contend: each one's leadership is a role of its own.
		for i := range spans {
			spans[i].Role = f.memberGroup(spans[i].Who) + "/" + spans[i].Role
		}
	}
	o := &r.rep.Overlap
	o.SpansChecked += len(spans)
	for _, ov := range verdict.Overlaps(spans) {
		ev := OverlapEvent{Scenario: scenario, A: ov.A.Who, B: ov.B.Who, From: ov.From.UnixNano(), To: ov.To.UnixNano(), Ms: ms(ov.Duration())}
		o.Count++
		o.TotalMs += ev.Ms
		o.Instances = append(o.Instances, ev)
		r.printf("!!! LEADERSHIP OVERLAP in %s: %s and %s both acted as leader for %.3f ms (%s to %s)",
			scenario, ev.A, ev.B, ev.Ms, ov.From.Format("15:04:05.000000"), ov.To.Format("15:04:05.000000"))
	}
	return err
}

func isEvent(event string) func(member.Line) bool {
	return func(l member.Line) bool { return l.Event == event }
}

// startLimit bounds how long n members may take to start and settle on this (possibly very busy)
// machine. It guards against a hung run; it is not a measurement.
func startLimit(n int, lease time.Duration) time.Duration {
	return 60*time.Second + time.Duration(n)*3*time.Second + 4*lease
}

// trialLimit bounds one trial's wait for an event.
func trialLimit(lease time.Duration) time.Duration {
	return 60*time.Second + 6*lease
}

// awaitSteady waits until the group is stable with n members and its leader acts afterwards, and
// returns the leader's name.
func (r *runner) awaitSteady(f *memberFleet, n int, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		if err := r.e.waitStable(f.group, n, time.Until(deadline)); err != nil {
			return "", fmt.Errorf("%s: %w%s", f.scenario, err, f.Diagnostics())
		}
		// Stable means assigned, not yet leading: the assignee still has to see a heartbeat of its
		// own come back and commit it.
		from := f.Cursor()
		after := time.Now().UnixNano()
		act, _, err := f.waitFor(from, time.Until(deadline), "an act after the group settled", func(l member.Line) bool {
			return l.Event == member.EventAct && l.To >= after
		})
		if err != nil {
			return "", err
		}
		if name, ok := f.leader(); ok && name == act.Name {
			return act.Name, nil
		}
		// The member that acted has lost leadership again already: report it and wait anew.
		r.unprovoked(f, from)
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s: no steady leader within %v", f.scenario, limit)
		}
	}
}

// unprovoked records leadership changes that no fault of the harness caused, found in the
// fleet's lines from index from on, with the members' reasons.
func (r *runner) unprovoked(f *memberFleet, from int) {
	var events []member.Line
	for _, l := range f.Lines()[from:] {
		switch l.Event {
		case member.EventAcquired, member.EventFenced, member.EventRevoked:
			events = append(events, l)
			r.printf("note: %s: leadership changed with no fault: %s %s %s", f.scenario, l.Name, l.Event, l.Info)
		}
	}
	r.rep.Unprovoked = append(r.rep.Unprovoked, Unprovoked{Scenario: f.scenario, Events: events})
}

// firstLeader starts n contenders in a fresh group with default settings, measures how long the
// first election takes and, if costWindow is positive, what the settled group costs.
func (r *runner) firstLeader(n, rep int, costWindow time.Duration, fl *FirstLeader) (*Cost, error) {
	var cost *Cost
	scenario := fmt.Sprintf("first%d-r%d", n, rep)
	err := r.withFleet(scenario, goneli.DefaultHeartbeatTimeout, r.e.opts.costTask, func(f *memberFleet) error {
		limit := startLimit(n, goneli.DefaultHeartbeatTimeout)
		if r.e.trace != nil {
			r.e.trace.start()
		}
		launch := time.Now()
		for range n {
			if _, err := f.spawn(); err != nil {
				return err
			}
		}
		acq, _, err := f.waitFor(0, limit, "the first acquisition", isEvent(member.EventAcquired))
		if err != nil {
			return err
		}
		if r.e.trace != nil {
			act, _, err := f.waitFor(0, limit, "the first act", isEvent(member.EventAct))
			if err != nil {
				return err
			}
			r.firstPhases(n).add(r.e.trace.stop(), f.Lines(), f.group, "", act, launch)
		}
		var lastStarted member.Line
		err = f.waitCount(0, n, limit, "every member's started line", func(l member.Line) bool {
			if l.Event == member.EventStarted {
				lastStarted = l
				return true
			}
			return false
		})
		if err != nil {
			return err
		}
		for _, l := range f.Lines() {
			if l.Event == member.EventStarted && l.Name == acq.Name {
				fl.StartedToAcquiredMs = append(fl.StartedToAcquiredMs, ms(time.Duration(acq.At-l.At)))
			}
		}
		fl.LaunchToAcquiredMs = append(fl.LaunchToAcquiredMs, ms(time.Duration(acq.At-launch.UnixNano())))
		fl.LaunchToAllStartedMs = append(fl.LaunchToAllStartedMs, ms(time.Duration(lastStarted.At-launch.UnixNano())))
		r.printf("first leader, %d contenders: %s acquired %.0f ms after launch; all started after %.0f ms",
			n, acq.Name, ms(time.Duration(acq.At-launch.UnixNano())), ms(time.Duration(lastStarted.At-launch.UnixNano())))
		if costWindow > 0 {
			cost, err = r.measureCost(f, n, costWindow)
		}
		return err
	})
	return cost, err
}

// idleLeader measures what a group of n costs when its leader has nothing to do: its task sleeps
// task per run (--idle-task, 100 ms), where the cost windows of firstLeader run the --cost-task
// loop (10 ms: a hundred runs a second, each reporting its act). A task that returns at once would
// be run every goneli.MinTaskInterval (1 ms), which is no idle leader either; one that sleeps past
// the renewal interval would delay renewals, which happen only between runs, and so cost less than
// an idle leader does. goneli v0.5.0's leader CPU was measured idle, so the README's table sets
// this figure beside it (issue 47), and the task loop's beside nothing.
func (r *runner) idleLeader(n int, task, window time.Duration) error {
	scenario := fmt.Sprintf("idle%d", n)
	return r.withFleet(scenario, goneli.DefaultHeartbeatTimeout, task, func(f *memberFleet) error {
		for range n {
			if _, err := f.spawn(); err != nil {
				return err
			}
		}
		c, err := r.measureCost(f, n, window)
		if err != nil {
			return err
		}
		r.rep.IdleLeader = c
		return nil
	})
}

// firstPhases returns the phase trace of first elections among n contenders, adding it to the
// report on first use.
func (r *runner) firstPhases(n int) *PhaseTrace {
	name := fmt.Sprintf("First election, %d contenders", n)
	for i := range r.rep.Phases {
		if r.rep.Phases[i].Name == name {
			return &r.rep.Phases[i]
		}
	}
	r.rep.Phases = append(r.rep.Phases, *newPhaseTrace(name, goneli.DefaultHeartbeatTimeout, firstPhases))
	return &r.rep.Phases[len(r.rep.Phases)-1]
}

// measureCost samples every member and the broker over window once the group has settled.
func (r *runner) measureCost(f *memberFleet, n int, window time.Duration) (*Cost, error) {
	leader, err := r.awaitSteady(f, n, startLimit(n, f.lease))
	if err != nil {
		return nil, err
	}
	w, err := r.measureWindow(f, window, []topicPartition{{f.group + ".neli", 0}})
	if err != nil {
		return nil, err
	}
	c := &Cost{Instances: n, WindowS: w.elapsed.Seconds(), LoadAvgDuringWindow: loadAverage(), LeaderChanges: w.changes}
	var followerCPU, followerRSS, followerAnon []float64
	var followerThreads []float64
	var all int64
	for _, p := range w.procs {
		all += p.ticks
		if p.name == leader {
			c.LeaderCPUSPerMin = w.perMin(p.ticks)
			c.LeaderRSSMB, c.LeaderAnonMB = p.rssMB(), p.anonMB()
			c.LeaderThreads = p.threads
		} else {
			followerCPU = append(followerCPU, w.perMin(p.ticks))
			followerRSS = append(followerRSS, p.rssMB())
			followerAnon = append(followerAnon, p.anonMB())
			followerThreads = append(followerThreads, float64(p.threads))
		}
	}
	c.AllCPUSPerMin = w.perMin(all)
	c.HarnessCPUSPerMin = w.perMin(w.harnessTicks + w.brokerTicks)
	c.BrokerJVMCPUSPerMin = w.perMin(w.brokerTicks)
	if len(followerCPU) > 0 {
		c.FollowerCPUSPerMin = summarise(followerCPU).Median
		c.FollowerRSSMB = summarise(followerRSS).Median
		c.FollowerAnonMB = summarise(followerAnon).Median
		c.FollowerThreads = int64(summarise(followerThreads).Median)
	}
	c.HeartbeatsPerS = w.perS(w.heartbeats)
	if r.e.counter != nil {
		c.RequestsPerSByKey = w.requestsPerSByKey()
		c.RequestsPerS = w.perS(w.requests())
		c.ProduceRequestsPerS = c.RequestsPerSByKey["Produce"]
		c.ProduceBytesPerS = w.perS(w.counts.produceBytes)
	}
	r.printf("cost, %d instances over %.0f s: leader %.2f CPU s/min %.0f MB, follower %.2f CPU s/min %.0f MB, %.1f heartbeats/s, %.0f requests/s",
		n, c.WindowS, c.LeaderCPUSPerMin, c.LeaderRSSMB, c.FollowerCPUSPerMin, c.FollowerRSSMB, c.HeartbeatsPerS, c.RequestsPerS)
	return c, nil
}

// topicPartition names one partition of a leader topic.
type topicPartition struct {
	topic     string
	partition int32
}

// window is what a fleet's live members and the broker cost over a measurement window.
type window struct {
	elapsed      time.Duration
	procs        []procCost // the members live at the start, in start order
	harnessTicks int64      // this process: the embedded broker (or the counting proxy) and the output readers
	brokerTicks  int64      // the JVMs of a cluster that --kafka real started; 0 otherwise
	heartbeats   int64      // records appended to the given partitions
	counts       counts     // requests the embedded broker received; empty with --kafka
	changes      int        // leadership events (acquired, fenced, revoked) in the window
}

// procCost is one member's CPU over a window and its memory at the end.
type procCost struct {
	name                   string
	ticks                  int64
	rssKB, anonKB, threads int64
}

func (p procCost) rssMB() float64  { return float64(p.rssKB) / 1024 }
func (p procCost) anonMB() float64 { return float64(p.anonKB) / 1024 }

func (w window) perMin(ticks int64) float64 { return float64(ticks) / userHZ / w.elapsed.Minutes() }

func (w window) perS(n int64) float64 { return float64(n) / w.elapsed.Seconds() }

// requests is every request the broker received in the window.
func (w window) requests() int64 {
	var total int64
	for _, v := range w.counts.byKey {
		total += v
	}
	return total
}

// requestsPerSByKey is the request rate by request name.
func (w window) requestsPerSByKey() map[string]float64 {
	out := map[string]float64{}
	for k, v := range w.counts.byKey {
		out[kmsg.NameForKey(k)] = w.perS(v)
	}
	return out
}

// measureWindow samples every live member of f, this process, the broker's request counts and
// the end offsets of parts before and after a window of length d.
func (r *runner) measureWindow(f *memberFleet, d time.Duration, parts []topicPartition) (window, error) {
	var w window
	procs := f.Live()
	before := map[int]procSample{}
	for _, p := range procs {
		s, err := sampleProc(p.Pid)
		if err != nil {
			return w, err
		}
		before[p.Pid] = s
	}
	self0, err := sampleProc(os.Getpid())
	if err != nil {
		return w, err
	}
	broker0, err := r.e.brokerTicks()
	if err != nil {
		return w, err
	}
	hwm0, err := r.e.heartbeats(parts)
	if err != nil {
		return w, err
	}
	var counts0 counts
	if r.e.counter != nil {
		counts0 = r.e.counter.snapshot()
	}
	from := f.Cursor()
	t0 := time.Now()
	// The window is a measurement interval, so here waiting on a timer is the point.
	time.Sleep(d)
	if r.e.counter != nil {
		w.counts = r.e.counter.snapshot().minus(counts0)
	}
	w.elapsed = time.Since(t0)
	hwm1, err := r.e.heartbeats(parts)
	if err != nil {
		return w, err
	}
	w.heartbeats = hwm1 - hwm0
	self1, err := sampleProc(os.Getpid())
	if err != nil {
		return w, err
	}
	w.harnessTicks = self1.cpuTicks - self0.cpuTicks
	broker1, err := r.e.brokerTicks()
	if err != nil {
		return w, err
	}
	w.brokerTicks = broker1 - broker0
	for _, p := range procs {
		s, err := sampleProc(p.Pid)
		if err != nil {
			return w, fmt.Errorf("%s: sampling %s: %w", f.scenario, p.Name, err)
		}
		w.procs = append(w.procs, procCost{name: p.Name, ticks: s.cpuTicks - before[p.Pid].cpuTicks, rssKB: s.rssKB, anonKB: s.anonKB, threads: s.threads})
	}
	for _, l := range f.Lines()[from:] {
		switch l.Event {
		case member.EventAcquired, member.EventFenced, member.EventRevoked:
			w.changes++
		}
	}
	return w, nil
}

// leaseLabel names a HeartbeatTimeout in scenario names: "5s", "1s", "1500ms".
func leaseLabel(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int(d/time.Second))
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// groupInterval and sessionTimeout are the group timings goneli derives from HeartbeatTimeout
// (see config.go); they bound the figures.
func groupInterval(lease time.Duration) time.Duration {
	return max(100*time.Millisecond, min(lease/10, 3*time.Second))
}

func sessionTimeout(lease time.Duration) time.Duration { return goneli.SessionTimeout(lease) }

// settle waits before a trial's fault, for two reasons. The group must be in a steady state: a
// leader that leaves within about a second of another member joining (as the replacement from
// the previous trial just did) hands off in about twice the usual time, because the join's
// rebalance is still settling; in production a leader usually fails long after the last join.
// And the fault must not fall at the same phase of the members' group heartbeats every time, as
// those restart with every rebalance; so a random part of a heartbeat interval is added.
func (r *runner) settle(lease time.Duration) {
	iv := groupInterval(lease)
	phase := time.Duration(0)
	if r.e.opts.randomPhase {
		phase = rand.N(iv)
	}
	time.Sleep(r.e.opts.settle + iv + phase)
}

// timeline keeps the lines of one trial around t0, for the SVG.
func timeline(title string, lines []member.Line, t0, end time.Time) Timeline {
	lo, hi := t0.Add(-time.Second).UnixNano(), end.Add(500*time.Millisecond).UnixNano()
	tl := Timeline{Title: title, T0: t0.UnixNano(), From: lo, To: hi}
	for _, l := range lines {
		at, last := l.At, l.At
		if l.Event == member.EventAct {
			at, last = l.From, l.To
		}
		if last >= lo && at <= hi {
			tl.Lines = append(tl.Lines, l)
		}
	}
	return tl
}

// maxUnprovoked is how many leadership changes without a fault one series tolerates before it
// gives up.
const maxUnprovoked = 5

// trialLoop runs a series of fault trials in a fresh group of --group-size members, contending
// for roles (nil: the single leadership). Each trial begins with a settled group and a steady
// leader, which trial receives (with roles, the leader of the first role); trial must leave that
// member ended, and trialLoop replaces it before the next one. Afterwards the series are
// summarised into the report.
func (r *runner) trialLoop(scenario string, lease time.Duration, trials int, roles []string, series []*Series,
	trial func(f *memberFleet, n int, leader *fleet.Proc) error) error {
	if trials <= 0 {
		return nil
	}
	k := r.e.opts.groupSize
	err := r.withFleet(scenario, lease, r.e.opts.task, func(f *memberFleet) error {
		f.roles = roles
		for range k {
			if _, err := f.spawn(); err != nil {
				return err
			}
		}
		leader, state, err := r.steady(f, k, startLimit(k, lease))
		if err != nil {
			return err
		}
		retries := 0
		for n := 1; n <= trials; n++ {
			steadyFrom := f.Cursor()
			r.settle(lease)
			if f.state() != state {
				// Leadership moved with no fault (a lease that lapsed on a starved machine, say).
				// That is a finding for the report, not a trial: settle again and repeat the trial.
				r.unprovoked(f, steadyFrom)
				if retries++; retries > maxUnprovoked {
					return fmt.Errorf("%s: leadership moved without a fault %d times", scenario, retries)
				}
				if leader, state, err = r.steady(f, k, startLimit(k, lease)); err != nil {
					return err
				}
				n--
				continue
			}
			if err := trial(f, n, f.Proc(leader)); err != nil {
				return err
			}
			if _, err := f.spawn(); err != nil {
				return err
			}
			if leader, state, err = r.steady(f, k, startLimit(1, lease)); err != nil {
				return err
			}
		}
		return nil
	})
	for _, s := range series {
		if len(s.SamplesMs) > 0 {
			s.Stat = summarise(s.SamplesMs)
			if len(roles) > 0 {
				r.rolesReport().Series = append(r.rolesReport().Series, *s)
			} else {
				r.rep.Series = append(r.rep.Series, *s)
			}
		}
	}
	return err
}

// steady waits until the group of n members is settled, and returns the member whose fault a
// trial measures and the leadership state that must not change before the fault: without roles,
// the steady leader both times; with roles, the leader of the first role and who leads every role.
func (r *runner) steady(f *memberFleet, n int, limit time.Duration) (leader, state string, err error) {
	if len(f.roles) == 0 {
		leader, err = r.awaitSteady(f, n, limit)
		return leader, leader, err
	}
	led, err := r.awaitRolesSteady(f, n, limit)
	if err != nil {
		return "", "", err
	}
	return led[f.roles[0]], describeLeaders(led), nil
}

// state describes who leads now, to compare with what steady returned.
func (f *memberFleet) state() string {
	if len(f.roles) == 0 {
		name, _ := f.leader()
		return name
	}
	return describeLeaders(leaders(f.Lines()))
}

func newSeries(name, description string, lease time.Duration) Series {
	return Series{Name: name, Description: description, HeartbeatTimeoutMs: lease.Milliseconds(),
		SessionTimeoutMs: sessionTimeout(lease).Milliseconds()}
}

// waitSuccessor waits for the first act of a member other than old that began after t0.
func (f *memberFleet) waitSuccessor(from int, old string, t0 time.Time) (member.Line, error) {
	l, _, err := f.waitFor(from, trialLimit(f.lease), "another member to act", func(l member.Line) bool {
		return l.Event == member.EventAct && l.Name != old && l.From >= t0.UnixNano()
	})
	return l, err
}

// failover runs trials in which the leader of a settled group is stopped with SIGTERM (graceful)
// or SIGKILL (crash), and measures how long until another member acts as leader.
func (r *runner) failover(crash bool, lease time.Duration, trials int) error {
	kind, sig := "graceful", syscall.SIGTERM
	main := newSeries(seriesHandoff, "leader sent SIGTERM (Close) -> another member's first act", lease)
	if crash {
		kind, sig = "crash", syscall.SIGKILL
		main = newSeries(seriesFailover, "leader sent SIGKILL -> another member's first act", lease)
	}
	closed := newSeries(seriesHandoffLeft, "leader sent SIGTERM -> its Close returned (closed line)", lease)
	gap := newSeries(seriesCrashGap, "leader's last reported act -> another member's first act", lease)
	scenario := kind + "-" + leaseLabel(lease)
	var phases *PhaseTrace
	if !crash && r.e.trace != nil {
		phases = newPhaseTrace("Graceful handoff", lease, handoffPhases)
		defer func() {
			if len(phases.SamplesMs) > 0 {
				r.rep.Phases = append(r.rep.Phases, *phases)
			}
		}()
	}
	return r.trialLoop(scenario, lease, trials, nil, []*Series{&main, &closed, &gap}, func(f *memberFleet, n int, p *fleet.Proc) error {
		from := f.Cursor()
		if phases != nil {
			r.e.trace.start()
		}
		t0 := f.signal(p, sig)
		next, err := f.waitSuccessor(from, p.Name, t0)
		var traced []traced
		if phases != nil {
			traced = r.e.trace.stop()
		}
		if err != nil {
			return err
		}
		if _, _, err := f.waitFor(from, trialLimit(lease), p.Name+" to exit", func(l member.Line) bool {
			return l.Event == fleet.EventExit && l.Name == p.Name
		}); err != nil {
			return err
		}
		lines := f.Lines()
		took := ms(time.Duration(next.From - t0.UnixNano()))
		main.SamplesMs = append(main.SamplesMs, took)
		if phases != nil {
			phases.add(traced, lines, f.group, p.Name, next, t0)
		}
		if crash {
			gap.SamplesMs = append(gap.SamplesMs, ms(time.Duration(next.From-verdict.LastActs(lines)[p.Name].UnixNano())))
		} else {
			for _, l := range lines[from:] {
				if l.Name == p.Name && l.Event == member.EventClosed {
					closed.SamplesMs = append(closed.SamplesMs, ms(time.Duration(l.At-t0.UnixNano())))
				}
			}
		}
		if n == 1 {
			r.rep.Timelines = append(r.rep.Timelines, timeline(
				fmt.Sprintf("%s, HeartbeatTimeout %v: %s -> %s", main.Name, lease, p.Name, next.Name),
				lines, t0, time.Unix(0, next.From)))
		}
		r.printf("%s trial %d/%d: %s -> %s in %.0f ms", scenario, n, trials, p.Name, next.Name, took)
		return nil
	})
}

// fence runs trials in which the leader of a settled group is cut off from the broker (every
// connection black-holed), measures how long until it fences itself and until another member
// acts.
func (r *runner) fence(lease time.Duration, trials int) error {
	if r.e.broker == nil {
		r.printf("fencing trials skipped: they need the embedded broker to cut one client off")
		return nil
	}
	fenced := newSeries(seriesFenceFenced, "leader's connections black-holed -> its fenced line", lease)
	lastAct := newSeries(seriesFenceLastAct, "leader's connections black-holed -> its last reported act", lease)
	next := newSeries(seriesFenceNext, "leader's connections black-holed -> another member's first act", lease)
	gap := newSeries(seriesFenceGap, "cut leader's last act -> another member's first act", lease)
	scenario := "fence-" + leaseLabel(lease)
	all := []*Series{&fenced, &lastAct, &next, &gap}
	return r.trialLoop(scenario, lease, trials, nil, all, func(f *memberFleet, n int, p *fleet.Proc) error {
		clientID := "goneli-" + goneli.Sanitise(p.Name)
		from := f.Cursor()
		t0 := f.Mark(p.Name, evCut, clientID)
		r.e.broker.Net.Cut(clientID, kafkatest.Blackhole)
		fl, _, err := f.waitFor(from, trialLimit(lease), p.Name+" to fence itself", func(l member.Line) bool {
			return l.Event == member.EventFenced && l.Name == p.Name
		})
		if err != nil {
			return err
		}
		succ, err := f.waitSuccessor(from, p.Name, t0)
		if err != nil {
			return err
		}
		// Read after the successor acts, long after the fencing, so that the cut leader's last
		// span has been flushed.
		lines := f.Lines()
		last := verdict.LastActs(lines)[p.Name].UnixNano()
		since := func(t int64) float64 { return ms(time.Duration(t - t0.UnixNano())) }
		fenced.SamplesMs = append(fenced.SamplesMs, since(fl.At))
		lastAct.SamplesMs = append(lastAct.SamplesMs, since(last))
		next.SamplesMs = append(next.SamplesMs, since(succ.From))
		gap.SamplesMs = append(gap.SamplesMs, ms(time.Duration(succ.From-last)))
		if n == 1 {
			r.rep.Timelines = append(r.rep.Timelines, timeline(
				fmt.Sprintf("network cut, HeartbeatTimeout %v: %s fenced, %s took over", lease, p.Name, succ.Name),
				lines, t0, time.Unix(0, succ.From)))
		}
		r.printf("%s trial %d/%d: %s fenced %.0f ms after the cut (last act %.0f ms), %s acted after %.0f ms",
			scenario, n, trials, p.Name, since(fl.At), since(last), succ.Name, since(succ.From))
		// The old leader is killed while still cut off: the group has already expelled it, and a
		// member rejoining and leaving again at once only slows the next trial down.
		f.signal(p, syscall.SIGKILL)
		<-p.Done()
		f.Mark(p.Name, evHeal, clientID)
		r.e.broker.Net.Heal(clientID)
		return nil
	})
}

// topRequests lists the busiest request kinds, for the table.
func topRequests(byKey map[string]float64, n int) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range byKey {
		all = append(all, kv{k, v})
	}
	// Ties go by name, so that rendering one report twice gives the same page.
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var parts []string
	for i := 0; i < len(all) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s %.1f", all[i].k, all[i].v))
	}
	return strings.Join(parts, ", ")
}
