package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/member"
	"go.uber.org/goleak"
)

// childEnv, when set, turns the test binary into a small stand-in for a member process; its value
// says how the stand-in behaves. It needs no broker.
const childEnv = "GONELI_FLEET_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	goleak.VerifyTestMain(m)
}

// child behaves as mode says and returns its exit status:
//   - talk: prints a started line (saying whether stdin is a pipe and whether it leads its own
//     process group), a line that is not JSON, an act line and some stderr, then closes on SIGTERM;
//   - deaf: ignores SIGTERM and waits to be killed;
//   - exit: prints a started line and exits with status 3 by itself.
func child(mode string) int {
	enc := json.NewEncoder(os.Stdout)
	term := make(chan os.Signal, 1)
	switch mode {
	case "talk":
		signal.Notify(term, syscall.SIGTERM)
	case "deaf":
		signal.Ignore(syscall.SIGTERM)
	}
	fmt.Fprintln(os.Stderr, "hello stderr")
	st, _ := os.Stdin.Stat()
	pipe := st != nil && st.Mode()&os.ModeNamedPipe != 0
	// The name is the fleet's to stamp; this one must not survive.
	_ = enc.Encode(member.Line{At: time.Now().UnixNano(), Name: "wrong", Event: member.EventStarted,
		Info: fmt.Sprintf("stdin-pipe=%v own-group=%v", pipe, syscall.Getpgrp() == os.Getpid())})
	switch mode {
	case "talk":
		fmt.Println("not json")
		now := time.Now().UnixNano()
		_ = enc.Encode(member.Line{At: now, Event: member.EventAct, From: now, To: now, Runs: 1})
		<-term
		_ = enc.Encode(member.Line{At: time.Now().UnixNano(), Event: member.EventClosed})
		return 0
	case "deaf":
		time.Sleep(time.Hour)
	}
	return 3
}

// awaitLimit bounds waits that succeed within milliseconds unless something is broken.
const awaitLimit = 30 * time.Second

func spec(name, mode string) Spec {
	// The race detector's default second of sleep at exit would only slow the tests down.
	return Spec{Name: name, Path: os.Args[0], Env: []string{childEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"}, Pdeathsig: true}
}

func events(lines []member.Line, name string) []string {
	var out []string
	for _, l := range lines {
		if l.Name == name {
			out = append(out, l.Event)
		}
	}
	return out
}

func TestStreamsLinesAndStopsGracefully(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	exits := make(chan *Proc, 1)
	f := New(Options{
		Marks: true,
		OnLine: func(l member.Line) {
			mu.Lock()
			seen = append(seen, l.Name+" "+l.Event)
			mu.Unlock()
		},
		OnExit: func(p *Proc) { exits <- p },
	})
	s := spec("m1", "talk")
	s.HoldStdin, s.Setpgid = true, true
	s.LogFile = filepath.Join(t.TempDir(), "m1.log")
	p, err := f.Start(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Start(s); err == nil {
		t.Error("a second process named m1 was started")
	}
	started, next, err := f.WaitFor(0, awaitLimit, "the started line", func(l member.Line) bool { return l.Event == member.EventStarted })
	if err != nil {
		t.Fatal(err)
	}
	if started.Name != "m1" || started.Info != "stdin-pipe=true own-group=true" {
		t.Errorf("started line %+v: want it named m1, with stdin a pipe and a process group of its own", started)
	}
	if _, _, err := f.WaitFor(next, awaitLimit, "an act line", func(l member.Line) bool { return l.Event == member.EventAct }); err != nil {
		t.Fatal(err)
	}
	if len(f.Live()) != 1 {
		t.Errorf("live %d, want 1", len(f.Live()))
	}
	if err := f.Stop(p, awaitLimit); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := <-exits; got != p {
		t.Errorf("OnExit got %v, want %v", got, p)
	}
	e, ok := p.Exit()
	if !ok || e.Err != nil || !e.Expected || e.At.IsZero() || e.Status() != "exit status 0" {
		t.Errorf("exit %+v, %v: want a clean, expected exit", e, ok)
	}
	want := []string{EventSpawned, member.EventStarted, member.EventAct, EventSigterm, member.EventClosed, EventExit}
	if got := events(f.Lines(), "m1"); !slices.Equal(got, want) {
		t.Errorf("logged %v, want %v", got, want)
	}
	mu.Lock()
	if want := []string{"m1 started", "m1 act", "m1 closed"}; !slices.Equal(seen, want) {
		t.Errorf("OnLine saw %v, want %v", seen, want)
	}
	mu.Unlock()
	if by := f.ByProcess(); len(by) != 1 || len(by["m1"]) != len(want) {
		t.Errorf("ByProcess = %v", by)
	}
	if stderr := strings.Join(p.Stderr(), "\n"); !strings.Contains(stderr, "hello stderr") || !strings.Contains(stderr, "stdout: not json") {
		t.Errorf("stderr tail %q lacks the stderr line or the stray stdout line", stderr)
	}
	// The stray stdout line and the stderr line come through two pipes, in either order.
	if d := f.Diagnostics(); !strings.Contains(d, "--- m1 stderr (last lines) ---\n") || !strings.Contains(d, "hello stderr") {
		t.Errorf("diagnostics %q", f.Diagnostics())
	}
	if b, err := os.ReadFile(s.LogFile); err != nil || string(b) != "hello stderr\n" {
		t.Errorf("log file %q, %v", b, err)
	}
	if d := f.Deaths(); len(d) != 0 {
		t.Errorf("deaths %v after a graceful stop", d)
	}
}

func TestStopKillsAfterLimit(t *testing.T) {
	f := New(Options{Marks: true})
	p, err := f.Start(spec("deaf", "deaf"))
	if err != nil {
		t.Fatal(err)
	}
	// Once it has printed, it ignores SIGTERM.
	if _, _, err := f.WaitFor(0, awaitLimit, "the started line", func(l member.Line) bool { return l.Event == member.EventStarted }); err != nil {
		t.Fatal(err)
	}
	err = f.Stop(p, 100*time.Millisecond)
	var nc *NotClosed
	if !errors.As(err, &nc) || !slices.Equal(nc.Names, []string{"deaf"}) || !strings.Contains(err.Error(), "deaf did not close within 100ms after SIGTERM") {
		t.Fatalf("Stop = %v, want deaf reported as not closed", err)
	}
	e, _ := p.Exit()
	var ee *exec.ExitError
	if !errors.As(e.Err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || !e.Expected {
		t.Errorf("exit %+v, want an expected SIGKILL", e)
	}
	if _, ok := f.Deaths()["deaf"]; !ok {
		t.Error("a killed process is not among the deaths")
	}
	want := []string{EventSpawned, member.EventStarted, EventSigterm, EventSigkill, EventExit}
	if got := events(f.Lines(), "deaf"); !slices.Equal(got, want) {
		t.Errorf("logged %v, want %v", got, want)
	}
}

func TestRecordsUnexpectedExit(t *testing.T) {
	exits := make(chan *Proc, 1)
	f := New(Options{OnExit: func(p *Proc) { exits <- p }})
	p, err := f.Start(spec("quitter", "exit"))
	if err != nil {
		t.Fatal(err)
	}
	<-exits
	<-p.Done()
	e, ok := p.Exit()
	if !ok || e.Expected || e.Status() != "exit status 3" {
		t.Errorf("exit %+v (%s), %v: want an unexpected exit status 3", e, e.Status(), ok)
	}
	if d := f.Deaths(); !d["quitter"].Equal(e.At) {
		t.Errorf("deaths %v, want quitter at %v", d, e.At)
	}
	if len(f.Live()) != 0 {
		t.Errorf("live %d after the only process ended", len(f.Live()))
	}
	// Without Marks the log holds only what the process printed.
	if got := events(f.Lines(), "quitter"); !slices.Equal(got, []string{member.EventStarted}) {
		t.Errorf("logged %v", got)
	}
}

func TestStopAllResumesStoppedProcesses(t *testing.T) {
	f := New(Options{Marks: true})
	for _, name := range []string{"a", "b"} {
		if _, err := f.Start(spec(name, "talk")); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.waitCount(2, member.EventAct); err != nil {
		t.Fatal(err)
	}
	a := f.Proc("a")
	if _, err := f.Signal(a, syscall.SIGSTOP); err != nil || !a.Stopped() {
		t.Fatalf("SIGSTOP: %v, stopped %v", err, a.Stopped())
	}
	// A process left stopped would not act on SIGTERM and would be killed at the limit.
	if err := f.StopAll(awaitLimit); err != nil {
		t.Fatalf("StopAll: %v", err)
	}
	for _, p := range f.Procs() {
		if e, _ := p.Exit(); e.Err != nil || !e.Expected {
			t.Errorf("%s: exit %+v, want clean and expected", p.Name, e)
		}
	}
	want := []string{EventSpawned, member.EventStarted, member.EventAct, EventSigstop, EventSigcont, EventSigterm, member.EventClosed, EventExit}
	if got := events(f.Lines(), "a"); !slices.Equal(got, want) {
		t.Errorf("logged %v, want %v", got, want)
	}
	if _, err := f.Signal(a, syscall.SIGTERM); err != nil {
		t.Errorf("signalling an ended process: %v, want no error", err)
	}
}

func TestWaitForGivesUp(t *testing.T) {
	f := New(Options{})
	f.Mark("h", "note", "")
	_, next, err := f.WaitFor(0, 50*time.Millisecond, "a line never printed", func(member.Line) bool { return false })
	if err == nil || !strings.Contains(err.Error(), "gave up after 50ms waiting for a line never printed") || next != 1 {
		t.Errorf("WaitFor = %d, %v", next, err)
	}
}

// waitCount waits until n lines of the event have been logged.
func (f *Fleet) waitCount(n int, event string) error {
	seen := 0
	_, _, err := f.WaitFor(0, awaitLimit, fmt.Sprintf("%d %s lines", n, event), func(l member.Line) bool {
		if l.Event == event {
			seen++
		}
		return seen == n
	})
	return err
}
