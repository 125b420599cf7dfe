package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/metrics"
	"github.com/obsidiandynamics/libstdgo/scribe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

const runAbout = `Runs CMD only while this instance is the leader of --group, like 'etcdctl lock' or
'consul lock'. On becoming leader it starts CMD with NELI_NAME, NELI_GROUP, NELI_TENURE and
NELI_TOKEN in its environment. When leadership is revoked (another instance takes over in
an orderly way), CMD gets SIGTERM, then SIGKILL after --grace, and the successor waits
until CMD is gone.
When leadership is fenced (the lease ran out: Kafka unreachable, this process stalled),
the successor may be elected within about one --heartbeat-timeout, so CMD gets SIGTERM at
once and SIGKILL after min(--grace, --heartbeat-timeout/2). Signals go to CMD's whole
process group. If neli itself is killed, CMD gets SIGKILL from the kernel.

NELI_TOKEN is the tenure's fencing token: it is larger than the token of every earlier
leader of the group, so a store that CMD writes to can refuse writes stamped with a token
lower than the highest it has seen, and a deposed leader that still runs (after a pause,
say) cannot overwrite its successor's work.

If CMD exits by itself, neli releases leadership and exits with CMD's status. SIGINT or
SIGTERM to neli stops CMD first, then releases leadership.

SIGUSR1 moves leadership away on purpose, for a rolling deploy or an unhealthy host: neli
stops CMD as on revoke, leaves the group so that another instance is elected within a
group heartbeat interval, stays out of the running for --yield-for, then contends again.
A follower that gets SIGUSR1 just stays out for --yield-for.

--priority P prefers some instances as leaders: among the members of --group one of the
highest priority leads, and among equal priorities nothing changes. A leader hands over,
as on revoke, to a member of higher priority once that member has been in the group for
2 x --heartbeat-timeout, and then stays out of the group while such a member is in it. Give
the new version a higher priority than the old in a rolling upgrade, and leadership moves
once, to the first new instance. A negative priority leads only when no member of priority
0 or more is left. 'neli transfer --to NAME' moves leadership to a named instance, and
'neli status' shows each member's priority.

--metrics-addr serves Prometheus metrics (goneli_leader, goneli_fencing_token, lease age,
transitions, ...) on /metrics and a health check on /healthz, which answers 503 when neli
believes it leads but its lease has lapsed, or when it has held the leader partition without
leading for over a second (it cannot renew; after HeartbeatTimeout it hands leadership over).

With --on-acquired and --on-revoked, neli runs those shell commands on each transition
instead of supervising CMD (the revoked hook also runs when leadership is fenced, with
NELI_EVENT=fenced).

Roles: with --roles N (roles named 0 to N-1) or --role NAME (repeated, once per role),
the instances of --group share out several leaderships instead of electing one leader:
role i is partition i of the leader topic, and the group spreads the roles over its
members. neli runs one copy of CMD for each role it leads, with NELI_ROLE (the role's
name, which for --roles is its number) and that role's NELI_TENURE and NELI_TOKEN in its
environment; tokens increase per role. Each copy is stopped on its own role's revoke or
fence, as above, without touching the other copies, and the role's successor waits until
its copy is gone. Every instance of a group must give the same roles in the same order.
If a copy exits by itself, neli stops the other copies, releases every role and exits
with that copy's status, as it does without roles: a single role cannot be given up
without leaving the group, and leading a role without running its CMD would stall it.
SIGUSR1 yields every role. The hooks get NELI_ROLE too. /metrics labels every per-role
metric with role="NAME", and /healthz answers 503 if any role's lease has lapsed while
neli believes it leads that role, or if it has held a role's partition without leading it
for over a second.`

// killWait bounds the wait for a process group to go after SIGKILL. Only a process stuck in the
// kernel outlives it.
const killWait = 5 * time.Second

type runOptions struct {
	common
	grace      time.Duration
	onAcquired string
	onRevoked  string
	// metricsAddr is where /metrics and /healthz are served; empty means nowhere.
	metricsAddr string
	// address is advertised in this instance's heartbeats while it leads (Config.Address).
	address  string
	yieldFor time.Duration
	// handOverAfter is Config.HandOverAfter; 0 leaves goneli's default (one lease).
	handOverAfter time.Duration
	// priority is Config.Priority.
	priority int
	topicFlags
	command []string
}

// topicFlags are the flags that say how the leader topic is made and which roles share it, for run
// and for doctor, which checks what run would need.
type topicFlags struct {
	// replicas is the leader topic's replication factor if neli creates it; 0 for the broker's.
	replicas int
	// roleCount and roleNames are --roles and --role as given; roles is the list they make, nil
	// for the single leader.
	roleCount int
	roleNames roleList
	roles     []string
}

func (t *topicFlags) registerTopic(fs *flag.FlagSet) {
	fs.IntVar(&t.replicas, "replication-factor", 0, "replication factor of the leader topic if neli creates it, for example 3 (default: the broker's default.replication.factor)")
	fs.IntVar(&t.roleCount, "roles", 0, "contend for N numbered roles, 0 to N-1, and run a copy of CMD for each role led (default: a single leader)")
	fs.Var(&t.roleNames, "role", "contend for the role NAME and run a copy of CMD for each role led; repeat for more roles (in the same order on every instance)")
}

func (t *topicFlags) checkReplicas() error {
	if t.replicas < 0 || t.replicas > math.MaxInt16 {
		return badUsage("--replication-factor %d: want 1 to %d, or 0 for the broker's default", t.replicas, math.MaxInt16)
	}
	return nil
}

// roleList is the repeatable --role flag.
type roleList []string

func (l *roleList) String() string { return strings.Join(*l, ",") }

func (l *roleList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func parseRun(args []string, stdout io.Writer) (runOptions, error) {
	var o runOptions
	o.kafka = "localhost:9092"
	fs := newFlagSet("run", "[flags] [--roles N | --role NAME...] -- CMD [ARGS...]", runAbout)
	o.register(fs, "neli", "info", goneli.DefaultHeartbeatTimeout)
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "how long CMD may take to exit after SIGTERM before it gets SIGKILL")
	fs.StringVar(&o.onAcquired, "on-acquired", "", "shell command to run on becoming leader (instead of -- CMD)")
	fs.StringVar(&o.onRevoked, "on-revoked", "", "shell command to run on losing leadership (instead of -- CMD)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "HOST:PORT to serve Prometheus /metrics and /healthz on (default: none)")
	fs.StringVar(&o.address, "address", "", "where others reach this instance while it leads, for example its URL; 'neli watch' and 'neli status' show it (default: none)")
	fs.DurationVar(&o.yieldFor, "yield-for", 0, "how long SIGUSR1 keeps this instance out of the running (default 2 x --heartbeat-timeout)")
	fs.DurationVar(&o.handOverAfter, "hand-over-after", 0,
		"how long this instance may hold leadership without being able to renew it (its own heartbeats not coming back) before it hands it over; at least half of --heartbeat-timeout (default --heartbeat-timeout)")
	fs.IntVar(&o.priority, "priority", 0, fmt.Sprintf("this instance's priority, %d to %d: among the members of the group one of the highest priority leads; "+
		"a leader hands over to a member of higher priority once it has been in the group for 2 x --heartbeat-timeout, and a negative priority leads only when "+
		"no member of 0 or more is left (default 0, as without priorities)", goneli.MinPriority, goneli.MaxPriority))
	o.registerTopic(fs)

	flags, command, dashes := args, []string(nil), false
	for i, a := range args {
		if a == "--" {
			flags, command, dashes = args[:i], args[i+1:], true
			break
		}
	}
	err := parse(fs, flags, stdout)
	if err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, badUsage("unexpected argument %q: put the command after --, as in neli run [flags] -- CMD [ARGS...]", fs.Arg(0))
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.grace < 0 {
		return o, badUsage("--grace %v must not be negative", o.grace)
	}
	if err := o.checkReplicas(); err != nil {
		return o, err
	}
	if len(o.address) > goneli.MaxAddressLength {
		return o, badUsage("--address is %d bytes long: at most %d are allowed, as every heartbeat carries it", len(o.address), goneli.MaxAddressLength)
	}
	switch {
	case o.yieldFor < 0:
		return o, badUsage("--yield-for %v must not be negative", o.yieldFor)
	case o.yieldFor == 0:
		// Long enough for a successor to be elected and settle before this instance contends again.
		o.yieldFor = 2 * o.heartbeatTimeout
	}
	if err := o.checkHandOverAfter(fs); err != nil {
		return o, err
	}
	if err := o.checkPriority(); err != nil {
		return o, err
	}
	if o.metricsAddr != "" {
		if _, port, err := net.SplitHostPort(o.metricsAddr); err != nil || port == "" {
			return o, badUsage("--metrics-addr %q: want HOST:PORT, for example 127.0.0.1:9464 or :9464", o.metricsAddr)
		}
	}
	if o.roles, err = o.roleNamesOf(fs); err != nil {
		return o, err
	}
	hooks := o.onAcquired != "" || o.onRevoked != ""
	switch {
	case hooks && len(command) > 0:
		return o, badUsage("give either -- CMD or --on-acquired/--on-revoked hooks, not both")
	case !hooks && !dashes:
		return o, badUsage("missing command: use neli run [flags] -- CMD [ARGS...] (or --on-acquired/--on-revoked)")
	case !hooks && len(command) == 0:
		return o, badUsage("missing command after --: use neli run [flags] -- CMD [ARGS...]")
	}
	if len(command) > 0 {
		if _, err := exec.LookPath(command[0]); err != nil {
			return o, badUsage("cannot run %q: %v", command[0], errors.Unwrap(err))
		}
	}
	o.command = command
	return o, nil
}

// roleNamesOf checks --roles and --role and returns the roles they name, or nil for a single
// leader.
func (t *topicFlags) roleNamesOf(fs *flag.FlagSet) ([]string, error) {
	count, named := flagSet(fs, "roles"), len(t.roleNames) > 0
	switch {
	case count && named:
		return nil, badUsage("--roles and --role cannot be used together: give either --roles N for numbered roles or --role NAME once per named role")
	case count && t.roleCount < 1:
		return nil, badUsage("--roles %d: want at least 1 role", t.roleCount)
	case count && t.roleCount > goneli.MaxRoles:
		// Checked before the names are made, so that a slip such as --roles 1000000000 costs a
		// line, not the memory.
		return nil, badUsage("--roles %d: at most %d roles (one partition of the leader topic each)", t.roleCount, goneli.MaxRoles)
	case count:
		return goneli.Shards(t.roleCount), nil
	case !named:
		return nil, nil
	}
	seen := map[string]bool{}
	for _, r := range t.roleNames {
		switch {
		case r == "":
			return nil, badUsage("--role must not be empty: give each role a name")
		case seen[r]:
			return nil, badUsage("--role %q is given twice: list each role once", r)
		}
		seen[r] = true
	}
	return t.roleNames, nil
}

func runRun(args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseRun(args, stdout)
	if err != nil {
		return 0, err
	}
	log, scr := o.logger(stderr)
	// The metrics port is taken before anything joins the group, so that a clash costs one line
	// and not a leadership change.
	var metricsLn net.Listener
	if o.metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", o.metricsAddr); err != nil {
			var oe *net.OpError
			if errors.As(err, &oe) {
				err = oe.Err
			}
			return 0, fmt.Errorf("--metrics-addr %s: cannot listen: %v", o.metricsAddr, err)
		}
		defer metricsLn.Close()
	}
	if err := o.checkReachable(); err != nil {
		return 0, err
	}
	config := o.runConfig(scr)

	sup := newSupervisor(o, config, log)
	// From here on a signal must stop the command before neli goes, so it is caught before the
	// command can be started. The buffer leaves room for a SIGTERM that arrives while a yield is
	// stopping the command: signal.Notify drops what does not fit.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	defer signal.Stop(sig)
	n, err := contend(config, o.roles, sup.barrier())
	if err != nil {
		return 0, err
	}
	if bound, err := o.stopBound(config); err == nil {
		log.Infof("neli run %s: SIGTERM stops this within %v (give a supervisor's stop timeout more)", config.Name, bound)
	}
	if metricsLn != nil {
		stopMetrics, err := serveMetrics(metricsLn, n, config, log)
		if err != nil {
			_ = n.Close()
			return 0, err
		}
		// Deferred so that /healthz and /metrics keep answering while leadership is released.
		defer stopMetrics()
	}
	p, err := n.background()
	if err != nil {
		_ = n.Close()
		return 0, err
	}
	pulserDone := make(chan error, 1)
	go func() { pulserDone <- p.Await() }()

	status := exitOK
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGUSR1 {
				// Yield delivers LeaderRevoked to the barrier for every role led, which stops its
				// command; the successor waits for that.
				log.Infof("neli run %s: %v: yielding leadership for %v", config.Name, s, o.yieldFor)
				if err := n.Yield(o.yieldFor); err != nil {
					log.Warnf("neli run %s: cannot yield: %v", config.Name, err)
				}
				continue
			}
			log.Infof("neli run %s: %v: stopping the command, then releasing leadership", config.Name, s)
			sup.shutdown()
		case ex := <-sup.exited:
			status = ex.status
			if ex.role == "" {
				log.Infof("neli run %s: command exited with status %d; releasing leadership", config.Name, status)
			} else {
				log.Infof("neli run %s: the command of role %s exited with status %d; stopping the other copies and releasing every role",
					config.Name, ex.role, status)
			}
			sup.shutdown()
		case err := <-pulserDone:
			sup.shutdown()
			_ = n.Close()
			if err == nil {
				err = errors.New("pulser stopped")
			}
			return 0, err
		}
		break // only SIGUSR1 keeps neli waiting
	}
	if err := n.Close(); err != nil {
		log.Warnf("neli run %s: %v", config.Name, err)
	}
	<-pulserDone
	return status, nil
}

// contender is what neli run needs of the single leader (goneli.Curator) or of roles
// (goneli.Roles).
type contender interface {
	Yield(d time.Duration) error
	Close() error
	// background keeps the instance pulsing; the leader work is the barrier's.
	background() (goneli.Pulser, error)
	// handler serves /metrics and /healthz.
	handler(constLabels prometheus.Labels) (http.Handler, error)
}

// contend joins the group as a single leader if roles is nil, and for roles otherwise.
func contend(config goneli.Config, roles []string, barrier goneli.Barrier) (contender, error) {
	if roles == nil {
		c, err := goneli.NewCurator(config, barrier)
		if err != nil {
			return nil, err
		}
		return single{c}, nil
	}
	r, err := goneli.NewRoles(config, roles, barrier)
	var ce *goneli.ConfigError
	switch {
	case errors.As(err, &ce) && strings.HasPrefix(ce.Field, "roles"):
		// Whatever goneli refuses of the role list that neli did not check itself (a name too
		// long, say) is still the command line's fault.
		return nil, badUsage("--role: %v", err)
	case err != nil:
		return nil, err
	}
	return multi{r}, nil
}

type single struct{ goneli.Curator }

func (s single) background() (goneli.Pulser, error) {
	return s.Background(func() {
		// The pulser calls this back-to-back while leading; the pause keeps that from spinning
		// while staying well inside the heartbeat interval.
		time.Sleep(10 * time.Millisecond)
	})
}

func (s single) handler(constLabels prometheus.Labels) (http.Handler, error) {
	return metrics.Handler(s.Curator, constLabels)
}

type multi struct{ goneli.Roles }

func (m multi) background() (goneli.Pulser, error) {
	return m.Background(func(string) {
		// Each role's task runs on a goroutine of its own, apart from the pulsing, so it may idle
		// longer than the single leader's; a run in progress delays only neli's exit, by as much.
		time.Sleep(100 * time.Millisecond)
	})
}

func (m multi) handler(constLabels prometheus.Labels) (http.Handler, error) {
	return metrics.RolesHandler(m.Roles, constLabels)
}

// env is what a command or hook finds in its environment, on top of neli's own, for event e.
// It is the one place where facts about the tenure reach the command.
func (s *supervisor) env(e goneli.Event) []string {
	event, role, tenure, token := describe(e)
	env := []string{
		"NELI_NAME=" + s.name,
		"NELI_GROUP=" + s.group,
		"NELI_EVENT=" + event,
		"NELI_TENURE=" + tenure,
		"NELI_TOKEN=" + strconv.FormatInt(token, 10),
	}
	if role != "" {
		env = append(env, "NELI_ROLE="+role)
	}
	return env
}

// describe names the kind of e, as NELI_EVENT shows it, its role (empty for the single leader),
// its tenure and its fencing token.
func describe(e goneli.Event) (event, role, tenure string, token int64) {
	switch e := e.(type) {
	case goneli.LeaderAcquired:
		return "acquired", e.Role, e.Tenure, e.Token
	case goneli.LeaderFenced:
		return "fenced", e.Role, e.Tenure, e.Token
	case goneli.LeaderRevoked:
		return "revoked", e.Role, e.Tenure, e.Token
	}
	return "unknown", "", "", 0
}

// metricsShutdown bounds how long scrapes in progress may delay neli's exit.
const metricsShutdown = time.Second

// serveMetrics serves c's /metrics and /healthz on ln until the returned function is called.
func serveMetrics(ln net.Listener, c contender, config goneli.Config, log *logrus.Logger) (func(), error) {
	h, err := c.handler(prometheus.Labels{"group": config.LeaderGroupID, "name": config.Name})
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Errorf("neli run %s: metrics server on %s: %v", config.Name, ln.Addr(), err)
		}
	}()
	log.Infof("neli run %s: serving http://%s/metrics and /healthz", config.Name, ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdown)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// supervisor starts and stops the command from the barrier, one copy per role led (a single
// copy without roles). The barrier is called for different roles at the same time, and
// shutdown from the main goroutine, hence the mutex.
type supervisor struct {
	name       string
	group      string
	command    []string
	onAcquired string
	onRevoked  string
	grace      time.Duration
	fenceGrace time.Duration
	log        *logrus.Logger
	exited     chan exit // the first command that ended without being asked to
	// slots holds the state of each role, under its name; the single leader's is under "". It
	// is filled in before the barrier can run and never changes after.
	slots map[string]*slot

	// mu guards closing and every slot's cur, so that no copy starts once shutdown has looked for
	// copies to stop.
	mu      sync.Mutex
	closing bool
}

// slot is what the supervisor keeps for one role.
type slot struct {
	role   string
	who    string // "neli run NAME", with the role if there are roles, for log messages
	cur    *child
	hookMu sync.Mutex // runs the role's hooks one at a time, in the order of its transitions
}

// exit reports a command that ended by itself.
type exit struct {
	role   string
	status int
}

func newSupervisor(o runOptions, config goneli.Config, log *logrus.Logger) *supervisor {
	s := &supervisor{
		name:       config.Name,
		group:      config.LeaderGroupID,
		command:    o.command,
		onAcquired: o.onAcquired,
		onRevoked:  o.onRevoked,
		grace:      o.grace,
		fenceGrace: min(o.grace, o.heartbeatTimeout/2),
		log:        log,
		exited:     make(chan exit, 1),
		slots:      map[string]*slot{},
	}
	who := "neli run " + config.Name
	if o.roles == nil {
		s.slots[""] = &slot{who: who}
	}
	for _, r := range o.roles {
		s.slots[r] = &slot{role: r, who: who + " role " + r}
	}
	return s
}

// child is one run of a command, in a process group of its own so that its helpers are signalled
// with it.
type child struct {
	cmd      *exec.Cmd
	done     chan struct{}
	status   int         // exit status, valid once done is closed
	stopping atomic.Bool // neli asked it to stop, so its exit is no reason to quit
}

// barrier returns the Barrier that supervises the command, or runs the hooks if there is no
// command.
func (s *supervisor) barrier() goneli.Barrier {
	return func(e goneli.Event) {
		_, role, _, _ := describe(e)
		sl := s.slots[role]
		if sl == nil {
			s.log.Errorf("neli run %s: event %v for a role neli does not know", s.name, e)
			return
		}
		s.logEvent(sl, e)
		if s.command == nil {
			s.hookEvent(sl, e)
		} else {
			s.commandEvent(sl, e)
		}
	}
}

func (s *supervisor) commandEvent(sl *slot, e goneli.Event) {
	switch e.(type) {
	case goneli.LeaderAcquired:
		// A copy terminated on a fence may still be exiting; it must be gone before the next one.
		s.stop(sl, s.grace)
		s.start(sl, s.env(e))
	case goneli.LeaderFenced:
		// This may run on goneli's lease watchdog while the pulse loop is stuck; it must not block,
		// and a successor may be elected soon, so the command gets only fenceGrace.
		s.terminate(sl, s.fenceGrace)
	case goneli.LeaderRevoked:
		// Blocking here holds back the role's successor until the command has exited.
		s.stop(sl, s.grace)
	}
}

func (s *supervisor) hookEvent(sl *slot, e goneli.Event) {
	switch e.(type) {
	case goneli.LeaderAcquired:
		s.hook(sl, s.onAcquired, e)
	case goneli.LeaderFenced:
		// Not in line: this may run on goneli's lease watchdog, which must not wait for a hook.
		go s.hook(sl, s.onRevoked, e)
	case goneli.LeaderRevoked:
		s.hook(sl, s.onRevoked, e)
	}
}

func (s *supervisor) logEvent(sl *slot, e goneli.Event) {
	switch e := e.(type) {
	case goneli.LeaderAcquired:
		s.log.Infof("%s: leader (tenure %s)", sl.who, e.Tenure)
	case goneli.LeaderFenced:
		s.log.Warnf("%s: fenced (%s)", sl.who, e.Reason)
	case goneli.LeaderRevoked:
		s.log.Infof("%s: leadership revoked (tenure %s)", sl.who, e.Tenure)
	}
}

// start launches the role's command, unless neli is shutting down.
func (s *supervisor) start(sl *slot, env []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	c, err := launch(s.command, env)
	if err != nil {
		s.log.Errorf("%s: cannot start %s: %v", sl.who, s.command[0], err)
		s.report(exit{sl.role, 127}) // the shell's status for a command that cannot be run
		return
	}
	s.log.Infof("%s: started %s (pid %d)", sl.who, strings.Join(s.command, " "), c.cmd.Process.Pid)
	sl.cur = c
	go func() {
		<-c.done
		if !c.stopping.Load() {
			s.report(exit{sl.role, c.status})
		}
	}()
}

// report tells the main goroutine that a command ended without being asked to. Only the first
// report matters: neli exits on it.
func (s *supervisor) report(e exit) {
	select {
	case s.exited <- e:
	default:
	}
}

// terminate sends SIGTERM to the role's running command and arranges a SIGKILL after grace,
// without waiting. It returns the child, or nil if none is running.
func (s *supervisor) terminate(sl *slot, grace time.Duration) *child {
	s.mu.Lock()
	c := sl.cur
	s.mu.Unlock()
	if c == nil || !c.signal(syscall.SIGTERM) {
		return nil
	}
	s.log.Infof("%s: sent SIGTERM to %s (pid %d)", sl.who, s.command[0], c.cmd.Process.Pid)
	kill := time.AfterFunc(grace, func() {
		if c.signal(syscall.SIGKILL) {
			s.log.Warnf("%s: %s did not exit within %v of SIGTERM; sent SIGKILL", sl.who, s.command[0], grace)
		}
	})
	go func() {
		<-c.done
		kill.Stop()
	}()
	return c
}

// stop terminates the role's running command and waits until it has exited.
func (s *supervisor) stop(sl *slot, grace time.Duration) {
	c := s.terminate(sl, grace)
	if c == nil {
		return
	}
	select {
	case <-c.done:
	case <-time.After(grace + killWait):
		s.log.Errorf("%s: %s (pid %d) survived SIGKILL for %v", sl.who, s.command[0], c.cmd.Process.Pid, killWait)
		return
	}
	s.log.Infof("%s: %s exited with status %d", sl.who, s.command[0], c.status)
}

// shutdown stops every copy of the command for good: no later LeaderAcquired starts one again.
// The copies are stopped side by side, so that neli's exit takes one --grace, not one per role.
func (s *supervisor) shutdown() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	if s.command == nil {
		return
	}
	var wg sync.WaitGroup
	for _, sl := range s.slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.stop(sl, s.grace)
		}()
	}
	wg.Wait()
}

// hook runs a short shell command for the role to completion, giving it --grace before stopping
// it.
func (s *supervisor) hook(sl *slot, script string, e goneli.Event) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	event, _, _, _ := describe(e)
	if script == "" || (closing && event == "acquired") {
		return
	}
	sl.hookMu.Lock()
	defer sl.hookMu.Unlock()
	c, err := launch([]string{"sh", "-c", script}, s.env(e))
	if err != nil {
		s.log.Errorf("%s: cannot run the %s hook: %v", sl.who, event, err)
		return
	}
	select {
	case <-c.done:
	case <-time.After(s.grace):
		s.log.Warnf("%s: the %s hook is still running after --grace %v; stopping it", sl.who, event, s.grace)
		c.signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(killWait):
			c.signal(syscall.SIGKILL)
			<-c.done
		}
	}
	if c.status != 0 {
		s.log.Warnf("%s: the %s hook exited with status %d", sl.who, event, c.status)
	}
}

func launch(argv []string, env []string) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = nil
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If neli dies, nobody is left to stop the command when leadership moves on.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.status = exitStatus(cmd.Wait())
		close(c.done)
	}()
	return c, nil
}

// signal sends sig to the child's process group and reports whether the child was still running.
func (c *child) signal(sig syscall.Signal) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	c.stopping.Store(true)
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	return true
}

// exitStatus turns Wait's result into a shell-style status: the exit code, or 128 plus the signal.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitFail
}

// checkHandOverAfter refuses a --hand-over-after that goneli's Config.Validate would refuse, naming
// the flag rather than the Config field. Given as 0 it is refused too: flagged explicitly, 0 would
// read as "never", which goneli spells as a very long duration instead.
func (o *runOptions) checkHandOverAfter(fs *flag.FlagSet) error {
	if !flagSet(fs, "hand-over-after") {
		return nil
	}
	if o.handOverAfter <= 0 {
		return badUsage("--hand-over-after %v must be positive (leave it out for one --heartbeat-timeout; a very long one, such as 8760h, never hands over)", o.handOverAfter)
	}
	if min := o.heartbeatTimeout / 2; o.handOverAfter < min {
		return badUsage("--hand-over-after %v is too short: the minimum is half of --heartbeat-timeout (%v), as a rebalance can hold a healthy leader's renewals back for most of a lease", o.handOverAfter, min)
	}
	return nil
}

// checkPriority refuses a --priority that goneli's Config.Validate would refuse, naming the flag.
func (o *runOptions) checkPriority() error {
	switch {
	case o.priority < goneli.MinPriority || o.priority > goneli.MaxPriority:
		return badUsage("--priority %d: want %d to %d (0 for no preference)", o.priority, goneli.MinPriority, goneli.MaxPriority)
	case o.priority != 0 && o.kafkaConfig()["client.id"] != nil:
		return badUsage("--priority %d cannot be combined with a client.id of your own (-X client.id): the priority travels in the client.id that neli derives from --name", o.priority)
	}
	return nil
}

// runConfig is the goneli configuration of neli run, defaults set.
func (o *runOptions) runConfig(scr scribe.Scribe) goneli.Config {
	config := o.config(scr)
	config.Address = o.address
	config.LeaderTopicReplicationFactor = o.replicas
	if o.handOverAfter > 0 {
		config.HandOverAfter = goneli.Duration(o.handOverAfter)
	}
	config.Priority = o.priority
	config.SetDefaults()
	return config
}

// stopBound is how long neli run may take to exit after SIGTERM or SIGINT: every copy of the
// command gets --grace after SIGTERM and killWait after SIGKILL (the copies stop side by side; a
// hook runs within Close), then Close hands leadership over within its bound, then the metrics
// server has metricsShutdown. A supervisor that kills neli sooner (systemd's TimeoutStopSec,
// Kubernetes' terminationGracePeriodSeconds) turns a leader's handover into a crash, which its
// successor waits out for a group session.
func (o *runOptions) stopBound(config goneli.Config) (time.Duration, error) {
	closeBound, err := config.CloseBound()
	if err != nil {
		return 0, err
	}
	return o.grace + killWait + closeBound + metricsShutdown, nil
}
