package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/member"
	"github.com/sirupsen/logrus"
)

const demoAbout = `Starts several contenders, each its own process, and disrupts their leaders one after the
other: a graceful stop (SIGTERM), a crash (SIGKILL) and a freeze (SIGSTOP for longer than the
group session timeout, then SIGCONT). Stopped and killed members are replaced so that there
are always contenders. It prints a timeline, then a summary with each failover time and a
check that no two members ever acted as leader at the same instant, judged from the
instants at which each member's IsLeader returned true. Exits 0 if that check passed.

Without --kafka it starts an embedded Kafka-protocol broker (kfake) in this process and
uses a 1 s lease. With --kafka it uses that cluster and a 3 s lease, the shortest that the
broker's default group.min.session.timeout.ms (6 s) allows; pass --heartbeat-timeout to
change it.`

// Demo defaults. The embedded broker accepts short sessions, so failovers take a second or two;
// a stock Kafka rejects a session under 6 s, which a 3 s lease respects.
const (
	embeddedLease   = time.Second
	realKafkaLease  = 3 * time.Second
	embeddedRunTime = 30 * time.Second
	realKafkaRun    = 60 * time.Second
)

type demoOptions struct {
	common
	members  int
	duration time.Duration
}

func parseDemo(args []string, stdout io.Writer) (demoOptions, error) {
	var o demoOptions
	fs := newFlagSet("demo", "[--members 3] [--duration 30s] [--kafka ADDR]", demoAbout)
	o.register(fs, "neli-demo", "error", embeddedLease)
	fs.IntVar(&o.members, "members", 3, "number of contenders, 2 to 9")
	fs.DurationVar(&o.duration, "duration", embeddedRunTime, "how long to run (default 60s with --kafka)")
	fs.Lookup("kafka").Usage = "Kafka bootstrap servers (default: start an embedded broker)"
	fs.Lookup("name").Usage = "prefix of the members' names (default n: n1, n2, ...)"
	fs.Lookup("log-level").Usage = "members' log level on stderr: trace, debug, info, warn, error or off"
	if err := parse(fs, args, stdout); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, badUsage("unexpected argument %q", fs.Arg(0))
	}
	if o.kafka != "" && !flagSet(fs, "heartbeat-timeout") {
		o.heartbeatTimeout = realKafkaLease
	}
	if o.kafka != "" && !flagSet(fs, "duration") {
		o.duration = realKafkaRun
	}
	if o.name == "" {
		o.name = "n"
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.members < 2 || o.members > 9 {
		return o, badUsage("--members %d: use 2 to 9 (a failover needs someone to fail over to)", o.members)
	}
	if o.duration < 5*time.Second {
		return o, badUsage("--duration %v is too short: use at least 5s (a failover takes a few seconds)", o.duration)
	}
	return o, nil
}

func runDemo(args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseDemo(args, stdout)
	if err != nil {
		return 0, err
	}
	log, _ := o.logger(stderr)
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("cannot find this program's executable to start members: %w", err)
	}
	d := &demo{
		o:      o,
		out:    stdout,
		stderr: stderr,
		log:    log,
		exe:    exe,
		events: make(chan memberEvent, 4096),
		procs:  map[string]*proc{},
	}
	if o.kafka == "" {
		b, err := kafkatest.Start()
		if err != nil {
			return 0, fmt.Errorf("cannot start the embedded broker: %w", err)
		}
		defer b.Close()
		d.addr = b.Addr
		d.say("embedded Kafka-protocol broker (kfake) listening on %s", b.Addr)
		d.say("lease (HeartbeatTimeout) %v, group session timeout %v: short, which the embedded broker allows,", o.heartbeatTimeout, 2*o.heartbeatTimeout)
		d.say("so a crashed or frozen leader is replaced within about %v", 2*o.heartbeatTimeout)
	} else {
		if err := checkReachable(o.kafka); err != nil {
			return 0, err
		}
		d.addr = o.kafka
		d.say("Kafka at %s; lease (HeartbeatTimeout) %v, group session timeout %v", o.kafka, o.heartbeatTimeout, 2*o.heartbeatTimeout)
		d.say("(the broker's group.min.session.timeout.ms must be at most %d)", (2 * o.heartbeatTimeout).Milliseconds())
	}
	return d.run(), nil
}

// Disruption kinds.
const (
	graceful = "graceful stop (SIGTERM)"
	crash    = "crash (SIGKILL)"
	freeze   = "freeze (SIGSTOP)"
)

// disruptions is the order in which the demo applies them.
var disruptions = []string{graceful, crash, freeze}

// statusEvery is how often a quiet timeline says who leads.
const statusEvery = 5 * time.Second

type step struct {
	kind        string
	victim      string
	at          time.Time // when the signal was sent
	successor   string
	successorAt int64 // Unix ns of the successor's LeaderAcquired
	thawedAt    time.Time
	timedOut    bool
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	frozen bool
	exited bool
	victim bool // the demo stopped or killed it, so its exit is expected
	log    *member.Tail
}

type memberEvent struct {
	name   string
	line   member.Line
	exited bool
	status int
}

type span struct {
	name     string
	from, to int64
	runs     int64
}

type demo struct {
	o      demoOptions
	out    io.Writer
	stderr io.Writer
	log    *logrus.Logger
	exe    string
	addr   string
	start  time.Time
	events chan memberEvent
	outMu  sync.Mutex

	procs   map[string]*proc
	spawned int
	running int

	leader    string
	since     time.Time // when leader acquired
	lastNews  time.Time // last timeline entry about the leader
	first     string
	firstAt   int64
	holdUntil time.Time
	steps     []*step
	cur       int  // index in steps of the disruption under way or next
	noMore    bool // no further disruption fits in --duration
	spans     []span
	problems  []string
	ending    bool
}

func (d *demo) session() time.Duration { return 2 * d.o.heartbeatTimeout }

// hold is how long a leader is left alone before the next disruption, so the timeline shows it
// leading.
func (d *demo) hold() time.Duration { return max(1500*time.Millisecond, d.o.heartbeatTimeout) }

// freezeFor keeps a frozen leader stopped past its session timeout, so the group expels it and
// it must discover on waking that its lease is gone.
func (d *demo) freezeFor() time.Duration { return d.session() + d.o.heartbeatTimeout }

// failoverLimit is how long the demo waits for a successor before calling the step a failure. It
// is generous: a loaded machine is slow, and a slow failover is not a safety problem.
func (d *demo) failoverLimit() time.Duration { return 3*d.session() + 10*time.Second }

// need estimates how long a disruption takes, so that one that cannot finish before --duration
// is skipped rather than cut off.
func (d *demo) need(kind string) time.Duration {
	switch kind {
	case crash:
		return d.session() + d.o.heartbeatTimeout + time.Second
	case freeze:
		return d.freezeFor() + time.Second
	}
	return time.Second
}

func (d *demo) run() int {
	d.start = time.Now()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)

	d.sayAt(time.Now(), "starting %d members, each a separate process; the demo runs for %v", d.o.members, d.o.duration)
	for i := 0; i < d.o.members; i++ {
		d.spawn()
	}
	deadline := d.start.Add(d.o.duration)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	interrupted := false
loop:
	for {
		select {
		case ev := <-d.events:
			d.handle(ev)
		case now := <-tick.C:
			if !now.Before(deadline) {
				d.sayAt(now, ">> %v is up: stopping every member", d.o.duration)
				break loop
			}
			d.advance(now, deadline)
		case s := <-sig:
			d.sayAt(time.Now(), ">> %v: stopping every member", s)
			interrupted = true
			break loop
		}
	}
	d.stopAll()
	passed := d.summary()
	switch {
	case interrupted:
		return 130
	case passed:
		return exitOK
	}
	return exitFail
}

// advance moves the scenario along: it starts the next disruption once the current leader has
// held for a while, thaws a frozen leader, and gives up on a failover that takes far too long.
func (d *demo) advance(now, deadline time.Time) {
	if d.firstAt == 0 {
		if now.Sub(d.start) > d.failoverLimit() {
			d.problem("no leader was elected within %v of starting", d.failoverLimit())
			d.noMore = true
			d.firstAt = -1
		}
		return
	}
	if d.leader != "" && now.Sub(d.lastNews) >= statusEvery {
		d.sayAt(now, "%s still leads, since %+.3fs", d.leader, d.since.Sub(d.start).Seconds())
		d.lastNews = now
	}
	if d.cur == len(d.steps) {
		if d.noMore {
			return
		}
		// The disruptions repeat in turn for as long as --duration allows.
		d.steps = append(d.steps, &step{kind: disruptions[len(d.steps)%len(disruptions)]})
	}
	s := d.steps[d.cur]
	if s.victim == "" {
		if d.leader == "" || now.Before(d.holdUntil) {
			return
		}
		if deadline.Sub(now) < d.need(s.kind) {
			d.steps, d.noMore = d.steps[:d.cur], true
			for _, k := range d.missing() {
				d.sayAt(now, ">> not enough time left for a %s; skipped (raise --duration)", k)
			}
			return
		}
		d.disrupt(s, now)
		return
	}
	waited := now.Sub(s.at)
	if s.successor == "" && !s.timedOut && waited > d.failoverLimit() {
		s.timedOut = true
		d.problem("no successor within %v of the %s of %s", d.failoverLimit(), s.kind, s.victim)
	}
	if s.kind == freeze && s.thawedAt.IsZero() && ((s.successor != "" && waited >= d.freezeFor()) || s.timedOut) {
		d.signal(d.procs[s.victim], syscall.SIGCONT)
		d.procs[s.victim].frozen = false
		s.thawedAt = now
		d.sayAt(now, ">> SIGCONT to %s after %v frozen; its lease ran out long ago, so it must not act", s.victim, waited.Round(time.Millisecond))
	}
	if (s.successor != "" || s.timedOut) && (s.kind != freeze || !s.thawedAt.IsZero()) {
		d.cur++
		d.holdUntil = now.Add(d.hold())
	}
}

func (d *demo) disrupt(s *step, now time.Time) {
	p := d.procs[d.leader]
	s.victim, s.at = p.name, now
	// Whatever happens next, the victim is done acting as leader; the successor's
	// LeaderAcquired names the next one.
	d.leader = ""
	switch s.kind {
	case graceful:
		p.victim = true
		d.sayAt(now, ">> SIGTERM to leader %s: it closes, handing over", p.name)
		d.signal(p, syscall.SIGTERM)
	case crash:
		p.victim = true
		d.sayAt(now, ">> SIGKILL to leader %s: the group notices after its session timeout (%v)", p.name, d.session())
		d.signal(p, syscall.SIGKILL)
	case freeze:
		p.frozen = true
		d.sayAt(now, ">> SIGSTOP to leader %s for %v: its lease lapses while it cannot even notice", p.name, d.freezeFor())
		d.signal(p, syscall.SIGSTOP)
	}
}

func (d *demo) signal(p *proc, sig syscall.Signal) {
	if p == nil || p.exited {
		return
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		d.log.Warnf("neli demo: %v to %s: %v", sig, p.name, err)
	}
}

func (d *demo) handle(ev memberEvent) {
	p := d.procs[ev.name]
	if ev.exited {
		d.exited(p, ev.status)
		return
	}
	l := ev.line
	at := time.Unix(0, l.At)
	switch l.Event {
	case member.EventStarted:
		d.sayAt(at, "%s contending", ev.name)
	case member.EventAcquired:
		d.acquired(ev.name, l)
	case member.EventFenced:
		d.sayAt(at, "%s fenced: %s", ev.name, l.Info)
		d.lost(ev.name)
	case member.EventRevoked:
		d.sayAt(at, "%s no longer leads (revoked)", ev.name)
		d.lost(ev.name)
	case member.EventClosed:
		d.sayAt(at, "%s closed", ev.name)
	case member.EventError:
		d.sayAt(at, "%s failed: %s", ev.name, l.Info)
		if !d.ending {
			d.problem("member %s failed: %s", ev.name, l.Info)
		}
	case member.EventAct:
		d.spans = append(d.spans, span{name: ev.name, from: l.From, to: l.To, runs: l.Runs})
	}
}

func (d *demo) acquired(name string, l member.Line) {
	at := time.Unix(0, l.At)
	note := ""
	if d.cur < len(d.steps) {
		if s := d.steps[d.cur]; s.victim != "" && s.victim != name && s.successor == "" {
			s.successor, s.successorAt = name, l.At
			note = fmt.Sprintf(": failover %d ms after the %s of %s", at.Sub(s.at).Milliseconds(), s.kind, s.victim)
			if p := d.procs[s.victim]; p != nil && p.frozen {
				note += fmt.Sprintf(" (%s is still frozen)", s.victim)
			}
		}
	}
	if d.firstAt == 0 {
		d.first, d.firstAt = name, l.At
		d.holdUntil = time.Now().Add(d.hold())
		note = fmt.Sprintf(": first leader, %d ms after the demo started", at.Sub(d.start).Milliseconds())
	}
	d.leader, d.since, d.lastNews = name, at, time.Now()
	d.sayAt(at, "%s LEADS (tenure %s)%s", name, l.Info, note)
}

func (d *demo) lost(name string) {
	if d.leader == name {
		d.leader = ""
	}
}

func (d *demo) exited(p *proc, status int) {
	p.exited = true
	d.running--
	d.lost(p.name)
	d.sayAt(time.Now(), "%s exited (status %d)", p.name, status)
	if d.ending {
		return
	}
	if !p.victim {
		d.problem("member %s exited unexpectedly with status %d; its last log lines: %s", p.name, status, lastLines(p.log))
	}
	d.spawn()
}

func (d *demo) spawn() {
	d.spawned++
	name := fmt.Sprintf("%s%d", d.o.name, d.spawned)
	args := []string{"member",
		"-kafka", d.addr,
		"-group", d.o.group,
		"-topic", d.o.topic,
		"-name", name,
		"-heartbeat-timeout", d.o.heartbeatTimeout.String(),
		"-log-level", strings.ToLower(d.o.logLevel),
		"-task", "1ms",
	}
	cmd := exec.Command(d.exe, args...)
	// Members live in their own process group so that a Ctrl-C reaches only the demo, which
	// then stops them in order; if the demo dies, the kernel kills them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, log: &member.Tail{Max: 5, Prefix: "[" + name + "] ", Out: d.stderr, OutMu: &d.outMu}}
	if strings.EqualFold(d.o.logLevel, "off") {
		p.log.Out = nil
	}
	cmd.Stderr = p.log
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		d.problem("cannot start member %s: %v", name, err)
		return
	}
	d.procs[name] = p
	d.running++
	go func() {
		if err := member.ParseLines(stdout, func(l member.Line) {
			d.events <- memberEvent{name: name, line: l}
		}); err != nil {
			// A line that is not JSON (a panic trace, say) ends parsing; keep the pipe drained.
			_, _ = io.Copy(io.Discard, stdout)
		}
		d.events <- memberEvent{name: name, exited: true, status: exitStatus(cmd.Wait())}
	}()
}

// stopAll closes every member gracefully, waking frozen ones first, and kills those that take
// too long.
func (d *demo) stopAll() {
	d.ending = true
	for _, p := range d.procs {
		if p.frozen {
			d.signal(p, syscall.SIGCONT)
			p.frozen = false
		}
		d.signal(p, syscall.SIGTERM)
	}
	d.drain(2*d.session() + 5*time.Second)
	if d.running > 0 {
		for _, p := range d.procs {
			if !p.exited {
				d.problem("member %s did not close within %v of SIGTERM; killed", p.name, 2*d.session()+5*time.Second)
				d.signal(p, syscall.SIGKILL)
			}
		}
		d.drain(killWait)
	}
}

func (d *demo) drain(limit time.Duration) {
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	for d.running > 0 {
		select {
		case ev := <-d.events:
			d.handle(ev)
		case <-timeout.C:
			return
		}
	}
}

func (d *demo) problem(format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	d.problems = append(d.problems, msg)
	d.log.Errorf("neli demo: %s", msg)
}

func (d *demo) say(format string, args ...interface{}) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, format+"\n", args...)
}

// sayAt prints a timeline entry stamped with its time since the demo started.
func (d *demo) sayAt(at time.Time, format string, args ...interface{}) {
	d.say("%+8.3fs  "+format, append([]interface{}{at.Sub(d.start).Seconds()}, args...)...)
}

// summary prints the failover table and the overlap check, and reports whether everything
// passed.
func (d *demo) summary() bool {
	d.say("")
	d.say("== Summary ==")
	d.say("lease (HeartbeatTimeout) %v, group session timeout %v, %d members started in all", d.o.heartbeatTimeout, d.session(), d.spawned)
	if d.firstAt > 0 {
		d.say("first leader: %s, %d ms after the demo started", d.first, time.Unix(0, d.firstAt).Sub(d.start).Milliseconds())
	}
	d.say("")
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "disruption\tleader\tsuccessor\tfailover\tno-leader gap\t")
	for _, s := range d.steps {
		switch {
		case s.victim == "":
			// Still waiting for the leader to settle when time ran out.
		case s.successor == "":
			fmt.Fprintf(tw, "%s\t%s\t-\tnone\t-\t\n", s.kind, s.victim)
		default:
			gap := "-"
			if g, ok := d.gap(s); ok {
				gap = fmt.Sprintf("%d ms", g.Milliseconds())
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d ms\t%s\t\n", s.kind, s.victim, s.successor,
				time.Unix(0, s.successorAt).Sub(s.at).Milliseconds(), gap)
		}
	}
	for _, k := range d.missing() {
		fmt.Fprintf(tw, "%s\t-\t-\tskipped\t-\t\n", k)
	}
	_ = tw.Flush()
	d.say("failover: from the signal to the successor's LeaderAcquired; no-leader gap: from the old")
	d.say("leader's last action to the new leader's first (actions are task runs that saw IsLeader true).")
	d.say("")

	overlaps, runs, closest := checkSpans(d.spans)
	members := map[string]bool{}
	for _, s := range d.spans {
		members[s.name] = true
	}
	if len(overlaps) == 0 {
		d.say("overlap check: PASSED: %d leader actions by %d members, no two members acted as leader at the same instant", runs, len(members))
		if closest >= 0 {
			d.say("(closest handover: %d ms between one member's last action and the next member's first)", closest.Milliseconds())
		}
	} else {
		d.say("overlap check: FAILED: %d overlapping pairs of leader actions, for example:", len(overlaps))
		for i, o := range overlaps {
			if i == 5 {
				break
			}
			d.say("  %s", o)
		}
	}
	for _, p := range d.problems {
		d.say("problem: %s", p)
	}
	passed := len(overlaps) == 0 && len(d.problems) == 0 && d.firstAt > 0
	if passed {
		d.say("result: PASSED")
	} else {
		d.say("result: FAILED")
	}
	return passed
}

// missing lists the kinds of disruption that have not been applied at all.
func (d *demo) missing() []string {
	var out []string
	for _, k := range disruptions {
		done := false
		for _, s := range d.steps {
			done = done || (s.kind == k && s.victim != "")
		}
		if !done {
			out = append(out, k)
		}
	}
	return out
}

// gap is the time without any leader action around a failover.
func (d *demo) gap(s *step) (time.Duration, bool) {
	var last, first int64
	for _, sp := range d.spans {
		if sp.name == s.victim && sp.from < s.successorAt && sp.to > last {
			last = sp.to
		}
		if sp.name == s.successor && sp.from >= s.successorAt && (first == 0 || sp.from < first) {
			first = sp.from
		}
	}
	if last == 0 || first == 0 {
		return 0, false
	}
	return time.Duration(first - last), true
}

// checkSpans looks for two members whose action spans overlap, counting closed intervals: a span
// [From, To] says IsLeader was true at both ends. It also returns the total actions and the
// shortest gap between spans of different members (-1 if there is none).
func checkSpans(spans []span) (overlaps []string, runs int64, closest time.Duration) {
	sorted := append([]span(nil), spans...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].from < sorted[j].from })
	closest = -1
	for i, a := range sorted {
		runs += a.runs
		for _, b := range sorted[i+1:] {
			if b.from > a.to {
				if b.name != a.name && (closest < 0 || time.Duration(b.from-a.to) < closest) {
					closest = time.Duration(b.from - a.to)
				}
				break
			}
			if b.name != a.name {
				overlaps = append(overlaps, fmt.Sprintf("%s acted %s..%s while %s acted %s..%s",
					a.name, clock(a.from), clock(a.to), b.name, clock(b.from), clock(b.to)))
			}
		}
	}
	return overlaps, runs, closest
}

func clock(ns int64) string {
	return time.Unix(0, ns).Format("15:04:05.000000")
}

// lastLines renders a member's last stderr lines on one line for a problem report.
func lastLines(t *member.Tail) string {
	lines := t.Lines()
	if len(lines) == 0 {
		return "(none)"
	}
	return strings.Join(lines, " | ")
}
