package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/member"
	"github.com/goneli/goneli/internal/verdict"
	"github.com/sirupsen/logrus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const demoAbout = `Starts several contenders, each its own process, and disrupts their leaders one after the
other: a graceful stop (SIGTERM), a crash (SIGKILL) and a freeze (SIGSTOP for longer than the
group session timeout, then SIGCONT). Stopped and killed members are replaced so that there
are always contenders. It prints a timeline, then a summary with each failover time and a
check that no two members ever acted as leader at the same instant, judged from the
instants at which each member's IsLeader returned true. Exits 0 if that check passed. A
fence check besides flags any fence that no injected freeze explains; it does not change
the exit status.

Without --kafka, leaders also write: while it leads, each member commits a numbered record
to the topic <leader topic>.writes every 100 ms through a FencedProducer, a transaction
bound to its tenure. The freeze then lands in the middle of a commit, which the embedded
broker holds until a successor leads; the frozen leader's late write is refused by the
broker, and the timeline says so. At the end the demo reads the topic back as a
read_committed consumer: it fails if a record of an earlier tenure follows one of a later
tenure, or if any commit began after a successor had fenced its tenure.

Without --kafka it starts an embedded Kafka-protocol broker (kfake) in this process and
uses a 1 s lease. With --kafka it uses that cluster and a 3 s lease, the shortest that the
broker's default group.min.session.timeout.ms (6 s) allows; pass --heartbeat-timeout to
change it. With --kafka the members do not write: fenced writes would need a topic and
transactional-id ACLs on that cluster, and only the embedded broker can hold a leader's
commit for the freeze to land in.`

// Demo defaults. The embedded broker accepts short sessions, so failovers take a second or two;
// a stock Kafka rejects a session under 6 s, which a 3 s lease respects.
const (
	embeddedLease   = time.Second
	realKafkaLease  = 3 * time.Second
	embeddedRunTime = 30 * time.Second
	realKafkaRun    = 60 * time.Second
	// demoWriteEvery is how often a leading member commits a record: often enough that a freeze
	// soon finds a commit to land in, seldom enough to keep the embedded broker's work small.
	demoWriteEvery = 100 * time.Millisecond
	// holdWait is how long a freeze waits for the leader's next commit before it freezes the
	// leader wherever it is.
	holdWait = 2 * time.Second
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
	// Settings from -F, -X or the environment may name the bootstrap servers instead of --kafka.
	if err := o.parseFlags(fs, args, stdout); err != nil {
		return o, err
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
	}
	// The fleet's readers hand everything to the event loop, which alone keeps the demo's state.
	d.fleet = fleet.New(fleet.Options{
		OnLine: func(l member.Line) { d.events <- memberEvent{line: l} },
		OnExit: func(p *fleet.Proc) { d.events <- memberEvent{exited: p} },
	})
	if o.kafka == "" {
		var opts []kfake.Opt
		if topic := o.writesTopic(); validTopic(topic) {
			d.writes = topic
			opts = append(opts, kfake.SeedTopics(1, topic))
		}
		b, err := kafkatest.Start(opts...)
		if err != nil {
			return 0, fmt.Errorf("cannot start the embedded broker: %w", err)
		}
		defer b.Close()
		if d.writes != "" {
			d.holder = holdCommits(b, d.events)
		}
		d.addr = b.Addr
		d.say("embedded Kafka-protocol broker (kfake) listening on %s", b.Addr)
		d.say("lease (HeartbeatTimeout) %v, group session timeout %v: short, which the embedded broker allows,", o.heartbeatTimeout, d.session())
		d.say("so a crashed or frozen leader is replaced within about %v", d.session())
	} else {
		if err := o.checkReachable(); err != nil {
			return 0, err
		}
		d.addr = o.kafka
		d.say("Kafka at %s; lease (HeartbeatTimeout) %v, group session timeout %v", o.kafka, o.heartbeatTimeout, d.session())
		d.say("(the broker's group.min.session.timeout.ms must be at most %d)", d.session().Milliseconds())
	}
	return d.run(), nil
}

// writesTopic is the topic the members write to: the leader topic's name with ".writes".
func (o demoOptions) writesTopic() string {
	if o.topic != "" {
		return o.topic + ".writes"
	}
	return o.group + ".neli.writes"
}

// commitHold holds one leader's commit at the embedded broker, so that the demo can freeze the
// leader in the middle of it: a leader frozen anywhere else finds its lease gone on waking and
// writes nothing, and the broker's refusal would go unseen. While armed, the next EndTxn that
// commits is held, which only a leader sends, until let through.
type commitHold struct {
	mu      sync.Mutex
	armed   bool
	release chan struct{} // closed to let the held commit through; nil when none is held
}

// holdCommits installs the hold on b's EndTxn requests; a held commit is announced on events.
func holdCommits(b *kafkatest.Broker, events chan<- memberEvent) *commitHold {
	h := &commitHold{}
	b.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		if r, ok := req.(*kmsg.EndTxnRequest); !ok || !r.Commit {
			return nil, nil, false
		}
		release := h.catch()
		if release == nil {
			return nil, nil, false
		}
		events <- memberEvent{held: true}
		// The broker goes on serving every other connection meanwhile; Close wakes this too.
		b.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return h
}

// catch disarms the hold and returns the channel that lets the commit through, or nil if the
// hold was not armed.
func (h *commitHold) catch() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.armed {
		return nil
	}
	h.armed = false
	h.release = make(chan struct{})
	return h.release
}

func (h *commitHold) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = true
}

// disarm reports whether the hold was still armed, that is, had caught no commit.
func (h *commitHold) disarm() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.armed
	h.armed = false
	return was
}

// let lets the held commit through, if any, and reports whether one was held.
func (h *commitHold) let() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.release == nil {
		return false
	}
	close(h.release)
	h.release = nil
	return true
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
	// A freeze with fenced writes first waits, from waitFrom, for the leader's next commit to be
	// held (commitHold); at stays zero until the freeze itself. held says it caught one.
	waitFrom time.Time
	held     bool
}

// memberEvent is a line a member printed or, if exited is set, the end of a member, or, if held
// is set, a leader's commit held at the broker.
type memberEvent struct {
	line   member.Line
	exited *fleet.Proc
	held   bool
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

	fleet   *fleet.Fleet
	spawned int

	leader    string
	since     time.Time // when leader acquired
	lastNews  time.Time // last timeline entry about the leader
	first     string
	firstAt   int64
	holdUntil time.Time
	steps     []*step
	cur       int  // index in steps of the disruption under way or next
	noMore    bool // no further disruption fits in --duration
	problems  []string
	ending    bool
	// fences and thaws feed the fence check (fenceCheck): every fence, and when each frozen
	// member was let go.
	fences []fenceAt
	thaws  map[string][]time.Time

	// writes is the topic the members write to through FencedProducers, "" if they do not write
	// (with --kafka); hold holds a leader's commit for a freeze to land in.
	writes      string
	holder      *commitHold
	leaderToken int64
	// commits counts the members' committed writes; refusedBroker and refusedLocal their late
	// writes, refused by the broker or by goneli's check before the commit.
	commits, refusedBroker, refusedLocal int
}

// fenceAt is one member's fence as its timeline shows it.
type fenceAt struct {
	who string
	at  time.Time
}

// unexplainedFences returns the fences that no injected fault explains. The demo's only fault
// that fences a member is a freeze: on waking the member finds its lease gone and fences at once,
// so a fence within a lease of its own thaw is explained. Any other fence is one that a newcomer
// would rightly ask about, and the summary names it.
func unexplainedFences(fences []fenceAt, thaws map[string][]time.Time, lease time.Duration) []fenceAt {
	var out []fenceAt
	for _, f := range fences {
		explained := slices.ContainsFunc(thaws[f.who], func(t time.Time) bool {
			return !f.at.Before(t) && f.at.Sub(t) <= lease
		})
		if !explained {
			out = append(out, f)
		}
	}
	return out
}

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
	if s.at.IsZero() {
		// Waiting for the leader's next commit; a leader that does not commit is frozen anyway.
		if now.Sub(s.waitFrom) > holdWait && d.holder.disarm() {
			d.sayAt(now, ">> %s committed nothing within %v", s.victim, holdWait)
			d.freezeNow(s, now)
		}
		return
	}
	waited := now.Sub(s.at)
	if s.successor == "" && !s.timedOut && waited > d.failoverLimit() {
		s.timedOut = true
		d.problem("no successor within %v of the %s of %s", d.failoverLimit(), s.kind, s.victim)
	}
	if s.kind == freeze && s.thawedAt.IsZero() && ((s.successor != "" && waited >= d.freezeFor()) || s.timedOut) {
		if d.holder.let() {
			d.sayAt(now, ">> the embedded broker lets %s's held commit through", s.victim)
		}
		d.signal(d.fleet.Proc(s.victim), syscall.SIGCONT)
		s.thawedAt = now
		if d.thaws == nil {
			d.thaws = map[string][]time.Time{}
		}
		d.thaws[s.victim] = append(d.thaws[s.victim], now)
		d.sayAt(now, ">> SIGCONT to %s after %v frozen; its lease ran out long ago, so it must not act", s.victim, waited.Round(time.Millisecond))
	}
	if (s.successor != "" || s.timedOut) && (s.kind != freeze || !s.thawedAt.IsZero()) {
		d.cur++
		d.holdUntil = now.Add(d.hold())
	}
}

func (d *demo) disrupt(s *step, now time.Time) {
	p := d.fleet.Proc(d.leader)
	if s.kind == freeze && d.holder != nil {
		s.victim, s.waitFrom = p.Name, now
		d.holder.arm()
		d.sayAt(now, ">> waiting for leader %s's next commit, to freeze it in the middle (the embedded broker holds the commit)", p.Name)
		return
	}
	s.victim, s.at = p.Name, now
	// Whatever happens next, the victim is done acting as leader; the successor's
	// LeaderAcquired names the next one.
	d.leader = ""
	switch s.kind {
	case graceful:
		d.sayAt(now, ">> SIGTERM to leader %s: it closes, handing over", p.Name)
		d.signal(p, syscall.SIGTERM)
	case crash:
		d.sayAt(now, ">> SIGKILL to leader %s: the group notices after its session timeout (%v)", p.Name, d.session())
		d.signal(p, syscall.SIGKILL)
	case freeze:
		d.sayAt(now, ">> SIGSTOP to leader %s for %v: its lease lapses while it cannot even notice", p.Name, d.freezeFor())
		d.signal(p, syscall.SIGSTOP)
	}
}

// freezeNow freezes the victim of s, a freeze that waited for a commit to hold.
func (d *demo) freezeNow(s *step, now time.Time) {
	s.at = now
	d.leader = ""
	if s.held {
		d.sayAt(now, ">> SIGSTOP to leader %s for %v while its commit (token %d) waits at the broker: its lease lapses while it cannot even notice",
			s.victim, d.freezeFor(), d.leaderToken)
	} else {
		d.sayAt(now, ">> SIGSTOP to leader %s for %v: its lease lapses while it cannot even notice", s.victim, d.freezeFor())
	}
	d.signal(d.fleet.Proc(s.victim), syscall.SIGSTOP)
}

// commitHeld freezes the leader whose commit the broker now holds, or lets the commit through
// if no freeze waits for it any more.
func (d *demo) commitHeld() {
	if d.cur < len(d.steps) {
		if s := d.steps[d.cur]; s.kind == freeze && s.victim != "" && s.at.IsZero() {
			s.held = true
			d.freezeNow(s, time.Now())
			return
		}
	}
	d.holder.let()
}

// refused reports a member's late write.
func (d *demo) refused(l member.Line) {
	at := time.Unix(0, l.At)
	if l.Info == member.RefusedByBroker {
		d.refusedBroker++
		d.sayAt(at, "%s: late write of tenure token %d refused by the broker (a successor leads)", l.Name, l.Token)
		return
	}
	d.refusedLocal++
	d.sayAt(at, "%s: late write of tenure token %d refused before its commit: its lease had ended", l.Name, l.Token)
}

// signal sends sig to p; SIGTERM and SIGKILL make p's exit expected, so that it is no problem.
func (d *demo) signal(p *fleet.Proc, sig syscall.Signal) {
	if _, err := d.fleet.Signal(p, sig); err != nil {
		d.log.Warnf("neli demo: %v", err)
	}
}

func (d *demo) handle(ev memberEvent) {
	if ev.exited != nil {
		d.exited(ev.exited)
		return
	}
	if ev.held {
		d.commitHeld()
		return
	}
	l := ev.line
	at := time.Unix(0, l.At)
	switch l.Event {
	case member.EventStarted:
		d.sayAt(at, "%s contending", l.Name)
	case member.EventAcquired:
		d.acquired(l.Name, l)
	case member.EventFenced:
		d.sayAt(at, "%s fenced: %s", l.Name, l.Info)
		d.fences = append(d.fences, fenceAt{who: l.Name, at: at})
		d.lost(l.Name)
	case member.EventRevoked:
		d.sayAt(at, "%s no longer leads (revoked)", l.Name)
		d.lost(l.Name)
	case member.EventCommit:
		d.commits++
	case member.EventRefused:
		d.refused(l)
	case member.EventClosed:
		d.sayAt(at, "%s closed", l.Name)
	case member.EventError:
		d.sayAt(at, "%s failed: %s", l.Name, l.Info)
		if !d.ending {
			d.problem("member %s failed: %s", l.Name, l.Info)
		}
	}
}

func (d *demo) acquired(name string, l member.Line) {
	at := time.Unix(0, l.At)
	note := ""
	if d.cur < len(d.steps) {
		if s := d.steps[d.cur]; s.victim != "" && !s.at.IsZero() && s.victim != name && s.successor == "" {
			s.successor, s.successorAt = name, l.At
			note = fmt.Sprintf(": failover %d ms after the %s of %s", at.Sub(s.at).Milliseconds(), s.kind, s.victim)
			if p := d.fleet.Proc(s.victim); p != nil && p.Stopped() {
				note += fmt.Sprintf(" (%s is still frozen)", s.victim)
			}
			defer d.letHeld(s, l)
		}
	}
	if d.firstAt == 0 {
		d.first, d.firstAt = name, l.At
		d.holdUntil = time.Now().Add(d.hold())
		note = fmt.Sprintf(": first leader, %d ms after the demo started", at.Sub(d.start).Milliseconds())
	}
	d.leader, d.since, d.lastNews, d.leaderToken = name, at, time.Now(), l.Token
	token := ""
	if l.Token != 0 {
		token = fmt.Sprintf(", token %d", l.Token)
	}
	d.sayAt(at, "%s LEADS (tenure %s%s)%s", name, l.Info, token, note)
}

// letHeld lets the frozen victim's held commit through once its successor leads: the broker then
// judges a commit that the successor's producer may already have fenced.
func (d *demo) letHeld(s *step, l member.Line) {
	if !s.held || !d.holder.let() {
		return
	}
	why := "its producer has initialised, which fenced the commit"
	if !l.Init {
		why = "though its producer has not initialised yet"
	}
	d.sayAt(time.Unix(0, l.At), ">> the embedded broker lets %s's held commit through: %s leads with token %d, %s", s.victim, l.Name, l.Token, why)
}

func (d *demo) lost(name string) {
	if d.leader == name {
		d.leader = ""
	}
}

func (d *demo) exited(p *fleet.Proc) {
	e, _ := p.Exit()
	status := exitStatus(e.Err)
	d.lost(p.Name)
	d.sayAt(e.At, "%s exited (status %d)", p.Name, status)
	if d.ending {
		return
	}
	if !e.Expected {
		d.problem("member %s exited unexpectedly with status %d; its last log lines: %s", p.Name, status, lastLines(p.Stderr()))
	}
	d.spawn()
}

// session is the members' group session timeout: twice the lease unless -X sets one. goneli's own
// default, about 1.25 leases (goneli.SessionTimeout), replaces a crashed leader sooner, but leaves
// a leader little room to renew while librdkafka waits up to a second to rejoin a rebalance, and
// at the demo's 1 s lease such a wait would fence it now and then (a fence the demo's check flags).
func (d *demo) session() time.Duration {
	if v, ok := d.o.resolved["session.timeout.ms"]; ok {
		if ms, err := strconv.Atoi(fmt.Sprint(v)); err == nil {
			return time.Duration(ms) * time.Millisecond
		}
	}
	return 2 * d.o.heartbeatTimeout
}

// memberEnv passes the Kafka settings from -F, -X and the environment, other than the bootstrap
// servers, to a member through its environment rather than its arguments, which ps shows, with the
// demo's session timeout.
func (d *demo) memberEnv() []string {
	props := map[string]string{"session.timeout.ms": strconv.Itoa(int(d.session().Milliseconds()))}
	for k, v := range d.o.resolved {
		if k != "bootstrap.servers" {
			props[k] = fmt.Sprint(v)
		}
	}
	b, _ := json.Marshal(props) // cannot fail: strings only
	return []string{member.KafkaConfigEnv + "=" + string(b)}
}

func (d *demo) spawn() {
	d.spawned++
	name := fmt.Sprintf("%s%d", d.o.name, d.spawned)
	tail := &member.Tail{Max: 5, Prefix: "[" + name + "] ", Out: d.stderr, OutMu: &d.outMu}
	if strings.EqualFold(d.o.logLevel, "off") {
		tail.Out = nil
	}
	var writes []string
	if d.writes != "" {
		writes = []string{"-writes", d.writes, "-write-every", demoWriteEvery.String()}
	}
	_, err := d.fleet.Start(fleet.Spec{
		Name: name,
		Path: d.exe,
		Args: append([]string{"member",
			"-kafka", d.addr,
			"-group", d.o.group,
			"-topic", d.o.topic,
			"-name", name,
			"-heartbeat-timeout", d.o.heartbeatTimeout.String(),
			"-log-level", strings.ToLower(d.o.logLevel),
			"-task", "1ms",
		}, writes...),
		Env: d.memberEnv(),
		// Members live in their own process group so that a Ctrl-C reaches only the demo, which
		// then stops them in order; if the demo dies, the kernel kills them.
		Setpgid:   true,
		Pdeathsig: true,
		Stderr:    tail,
	})
	if err != nil {
		d.problem("cannot start member %s: %v", name, err)
	}
}

// stopAll closes every member gracefully, waking frozen ones first, and kills those that take
// too long. The event loop goes on meanwhile: the members' last lines and exits feed it.
func (d *demo) stopAll() {
	d.ending = true
	if d.holder != nil {
		d.holder.disarm()
		d.holder.let()
	}
	limit := 2*d.session() + 5*time.Second
	stopped := make(chan error)
	go func() { stopped <- d.fleet.StopAll(limit) }()
	for {
		select {
		case ev := <-d.events:
			d.handle(ev)
		case err := <-stopped:
			var nc *fleet.NotClosed
			if errors.As(err, &nc) {
				for _, name := range nc.Names {
					d.problem("member %s did not close within %v of SIGTERM; killed", name, limit)
				}
			}
			// Every line and exit was handed over before StopAll returned.
			for {
				select {
				case ev := <-d.events:
					d.handle(ev)
				default:
					return
				}
			}
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
	lines := d.fleet.ByProcess()
	spans := verdict.ActSpans(lines)
	// The same promise the chaos suite checks: each member's events come in the documented order.
	deaths := d.fleet.Deaths()
	for _, name := range slices.Sorted(maps.Keys(lines)) {
		_, died := deaths[name]
		if err := verdict.EventOrder(lines[name], died); err != nil {
			d.problem("member %s: %v", name, err)
		}
	}
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
			if g, ok := failoverGap(spans, s); ok {
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

	overlaps := verdict.Overlaps(spans)
	if len(overlaps) == 0 {
		runs, members := verdict.Acts(spans)
		d.say("overlap check: PASSED: %d leader actions by %d members, no two members acted as leader at the same instant", runs, members)
		if closest, ok := verdict.ClosestHandover(spans); ok {
			d.say("(closest handover: %d ms between one member's last action and the next member's first)", closest.Duration().Milliseconds())
		}
	} else {
		d.say("overlap check: FAILED: %d overlapping pairs of leader actions, for example:", len(overlaps))
		for i, o := range overlaps {
			if i == 5 {
				break
			}
			d.say("  %s acted %s..%s while %s acted %s..%s", o.A.Who, clock(o.A.From), clock(o.A.To), o.B.Who, clock(o.B.From), clock(o.B.To))
		}
	}
	// Not a safety problem, so the result does not depend on it; but a fence with no cause is a
	// lost lease that a user would see as a blip of leadership, and is flagged as such.
	if odd := unexplainedFences(d.fences, d.thaws, d.o.heartbeatTimeout); len(odd) == 0 {
		d.say("fence check: PASSED: %d fences, each within a lease of its member's injected freeze ending", len(d.fences))
	} else {
		d.say("fence check: FLAGGED: %d of %d fences followed no injected freeze (no overlap, but a lease lost with no fault to cause it):", len(odd), len(d.fences))
		for _, f := range odd {
			d.say("  %s fenced at %+.3fs", f.who, f.at.Sub(d.start).Seconds())
		}
	}
	writesOK := d.writeCheck(lines)
	for _, p := range d.problems {
		d.say("problem: %s", p)
	}
	passed := len(overlaps) == 0 && len(d.problems) == 0 && d.firstAt > 0 && writesOK
	if passed {
		d.say("result: PASSED")
	} else {
		d.say("result: FAILED")
	}
	return passed
}

// writeCheck prints the fenced writes' figures and checks what was committed: read back as a
// read_committed consumer, no record of an earlier tenure may follow one of a later tenure, and
// no commit may have begun after a successor had fenced its tenure (verdict.LateCommits). It
// reports whether both held; without writes there is nothing to check.
func (d *demo) writeCheck(lines map[string][]member.Line) bool {
	if d.writes == "" {
		return true
	}
	d.say("fenced writes: %d committed; late writes refused: %d by the broker, %d by goneli before the commit",
		d.commits, d.refusedBroker, d.refusedLocal)
	late := verdict.LateCommits(lines)
	order, err := readWrites(d.addr, d.writes)
	if err != nil {
		d.problem("reading %s back: %v", d.writes, err)
		return false
	}
	if len(order.Interleaved) == 0 && len(late) == 0 {
		d.say("write check: PASSED: %d records read back read_committed, tenures never interleaved, no commit after its tenure's end", order.Records)
		return true
	}
	d.say("write check: FAILED: %d of %d records read back follow a later tenure's, %d commits began after their tenure's end",
		len(order.Interleaved), order.Records, len(late))
	for i, x := range order.Interleaved {
		if i == 5 {
			break
		}
		d.say("  interleaved: %v", x)
	}
	for i, c := range late {
		if i == 5 {
			break
		}
		d.say("  late commit: %v", c)
	}
	return false
}

// readWrites reads topic's partition 0 from the start to its last stable offset as a
// read_committed consumer, checking the order of the members' records.
func readWrites(addr, topic string) (verdict.WriteOrder, error) {
	var order verdict.WriteOrder
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": addr, "group.id": topic + ".check",
		"isolation.level": "read_committed", "enable.partition.eof": true, "enable.auto.commit": false,
		"enable.metrics.push": false, "log_level": 3})
	if err != nil {
		return order, err
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		return order, err
	}
	limit := time.Now().Add(10 * time.Second)
	for time.Now().Before(limit) {
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			var w member.WriteRecord
			if err := json.Unmarshal(e.Value, &w); err != nil {
				return order, fmt.Errorf("record at offset %v: %w", e.TopicPartition.Offset, err)
			}
			order.Add(int64(e.TopicPartition.Offset), w)
		case kafka.PartitionEOF:
			// At the last stable offset: everything committed has been read.
			return order, nil
		}
	}
	return order, fmt.Errorf("no end within 10s (%d records read)", order.Records)
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

// failoverGap is the time without any leader action around a failover: from the victim's last action
// before the successor acquired to the successor's first action after.
func failoverGap(spans []verdict.Span, s *step) (time.Duration, bool) {
	var last, first time.Time
	acquired := time.Unix(0, s.successorAt)
	for _, sp := range spans {
		if sp.Who == s.victim && sp.From.Before(acquired) && sp.To.After(last) {
			last = sp.To
		}
		if sp.Who == s.successor && !sp.From.Before(acquired) && (first.IsZero() || sp.From.Before(first)) {
			first = sp.From
		}
	}
	if last.IsZero() || first.IsZero() {
		return 0, false
	}
	return first.Sub(last), true
}

func clock(t time.Time) string {
	return t.Format("15:04:05.000000")
}

// lastLines renders a member's last stderr lines on one line for a problem report.
func lastLines(lines []string) string {
	if len(lines) == 0 {
		return "(none)"
	}
	return strings.Join(lines, " | ")
}
