package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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

--metrics-addr serves Prometheus metrics (goneli_leader, goneli_fencing_token, lease age,
transitions, ...) on /metrics and a health check on /healthz, which answers 503 when neli
believes it leads but its lease has lapsed.

With --on-acquired and --on-revoked, neli runs those shell commands on each transition
instead of supervising CMD (the revoked hook also runs when leadership is fenced, with
NELI_EVENT=fenced).`

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
	yieldFor    time.Duration
	command     []string
}

func parseRun(args []string, stdout io.Writer) (runOptions, error) {
	var o runOptions
	o.kafka = "localhost:9092"
	fs := newFlagSet("run", "[flags] -- CMD [ARGS...]", runAbout)
	o.register(fs, "neli", "info", goneli.DefaultHeartbeatTimeout)
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "how long CMD may take to exit after SIGTERM before it gets SIGKILL")
	fs.StringVar(&o.onAcquired, "on-acquired", "", "shell command to run on becoming leader (instead of -- CMD)")
	fs.StringVar(&o.onRevoked, "on-revoked", "", "shell command to run on losing leadership (instead of -- CMD)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "HOST:PORT to serve Prometheus /metrics and /healthz on (default: none)")
	fs.DurationVar(&o.yieldFor, "yield-for", 0, "how long SIGUSR1 keeps this instance out of the running (default 2 x --heartbeat-timeout)")

	flags, command, dashes := args, []string(nil), false
	for i, a := range args {
		if a == "--" {
			flags, command, dashes = args[:i], args[i+1:], true
			break
		}
	}
	if err := parse(fs, flags, stdout); err != nil {
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
	switch {
	case o.yieldFor < 0:
		return o, badUsage("--yield-for %v must not be negative", o.yieldFor)
	case o.yieldFor == 0:
		// Long enough for a successor to be elected and settle before this instance contends again.
		o.yieldFor = 2 * o.heartbeatTimeout
	}
	if o.metricsAddr != "" {
		if _, port, err := net.SplitHostPort(o.metricsAddr); err != nil || port == "" {
			return o, badUsage("--metrics-addr %q: want HOST:PORT, for example 127.0.0.1:9464 or :9464", o.metricsAddr)
		}
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
	if err := checkReachable(o.kafka); err != nil {
		return 0, err
	}
	config := o.config(scr)
	config.SetDefaults()

	sup := &supervisor{
		name:       config.Name,
		group:      config.LeaderGroupID,
		command:    o.command,
		onAcquired: o.onAcquired,
		onRevoked:  o.onRevoked,
		grace:      o.grace,
		fenceGrace: min(o.grace, o.heartbeatTimeout/2),
		log:        log,
		exited:     make(chan int, 1),
	}
	// From here on a signal must stop the command before neli goes, so it is caught before the
	// command can be started. The buffer leaves room for a SIGTERM that arrives while a yield is
	// stopping the command: signal.Notify drops what does not fit.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	defer signal.Stop(sig)
	n, err := goneli.NewCurator(config, sup.barrier())
	if err != nil {
		return 0, err
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
	p, err := n.Background(func() {
		// The pulser calls this back-to-back while leading; the pause keeps that from spinning
		// while staying well inside the heartbeat interval.
		time.Sleep(10 * time.Millisecond)
	})
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
				// Yield delivers LeaderRevoked to the barrier when leading, which stops the command
				// before the group is left; it returns once that is done.
				log.Infof("neli run %s: %v: yielding leadership for %v", config.Name, s, o.yieldFor)
				if err := n.Yield(o.yieldFor); err != nil {
					log.Warnf("neli run %s: cannot yield: %v", config.Name, err)
				}
				continue
			}
			log.Infof("neli run %s: %v: stopping the command, then releasing leadership", config.Name, s)
			sup.shutdown()
		case status = <-sup.exited:
			log.Infof("neli run %s: command exited with status %d; releasing leadership", config.Name, status)
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

// env is what a command or hook finds in its environment, on top of neli's own, for event e.
// It is the one place where facts about the tenure reach the command.
func (s *supervisor) env(e goneli.Event) []string {
	event, tenure, token := describe(e)
	return []string{
		"NELI_NAME=" + s.name,
		"NELI_GROUP=" + s.group,
		"NELI_EVENT=" + event,
		"NELI_TENURE=" + tenure,
		"NELI_TOKEN=" + strconv.FormatInt(token, 10),
	}
}

// describe names the kind of e, as NELI_EVENT shows it, its tenure and its fencing token.
func describe(e goneli.Event) (event, tenure string, token int64) {
	switch e := e.(type) {
	case goneli.LeaderAcquired:
		return "acquired", e.Tenure, e.Token
	case goneli.LeaderFenced:
		return "fenced", e.Tenure, e.Token
	case goneli.LeaderRevoked:
		return "revoked", e.Tenure, e.Token
	}
	return "unknown", "", 0
}

// metricsShutdown bounds how long scrapes in progress may delay neli's exit.
const metricsShutdown = time.Second

// serveMetrics serves the curator's /metrics and /healthz on ln until the returned function is
// called.
func serveMetrics(ln net.Listener, c goneli.Curator, config goneli.Config, log *logrus.Logger) (func(), error) {
	h, err := metrics.Handler(c, prometheus.Labels{"group": config.LeaderGroupID, "name": config.Name})
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

// supervisor starts and stops the leader's command from the barrier. The barrier is never called
// concurrently with itself, but shutdown is called from the main goroutine, hence the mutex.
type supervisor struct {
	name       string
	group      string
	command    []string
	onAcquired string
	onRevoked  string
	grace      time.Duration
	fenceGrace time.Duration
	log        *logrus.Logger
	exited     chan int // the status of a command that ended without being asked to

	mu      sync.Mutex
	cur     *child
	closing bool

	hookMu sync.Mutex // runs hooks one at a time, in the order of the transitions
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
	if s.command == nil {
		return s.hookBarrier
	}
	return s.commandBarrier
}

func (s *supervisor) commandBarrier(e goneli.Event) {
	s.logEvent(e)
	switch e := e.(type) {
	case goneli.LeaderAcquired:
		// A copy terminated on a fence may still be exiting; it must be gone before the next one.
		s.stop(s.grace)
		s.start(s.env(e))
	case goneli.LeaderFenced:
		// This may run on goneli's lease watchdog while the pulse loop is stuck; it must not block,
		// and a successor may be elected soon, so the command gets only fenceGrace.
		s.terminate(s.fenceGrace)
	case goneli.LeaderRevoked:
		// Blocking here holds back the successor until the command has exited.
		s.stop(s.grace)
	}
}

func (s *supervisor) hookBarrier(e goneli.Event) {
	s.logEvent(e)
	switch e.(type) {
	case goneli.LeaderAcquired:
		s.hook(s.onAcquired, e)
	case goneli.LeaderFenced:
		// Not in line: this may run on goneli's lease watchdog, which must not wait for a hook.
		go s.hook(s.onRevoked, e)
	case goneli.LeaderRevoked:
		s.hook(s.onRevoked, e)
	}
}

func (s *supervisor) logEvent(e goneli.Event) {
	switch e := e.(type) {
	case goneli.LeaderAcquired:
		s.log.Infof("neli run %s: leader (tenure %s)", s.name, e.Tenure)
	case goneli.LeaderFenced:
		s.log.Warnf("neli run %s: fenced (%s)", s.name, e.Reason)
	case goneli.LeaderRevoked:
		s.log.Infof("neli run %s: leadership revoked (tenure %s)", s.name, e.Tenure)
	}
}

// start launches the command, unless neli is shutting down.
func (s *supervisor) start(env []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	c, err := launch(s.command, env)
	if err != nil {
		s.log.Errorf("neli run %s: cannot start %s: %v", s.name, s.command[0], err)
		s.report(127) // the shell's status for a command that cannot be run
		return
	}
	s.log.Infof("neli run %s: started %s (pid %d)", s.name, strings.Join(s.command, " "), c.cmd.Process.Pid)
	s.cur = c
	go func() {
		<-c.done
		if !c.stopping.Load() {
			s.report(c.status)
		}
	}()
}

// report tells the main goroutine that the command ended without being asked to. Only the first
// report matters: neli exits on it.
func (s *supervisor) report(status int) {
	select {
	case s.exited <- status:
	default:
	}
}

// terminate sends SIGTERM to the running command and arranges a SIGKILL after grace, without
// waiting. It returns the child, or nil if none is running.
func (s *supervisor) terminate(grace time.Duration) *child {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	if c == nil || !c.signal(syscall.SIGTERM) {
		return nil
	}
	s.log.Infof("neli run %s: sent SIGTERM to %s (pid %d)", s.name, s.command[0], c.cmd.Process.Pid)
	kill := time.AfterFunc(grace, func() {
		if c.signal(syscall.SIGKILL) {
			s.log.Warnf("neli run %s: %s did not exit within %v of SIGTERM; sent SIGKILL", s.name, s.command[0], grace)
		}
	})
	go func() {
		<-c.done
		kill.Stop()
	}()
	return c
}

// stop terminates the running command and waits until it has exited.
func (s *supervisor) stop(grace time.Duration) {
	c := s.terminate(grace)
	if c == nil {
		return
	}
	select {
	case <-c.done:
	case <-time.After(grace + killWait):
		s.log.Errorf("neli run %s: %s (pid %d) survived SIGKILL for %v", s.name, s.command[0], c.cmd.Process.Pid, killWait)
		return
	}
	s.log.Infof("neli run %s: %s exited with status %d", s.name, s.command[0], c.status)
}

// shutdown stops the command for good: no later LeaderAcquired starts it again.
func (s *supervisor) shutdown() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	if s.command != nil {
		s.stop(s.grace)
	}
}

// hook runs a short shell command to completion, giving it --grace before stopping it.
func (s *supervisor) hook(script string, e goneli.Event) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	event, _, _ := describe(e)
	if script == "" || (closing && event == "acquired") {
		return
	}
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	c, err := launch([]string{"sh", "-c", script}, s.env(e))
	if err != nil {
		s.log.Errorf("neli run %s: cannot run the %s hook: %v", s.name, event, err)
		return
	}
	select {
	case <-c.done:
	case <-time.After(s.grace):
		s.log.Warnf("neli run %s: the %s hook is still running after --grace %v; stopping it", s.name, event, s.grace)
		c.signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(killWait):
			c.signal(syscall.SIGKILL)
			<-c.done
		}
	}
	if c.status != 0 {
		s.log.Warnf("neli run %s: the %s hook exited with status %d", s.name, event, c.status)
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
