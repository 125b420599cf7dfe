package goneli

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"
)

// Calls run one at a time, in the order posted, even when posted from several goroutines at once
// while earlier calls are still running.
func TestDispatcherOrderAndExclusion(t *testing.T) {
	d := newDispatcher()
	var inside atomic.Int32
	var overlapped atomic.Bool
	var got []int
	call := func(i int) func() {
		return func() {
			if inside.Add(1) > 1 {
				overlapped.Store(true)
			}
			got = append(got, i) // only ever touched by the dispatcher's goroutine
			inside.Add(-1)
		}
	}
	var last *core.Delivery
	for i := range 100 {
		last = d.post(call(i))
	}
	if !driver.AwaitDelivery(last, awaitLimit, nil) {
		t.Fatal("the last call was never delivered")
	}
	d.stop()
	<-d.done
	if overlapped.Load() {
		t.Fatal("two calls ran at once")
	}
	if !slices.IsSorted(got) || len(got) != 100 {
		t.Fatalf("calls ran out of order or went missing: %v", got)
	}
}

// await reports a delivery that has not happened as such, whether the limit passed or the abort
// channel closed first; stop lets everything already posted run before the goroutine ends.
func TestDispatcherAwaitAndStop(t *testing.T) {
	d := newDispatcher()
	release := make(chan struct{})
	blocked := d.post(func() { <-release })
	var ran atomic.Bool
	after := d.post(func() { ran.Store(true) })
	if driver.AwaitDelivery(blocked, time.Millisecond, nil) {
		t.Fatal("await reported a call that is still running as delivered")
	}
	abort := make(chan struct{})
	close(abort)
	if driver.AwaitDelivery(after, awaitLimit, abort) {
		t.Fatal("await ignored its abort channel")
	}
	if !d.inCall() {
		t.Fatal("inCall is false while a call runs")
	}
	d.stop()
	close(release)
	<-d.done
	if !ran.Load() {
		t.Fatal("stop dropped a call posted before it")
	}
	if d.post() != nil {
		t.Fatal("posting nothing must return no delivery")
	}
	if !driver.AwaitDeliveries([]*core.Delivery{blocked, after, nil}, time.Millisecond, nil, sinceStart()) {
		t.Fatal("awaitAll of delivered calls must succeed")
	}
}

// sinceStart is a clock on the driver's scale that starts now.
func sinceStart() func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}
