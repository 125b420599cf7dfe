package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goneli/goneli/internal/member"
)

// memberEnv, set in a process's environment, makes the benchmark binary (or the test binary of
// this package) run as one member instead of as the benchmark.
const memberEnv = "GONELI_BENCH_MEMBER"

// runMemberIfAsked runs this process as a member if memberEnv is set, and then exits.
func runMemberIfAsked() {
	if os.Getenv(memberEnv) != "" {
		os.Exit(member.Main(os.Args[1:]))
	}
}

// Events the harness adds to a fleet's log next to the members' own lines, so that one log holds
// everything a trial's timeline needs.
const (
	evSpawned = "spawned" // the process was started
	evTerm    = "sigterm" // the harness sent SIGTERM
	evKill    = "sigkill" // the harness sent SIGKILL
	evCut     = "cut"     // the harness black-holed the member's connections
	evHeal    = "heal"    // the harness ended the cut
	evExit    = "exit"    // the process ended; Info has its status
)

// proc is one member process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	pid    int
	stderr *member.Tail
	exited chan struct{}
}

// fleet is the set of member processes contending in one group, with their merged output.
type fleet struct {
	env      *env
	scenario string
	group    string
	lease    time.Duration
	task     time.Duration

	mu      sync.Mutex
	lines   []member.Line
	changed chan struct{}
	procs   map[string]*proc
	spawned int
	readers sync.WaitGroup
}

func newFleet(e *env, scenario string, lease, task time.Duration) *fleet {
	return &fleet{
		env:      e,
		scenario: scenario,
		group:    fmt.Sprintf("bench-%s-%s", e.runID, scenario),
		lease:    lease,
		task:     task,
		changed:  make(chan struct{}),
		procs:    map[string]*proc{},
	}
}

// spawn starts one more member.
func (f *fleet) spawn() (*proc, error) {
	f.mu.Lock()
	f.spawned++
	name := fmt.Sprintf("%s-m%02d", f.scenario, f.spawned)
	f.mu.Unlock()
	args := []string{
		"--kafka", f.env.addr,
		"--group", f.group,
		"--name", name,
		"--heartbeat-timeout", f.lease.String(),
		"--task", f.task.String(),
		"--log-level", f.env.opts.memberLog,
	}
	cmd := exec.Command(f.env.exe, args...)
	cmd.Env = append(os.Environ(), memberEnv+"=1")
	// A member outliving a crashed harness would keep contending in a group nobody watches.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, stderr: &member.Tail{Max: 40}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if dir := f.env.opts.memberLogs; dir != "" {
		// exec closes neither writer; the file is closed once the process has ended.
		lf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return nil, err
		}
		cmd.Stderr = io.MultiWriter(p.stderr, lf)
		defer func() {
			go func() { <-p.exited; _ = lf.Close() }()
		}()
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting member %s: %w", name, err)
	}
	p.pid = cmd.Process.Pid
	f.mu.Lock()
	f.procs[name] = p
	f.mu.Unlock()
	f.add(member.Line{Name: name, Event: evSpawned, Info: fmt.Sprint(p.pid)})
	f.readers.Add(1)
	go func() {
		defer f.readers.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l member.Line
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				_, _ = fmt.Fprintf(p.stderr, "stdout: %s\n", sc.Bytes())
				continue
			}
			l.Name = name
			f.add(l)
		}
		err := cmd.Wait()
		status := "exit status 0"
		if err != nil {
			status = err.Error()
		}
		f.add(member.Line{Name: name, Event: evExit, Info: status})
		close(p.exited)
	}()
	return p, nil
}

func (f *fleet) add(l member.Line) {
	if l.At == 0 {
		l.At = time.Now().UnixNano()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines = append(f.lines, l)
	close(f.changed)
	f.changed = make(chan struct{})
}

// mark records a harness event now and returns its time.
func (f *fleet) mark(name, event, info string) time.Time {
	now := time.Now()
	f.add(member.Line{At: now.UnixNano(), Name: name, Event: event, Info: info})
	return now
}

// cursor is the index of the next line to be logged.
func (f *fleet) cursor() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.lines)
}

func (f *fleet) snapshot() []member.Line {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]member.Line(nil), f.lines...)
}

// waitFor returns the first line at index from or later that satisfies pred, waiting for the
// members to print it, and the index after it. It gives up after limit, which only guards against
// a broken run: it is not a measurement.
func (f *fleet) waitFor(from int, limit time.Duration, what string, pred func(member.Line) bool) (member.Line, int, error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		f.mu.Lock()
		lines, changed := f.lines, f.changed
		f.mu.Unlock()
		for i := from; i < len(lines); i++ {
			if pred(lines[i]) {
				return lines[i], i + 1, nil
			}
		}
		from = len(lines)
		select {
		case <-changed:
		case <-timer.C:
			return member.Line{}, from, fmt.Errorf("%s: gave up after %v waiting for %s%s", f.scenario, limit, what, f.diagnostics())
		}
	}
}

// waitCount waits until n lines from index from on satisfy pred.
func (f *fleet) waitCount(from, n int, limit time.Duration, what string, pred func(member.Line) bool) error {
	seen := 0
	_, _, err := f.waitFor(from, limit, what, func(l member.Line) bool {
		if pred(l) {
			seen++
		}
		return seen >= n
	})
	return err
}

// leader names the member that leads now, judged by its latest leadership event.
func (f *fleet) leader() (string, bool) {
	// The latest acquisition wins should an old leader not have reported its fencing yet.
	latest := map[string]int{} // member -> index of its latest acquisition, -1 after losing it
	for i, l := range f.snapshot() {
		switch l.Event {
		case member.EventAcquired:
			latest[l.Name] = i
		case member.EventFenced, member.EventRevoked, evExit:
			latest[l.Name] = -1
		}
	}
	name, best := "", -1
	for n, i := range latest {
		if i > best {
			name, best = n, i
		}
	}
	return name, best >= 0
}

func (f *fleet) proc(name string) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[name]
}

// live lists the members whose processes have not ended.
func (f *fleet) live() []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*proc
	for _, p := range f.procs {
		select {
		case <-p.exited:
		default:
			out = append(out, p)
		}
	}
	return out
}

func (f *fleet) signal(p *proc, sig syscall.Signal) time.Time {
	ev := evTerm
	if sig == syscall.SIGKILL {
		ev = evKill
	}
	// The mark is taken first so that the measured interval includes delivering the signal.
	t := f.mark(p.name, ev, "")
	_ = p.cmd.Process.Signal(sig)
	return t
}

// stop ends one member gracefully, or kills it if it does not end within limit.
func (f *fleet) stop(p *proc, limit time.Duration) error {
	f.signal(p, syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(limit):
		f.signal(p, syscall.SIGKILL)
		<-p.exited
		return fmt.Errorf("%s: %s did not close within %v after SIGTERM%s", f.scenario, p.name, limit, f.diagnostics())
	}
}

// close stops every member that is still running and waits for all output to be read.
func (f *fleet) close() error {
	var errs []string
	live := f.live()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.stop(p, 30*time.Second+2*f.lease); err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	f.readers.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// kill ends every member at once; for cleaning up after a failed run.
func (f *fleet) kill() {
	for _, p := range f.live() {
		_ = p.cmd.Process.Kill()
	}
	f.readers.Wait()
}

// diagnostics renders the members' recent stderr, for errors.
func (f *fleet) diagnostics() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sb strings.Builder
	for name, p := range f.procs {
		if s := strings.Join(p.stderr.Lines(), "\n"); s != "" {
			fmt.Fprintf(&sb, "\n--- %s stderr (last lines) ---\n%s", name, s)
		}
	}
	return sb.String()
}
