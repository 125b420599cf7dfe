package driver

import (
	"sync"
	"time"
)

// watchdog calls fire when the lease it is aimed at runs out, from a goroutine of its own. It exists
// so that LeaderFenced reaches the barrier on time even when nobody pulses (a long-running task, a
// stuck pulse loop); IsLeader does not depend on it, since it reads the lease end itself.
type watchdog struct {
	now  func() time.Duration
	fire func()
	stop <-chan struct{}

	next    chan time.Duration // the newest lease end to aim at
	started bool               // guarded by the caller's lock, like aim
	running sync.WaitGroup
}

func newWatchdog(now func() time.Duration, fire func(), stop <-chan struct{}) *watchdog {
	return &watchdog{now: now, fire: fire, stop: stop, next: make(chan time.Duration, 1)}
}

// aim points the watchdog at end, replacing any earlier aim; the goroutine starts on first use, so
// that an instance that never leads never has one. Callers serialise their calls.
func (w *watchdog) aim(end time.Duration) {
	if !w.started {
		w.started = true
		w.running.Add(1)
		go w.run()
	}
	select {
	case <-w.next:
	default:
	}
	w.next <- end
}

// wait returns once the goroutine has ended, which it does when stop is closed.
func (w *watchdog) wait() {
	w.running.Wait()
}

func (w *watchdog) run() {
	defer w.running.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-w.stop:
			return
		case end := <-w.next:
			timer.Reset(max(end-w.now(), 0))
		case <-timer.C:
			w.fire()
		}
	}
}
