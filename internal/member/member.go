// Package member is a leader-election contender meant to run as its own process, for the demo,
// the chaos suite and the benchmarks. It prints what it does as JSON lines on stdout, stamped with
// the wall clock so that a parent on the same host can merge the lines of several members onto one
// timeline.
//
// Leader work is simulated by a task that runs over and over while the member leads. Each run
// reads the clock, then checks IsLeader, and reports the clock reading as an action only if the
// check passed. A process frozen between the two readings therefore reports nothing for that run,
// so a report always means "IsLeader was true at or after this instant".
//
// With -roles N or -role NAME the member contends for several roles with goneli.NewRoles instead
// of for the single leadership of goneli.New. Its acquired, fenced, revoked and act lines then name
// their role, and each act span means that IsLeader of that role was true at its first and last
// action; spans of one role never overlap, spans of different roles may.
package member

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goneli/goneli"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// Line is one JSON line of a member's output.
type Line struct {
	At    int64  `json:"at"`             // Unix nanoseconds when it happened
	Name  string `json:"name"`           // the member's Config.Name
	Event string `json:"event"`          // see the Event* constants
	From  int64  `json:"from,omitempty"` // EventAct: first action of the span, Unix nanoseconds
	To    int64  `json:"to,omitempty"`   // EventAct: last action of the span
	Runs  int64  `json:"runs,omitempty"` // EventAct: task runs in the span
	Info  string `json:"info,omitempty"` // tenure, reason or error text
	// Role is the role an acquired, fenced, revoked, act or commit line is about: empty for a
	// member without roles (the single leader of goneli.New).
	Role string `json:"role,omitempty"`
	// Token is the fencing token of the tenure an acquired or commit line is about.
	Token int64 `json:"token,omitempty"`
	// Init, on an acquired line, says that the role's FencedProducer (-writes) initialised for
	// the tenure before the line was written: from At on, the broker refuses every commit of an
	// earlier tenure of the role. Without it (no writes, or the initialisation failed) the
	// producer initialises before the tenure's first commit instead.
	Init bool `json:"init,omitempty"`
	// Since, on an acquired line, is when the tenure first acquired (LeaderAcquired.Since), Unix
	// nanoseconds: before At by the FencedProducer's initialisation, which a broker that is down
	// can stretch past a fault, so that the tenure's token belongs to the log from before it.
	Since int64 `json:"since,omitempty"`
	// Stat is what a stats line reports (-stats-every).
	Stat *Stat `json:"stat,omitempty"`
}

// Stat is what a member's stats line reports about the leases it held since the last one, over
// every role it leads (sampled every flushEvery).
type Stat struct {
	// MarginMs is the least lease left (Stats.LeaseRemaining) seen while leading: how close the
	// renewals came to the lease's end; -1 if no role led. LagMs is the longest renewal lag seen
	// (Stats.RenewalLag).
	MarginMs float64 `json:"margin_ms"`
	LagMs    float64 `json:"lag_ms"`
	Leading  int     `json:"leading"` // roles led at the last sample
	// Missed and Late are Stats.CommitStoresMissed and LateWithdrawals, instance-wide and
	// cumulative.
	Missed uint64 `json:"missed"`
	Late   uint64 `json:"late"`
}

// Events a member reports.
const (
	EventStarted  = "started"  // New returned; the member is contending
	EventAcquired = "acquired" // LeaderAcquired reached the barrier
	EventFenced   = "fenced"   // LeaderFenced reached the barrier
	EventRevoked  = "revoked"  // LeaderRevoked reached the barrier
	EventAct      = "act"      // a span of leader actions, [From, To]; spans of one member never overlap
	EventClosed   = "closed"   // Close returned after SIGTERM or SIGINT
	EventError    = "error"    // a fatal error; the process exits non-zero
	EventStats    = "stats"    // Stat, every -stats-every

	// EventCommit is a transaction of the fenced writes (-writes) that committed; At is when
	// CommitTransaction was called (the last call, if it was retried), Token the tenure's.
	EventCommit = "commit"
	// EventRefused is a fenced write refused because its tenure (Token) had ended: Info is
	// RefusedByBroker when the broker refused the commit (a successor's producer had initialised),
	// RefusedLocally when goneli's own check aborted it first. A write attempted while the member
	// did not lead at all writes nothing and is not reported.
	EventRefused = "refused"
)

// EventRefused's Info.
const (
	RefusedByBroker = "broker"
	RefusedLocally  = "local"
)

// Options configure a member.
type Options struct {
	Broker           string
	Group            string
	Topic            string
	Name             string
	HeartbeatTimeout time.Duration
	MinPollInterval  time.Duration
	HandOverAfter    time.Duration // 0: goneli's default
	Priority         int           // Config.Priority
	Task             time.Duration // simulated work per run
	Kafka            map[string]string
	LogLevel         string // goneli's log level on stderr: off, error, warn, info, debug
	// Roles, if not empty, are the roles to contend for with goneli.NewRoles; otherwise the
	// member contends for the single leadership of goneli.New.
	Roles []string
	// Writes, if set, is a topic that each led role's task writes numbered records to through a
	// goneli.FencedProducer, one every WriteEvery (see WriteRecord).
	Writes     string
	WriteEvery time.Duration
	// StatsEvery, if positive, is how often a stats line reports the leases' margins.
	StatsEvery time.Duration
}

// WriteRecord is the value of a record a member writes to Options.Writes: which member wrote it,
// for which role and tenure (the fencing token), and its number within the member's role.
type WriteRecord struct {
	Member string `json:"m"`
	Role   string `json:"r,omitempty"`
	Token  int64  `json:"t"`
	Seq    int64  `json:"s"`
}

// flushEvery is how often an open span of actions is reported, bounding what a SIGKILL can hide.
// A member that has nothing to report wakes only every idleEvery (to sample stats and check the
// instance's error): a follower's ticker was a cost of the harness that the benchmarks' idle
// follower row counted as goneli's. The first action after a quiet spell is reported at once.
const (
	flushEvery = 50 * time.Millisecond
	idleEvery  = 500 * time.Millisecond
)

// Main parses args (without the program name) and runs a member until SIGTERM or SIGINT, writing
// lines to stdout. It returns the process exit status.
func Main(args []string) int {
	o, err := ParseArgs(args, os.Stderr)
	if err != nil {
		return 2
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	stop := make(chan struct{})
	go func() { <-sig; close(stop) }()
	if err := Run(o, os.Stdout, stop); err != nil {
		return 1
	}
	return 0
}

// MainIfChild turns a test binary that a harness re-runs as a member (with the environment
// variable env set) into that member: it runs Main and exits, and never returns. Otherwise it
// returns at once. The harness holds the member's stdin open and never writes to it, so end of
// input means the harness is gone (killed, or timed out), and the member then exits rather than
// outlive it.
func MainIfChild(env string) {
	if os.Getenv(env) == "" {
		return
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	os.Exit(Main(os.Args[1:]))
}

// ParseArgs parses a member's flags (args without the program name); usage and errors go to
// output.
func ParseArgs(args []string, output io.Writer) (Options, error) {
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	fs.SetOutput(output)
	var o Options
	var kafkaKV multiFlag
	fs.StringVar(&o.Broker, "kafka", "localhost:9092", "bootstrap servers")
	fs.StringVar(&o.Group, "group", "neli", "leader group ID")
	fs.StringVar(&o.Topic, "topic", "", "leader topic (default: <group>.neli)")
	fs.StringVar(&o.Name, "name", "", "instance name (default: goneli's)")
	fs.DurationVar(&o.HeartbeatTimeout, "heartbeat-timeout", goneli.DefaultHeartbeatTimeout, "lease length")
	fs.DurationVar(&o.MinPollInterval, "min-poll-interval", 0, "poll and heartbeat interval (0: goneli's default for the lease)")
	fs.DurationVar(&o.HandOverAfter, "hand-over-after", 0, "Config.HandOverAfter (0: goneli's default, one lease)")
	fs.IntVar(&o.Priority, "priority", 0, "Config.Priority")
	fs.DurationVar(&o.Task, "task", time.Millisecond, "simulated work per leader task run")
	fs.Var(&kafkaKV, "X", "extra librdkafka setting key=value (repeatable)")
	fs.StringVar(&o.Writes, "writes", "", "topic that the leader task writes numbered records to through a FencedProducer (empty: no writes)")
	fs.DurationVar(&o.WriteEvery, "write-every", 20*time.Millisecond, "interval between the leader task's writes")
	fs.StringVar(&o.LogLevel, "log-level", "warn", "goneli log level on stderr")
	fs.DurationVar(&o.StatsEvery, "stats-every", 0, "report the leases' least margin and longest renewal lag this often (0: never)")
	var numbered int
	var named roleFlag
	fs.IntVar(&numbered, "roles", 0, "contend for this many numbered roles, \"0\" to \"N-1\", with NewRoles (0: the single leader of New)")
	fs.Var(&named, "role", "contend for this named role with NewRoles (repeatable, in partition order)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected argument %q", fs.Arg(0))
		fmt.Fprintf(output, "member: %v\n", err)
		return o, err
	}
	roles, err := rolesOf(numbered, named)
	if err != nil {
		fmt.Fprintf(output, "member: %v\n", err)
		return o, err
	}
	o.Roles = roles
	o.Kafka = map[string]string{}
	if env := os.Getenv(KafkaConfigEnv); env != "" {
		if err := json.Unmarshal([]byte(env), &o.Kafka); err != nil {
			fmt.Fprintf(output, "member: $%s: %v\n", KafkaConfigEnv, err)
			return o, err
		}
	}
	for k, v := range kafkaKV.m {
		o.Kafka[k] = v
	}
	return o, nil
}

// KafkaConfigEnv names the environment variable through which a parent passes librdkafka
// properties as a JSON object of strings: unlike arguments, a process's environment is not shown
// to other users of the host, so secrets stay out of ps. -X settings override it.
const KafkaConfigEnv = "NELI_MEMBER_KAFKA_CONFIG"

// rolesOf is the role list the -roles and -role flags ask for: nil for neither.
func rolesOf(numbered int, named roleFlag) ([]string, error) {
	switch {
	case numbered < 0:
		return nil, fmt.Errorf("-roles %d: want a positive number", numbered)
	case numbered > 0 && len(named) > 0:
		return nil, errors.New("-roles and -role exclude each other")
	case numbered > 0:
		return goneli.Shards(numbered), nil
	}
	return named, nil
}

// roleFlag collects -role values in order.
type roleFlag []string

func (f *roleFlag) String() string { return strings.Join(*f, ",") }

func (f *roleFlag) Set(s string) error {
	if s == "" {
		return errors.New("a role name must not be empty")
	}
	*f = append(*f, s)
	return nil
}

type multiFlag struct{ m map[string]string }

func (f *multiFlag) String() string { return fmt.Sprint(f.m) }

func (f *multiFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	if f.m == nil {
		f.m = map[string]string{}
	}
	f.m[k] = v
	return nil
}

// Run contends until stop is closed, then closes gracefully. Lines go to out.
func Run(o Options, out io.Writer, stop <-chan struct{}) error {
	w := &writer{enc: json.NewEncoder(out), name: o.Name}
	if w.name == "" {
		w.name = "member"
	}
	kc := goneli.KafkaConfigMap{"bootstrap.servers": o.Broker}
	for k, v := range o.Kafka {
		kc[k] = v
	}
	// librdkafka writes its own lines to stderr (goneli forwards them only when asked, which would
	// add its log poller to what the benchmarks measure); -log-level sets how much it writes.
	if _, set := kc["log_level"]; !set {
		kc["log_level"] = librdkafkaLevel(o.LogLevel)
	}
	config := goneli.Config{
		KafkaConfig:      kc,
		LeaderGroupID:    o.Group,
		LeaderTopic:      o.Topic,
		Name:             o.Name,
		HeartbeatTimeout: goneli.Duration(o.HeartbeatTimeout),
		Scribe:           stderrScribe(o.LogLevel),
	}
	if o.MinPollInterval > 0 {
		config.MinPollInterval = goneli.Duration(o.MinPollInterval)
	}
	if o.HandOverAfter > 0 {
		config.HandOverAfter = goneli.Duration(o.HandOverAfter)
	}
	config.Priority = o.Priority
	kick := make(chan struct{}, 1)
	acts := newRoleSpans(w, o.Roles, kick)
	inits := &initialised{tokens: map[string]int64{}}
	barrier := func(e goneli.Event) {
		switch e := e.(type) {
		case goneli.LeaderAcquired:
			w.write(Line{Event: EventAcquired, Info: e.Tenure, Role: e.Role, Token: e.Token, Init: inits.is(e.Role, e.Token),
				Since: e.Since.UnixNano()})
		case goneli.LeaderFenced:
			acts[e.Role].flush()
			w.write(Line{Event: EventFenced, Info: e.Reason, Role: e.Role})
		case goneli.LeaderRevoked:
			acts[e.Role].flush()
			w.write(Line{Event: EventRevoked, Info: e.Tenure, Role: e.Role})
		}
	}
	c, err := contend(config, o.Roles, barrier)
	if err != nil {
		w.write(Line{Event: EventError, Info: err.Error()})
		return err
	}
	wr, err := newWriters(o, w, c.leads, inits)
	if err != nil {
		_ = c.close()
		w.write(Line{Event: EventError, Info: err.Error()})
		return err
	}
	w.write(Line{Event: EventStarted})
	// Each run reads the clock, then checks that role's IsLeader, and reports the reading only if
	// the check passed.
	p, err := c.background(func(role string, isLeader func() bool) {
		t := time.Now()
		if isLeader() {
			acts[role].act(t)
			wr.write(role)
		}
		if o.Task > 0 {
			time.Sleep(o.Task)
		}
	})
	if err != nil {
		wr.close()
		_ = c.close()
		w.write(Line{Event: EventError, Info: err.Error()})
		return err
	}
	ticker := time.NewTimer(idleEvery)
	defer ticker.Stop()
	fast := false
	sampler := newStatSampler(c.stats, o.StatsEvery)
	for {
		select {
		case <-stop:
			p.Close()
			_ = p.Await()
			acts.flush()
			// Before the instance: a FencedProducer must not outlive its leadership.
			wr.close()
			if err := c.close(); err != nil {
				w.write(Line{Event: EventError, Info: err.Error()})
				return err
			}
			w.write(Line{Event: EventClosed})
			return nil
		case <-kick:
			// Only a loop waiting out idleEvery needs the kick: on the fast cadence the next tick
			// is due within flushEvery anyway, and resetting it at every kick would starve it
			// (many roles kick all the time: no stats line was written with a thousand).
			if !fast {
				acts.flush()
				fast = true
				ticker.Reset(flushEvery)
			}
		case <-ticker.C:
			fast = acts.flush()
			if fast {
				ticker.Reset(flushEvery)
			} else {
				ticker.Reset(idleEvery)
			}
			if st := sampler.sample(); st != nil {
				w.write(Line{Event: EventStats, Stat: st})
			}
			if err := p.Error(); err != nil {
				w.write(Line{Event: EventError, Info: err.Error()})
				wr.close()
				_ = c.close()
				return err
			}
		}
	}
}

// contender is what Run needs of goneli.New's Neli or goneli.NewRoles' Roles.
type contender struct {
	close func() error
	// background starts the pulser with a task that runs for each led role (role "" without
	// roles), given the role's IsLeader.
	background func(task func(role string, isLeader func() bool)) (goneli.Pulser, error)
	// leads gives each role's Leadership ("" without roles), for fenced writes.
	leads map[string]goneli.Leadership
	// stats gives each role's Stats.
	stats []func() goneli.Stats
}

// contend joins the group: with goneli.New if roles is empty, with goneli.NewRoles otherwise.
func contend(config goneli.Config, roles []string, barrier goneli.Barrier) (contender, error) {
	if len(roles) == 0 {
		n, err := goneli.New(config, barrier)
		if err != nil {
			return contender{}, err
		}
		c := n.(goneli.Curator)
		return contender{close: n.Close, background: func(task func(string, func() bool)) (goneli.Pulser, error) {
			return n.Background(func() { task("", n.IsLeader) })
		}, leads: map[string]goneli.Leadership{"": c}, stats: []func() goneli.Stats{c.Stats}}, nil
	}
	rs, err := goneli.NewRoles(config, roles, barrier)
	if err != nil {
		return contender{}, err
	}
	// Looked up once: the map is only read from here on, by every role's task goroutine.
	isLeader := map[string]func() bool{}
	leads := map[string]goneli.Leadership{}
	var stats []func() goneli.Stats
	for _, r := range rs.All() {
		isLeader[r.Name()] = r.IsLeader
		leads[r.Name()] = r
		stats = append(stats, r.Stats)
	}
	return contender{close: rs.Close, background: func(task func(string, func() bool)) (goneli.Pulser, error) {
		return rs.Background(func(role string) { task(role, isLeader[role]) })
	}, leads: leads, stats: stats}, nil
}

type writer struct {
	mu   sync.Mutex
	enc  *json.Encoder
	name string
}

func (w *writer) write(l Line) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.At == 0 {
		l.At = time.Now().UnixNano()
	}
	l.Name = w.name
	_ = w.enc.Encode(l)
}

// roleSpans holds the open span of every role, keyed by role ("" without roles). The map is
// filled before the member contends and only read afterwards.
type roleSpans map[string]*spans

func newRoleSpans(w *writer, roles []string, kick chan<- struct{}) roleSpans {
	out := roleSpans{}
	if len(roles) == 0 {
		roles = []string{""}
	}
	for _, r := range roles {
		out[r] = &spans{w: w, role: r, kick: kick, quiet: true}
	}
	return out
}

// flush reports every role's open span, and whether there was one.
func (rs roleSpans) flush() bool {
	open := false
	for _, s := range rs {
		open = s.flush() || open
	}
	return open
}

// spans coalesces one role's actions into reported spans.
type spans struct {
	mu       sync.Mutex
	w        *writer
	role     string
	from, to time.Time
	runs     int64
	// kick asks the member's loop to report at once: a span opened after a quiet spell, when the
	// loop may be waiting out idleEvery.
	kick  chan<- struct{}
	quiet bool
}

func (s *spans) act(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == 0 {
		s.from = t
		if s.quiet && s.kick != nil {
			s.quiet = false
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
	}
	s.to = t
	s.runs++
}

func (s *spans) flush() bool {
	if s == nil {
		return false // an event of a role this member does not know; goneli never sends one
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == 0 {
		s.quiet = true
		return false
	}
	s.w.write(Line{Event: EventAct, From: s.from.UnixNano(), To: s.to.UnixNano(), Runs: s.runs, Role: s.role})
	s.runs = 0
	return true
}

// librdkafkaLevel is librdkafka's log_level (syslog's numbers) for a -log-level name.
func librdkafkaLevel(level string) int {
	switch strings.ToLower(level) {
	case "off":
		return 0
	case "error":
		return 3
	case "info":
		return 6
	case "debug", "trace":
		return 7
	}
	return 4
}

func stderrScribe(level string) scribe.Scribe {
	s := scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(func(format string, args ...interface{}) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
	})})
	l := strings.ToLower(level)
	if l != "" {
		l = strings.ToUpper(l[:1]) + l[1:]
	}
	spec, err := scribe.ParseLevelName(l)
	if err != nil {
		spec, _ = scribe.ParseLevelName("Warn")
	}
	s.SetEnabled(spec.Level)
	return s
}

// statSampler keeps the least margin and the longest lag of the leases seen since its last line.
// With several roles it samples every fifth call (250 ms), so that a thousand roles' Stats do not
// add much to what the member costs.
type statSampler struct {
	stats []func() goneli.Stats
	every time.Duration
	next  time.Time
	calls int
	cur   Stat
}

func newStatSampler(stats []func() goneli.Stats, every time.Duration) *statSampler {
	return &statSampler{stats: stats, every: every, next: time.Now().Add(every), cur: Stat{MarginMs: -1}}
}

// sample takes a sample of every role's lease, and returns the line that is due, if one is.
func (s *statSampler) sample() *Stat {
	if s.every <= 0 {
		return nil
	}
	if s.calls++; len(s.stats) > 1 && s.calls%5 != 0 && time.Now().Before(s.next) {
		return nil
	}
	s.cur.Leading = 0
	for _, f := range s.stats {
		st := f()
		s.cur.Missed, s.cur.Late = st.CommitStoresMissed, st.LateWithdrawals
		if !st.Leader {
			continue
		}
		s.cur.Leading++
		if m := float64(st.LeaseRemaining.Microseconds()) / 1000; s.cur.MarginMs < 0 || m < s.cur.MarginMs {
			s.cur.MarginMs = m
		}
		s.cur.LagMs = max(s.cur.LagMs, float64(st.RenewalLag.Microseconds())/1000)
	}
	if time.Now().Before(s.next) {
		return nil
	}
	s.next = time.Now().Add(s.every)
	out := s.cur
	s.cur = Stat{MarginMs: -1}
	return &out
}
