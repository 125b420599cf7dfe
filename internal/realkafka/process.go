package realkafka

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// No JVM may outlive the test binary that started it, however the binary ends. Three things see to
// it:
//
//   - Pdeathsig: the kernel sends the JVM SIGKILL when the thread that started it exits. That is the
//     thread, not the process (prctl(2) PR_SET_PDEATHSIG), and the Go runtime ends a thread when a
//     goroutine locked to it returns; so every JVM is started from a spawner, a goroutine that locks
//     its thread and keeps it until its cluster has closed. A binary killed by SIGKILL, or ended by
//     go test's -timeout panic, loses every thread at once.
//   - Setpgid: each JVM leads a process group of its own, so that a signal to the group reaches
//     whatever it started, and a Ctrl-C at the terminal reaches only the test binary.
//   - The reaper: every cluster's directory holds the test binary's pid and each node's, with their
//     start times; a cluster started later kills the JVMs of any directory whose owner is gone,
//     should one have escaped the two above, and removes the directory.

// spawner starts processes from one goroutine locked to its OS thread, for Pdeathsig.
type spawner struct {
	reqs chan func()
	done chan struct{}
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan func()), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		// Never unlocked: when this goroutine returns the runtime ends the thread, and the kernel
		// kills whatever was started from it and still runs.
		runtime.LockOSThread()
		for f := range s.reqs {
			f()
		}
	}()
	return s
}

// start starts cmd from the spawner's thread.
func (s *spawner) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error, 1)
	s.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// close ends the spawner's thread, killing anything it started that still runs, and waits for it.
func (s *spawner) close() {
	close(s.reqs)
	<-s.done
}

// process is a started JVM.
type process struct {
	cmd     *exec.Cmd
	pid     int
	pidFile string // removed once the process has been waited for
	done    chan struct{}

	mu     sync.Mutex
	err    error // Wait's, once done is closed
	paused bool
}

// startProcess starts cmd from sp with stdout and stderr appended to logPath, and records its pid
// in pidFile for the reaper.
func startProcess(sp *spawner, cmd *exec.Cmd, logPath, pidFile string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// An *os.File is handed to the child as it is: no goroutine copies its output.
	cmd.Stdout, cmd.Stderr = log, log
	err = sp.start(cmd)
	_ = log.Close()
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, pidFile: pidFile, done: make(chan struct{})}
	if err := writeStamp(pidFile, p.pid); err != nil {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	go func() {
		err := cmd.Wait()
		_ = os.Remove(pidFile)
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// signal sends sig to the process's group. A process that has ended is no error.
func (p *process) signal(sig syscall.Signal) error {
	if done, _ := p.exited(); done {
		return nil
	}
	p.mu.Lock()
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	p.mu.Unlock()
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// awaitStopped waits until every thread of the process has stopped (state T in
// /proc/<pid>/task/*/stat), for up to limit. kill(SIGSTOP) returns before that: the kernel wakes one
// thread to take the signal, and only when that thread runs does it ask the others to stop
// (do_signal_stop), so on a loaded machine a thread that something else woke, the JVM's network
// thread answering a request, say, can run for milliseconds after the signal was sent (a paused
// node answered a Metadata request in a .ci/stress run). Polled: the kernel gives no event for it.
func (p *process) awaitStopped(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		running, err := p.runningThreads()
		if err != nil || running == 0 {
			return err
		}
		if done, _ := p.exited(); done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: %d threads still run %v after SIGSTOP", p.pid, running, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of the process that are not stopped. A process or thread that
// has gone counts as stopped: there is nothing left of it to run.
func (p *process) runningThreads() (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", p.pid)
	tasks, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	running := 0
	for _, task := range tasks {
		state, _, err := readStat(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread has gone
		}
		if state != 'T' && state != 't' && state != 'Z' && state != 'X' {
			running++
		}
	}
	return running, nil
}

func (p *process) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// kill sends SIGKILL and waits for the process to end.
func (p *process) kill() {
	_ = p.signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to end with SIGTERM (after SIGCONT, should it be paused) and waits up to
// limit; then it kills it and says so.
func (p *process) stop(limit time.Duration) error {
	if p.isPaused() {
		_ = p.signal(syscall.SIGCONT)
	}
	_ = p.signal(syscall.SIGTERM)
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		p.kill()
		return fmt.Errorf("pid %d did not end within %v of SIGTERM and was killed", p.pid, limit)
	}
}

// A stamp names a process beyond its pid, which the kernel reuses: "pid starttime", the start time
// in clock ticks since boot (/proc/<pid>/stat, field 22).
func writeStamp(path string, pid int) error {
	st, err := startTime(pid)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(fmt.Sprintf("%d %d\n", pid, st)), 0o644)
}

func readStamp(path string) (pid int, start uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return pid, start, nil
}

// startTime is the process's start time in clock ticks since boot.
func startTime(pid int) (uint64, error) {
	_, start, err := procStat(pid)
	return start, err
}

// procStat reads a process's state letter and start time from /proc.
func procStat(pid int) (state byte, start uint64, err error) {
	return readStat(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
}

// readStat reads the state letter and start time from a stat file of /proc: a process's, or one
// of its threads' (/proc/<pid>/task/<tid>/stat, of the same form).
func readStat(path string) (state byte, start uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces and parentheses itself.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("%s: no command name", path)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); the start time is field 22.
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("%s: %d fields", path, len(fields)+2)
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	return fields[0][0], start, err
}

// alive reports whether the process pid started at start still runs (a zombie does not).
func alive(pid int, start uint64) bool {
	state, st, err := procStat(pid)
	return err == nil && st == start && state != 'Z' && state != 'X'
}

// cmdlineHas reports whether the command line of pid contains s.
func cmdlineHas(pid int, s string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return err == nil && bytes.Contains(b, []byte(s))
}

// awaitExit waits up to limit for a process that need not be this one's child to end (it may stay
// a zombie until its new parent reaps it), and reports whether it did.
func awaitExit(pid int, start uint64, limit time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return !alive(pid, start) // ESRCH: gone already
	}
	defer unix.Close(fd)
	if !alive(pid, start) {
		return true // the pid was reused: the one stamped is gone
	}
	deadline := time.Now().Add(limit)
	for {
		// A pidfd turns readable when its process exits.
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return !alive(pid, start)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err == nil && n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return !alive(pid, start)
		}
	}
}
