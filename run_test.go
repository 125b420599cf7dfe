package goneli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

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
	*leaseRig
	n       *neli
	p       *part
	tr      *tenureRunner
	calls   chan uint64 // the lease's epoch as each call of the task was entered
	entered chan struct{}
	release chan struct{}
}

func newRunRig(t *testing.T) *runRig {
	r := &runRig{leaseRig: newLeaseRig(t), calls: make(chan uint64, 4), entered: make(chan struct{}, 4), release: make(chan struct{}, 4)}
	r.p = &part{Role: &core.Role{Lease: r.l}, events: newDispatcher(), signal: make(chan struct{}, 1)}
	d := driver.Detached(r.clock, r.clock.now)
	r.n = &neli{config: Config{Name: "a"}, log: newTestLog(t).Scribe(), life: newLifecycle(), d: d,
		parts: []*part{r.p}, events: dispatchers{r.p.events}, leaderSignal: make(chan struct{}, 1)}
	r.tr = newTenureRunner(context.Background(), func(ctx context.Context, _ string) {
		r.calls <- r.l.Load().Epoch
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
func (r *runRig) post() *core.Delivery {
	if len(r.events) == 0 {
		return nil
	}
	d := core.NewDelivery()
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
		<-last.Wait()
		r.tr.stopAll()
		if len(r.calls) > 0 {
			id, _ := r.l.Tenure()
			t.Fatalf("the task was entered for tenure %x after it was revoked", id)
		}
	})

	// A fence and a new acquisition of the same tenure while the barrier holds the first: only the
	// second, which stands, gets a call.
	t.Run("fenced and acquired again", func(t *testing.T) {
		r := newRunRig(t)
		r.acquire()
		r.post()
		<-r.entered
		r.wait(time.Second)
		r.expire()
		r.renewal(10*time.Millisecond, 10*time.Millisecond)
		if got := fmt.Sprint(publicEvents(r.events)); !strings.HasPrefix(got, "[LeaderFenced") || !strings.Contains(got, "LeaderAcquired") || len(r.events) != 2 {
			t.Fatalf("events %s after the first acquisition, want a fence and an acquisition", got)
		}
		last := r.post()
		r.release <- struct{}{}
		<-r.entered
		r.release <- struct{}{}
		<-last.Wait()
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

// leaseRig drives one lease with a clock of its own, as the machine would: every heartbeat lands
// at the next offset, and its commit is accepted at once.
type leaseRig struct {
	t      *testing.T
	clock  *stepClock
	l      *core.Lease
	events []core.TenureEvent
	offset int64
}

func newLeaseRig(t *testing.T) *leaseRig {
	c := &stepClock{now: time.Unix(1_800_000_000, 0)}
	return &leaseRig{t: t, clock: c, l: core.NewLease(core.LeaseConfig{Timeout: time.Second, Interval: 100 * time.Millisecond, ReleaseWait: 2 * time.Second, Clock: c, Base: c.now})}
}

func (r *leaseRig) take(out core.LeaseOut) core.LeaseOut {
	r.events = append(r.events, out.Events...)
	return out
}

func (r *leaseRig) wait(d time.Duration) { r.clock.advance(d) }
func (r *leaseRig) revoke(lost bool)     { r.take(r.l.Revoke(lost)) }
func (r *leaseRig) expire()              { r.take(r.l.Expire()) }

// renewal produces the next heartbeat once it is due, reads it back after rtt and has its commit
// accepted after a further lag.
func (r *leaseRig) renewal(rtt, lag time.Duration) {
	r.t.Helper()
	var h *core.Heartbeat
	for i := 0; h == nil; i++ {
		if i == 100 {
			r.t.Fatal("no heartbeat due within 100 ms")
		}
		if h = r.take(r.l.Due(true)).Heartbeat; h == nil {
			r.wait(time.Millisecond)
		}
	}
	r.l.Sent()
	r.wait(rtt)
	back := r.take(r.l.ReadBack(*h, r.offset))
	r.offset++
	r.l.StoredAt(back.Store, r.l.Now())
	r.wait(lag)
	r.take(r.l.Committed(back.Store, back.Tag, false))
}

// acquire assigns the partition, passes its group check and renews: the lease acquires.
func (r *leaseRig) acquire() {
	r.take(r.l.Assign(false))
	id, _ := r.l.Tenure()
	r.take(r.l.Checked(id, core.GroupCheck{Verdict: core.GroupVerdict{SawSelf: true}}))
	r.renewal(10*time.Millisecond, 10*time.Millisecond)
}
