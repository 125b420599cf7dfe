package goneli

import (
	"sync"
	"sync/atomic"
	"time"
)

// The close sequence, in the order it runs: Close marks the instance Closing and starts shutdown on
// a goroutine of its own; shutdown has the driver leave the group and close its clients (leave:
// endAll, awaitLeft, closeConsumers), stops the watchdog and the dispatchers, marks the instance
// Closed, and waits within the close bound for the barrier's last calls. Everything that outlives
// Close (a client still closing, a released marker waiting for the barrier) is counted in
// the driver (AwaitClients), and clientsClosed is closed when it has all ended.

// lifecycle is an instance's progress through Close, shared by the API type and the driver.
type lifecycle struct {
	stage atomic.Int32 // a State
	once  sync.Once
	// closing is closed when Close begins; it ends every wait of the pulse loop and the rebalance
	// callback.
	closing chan struct{}
	// fromBarrier is closed when Close is called while the barrier is being called, perhaps by
	// the barrier itself: the close sequence then waits for no barrier call.
	fromBarrier     chan struct{}
	fromBarrierOnce sync.Once
	kafkaClosed     chan struct{} // the instance has left the group and its clients are closed or abandoned
	closed          chan struct{} // and the last event was delivered, or the close bound passed
	clientsClosed   chan struct{} // every client finished closing, which can be after Close returns
	err             error         // Close's result, set before kafkaClosed is closed
	deadline        time.Duration // the close bound, on the driver's clock; set before kafkaClosed is closed
}

func newLifecycle() *lifecycle {
	return &lifecycle{
		closing:       make(chan struct{}),
		fromBarrier:   make(chan struct{}),
		kafkaClosed:   make(chan struct{}),
		closed:        make(chan struct{}),
		clientsClosed: make(chan struct{}),
	}
}

func (l *lifecycle) state() State {
	return State(l.stage.Load())
}

// Live, Closing and FromBarrier are what the driver reads of the lifecycle (driver.Life).
func (l *lifecycle) Live() bool                   { return l.state() == Live }
func (l *lifecycle) Closing() <-chan struct{}     { return l.closing }
func (l *lifecycle) FromBarrier() <-chan struct{} { return l.fromBarrier }

func (n *neli) Close() error {
	// A call made while the application is being called may come from the barrier itself, which
	// cannot return before Close does: it waits only for the Kafka side, and the close sequence
	// stops waiting for the barrier, leaving release markers to hold successors back instead.
	life := n.life
	during := n.events.inCall()
	if during {
		life.fromBarrierOnce.Do(func() { close(life.fromBarrier) })
	}
	life.once.Do(func() {
		life.stage.Store(int32(Closing))
		close(life.closing)
		go n.shutdown()
	})
	if during {
		<-life.kafkaClosed
	} else {
		<-life.closed
	}
	return life.err
}

// shutdown runs the close sequence on a goroutine of its own, so that a Close made by the barrier
// does not wait for itself.
func (n *neli) shutdown() {
	d, life := n.d, n.life
	deadline := d.Now() + d.CloseBound()
	err := d.Leave(deadline)
	d.AwaitAlarm()
	n.events.stop()
	// librdkafka may still log from a consumer that is finishing its close in the background;
	// its logs keep flowing until it is done.
	go func() {
		d.AwaitClients()
		if late := d.Now() - deadline; late > 0 {
			n.log.W()("goneli %s: the Kafka clients finished closing %v after the close bound", n.config.Name, late.Round(time.Millisecond))
		}
		d.CloseLogs()
		n.events.wait()
		close(life.clientsClosed)
	}()
	life.err, life.deadline = err, deadline
	// Closed before any Close returns, so that a caller sees it whichever way Close returned.
	life.stage.Store(int32(Closed))
	n.log.I()("goneli %s: closed", n.config.Name)
	close(life.kafkaClosed)
	// A barrier call that is still under way returns once the Close it may have made has: Await
	// and a Close from elsewhere wait for the last events too, within the close bound.
	events := make(chan struct{})
	go func() {
		n.events.wait()
		close(events)
	}()
	timer := time.NewTimer(max(deadline-d.Now(), 0))
	defer timer.Stop()
	select {
	case <-events:
	case <-timer.C:
	}
	close(life.closed)
}

func (n *neli) Await() {
	life := n.life
	<-life.closed
	timer := time.NewTimer(max(life.deadline-n.d.Now(), 0))
	defer timer.Stop()
	select {
	case <-life.clientsClosed:
	case <-timer.C:
	}
}
