package goneli

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/testkit"
)

// The runner's rules, without a broker: a call per acquisition; a fence cancels without waiting; a
// revocation and the next acquisition wait for the call to return; roles are independent.
func TestTenureRunner(t *testing.T) {
	log := testkit.NewTaskLog()
	gate := make(chan struct{}) // holds the first call of role x after its cancellation
	calls := map[string]int{}
	var mu sync.Mutex
	tr := newTenureRunner(context.Background(), func(ctx context.Context, role string) {
		mu.Lock()
		calls[role]++
		n := calls[role]
		mu.Unlock()
		log.Add("start %s%d", role, n)
		<-ctx.Done()
		log.Add("cancelled %s%d", role, n)
		if role == "x" && n == 1 {
			<-gate
		}
		log.Add("end %s%d", role, n)
	})

	tr.handle(LeaderAcquired{Role: "x"})
	tr.handle(LeaderAcquired{Role: "y"})
	log.Await(t, "start x1")
	log.Await(t, "start y1")

	// A fence returns while the call is still held by the gate.
	tr.handle(LeaderFenced{Role: "x"})
	log.Await(t, "cancelled x1")

	// The next acquisition must wait for x1 to end.
	acquired := make(chan struct{})
	go func() {
		tr.handle(LeaderAcquired{Role: "x"})
		close(acquired)
	}()
	// A negative check: nothing announces that x2 has not started, so give it a moment to show up
	// if the runner were wrong, then let x1 end.
	select {
	case <-acquired:
		t.Fatal("a new acquisition did not wait for the fenced call to return")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	<-acquired
	log.Await(t, "start x2")

	tr.handle(LeaderRevoked{Role: "y"})
	if got := log.Snapshot(); !slices.Contains(got, "end y1") {
		t.Fatalf("a revocation returned before its call ended: %q", got)
	}
	tr.stopAll()
	got := log.Snapshot()
	for _, want := range [][2]string{{"end x1", "start x2"}, {"cancelled x1", "end x1"}} {
		if slices.Index(got, want[0]) > slices.Index(got, want[1]) {
			t.Errorf("%q after %q: %q", want[0], want[1], got)
		}
	}
	if !slices.Contains(got, "end x2") || strings.Count(strings.Join(got, ","), "start") != 3 {
		t.Errorf("after stopAll: %q", got)
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	if err := Run(ctx, Config{}, nil); err == nil || !strings.Contains(err.Error(), "non-nil task") {
		t.Errorf("Run without a task: %v", err)
	}
	var ce *ConfigError
	if err := Run(ctx, Config{HeartbeatTimeout: Duration(time.Millisecond)}, func(context.Context) {}); !errors.As(err, &ce) {
		t.Errorf("Run with a bad config: %v, want a ConfigError", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := Run(ended, Config{}, func(context.Context) { t.Error("task ran") }); err != nil {
		t.Errorf("Run with an ended context: %v", err)
	}
}

// stopAll waits for every call, including one that a revocation is already waiting for, and no
// call starts after it: Run must not return while a task runs, nor start one after returning.
func TestTenureRunnerStopAllWaitsForEveryCall(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan string, 4)
	var ended atomic.Int32
	tr := newTenureRunner(context.Background(), func(ctx context.Context, role string) {
		started <- role
		<-ctx.Done()
		<-gate
		ended.Add(1)
	})
	tr.handle(LeaderAcquired{Role: "x"})
	<-started
	revoked := make(chan struct{})
	go func() {
		tr.handle(LeaderRevoked{Role: "x"}) // waits for x's call, which the gate holds
		close(revoked)
	}()
	stopped := make(chan struct{})
	go func() {
		tr.stopAll()
		close(stopped)
	}()
	// A negative check: nothing announces that stopAll is still waiting, so give it a moment to
	// return if it were wrong, then let the call end.
	select {
	case <-stopped:
		t.Fatal("stopAll returned while a call still ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	<-stopped
	<-revoked
	if ended.Load() != 1 {
		t.Fatalf("%d calls ended, want 1", ended.Load())
	}
	tr.handle(LeaderAcquired{Role: "y"})
	tr.stopAll()
	select {
	case role := <-started:
		t.Fatalf("a call for %s started after stopAll", role)
	default:
	}
}

// runRig is an instance without Kafka whose one lease a rig drives, delivering its events through
// Run's barrier to a task that counts its calls, and to a barrier that holds LeaderAcquired until
// told to return.
type runRig struct {
	*rig
	n       *neli
	p       *part
	tr      *tenureRunner
	calls   chan uint64 // the lease's epoch as each call of the task was entered
	entered chan struct{}
	release chan struct{}
}

func newRunRig(t *testing.T) *runRig {
	r := &runRig{rig: newRig(t), calls: make(chan uint64, 4), entered: make(chan struct{}, 4), release: make(chan struct{}, 4)}
	r.p = &part{role: &role{lease: r.l}, events: newDispatcher(), signal: make(chan struct{}, 1)}
	d := &driver{clock: r.clock, base: r.clock.now}
	d.m = &machine{clock: r.clock, base: r.clock.now}
	r.n = &neli{config: Config{Name: "a"}, log: newTestLog(t).Scribe(), life: newLifecycle(), d: d,
		parts: []*part{r.p}, events: dispatchers{r.p.events}, leaderSignal: make(chan struct{}, 1)}
	r.tr = newTenureRunner(context.Background(), func(ctx context.Context, _ string) {
		r.calls <- r.l.load().epoch
		<-ctx.Done()
	})
	r.n.barrier = r.tr.barrier(func(e Event) {
		if _, ok := e.(LeaderAcquired); ok {
			r.entered <- struct{}{}
			<-r.release
		}
	}, r.n.acquisitionStands)
	t.Cleanup(func() {
		close(r.release) // a barrier call that a failed test left waiting returns
		r.tr.stopAll()
		r.n.events.stop()
		r.n.events.wait()
	})
	return r
}

// post hands the events the lease has produced since the last post to the dispatcher, as the
// driver does, and returns the delivery of the last.
func (r *runRig) post() *delivery {
	if len(r.events) == 0 {
		return nil
	}
	d := newDelivery()
	r.n.deliver(r.p, publicEvents(r.events), d)
	r.events = nil
	return d
}

// Run must not enter the task for a tenure that ended while the barrier held its LeaderAcquired:
// the call would start after a successor may have begun to lead.
func TestRunStartsNoTaskForAnEndedTenure(t *testing.T) {
	t.Run("revoked", func(t *testing.T) {
		r := newRunRig(t)
		r.acquire()
		r.post()
		<-r.entered
		r.revoke(false)
		last := r.post()
		r.release <- struct{}{}
		<-last.done
		r.tr.stopAll()
		if len(r.calls) > 0 {
			t.Fatalf("the task was entered for tenure %x after it was revoked", r.l.t.id)
		}
	})

	// A fence and a new acquisition of the same tenure while the barrier holds the first: only the
	// second, which stands, gets a call.
	t.Run("fenced and acquired again", func(t *testing.T) {
		r := newRunRig(t)
		r.acquire()
		r.post()
		<-r.entered
		r.wait(rigLease)
		r.expire()
		r.renewal(10*time.Millisecond, 10*time.Millisecond)
		if got := r.kinds(); got != "FA" {
			t.Fatalf("events %q after the first acquisition, want FA", got)
		}
		last := r.post()
		r.release <- struct{}{}
		<-r.entered
		r.release <- struct{}{}
		<-last.done
		<-r.calls // the second acquisition's call, which nothing cancels before it is entered
		r.tr.stopAll()
		if len(r.calls) > 0 {
			t.Fatal("the task was entered for the first acquisition too, which had been fenced")
		}
	})

	// The control: a tenure that still leads when the barrier returns gets its call.
	t.Run("still leading", func(t *testing.T) {
		r := newRunRig(t)
		r.acquire()
		r.post()
		<-r.entered
		r.release <- struct{}{}
		if epoch := <-r.calls; epoch != 1 {
			t.Fatalf("the task was entered for acquisition %d, want 1", epoch)
		}
	})
}
