package coretest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goneli/goneli"
)

// Close may be called from every callback goneli makes, and returns: from the barrier's
// LeaderFenced (the barrier's LeaderAcquired and LeaderRevoked have tests of their own), from
// OnLeaderChange, and from a Background task. Each instance then ends with LeaderRevoked if it led.
func TestCloseFromEveryCallback(t *testing.T) {
	t.Run("LeaderFenced", func(t *testing.T) {
		b := startBroker(t)
		log, r, group := newTestLog(t), newRecorder(), groupName(t)
		var n Neli
		ready := make(chan struct{})
		closed := make(chan error, 1)
		n, err := New(testConfig(b, group, "a", log), func(e Event) {
			r.add("a", e)
			<-ready
			if _, ok := e.(LeaderFenced); ok {
				closed <- n.Close()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		close(ready)
		// a pulses by hand until it leads, then stops, so that the watchdog fences it.
		for leader := false; !leader; {
			if leader, err = n.Pulse(10 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		awaitClose(t, closed, "LeaderFenced")
		n.Await()
		awaitClientsClosed(t, n)
		events := r.snapshot()
		checkGrammar(t, events)
		if _, last := first[LeaderRevoked](events, "a", 0); last == nil {
			t.Fatalf("no LeaderRevoked after the Close: %s", describe(events))
		}
	})

	t.Run("OnLeaderChange", func(t *testing.T) {
		b := startBroker(t)
		log, r, group := newTestLog(t), newRecorder(), groupName(t)
		contender(t, testConfig(b, group, "a", log), r)
		r.await(t, "a to lead", has[LeaderAcquired]("a"))
		var f Neli
		ready := make(chan struct{})
		closed := make(chan error, 1)
		config := testConfig(b, group, "f", log)
		var once sync.Once
		config.OnLeaderChange = func(info LeaderInfo) {
			<-ready
			once.Do(func() { closed <- f.Close() })
		}
		f, err := New(config, r.barrier("f"))
		if err != nil {
			t.Fatal(err)
		}
		close(ready)
		p, err := f.Background(func() {})
		if err != nil {
			t.Fatal(err)
		}
		awaitClose(t, closed, "OnLeaderChange")
		if err := p.Await(); err != nil {
			t.Fatalf("the pulser of a closed instance: %v", err)
		}
		awaitClientsClosed(t, f)
	})

	t.Run("Background task", func(t *testing.T) {
		b := startBroker(t)
		log, r, group := newTestLog(t), newRecorder(), groupName(t)
		n := newNeli(t, testConfig(b, group, "a", log), r)
		closed := make(chan error, 1)
		var once sync.Once
		p, err := n.Background(func() {
			once.Do(func() { closed <- n.Close() })
		})
		if err != nil {
			t.Fatal(err)
		}
		awaitClose(t, closed, "a Background task")
		if err := p.Await(); err != nil {
			t.Fatalf("the pulser: %v", err)
		}
		events := r.snapshot()
		checkGrammar(t, events)
		if _, last := first[LeaderRevoked](events, "a", 0); last == nil {
			t.Fatalf("no LeaderRevoked after the Close: %s", describe(events))
		}
	})
}

// A barrier that holds LeaderAcquired for longer than the lease delays leadership, and costs it
// nothing: the lease goes on being renewed meanwhile, and IsLeader turns true when the barrier
// returns, without a fence.
func TestSlowAcquiredBarrierDelaysLeadership(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	var n Neli
	inBarrier := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	n, err := New(testConfig(b, group, "a", log), func(e Event) {
		r.add("a", e)
		if _, ok := e.(LeaderAcquired); ok {
			once.Do(func() {
				close(inBarrier)
				<-release
			})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		awaitClientsClosed(t, n)
	})
	pulse(t, n)
	<-inBarrier
	renewedBefore := n.(Curator).Stats().HeartbeatsConfirmed
	// The condition under test: the barrier holds on for longer than the lease.
	time.Sleep(testLease + testLease/2)
	if n.IsLeader() {
		t.Fatal("IsLeader true while the barrier still handles LeaderAcquired")
	}
	if after := n.(Curator).Stats().HeartbeatsConfirmed; after <= renewedBefore {
		t.Fatalf("no heartbeat confirmed while the barrier held on (%d, then %d)", renewedBefore, after)
	}
	close(release)
	awaitCondition(t, "IsLeader after the barrier returned", n.IsLeader)
	if _, e := first[LeaderFenced](r.snapshot(), "a", 0); e != nil {
		t.Fatalf("fenced while the barrier held LeaderAcquired: %v", e.what)
	}
}

// awaitClose waits for the result of a Close made from a callback, which must come and be nil.
func awaitClose(t *testing.T, closed <-chan error, from string) {
	t.Helper()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from %s: %v", from, err)
		}
	case <-time.After(awaitLimit):
		t.Fatalf("Close from %s did not return", from)
	}
}

// childPanicEnv makes a child contender panic: "barrier" in its barrier's LeaderAcquired, "task"
// in its first Background task run.
const childPanicEnv = "GONELI_TEST_CHILD_PANIC"

// A panic in the barrier or in a leader task is not recovered: like any panic on a goroutine it
// ends the process, which the group then handles as a crash, electing a successor after the
// session timeout. A barrier that panics in LeaderAcquired never let its process act as leader
// (IsLeader turns true only once LeaderAcquired has returned); a task panics as it acts.
func TestPanicEndsTheProcess(t *testing.T) {
	for _, where := range []string{"barrier", "task"} {
		t.Run(where, func(t *testing.T) {
			b := startBroker(t)
			log, r, group := newTestLog(t), newRecorder(), groupName(t)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+b.Addr, "GONELI_TEST_CHILD_GROUP="+group, "GONELI_TEST_CHILD_NAME=child",
				childPanicEnv+"="+where)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-done
			})
			var exit *exec.ExitError
			select {
			case err := <-done:
				done <- err
				if !errors.As(err, &exit) || exit.ExitCode() == 0 || !strings.Contains(stderr.String(), "panic: "+where+" panics on purpose") {
					t.Fatalf("child ended with %v, stderr:\n%s", err, stderr.String())
				}
			case <-time.After(awaitLimit):
				t.Fatalf("the child did not end after its %s panicked", where)
			}
			contender(t, testConfig(b, group, "c", log), r)
			r.await(t, "c to take over from the dead child", has[LeaderAcquired]("c"))
		})
	}
}
