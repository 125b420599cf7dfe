package goneli

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// LeaderTask is leader work that Background runs over and over while its instance leads. Each run
// should be short, well under HeartbeatTimeout: the lease is only renewed between runs, and
// leadership is checked only before each run starts. A task that must run longer should watch
// for LeaderFenced in the barrier, or check IsLeader as it goes.
//
// Runs start at most once per MinTaskInterval: a task that returns at once because it found nothing
// to do costs a timer wakeup per run instead of a busy core. A task that wants to idle for longer
// may sleep before it returns.
type LeaderTask func()

// MinTaskInterval is the shortest time between the starts of two runs of a Background task.
const MinTaskInterval = time.Millisecond

// taskNow reads the clock that times a task's runs; tests freeze it so that whether a run "returned
// early" does not depend on how loaded the machine is.
var taskNow = time.Now

// taskPause waits between two runs of a task that returned early; tests count its calls.
var taskPause = func(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Pulser is a goroutine started by Background that pulses a Neli and runs a LeaderTask while the
// Neli leads.
type Pulser interface {
	// Close asks the pulser to stop after the current task run, without closing the Neli. It
	// does not wait; Await does.
	Close()

	// Error returns the fatal error that stopped the pulser, or nil.
	Error() error

	// Await blocks until the pulser stops, and returns what Error would. A pulser stopped by
	// Close, or because its Neli was closed, returns nil.
	Await() error
}

type pulser struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Background starts a Pulser that runs task whenever n leads.
func (n *neli) Background(task LeaderTask) (Pulser, error) {
	return background(n, task)
}

func background(n Neli, task LeaderTask) (Pulser, error) {
	p, ctx, err := newPulser(n.State(), task == nil, "LeaderTask")
	if err != nil {
		return nil, err
	}
	go p.run(ctx, n, task)
	return p, nil
}

// newPulser makes the pulser of a Background call, after the checks every Background makes: a
// task (noTask says there is none; what names its type) and an instance that is still live.
func newPulser(state State, noTask bool, what string) (*pulser, context.Context, error) {
	if noTask {
		return nil, nil, fmt.Errorf("goneli: Background needs a non-nil %s", what)
	}
	if state != Live {
		return nil, nil, ErrNonLivePulse
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &pulser{cancel: cancel, done: make(chan struct{})}, ctx, nil
}

func (p *pulser) run(ctx context.Context, n Neli, task LeaderTask) {
	defer close(p.done)
	defer p.cancel()
	warned := false // said once per pulser: a task that overruns usually does so every time
	for ctx.Err() == nil {
		leader, err := n.PulseCtx(ctx)
		if err != nil {
			if !errors.Is(err, ErrNonLivePulse) && !errors.Is(err, context.Canceled) {
				p.err = err
			}
			return
		}
		// Pulse may have returned a moment ago; the lease is checked again right before the task.
		if leader && n.IsLeader() {
			start := taskNow()
			task()
			took := taskNow().Sub(start)
			if rest := MinTaskInterval - took; rest > 0 {
				taskPause(ctx, rest)
			}
			if nl, ok := n.(*neli); ok && !warned && took > *nl.config.HeartbeatTimeout {
				// The instance cannot poll while the task runs: it is fenced, and librdkafka then
				// leaves the group with advice to raise max.poll.interval.ms, which would not help.
				warned = true
				nl.log.W()("goneli %s: a Background task run took %v, longer than the lease (HeartbeatTimeout %v): "+
					"no lease can be renewed while a run lasts, so this instance was fenced (and, past max.poll.interval.ms, expelled from the group). "+
					"Keep each run well under the lease, or use goneli.Run for leader work that runs for a whole tenure",
					nl.config.Name, took.Round(time.Millisecond), *nl.config.HeartbeatTimeout)
			}
		}
	}
}

func (p *pulser) Close() {
	p.cancel()
}

func (p *pulser) Error() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

func (p *pulser) Await() error {
	<-p.done
	return p.err
}
