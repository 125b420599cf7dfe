// Command bench measures goneli: time to the first leader, graceful handoff, crash failover,
// fencing of a leader cut off from Kafka, a rolling upgrade with and without priorities,
// leadership overlap, and the cost per instance, with every contender in its own process. It prints a table (Markdown) and writes the figures as JSON.
//
//	go run ./bench                       # the full run, about 15 minutes, embedded broker
//	go run ./bench --short               # a smoke run of well under a minute
//	go run ./bench --kafka host:9092     # against a real cluster (no fencing trials)
//	go run ./bench --kafka real          # against Apache Kafka that the benchmark starts itself
//	                                     # (internal/realkafka: one node, java and, once, mvn)
//	go run ./bench --real-kafka          # the embedded broker, then the headline scenarios again
//	                                     # on Apache Kafka: both in one report, side by side
//	go run ./bench --render bench.json --svg failover.svg
//	go run ./bench --render bench/results.json --md docs/performance-results.md --readme README.md
//	                                     # the docs' tables from the committed figures
//	go run ./bench --roles-scenarios     # adds the roles scenarios (goneli.NewRoles)
//	go run ./bench --short --roles-scenarios --contenders "" --trials 0 --fence-trials 0 --roles-trials 2
//	                                     # only the roles scenarios, small: about a minute
//	go run ./bench --load                # only the load scenario (load.go): about 13 minutes
//	go run ./bench --contenders "" --crash-trials 0 --fence-trials 0 --heartbeat-timeouts 5s --trials 20
//	                                     # only graceful handoffs at the default lease, with the phase
//	                                     # trace; --random-phase=false closes the leader at one phase
//
// The roles scenarios compare one instance leading --roles roles (64) with one leading a single
// role and with --roles single-leader instances, each in a group of its own (CPU, memory, broker
// requests per role); hand one role off on a graceful stop and on a crash in a group of
// --group-size members over --roles-handoff roles; and spread --roles roles over --roles-group
// members (10), counting the roles moved when one leaves and when one joins. They take some
// 10 minutes at the defaults, 2 of them with --short. --roles-setups picks the cost setups and
// --roles-group 0 leaves the group out; a thousand roles, without a thousand processes:
//
//	go run ./bench --roles-scenarios --contenders "" --trials 0 --fence-trials 0 --roles-trials 0 \
//	  --roles 1000 --roles-setups roles --roles-group 2 --cost-window 10s
//
// The process exits non-zero if any two members ever acted as leader at the same instant.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goneli/goneli"
)

type options struct {
	kafka       string
	alsoReal    bool   // --real-kafka: the headline scenarios again on Apache Kafka (realPass)
	realVersion string // the Apache Kafka version of --kafka real and --real-kafka
	idleTask    time.Duration
	out         string
	svg         string
	render      string
	md          string
	readme      string
	short       bool
	trials      int
	fenceTrials int
	contenders  []int
	firstReps   int
	costWindow  time.Duration
	groupSize   int
	leases      []time.Duration
	task        time.Duration
	costTask    time.Duration
	memberLog   string
	memberLogs  string
	settle      time.Duration
	randomPhase bool

	rolesScenarios bool
	roles          int      // roles of the cost and group scenarios
	handoffRoles   int      // roles of the handoff trials
	rolesGroup     int      // members of the group scenario
	rolesTrials    int      // trials per roles handoff series
	rolesSetups    []string // setups of the roles cost scenario (setup* in roles.go)
	crashTrials    int      // trials per crash failover series
	rollingTrials  int      // rolling upgrades per HeartbeatTimeout, with and without priorities

	load          bool            // run the load scenario (load.go)
	loadInstances []int           // instances of one role each
	loadRoles     int             // roles of the one instance with many (0: none)
	loadDelays    []time.Duration // the broker's answer delays, in the order applied
	loadLease     time.Duration
	loadWindow    time.Duration
	loadSettle    time.Duration
	loadTask      time.Duration
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var contenders, leases string
	fs.StringVar(&o.kafka, "kafka", "", "bootstrap servers of a Kafka cluster, or \""+realKafka+"\" to start Apache Kafka itself "+
		"(internal/realkafka: one node, the fast group profile; needs java, and mvn for the first fetch) (default: an embedded kfake broker)")
	fs.BoolVar(&o.alsoReal, "real-kafka", false, "after the run, run the first elections, cost, graceful and crash failover "+
		"(and with --roles-scenarios the roles cost) again on Apache Kafka started as --kafka real does, into the same report")
	fs.StringVar(&o.realVersion, "kafka-version", "", "Apache Kafka version for --kafka real and --real-kafka (default: $GONELI_KAFKA_VERSION, else the version internal/realkafka pins)")
	fs.DurationVar(&o.idleTask, "idle-task", 100*time.Millisecond, "the idle leader's task: a group of --group-size whose leader's task sleeps this long per run is measured for cost beside the others; "+
		"keep it under the renewal interval (500ms at the default lease), as the lease renews only between runs (0 skips it)")
	fs.StringVar(&o.out, "out", "bench.json", "write the figures as JSON here (\"\" for none)")
	fs.StringVar(&o.svg, "svg", "", "also render the failover timelines as SVG here")
	fs.StringVar(&o.render, "render", "", "only render --svg, --md and --readme from this JSON report, then exit")
	fs.StringVar(&o.md, "md", "", "also write the tables as a Markdown page here (docs/performance-results.md)")
	fs.StringVar(&o.readme, "readme", "", "also put the summary table into this file, between its "+summaryBegin+" and "+summaryEnd+" lines")
	fs.BoolVar(&o.short, "short", false, "smoke run: few trials, HeartbeatTimeout 1s only, small groups")
	fs.IntVar(&o.trials, "trials", 20, "trials per handoff and failover series (0 skips them)")
	fs.IntVar(&o.crashTrials, "crash-trials", -1, "trials per crash failover series (default: --trials; 0 skips them)")
	fs.IntVar(&o.fenceTrials, "fence-trials", 10, "trials per fencing series (0 skips them)")
	fs.StringVar(&contenders, "contenders", "1,3,10,50", "group sizes for time to first leader and cost (\"\" for none)")
	fs.IntVar(&o.firstReps, "first-reps", 3, "repetitions of time to first leader for up to 10 contenders (larger groups run once)")
	fs.DurationVar(&o.costWindow, "cost-window", 30*time.Second, "measurement window of the cost figures")
	fs.IntVar(&o.groupSize, "group-size", 3, "contenders in each failover and fencing trial")
	fs.StringVar(&leases, "heartbeat-timeouts", "5s,1s", "HeartbeatTimeout settings to measure failover with")
	fs.DurationVar(&o.task, "task", time.Millisecond, "simulated leader work per run in the failover trials (their time resolution)")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "how long a group must have been steady before a trial's fault")
	fs.BoolVar(&o.randomPhase, "random-phase", true, "add a random part of a group heartbeat interval to each trial's settle, so that faults fall at every phase of the members' group heartbeats")
	fs.StringVar(&o.memberLogs, "member-logs", "", "also write each member's stderr to <dir>/<member>.log")
	fs.StringVar(&o.memberLog, "member-log-level", "warn", "members' log level on stderr (shown when a scenario fails)")
	fs.DurationVar(&o.costTask, "cost-task", 10*time.Millisecond, "simulated leader work per run while measuring cost")
	fs.BoolVar(&o.rolesScenarios, "roles-scenarios", false, "also run the roles scenarios (goneli.NewRoles)")
	fs.IntVar(&o.roles, "roles", 64, "roles in the roles cost and group scenarios")
	fs.IntVar(&o.handoffRoles, "roles-handoff", 6, "roles in the roles handoff trials (over --group-size members)")
	fs.IntVar(&o.rolesGroup, "roles-group", 10, "members in the roles group scenario (0 skips it)")
	var setups string
	fs.StringVar(&setups, "roles-setups", strings.Join(rolesSetups, ","), "setups of the roles cost scenario (\"\" for none)")
	fs.IntVar(&o.rolesTrials, "roles-trials", -1, "trials per roles handoff series (default: --trials)")
	fs.IntVar(&o.rollingTrials, "rolling-trials", 3, "rolling upgrades per HeartbeatTimeout, with priorities and without; trial i replaces the leader first, in the middle or last (0 skips them)")
	fs.BoolVar(&o.load, "load", false, "run the load scenario (alone, unless other scenarios' flags are given): instances on a broker that answers later and later")
	var loadInstances, loadDelays string
	fs.StringVar(&loadInstances, "load-instances", "1,4,16,64", "load scenario: numbers of instances, each leading one role in a group of its own")
	fs.IntVar(&o.loadRoles, "load-roles", 1000, "load scenario: roles of one more instance (0: none)")
	fs.StringVar(&loadDelays, "load-delays", "0,100ms,400ms,1s", "load scenario: how late the broker answers, applied in this order")
	fs.DurationVar(&o.loadLease, "load-lease", goneli.DefaultHeartbeatTimeout, "load scenario: HeartbeatTimeout")
	fs.DurationVar(&o.loadWindow, "load-window", 20*time.Second, "load scenario: measurement window at each delay")
	fs.DurationVar(&o.loadSettle, "load-settle", 10*time.Second, "load scenario: how long the members run at a new delay before its window")
	fs.DurationVar(&o.loadTask, "load-task", 100*time.Millisecond, "load scenario: simulated leader work per run; the harness's own task loop costs each leader about 0.6 CPU s/min at --cost-task's 10 ms")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	others := false
	for _, name := range []string{"trials", "fence-trials", "crash-trials", "contenders", "first-reps", "rolling-trials", "roles-scenarios", "roles-trials"} {
		others = others || set[name]
	}
	if o.load && !others {
		// The load scenario alone, unless another scenario was asked for explicitly (a full run
		// with --load given as one more flag once ran only the roles scenarios and the load).
		o.trials, o.fenceTrials, o.rollingTrials, contenders = 0, 0, 0, ""
	}
	if o.short {
		// Only what was not given explicitly shrinks.
		short := map[string]func(){
			"trials":             func() { o.trials = 2 },
			"fence-trials":       func() { o.fenceTrials = 1 },
			"contenders":         func() { contenders = "1,3" },
			"first-reps":         func() { o.firstReps = 1 },
			"cost-window":        func() { o.costWindow = 3 * time.Second },
			"heartbeat-timeouts": func() { leases = "1s" },
			"settle":             func() { o.settle = 500 * time.Millisecond },
			"roles":              func() { o.roles = 8 },
			"roles-group":        func() { o.rolesGroup = 4 },
			"rolling-trials":     func() { o.rollingTrials = 1 },
		}
		for name, apply := range short {
			if !set[name] {
				apply()
			}
		}
	}
	for _, s := range strings.Split(contenders, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return o, fmt.Errorf("--contenders: bad group size %q", s)
		}
		o.contenders = append(o.contenders, n)
	}
	for _, s := range strings.Split(leases, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < goneli.MinHeartbeatTimeout {
			return o, fmt.Errorf("--heartbeat-timeouts: bad HeartbeatTimeout %q (at least %v)", s, goneli.MinHeartbeatTimeout)
		}
		o.leases = append(o.leases, d)
	}
	if o.alsoReal && o.kafka != "" {
		return o, errors.New("--real-kafka runs beside the embedded broker: it takes no --kafka")
	}
	if o.groupSize < 2 {
		return o, errors.New("--group-size must be at least 2: a failover needs a successor")
	}
	if o.crashTrials < 0 {
		o.crashTrials = o.trials
	}
	if o.rolesTrials < 0 {
		o.rolesTrials = o.trials
	}
	for _, s := range strings.Split(setups, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(rolesSetups, s) {
			return o, fmt.Errorf("--roles-setups: unknown setup %q (want some of %s)", s, strings.Join(rolesSetups, ","))
		}
		o.rolesSetups = append(o.rolesSetups, s)
	}
	if err := validateRoles(o); err != nil {
		return o, err
	}
	for _, s := range strings.Split(loadInstances, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return o, fmt.Errorf("--load-instances: bad number of instances %q", s)
		}
		o.loadInstances = append(o.loadInstances, n)
	}
	var err error
	if o.loadDelays, err = parseDelays(loadDelays); err != nil {
		return o, err
	}
	if o.loadRoles < 0 {
		return o, fmt.Errorf("--load-roles: %d is not a number of roles", o.loadRoles)
	}
	if o.loadLease < goneli.MinHeartbeatTimeout {
		return o, fmt.Errorf("--load-lease: at least %v", goneli.MinHeartbeatTimeout)
	}
	return o, nil
}

func main() {
	runMemberIfAsked()
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if o.render != "" {
		if err := renderFile(o.render, o); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	rep, err := run(o, os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if rep.Overlap.Count > 0 || rep.Real != nil && rep.Real.Overlap.Count > 0 {
		os.Exit(3)
	}
}

// realPass is what --real-kafka runs on Apache Kafka after the run on the embedded broker: the
// headline figures, so that the two brokers' stand side by side from one run on one machine. Left
// out: the fencing trials (they cut one member off inside the embedded broker; the tests of
// internal/realkafka/realtest cut members off Kafka through a proxy each, set up before the cluster
// starts), the load scenario (it delays the embedded broker's answers), the rolling upgrades and
// the roles handoffs and group (to keep the run's length in bounds; they exercise the same group
// protocol as the handoffs that do run).
func realPass(o options) options {
	o.kafka = realKafka
	o.fenceTrials, o.rollingTrials, o.load = 0, 0, false
	o.rolesTrials, o.rolesGroup = 0, 0
	return o
}

// run measures everything o asks for, prints progress and the table to out, and writes the
// report files. It returns an error if a scenario failed; overlap is reported in the Report.
func run(o options, args []string, out io.Writer) (*Report, error) {
	rep, errs := measure(o, args, out)
	if rep == nil {
		return nil, errors.Join(errs...)
	}
	if o.alsoReal {
		r := realPass(o)
		real, more := measure(r, args, out)
		errs = append(errs, more...)
		if real != nil {
			real.Command = rep.Command
			rep.Real = real
		}
	}
	printTable(out, rep)
	if o.out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(o.out, append(b, '\n'), 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", o.out, err))
		}
	}
	if err := writeRendered(rep, o, o.out); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// measure runs the scenarios of o on the broker o names and returns what they measured, and the
// errors of those that failed; a nil report if the broker could not start.
func measure(o options, args []string, out io.Writer) (*Report, []error) {
	rep := &Report{
		Started:    time.Now().UTC(),
		Command:    strings.TrimSpace("go run ./bench " + strings.Join(args, " ")),
		Short:      o.short,
		Broker:     "embedded (kfake)",
		CPUs:       runtime.NumCPU(),
		GoVersion:  runtime.Version(),
		LoadStart:  loadAverage(),
		TrialsPer:  o.trials,
		GroupSize:  o.groupSize,
		TaskMs:     ms(o.task),
		CostTaskMs: ms(o.costTask),
		SettleMs:   ms(o.settle),
		IdleTaskMs: ms(o.idleTask),
	}
	e, err := newEnv(o)
	if err != nil {
		return nil, []error{err}
	}
	defer e.close()
	rep.Broker = e.brokerName
	if e.real != nil {
		r := e.real
		rep.KafkaVersion = r.Version()
		fmt.Fprintf(out, "Apache Kafka %s %s\n", r.Version(), r.Timing())
	}
	r := &runner{e: e, out: out, rep: rep}
	var errs []error
	for _, n := range o.contenders {
		fl := FirstLeader{Contenders: n}
		reps := o.firstReps
		if n > 10 {
			reps = 1
		}
		for i := 1; i <= reps; i++ {
			window := time.Duration(0)
			if i == 1 {
				window = o.costWindow
			}
			cost, err := r.firstLeader(n, i, window, &fl)
			if err != nil {
				errs = append(errs, err)
				r.printf("error: %v", err)
				break
			}
			if cost != nil {
				rep.Cost = append(rep.Cost, *cost)
			}
		}
		fl.LaunchToAcquired = summarise(fl.LaunchToAcquiredMs)
		fl.StartedToAcquired = summarise(fl.StartedToAcquiredMs)
		fl.LaunchToAllStarted = summarise(fl.LaunchToAllStartedMs)
		rep.FirstLeader = append(rep.FirstLeader, fl)
	}
	if o.idleTask > 0 && len(o.contenders) > 0 && o.costWindow > 0 {
		if err := r.idleLeader(o.groupSize, o.idleTask, o.costWindow); err != nil {
			errs = append(errs, err)
			r.printf("error: %v", err)
		}
	}
	for _, lease := range o.leases {
		steps := []func() error{
			func() error { return r.failover(false, lease, o.trials) },
			func() error { return r.failover(true, lease, o.crashTrials) },
			func() error { return r.fence(lease, o.fenceTrials) },
			func() error { return r.rolling(lease, o.rollingTrials) },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				errs = append(errs, err)
				r.printf("error: %v", err)
			}
		}
	}
	if o.rolesScenarios {
		errs = append(errs, r.runRoles()...)
	}
	if o.load {
		errs = append(errs, r.runLoad()...)
	}
	rep.Finished = time.Now().UTC()
	for i := range rep.Phases {
		rep.Phases[i].summarise()
	}
	rep.LoadEnd = loadAverage()
	return rep, errs
}

// writeRendered writes what o asks for besides the JSON: the SVG, the Markdown page and the
// README's summary. source names the JSON file the page says it was rendered from.
func writeRendered(rep *Report, o options, source string) error {
	var errs []error
	if o.svg != "" {
		if err := os.WriteFile(o.svg, renderSVG(rep), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", o.svg, err))
		}
	}
	if o.md != "" {
		if err := os.WriteFile(o.md, markdownPage(rep, source), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", o.md, err))
		}
	}
	if o.readme != "" {
		if err := replaceSummary(o.readme, rep, o.md); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func renderFile(in string, o options) error {
	if o.svg == "" && o.md == "" && o.readme == "" {
		return errors.New("--render needs --svg, --md or --readme")
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return writeRendered(&rep, o, in)
}

// printTable renders the report as Markdown tables (markdownPage puts them on a page).
func printTable(w io.Writer, rep *Report) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("goneli benchmark, %s, %s, broker: %s, %d CPUs, load average %.2f before and %.2f after; %s",
		rep.Started.Format("2006-01-02 15:04 MST"), rep.GoVersion, rep.Broker, rep.CPUs, rep.LoadStart, rep.LoadEnd,
		rep.Finished.Sub(rep.Started).Round(time.Second))
	p("")
	p("| Time to first leader (default settings) | contenders | runs | median | p90 | max |")
	p("|---|---|---|---|---|---|")
	for _, fl := range rep.FirstLeader {
		if fl.LaunchToAcquired.N == 0 {
			continue
		}
		p("| processes launched -> first `acquired` | %d | %d | %s | %s | %s |", fl.Contenders, fl.LaunchToAcquired.N,
			msStr(fl.LaunchToAcquired.Median), msStr(fl.LaunchToAcquired.P90), msStr(fl.LaunchToAcquired.Max))
		p("| leader's `started` -> its `acquired` | %d | %d | %s | %s | %s |", fl.Contenders, fl.StartedToAcquired.N,
			msStr(fl.StartedToAcquired.Median), msStr(fl.StartedToAcquired.P90), msStr(fl.StartedToAcquired.Max))
		p("| processes launched -> all `started` | %d | %d | %s | %s | %s |", fl.Contenders, fl.LaunchToAllStarted.N,
			msStr(fl.LaunchToAllStarted.Median), msStr(fl.LaunchToAllStarted.P90), msStr(fl.LaunchToAllStarted.Max))
	}
	p("")
	p("| Failover and fencing (%d contenders) | HeartbeatTimeout | trials | median | p90 | max | bounded by |", rep.GroupSize)
	p("|---|---|---|---|---|---|---|")
	for _, s := range rep.Series {
		lease := time.Duration(s.HeartbeatTimeoutMs) * time.Millisecond
		p("| %s | %v | %d | %s | %s | %s | %s |", seriesTitle(s.Name), lease, s.N,
			msStr(s.Median), msStr(s.P90), msStr(s.Max), seriesBound(s, lease))
	}
	if len(rep.Cost) > 0 {
		p("")
		p("| Cost per instance (HeartbeatTimeout 5s) | instances | leader | idle follower | all members | broker + harness |")
		p("|---|---|---|---|---|---|")
		for _, c := range rep.Cost {
			p("| CPU s per minute (the leader runs the %v task loop) | %d | %.2f | %.2f | %.2f | %.2f |", costTask(rep), c.Instances, c.LeaderCPUSPerMin,
				c.FollowerCPUSPerMin, c.AllCPUSPerMin, c.HarnessCPUSPerMin)
		}
		if c := rep.IdleLeader; c != nil {
			p("| CPU s per minute, idle leader (its task sleeps %s per run) | %d | %.2f | %.2f | %.2f | %.2f |", idleTaskStr(rep), c.Instances, c.LeaderCPUSPerMin,
				c.FollowerCPUSPerMin, c.AllCPUSPerMin, c.HarnessCPUSPerMin)
		}
		for _, c := range rep.Cost {
			p("| RSS MB / threads | %d | %.0f / %d | %s | | |", c.Instances, c.LeaderRSSMB, c.LeaderThreads,
				followerMem(c))
		}
		for _, c := range rep.Cost {
			if !anonMeasured(rep.Cost) {
				break // a report from before RssAnon was sampled
			}
			follower := "-"
			if c.Instances > 1 {
				follower = fmt.Sprintf("%.1f", c.FollowerAnonMB)
			}
			p("| private (anonymous) MB | %d | %.1f | %s | | |", c.Instances, c.LeaderAnonMB, follower)
		}
		p("")
		p("| Traffic | instances | heartbeats/s | heartbeat bytes/s | broker requests/s | busiest requests per s |")
		p("|---|---|---|---|---|---|")
		for _, c := range rep.Cost {
			p("| %s | %d | %.1f | %.0f | %.0f | %s |", "group of", c.Instances, c.HeartbeatsPerS, c.ProduceBytesPerS,
				c.RequestsPerS, topRequests(c.RequestsPerSByKey, 4))
		}
	}
	printPhases(p, rep.Phases)
	printRolesTables(w, rep.Roles)
	printRollingTable(w, rep.Rolling)
	printLoadTables(p, rep.Load)
	p("")
	if len(rep.UncutFences) > 0 {
		by := map[string]int{}
		var order []string
		for _, u := range rep.UncutFences {
			if by[u.Scenario] == 0 {
				order = append(order, u.Scenario)
			}
			by[u.Scenario]++
		}
		var parts []string
		for _, sc := range order {
			parts = append(parts, fmt.Sprintf("%s %d", sc, by[sc]))
		}
		p("Leaders fenced with no fault applied: %d (%s); see fences_without_cut in the JSON.", len(rep.UncutFences), strings.Join(parts, ", "))
	}
	if len(rep.Unprovoked) > 0 {
		p("Leadership changed with no fault applied %d times (the trial was repeated); see unprovoked_leadership_changes in the JSON.", len(rep.Unprovoked))
	}
	if rep.Overlap.Count == 0 {
		p("Leadership overlap: none (%d act spans checked across all trials).", rep.Overlap.SpansChecked)
	} else {
		p("!!! LEADERSHIP OVERLAP: %d overlapping pairs of act spans, %.3f ms in total (%d spans checked) !!!",
			rep.Overlap.Count, rep.Overlap.TotalMs, rep.Overlap.SpansChecked)
	}
	printBrokers(w, rep)
}

// costTask is the leader's task loop in the cost windows, as the report recorded it.
func costTask(rep *Report) time.Duration {
	return time.Duration(rep.CostTaskMs * float64(time.Millisecond))
}

func followerMem(c Cost) string {
	if c.Instances < 2 {
		return "-"
	}
	return fmt.Sprintf("%.0f / %d", c.FollowerRSSMB, c.FollowerThreads)
}

func msStr(v float64) string {
	if v >= 10_000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func seriesTitle(name string) string {
	switch name {
	case seriesHandoff:
		return "graceful handoff: leader SIGTERM (Close) -> successor acts"
	case seriesHandoffLeft:
		return "graceful: leader SIGTERM -> its Close returns"
	case seriesFailover:
		return "crash failover: leader SIGKILL -> successor acts"
	case seriesCrashGap:
		return "crash: leader's last act -> successor acts"
	case seriesFenceFenced:
		return "network cut: cut -> leader fenced"
	case seriesFenceLastAct:
		return "network cut: cut -> leader's last act"
	case seriesFenceNext:
		return "network cut: cut -> successor acts"
	case seriesFenceGap:
		return "network cut: leaderless gap (last act -> successor acts)"
	case seriesRolesHandoff:
		return "graceful handoff: leader SIGTERM (Close) -> successor acts for the role, per role it led"
	case seriesRolesHandoffAll:
		return "graceful handoff: leader SIGTERM (Close) -> successors act for every role it led"
	case seriesRolesFailover:
		return "crash failover: leader SIGKILL -> successor acts for the role, per role it led"
	case seriesRolesFailoverAll:
		return "crash failover: leader SIGKILL -> successors act for every role it led"
	case seriesRolesCrashGap:
		return "crash: leader's last act for the role -> successor acts for it"
	}
	return name
}

// seriesBound names what the figure is bounded by, with the derived values for this lease. The
// session is the one the run recorded: a report from before it was recorded names none.
func seriesBound(s Series, lease time.Duration) string {
	iv, sess := groupInterval(lease), "session timeout"
	if s.SessionTimeoutMs > 0 {
		sess = fmt.Sprintf("session timeout (%v)", time.Duration(s.SessionTimeoutMs)*time.Millisecond)
	}
	switch s.Name {
	case seriesHandoff, seriesRolesHandoff, seriesRolesHandoffAll:
		return fmt.Sprintf("group heartbeat interval (%v) + first own heartbeat round trip", iv)
	case seriesHandoffLeft:
		return "LeaveGroup round trip, client shutdown"
	case seriesFailover, seriesCrashGap, seriesRolesFailover, seriesRolesFailoverAll, seriesRolesCrashGap:
		return sess + " + rebalance"
	case seriesFenceFenced, seriesFenceLastAct:
		return fmt.Sprintf("lease (%v) after the last confirmed heartbeat", lease)
	case seriesFenceNext, seriesFenceGap:
		return sess + " after the last group heartbeat"
	}
	return ""
}
