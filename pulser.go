package goneli

import (
	"context"
	"errors"
)

// LeaderTask is leader work that Background runs over and over while its instance leads. Each run
// should be short, well under HeartbeatTimeout: the lease is only renewed between runs, and
// leadership is checked only before each run starts. A task that must run longer should watch
// for LeaderFenced in the barrier, or check IsLeader as it goes.
type LeaderTask func()

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
	if task == nil {
		return nil, errors.New("goneli: Background needs a non-nil LeaderTask")
	}
	if n.State() != Live {
		return nil, ErrNonLivePulse
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &pulser{cancel: cancel, done: make(chan struct{})}
	go p.run(ctx, n, task)
	return p, nil
}

func (p *pulser) run(ctx context.Context, n Neli, task LeaderTask) {
	defer close(p.done)
	defer p.cancel()
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
			task()
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
