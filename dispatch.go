package goneli

import (
	"sync"

	"github.com/goneli/goneli/internal/core"
)

// dispatcher calls the application (the barrier, OnLeaderChange) from a goroutine of its own, one
// call at a time, in the order the calls were posted. So the application is never called with a
// lock of goneli's held, and may call back into the instance (IsLeader, State, Stats, Token, Yield,
// Close) without deadlock.
type dispatcher struct {
	mu      sync.Mutex
	queue   []queued
	wake    chan struct{}
	busy    bool // a call is under way
	stopped bool // stop was called: exit once the queue is empty
	done    chan struct{}
}

// queued is a call posted, and the delivery that says it has returned.
type queued struct {
	call func()
	dl   *core.Delivery
}

func newDispatcher() *dispatcher {
	d := &dispatcher{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go d.run()
	return d
}

// post queues calls and returns the last one's delivery, or nil if there were none.
func (d *dispatcher) post(calls ...func()) *core.Delivery {
	if len(calls) == 0 {
		return nil
	}
	last := core.NewDelivery()
	d.postAs(last, calls...)
	return last
}

// postAs queues calls, the last one's delivery being last.
func (d *dispatcher) postAs(last *core.Delivery, calls ...func()) {
	if len(calls) == 0 {
		return
	}
	d.mu.Lock()
	for i, c := range calls {
		dl := last
		if i < len(calls)-1 {
			dl = core.NewDelivery()
		}
		d.queue = append(d.queue, queued{call: c, dl: dl})
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// inCall reports whether an application call is under way at this moment.
func (d *dispatcher) inCall() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.busy
}

// stop lets the goroutine exit once everything posted so far has been delivered; Done is closed
// then. It does not wait.
func (d *dispatcher) stop() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run() {
	defer close(d.done)
	for {
		d.mu.Lock()
		if len(d.queue) == 0 {
			stopped := d.stopped
			d.mu.Unlock()
			if stopped {
				return
			}
			<-d.wake
			continue
		}
		q := d.queue[0]
		d.queue[0] = queued{}
		d.queue = d.queue[1:]
		d.busy = true
		d.mu.Unlock()
		q.call()
		d.mu.Lock()
		d.busy = false
		d.mu.Unlock()
		q.dl.Finish()
	}
}

// dispatchers are the dispatchers of an instance's roles.
type dispatchers []*dispatcher

// inCall reports whether any of them is calling the application at this moment.
func (ds dispatchers) inCall() bool {
	for _, d := range ds {
		if d.inCall() {
			return true
		}
	}
	return false
}

// stop stops them all; see dispatcher.stop.
func (ds dispatchers) stop() {
	for _, d := range ds {
		d.stop()
	}
}

// wait returns once every one of them has finished.
func (ds dispatchers) wait() {
	for _, d := range ds {
		<-d.done
	}
}
