// Package fleet runs member processes (internal/member) for the demo, the benchmarks and the
// chaos suite, and merges the JSON lines they print into one log.
//
// Each caller decides how a member process is made (the test binary with an environment
// variable, or `neli member`) and passes the executable, arguments and environment in a Spec.
// The fleet reads every process's stdout, stamps each line with the process's name and appends it
// to a log that callers can wait on without sleeping, records how and when each process ended,
// and stops processes in order or all at once.
package fleet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goneli/goneli/internal/member"
)

// Marker events: lines the fleet adds to the log itself when Options.Marks is set, so that one log
// holds everything a trial's timeline needs.
const (
	EventSpawned = "spawned" // the process was started; Info has its pid
	EventSigterm = "sigterm" // the harness sent SIGTERM
	EventSigkill = "sigkill" // the harness sent SIGKILL
	EventSigstop = "sigstop" // the harness sent SIGSTOP
	EventSigcont = "sigcont" // the harness sent SIGCONT
	EventExit    = "exit"    // the process ended; Info has its status
)

// Options configure a Fleet.
type Options struct {
	// Marks adds marker lines (the Event* constants) to the log: a process started, was sent a
	// signal, ended.
	Marks bool
	// OnLine, if set, is called with every line a process prints, in order, from the goroutine
	// that reads that process. While it runs the process's output is not read, so it must not
	// block for long.
	OnLine func(member.Line)
	// OnExit, if set, is called once a process has ended and all of its output has been read and
	// logged, from the goroutine that read it, before Done is closed.
	OnExit func(*Proc)
}

// Spec says how to start one process.
type Spec struct {
	Name string   // stamped on every line the process prints; unique within the fleet
	Path string   // the executable
	Args []string // without the program name
	Env  []string // added to this process's environment
	// Pdeathsig has the kernel SIGKILL the process should the harness die, so that no member
	// goes on contending in a group nobody watches.
	Pdeathsig bool
	// Setpgid puts the process in a process group of its own, so that a Ctrl-C at the terminal
	// reaches only the harness, which then stops its members in order.
	Setpgid bool
	// HoldStdin gives the process a stdin pipe that the harness never writes to and that closes
	// only when the process has been waited for, so that the process sees end of input exactly
	// when the harness is gone: a way for a member to follow the harness when Pdeathsig cannot
	// be used.
	HoldStdin bool
	// Stderr receives the process's stderr. If nil, a Tail keeping the last 40 lines is made, for
	// Diagnostics.
	Stderr *member.Tail
	// LogFile, if set, is created and receives the process's stderr too.
	LogFile string
}

// Fleet is a set of processes and the merged log of what they printed. Its methods are safe for
// concurrent use.
type Fleet struct {
	opts    Options
	readers sync.WaitGroup

	mu      sync.Mutex
	lines   []member.Line // append-only: elements are never changed once added
	changed chan struct{} // closed and replaced whenever a line is added
	procs   []*Proc       // in start order
	byName  map[string]*Proc
}

// Proc is one started process.
type Proc struct {
	Name string
	Pid  int

	cmd      *exec.Cmd
	stderr   *member.Tail
	done     chan struct{}
	expected atomic.Bool // the harness asked the process to end
	stopped  atomic.Bool // sent SIGSTOP and not yet SIGCONT

	mu     sync.Mutex
	exit   Exit
	exited bool
}

// Exit is how a process ended.
type Exit struct {
	At  time.Time // when Wait returned
	Err error     // Wait's error: nil for exit status 0, an *exec.ExitError otherwise
	// Expected is true if the harness had sent the process SIGTERM, SIGINT or SIGKILL, that is,
	// asked it to end.
	Expected bool
}

// Status renders the exit as Wait's error does: "exit status 3", "signal: killed".
func (e Exit) Status() string {
	if e.Err == nil {
		return "exit status 0"
	}
	return e.Err.Error()
}

// Done is closed once the process has ended and all its output has been read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exit returns how the process ended, and false if it has not yet ended.
func (p *Proc) Exit() (Exit, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit, p.exited
}

// Stopped reports whether the harness has sent the process SIGSTOP and not yet SIGCONT.
func (p *Proc) Stopped() bool { return p.stopped.Load() }

// Stderr returns the last lines of the process's stderr.
func (p *Proc) Stderr() []string { return p.stderr.Lines() }

// New returns an empty fleet.
func New(o Options) *Fleet {
	return &Fleet{opts: o, changed: make(chan struct{}), byName: map[string]*Proc{}}
}

// Start starts a process and begins reading its output.
func (f *Fleet) Start(s Spec) (*Proc, error) {
	f.mu.Lock()
	_, taken := f.byName[s.Name]
	f.mu.Unlock()
	if taken {
		return nil, fmt.Errorf("fleet: a process named %s was started already", s.Name)
	}
	cmd := exec.Command(s.Path, s.Args...)
	if len(s.Env) > 0 {
		cmd.Env = append(os.Environ(), s.Env...)
	}
	if s.Pdeathsig || s.Setpgid {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: s.Setpgid}
		if s.Pdeathsig {
			cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		}
	}
	p := &Proc{Name: s.Name, cmd: cmd, stderr: s.Stderr, done: make(chan struct{})}
	if p.stderr == nil {
		p.stderr = &member.Tail{Max: 40}
	}
	cmd.Stderr = p.stderr
	var logFile *os.File
	if s.LogFile != "" {
		var err error
		if logFile, err = os.Create(s.LogFile); err != nil {
			return nil, err
		}
		cmd.Stderr = io.MultiWriter(p.stderr, logFile)
	}
	closeLog := func() {
		if logFile != nil {
			_ = logFile.Close()
		}
	}
	stdout, err := cmd.StdoutPipe()
	if err == nil && s.HoldStdin {
		// Wait closes the write end; until then nothing is written to it.
		_, err = cmd.StdinPipe()
	}
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		closeLog()
		return nil, fmt.Errorf("starting %s: %w", s.Name, err)
	}
	p.Pid = cmd.Process.Pid
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.byName[s.Name] = p
	f.mu.Unlock()
	if f.opts.Marks {
		f.Mark(s.Name, EventSpawned, fmt.Sprint(p.Pid))
	}
	f.readers.Add(1)
	go func() {
		defer f.readers.Done()
		f.read(p, stdout)
		err := cmd.Wait()
		closeLog()
		p.mu.Lock()
		p.exit = Exit{At: time.Now(), Err: err, Expected: p.expected.Load()}
		p.exited = true
		exit := p.exit
		p.mu.Unlock()
		if f.opts.Marks {
			f.add(member.Line{At: exit.At.UnixNano(), Name: p.Name, Event: EventExit, Info: exit.Status()})
		}
		if f.opts.OnExit != nil {
			f.opts.OnExit(p)
		}
		close(p.done)
	}()
	return p, nil
}

// read logs the process's stdout until it closes. Lines that are not JSON (a panic trace, say)
// go to the stderr tail, where diagnostics look.
func (f *Fleet) read(p *Proc, stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l member.Line
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			_, _ = fmt.Fprintf(p.stderr, "stdout: %s\n", sc.Bytes())
			continue
		}
		l.Name = p.Name
		if l.At == 0 {
			l.At = time.Now().UnixNano()
		}
		f.add(l)
		if f.opts.OnLine != nil {
			f.opts.OnLine(l)
		}
	}
	if sc.Err() != nil {
		// An overlong line ends scanning; the process must not block on a full pipe.
		_, _ = fmt.Fprintf(p.stderr, "stdout: %v\n", sc.Err())
		_, _ = io.Copy(io.Discard, stdout)
	}
}

func (f *Fleet) add(l member.Line) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines = append(f.lines, l)
	close(f.changed)
	f.changed = make(chan struct{})
}

// Mark adds a line of the harness's own to the log, stamped now, and returns its time.
func (f *Fleet) Mark(name, event, info string) time.Time {
	now := time.Now()
	f.add(member.Line{At: now.UnixNano(), Name: name, Event: event, Info: info})
	return now
}

// Cursor is the index in the log of the next line to be added.
func (f *Fleet) Cursor() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.lines)
}

// Lines returns the log so far. The caller must not modify it.
func (f *Fleet) Lines() []member.Line {
	lines, _ := f.Snapshot()
	return lines
}

// Snapshot returns the log so far and a channel that is closed when a line is added after it:
// together they let a caller wait for a condition on the log without missing a line.
func (f *Fleet) Snapshot() ([]member.Line, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The log is append-only, so a capacity-limited slice of it never changes under the caller.
	return f.lines[:len(f.lines):len(f.lines)], f.changed
}

// WaitFor returns the first line at index from or later that satisfies pred, waiting for it to be
// added, and the index after it. It gives up after limit, which guards against a broken run; the
// error then names what was awaited and shows the processes' recent stderr.
func (f *Fleet) WaitFor(from int, limit time.Duration, what string, pred func(member.Line) bool) (member.Line, int, error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		lines, changed := f.Snapshot()
		for i := from; i < len(lines); i++ {
			if pred(lines[i]) {
				return lines[i], i + 1, nil
			}
		}
		from = max(from, len(lines))
		select {
		case <-changed:
		case <-timer.C:
			return member.Line{}, from, fmt.Errorf("gave up after %v waiting for %s%s", limit, what, f.Diagnostics())
		}
	}
}

// ByProcess returns the log grouped by process, each process's lines in the order it printed
// them, with every started process present even if it printed nothing.
func (f *Fleet) ByProcess() map[string][]member.Line {
	lines := f.Lines()
	out := map[string][]member.Line{}
	for _, p := range f.Procs() {
		out[p.Name] = nil
	}
	for _, l := range lines {
		out[l.Name] = append(out[l.Name], l)
	}
	return out
}

// Proc returns the process named name, or nil.
func (f *Fleet) Proc(name string) *Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byName[name]
}

// Procs returns every process started, in start order.
func (f *Fleet) Procs() []*Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Proc(nil), f.procs...)
}

// Live returns the processes that have not ended, in start order.
func (f *Fleet) Live() []*Proc {
	var out []*Proc
	for _, p := range f.Procs() {
		select {
		case <-p.done:
		default:
			out = append(out, p)
		}
	}
	return out
}

var signalEvents = map[syscall.Signal]string{
	syscall.SIGTERM: EventSigterm, syscall.SIGKILL: EventSigkill,
	syscall.SIGSTOP: EventSigstop, syscall.SIGCONT: EventSigcont,
}

// Signal sends sig to p and returns when it was sent. SIGTERM, SIGINT and SIGKILL mark p's exit
// as expected. A process that has ended already is no error: it may have ended just before.
func (f *Fleet) Signal(p *Proc, sig syscall.Signal) (time.Time, error) {
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL:
		p.expected.Store(true)
	case syscall.SIGSTOP:
		p.stopped.Store(true)
	case syscall.SIGCONT:
		p.stopped.Store(false)
	}
	var at time.Time
	// The mark is taken before the signal is sent, so that an interval measured from it includes
	// delivering the signal.
	if ev, ok := signalEvents[sig]; ok && f.opts.Marks {
		at = f.Mark(p.Name, ev, "")
	} else {
		at = time.Now()
	}
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("%v to %s: %w", sig, p.Name, err)
	}
	return at, err
}

// NotClosed is the error of Stop and StopAll when processes did not end within the limit after
// SIGTERM and were killed.
type NotClosed struct {
	Names       []string
	Limit       time.Duration
	Diagnostics string // the processes' recent stderr, from Fleet.Diagnostics
}

func (e *NotClosed) Error() string {
	return fmt.Sprintf("%s did not close within %v after SIGTERM%s", strings.Join(e.Names, ", "), e.Limit, e.Diagnostics)
}

// Stop ends p gracefully with SIGTERM, or with SIGKILL if it has not ended within limit, and waits
// for it. It returns a *NotClosed if p had to be killed.
func (f *Fleet) Stop(p *Proc, limit time.Duration) error {
	return f.stop([]*Proc{p}, limit)
}

// StopAll stops every live process as Stop does, all at once. A process stopped with SIGSTOP is
// sent SIGCONT first, or it could not act on SIGTERM.
func (f *Fleet) StopAll(limit time.Duration) error {
	return f.stop(f.Live(), limit)
}

func (f *Fleet) stop(procs []*Proc, limit time.Duration) error {
	for _, p := range procs {
		if p.Stopped() {
			_, _ = f.Signal(p, syscall.SIGCONT)
		}
		_, _ = f.Signal(p, syscall.SIGTERM)
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	expired := false
	var late []*Proc
	for _, p := range procs {
		if !expired {
			select {
			case <-p.done:
				continue
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-p.done:
		default:
			late = append(late, p)
		}
	}
	if len(late) == 0 {
		return nil
	}
	e := &NotClosed{Limit: limit, Diagnostics: f.Diagnostics()}
	for _, p := range late {
		e.Names = append(e.Names, p.Name)
		_, _ = f.Signal(p, syscall.SIGKILL)
	}
	for _, p := range late {
		<-p.done
	}
	return e
}

// KillAll sends SIGKILL to every live process and waits until all output is read; for cleaning
// up after a failed run.
func (f *Fleet) KillAll() {
	for _, p := range f.Live() {
		_, _ = f.Signal(p, syscall.SIGKILL)
	}
	f.readers.Wait()
}

// Deaths returns when each process died, keyed by name: those that ended without being asked to,
// or not cleanly (SIGKILL, a failure). They could not report the end of their own tenure, which
// is what a checker needs to know.
func (f *Fleet) Deaths() map[string]time.Time {
	out := map[string]time.Time{}
	for _, p := range f.Procs() {
		if e, ok := p.Exit(); ok && (!e.Expected || e.Err != nil) {
			out[p.Name] = e.At
		}
	}
	return out
}

// Diagnostics renders the processes' recent stderr, for error messages.
func (f *Fleet) Diagnostics() string {
	var sb strings.Builder
	for _, p := range f.Procs() {
		if s := strings.Join(p.Stderr(), "\n"); s != "" {
			fmt.Fprintf(&sb, "\n--- %s stderr (last lines) ---\n%s", p.Name, s)
		}
	}
	return sb.String()
}
