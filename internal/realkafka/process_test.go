package realkafka

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// SIGSTOP's signal returns before the process has stopped; awaitStopped returns once every thread
// has, and a process continued runs again. Checked on a busy-looping shell, without Kafka.
func TestAwaitStopped(t *testing.T) {
	sp := newSpawner()
	defer sp.close()
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	p, err := startProcess(sp, cmd, filepath.Join(dir, "log"), filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	if err := p.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := p.awaitStopped(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := p.runningThreads(); err != nil || n != 0 {
		t.Fatalf("after awaitStopped: %d threads run (%v), want none", n, err)
	}
	if err := p.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// A thread continued shows R or S (a busy loop preempted), never T again; the first look may
	// come before the kernel has woken it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := p.runningThreads()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no thread runs 10 s after SIGCONT")
		}
		time.Sleep(time.Millisecond)
	}
}
