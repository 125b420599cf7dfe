package goneli

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goneli/goneli/internal/core"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The close sequence, in the order it runs: Close marks the instance Closing and starts shutdown on
// a goroutine of its own; shutdown has the driver leave the group and close its clients (leave:
// endAll, awaitLeft, closeConsumers), stops the watchdog and the dispatchers, marks the instance
// Closed, and waits within the close bound for the barrier's last calls. Everything that outlives
// Close (a client still closing, a released marker waiting for the barrier) is counted in
// driver.closers, and clientsClosed is closed when it has all ended.

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
	deadline := d.now() + d.closeBound()
	err := d.leave(deadline)
	d.alarm.wait()
	n.events.stop()
	// librdkafka may still log from a consumer that is finishing its close in the background;
	// its logs keep flowing until it is done.
	go func() {
		d.closers.Wait()
		if late := d.now() - deadline; late > 0 {
			n.log.W()("goneli %s: the Kafka clients finished closing %v after the close bound", n.config.Name, late.Round(time.Millisecond))
		}
		d.logs.close()
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
	timer := time.NewTimer(max(deadline-d.now(), 0))
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
	timer := time.NewTimer(max(life.deadline-n.d.now(), 0))
	defer timer.Stop()
	select {
	case <-life.clientsClosed:
	case <-timer.C:
	}
}

// closeBound is how long Close may take: the rebalance timeout plus one HeartbeatTimeout
// (Config.CloseBound, with the session New fitted to the brokers).
func (d *driver) closeBound() time.Duration {
	return d.timing.CloseBound(*d.config.HeartbeatTimeout)
}

// leave ends every tenure, leaves the group and closes the consumers, by deadline (on the driver's
// clock), and returns what went wrong. The pulsing goroutine gives up mu within a poll, or at once
// if it waits in the rebalance callback for the barrier: that wait ends when closing does.
func (d *driver) leave(deadline time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endAll(deadline)
	// librdkafka 2.11 under the cooperative-sticky assignor can skip the LeaveGroup when a member
	// that owns no partition closes; the coordinator then waits for it through the next rebalance,
	// and whoever joins or leaves next is held up to a rebalance timeout. An explicit unsubscribe
	// sent the LeaveGroup in every run measured (TestSequentialCloseLeavesPromptly).
	if err := d.consumer.Unsubscribe(); err != nil {
		d.log.D()("goneli %s: unsubscribing before close: %v", d.config.Name, err)
	} else {
		d.awaitLeft(deadline)
	}
	commits := d.commits
	d.machine(func(m *core.Machine) { m.Gate.Close() })
	closing := []namedConsumer{{"Kafka consumer", d.consumer, func() { commits.close() }}}
	if d.observer != nil {
		closing = append(closing, namedConsumer{"leader observer", d.observer.consumer, nil})
	}
	d.closing.Store(true)
	return errors.Join(d.closeConsumers(closing, deadline)...)
}

// endAll ends every tenure for Close. Close waits for the final LeaderRevoked events, up to the
// rebalance timeout, before it leaves the group, as a revocation in a rebalance would. It does
// not wait while a barrier call made Close (fromBarrier): that call cannot return before Close
// does. Roles whose LeaderRevoked was not delivered, then or after the rebalance timeout, get
// releasing markers instead, so that their successors still wait for the barrier, and the
// released markers follow from a goroutine that keeps the producer open until then (or until
// deadline). Called with mu held.
func (d *driver) endAll(deadline time.Duration) {
	// Nothing stored is committed from here on: the tenures end, and the unassign that comes
	// before the LeaveGroup would wait for the commit's answer.
	var releases []core.Release
	d.machine(func(m *core.Machine) { releases = m.EndAll() })
	var finals []*core.Delivery
	for _, r := range releases {
		finals = append(finals, r.Done)
	}
	if !awaitDeliveries(finals, d.timing.MaxPoll, d.life.fromBarrier, d.now) {
		select {
		case <-d.life.fromBarrier:
		default:
			d.log.W()("goneli %s: the barrier has not returned from LeaderRevoked after %v (the rebalance timeout); leaving the group regardless",
				d.config.Name, d.timing.MaxPoll)
		}
	}
	var done, busy, unmarked []core.Release
	for _, r := range releases {
		select {
		case <-r.Done.Wait():
			r.Marker.Kind = core.KindReleased
			done = append(done, r)
		default:
			busy = append(busy, r)
			if r.Fresh {
				unmarked = append(unmarked, r)
			}
		}
	}
	limit := d.awaitHeartbeats()
	if d.wire != nil {
		d.wire.Close()
	}
	// Released markers also tell observers at once that these roles have no leader.
	d.writeMarkers(append(unmarked, done...), limit)
	// A group check may be using the producer's connections, or goneli's own.
	d.check.checker.stop()
	d.closeSide()
	if d.heart.p == nil {
		return
	}
	if len(busy) == 0 {
		// confluent-kafka-go's producer Close waits up to 100 ms for its poller goroutine to notice,
		// and nothing in the rest of the sequence needs the producer: leaving the group first
		// gives the successor its assignment that much sooner.
		d.closers.Add(1)
		go func() {
			defer d.closers.Done()
			d.heart.p.Close()
		}()
		return
	}
	// Each role's released marker goes out as soon as its own barrier call returns; the producer
	// closes after the last of them, or at deadline.
	d.closers.Add(1)
	go func() {
		defer d.closers.Done()
		defer d.heart.p.Close()
		var writers sync.WaitGroup
		for _, r := range busy {
			writers.Add(1)
			go func() {
				defer writers.Done()
				if awaitDelivery(r.Done, deadline-d.now(), nil) {
					r.Marker.Kind = core.KindReleased
					d.writeMarkers([]core.Release{r}, d.releaseFlush())
				}
			}()
		}
		writers.Wait()
	}()
}

// closeSide closes goneli's own connection, if there is one, once nothing uses it: the group
// checker has stopped and no heartbeat round starts any more (its round under way, if any, fails).
func (d *driver) closeSide() {
	if d.check.wire != nil {
		d.check.wire.Close()
	}
}

// subscriptionReader is what awaitLeft asks of the consumer beyond KafkaConsumer; *kafka.Consumer
// has it.
type subscriptionReader interface {
	Subscription() ([]string, error)
}

// awaitLeft polls the consumer after Unsubscribe until librdkafka has carried the unsubscribe out
// (the subscription is empty) and every partition it revoked has been handed back, or until
// deadline. Called with mu held.
//
// Closing a consumer while a rebalance event still waits in its queue can hang librdkafka 2.11
// for good (issue 16): during the close an assignment that arrived earlier is served as an
// unassignment, the group terminates, and the revocation queued behind it then reaches the
// rebalance callback, whose Unassign waits for a reply from the terminated group that never comes.
// A member whose poll loop stalled while a rebalance went on is in exactly that state. Serving
// every rebalance before the close leaves none for the close to trip over. Unsubscribe itself is
// postponed by librdkafka until a rebalance in progress completes.
func (d *driver) awaitLeft(deadline time.Duration) {
	sr, ok := d.consumer.(subscriptionReader)
	if !ok {
		return
	}
	for {
		served := d.drainForClose()
		// Revoking partition 0 commits the offset stored last, and only once that commit is
		// answered does librdkafka send the LeaveGroup; a close that comes first skips it, and
		// the group then waits a session timeout for this member (librdkafka 2.11.1).
		if !served && len(d.m.Group.Parts) == 0 && !d.m.Group.OwedCommit {
			if topics, err := sr.Subscription(); err != nil || len(topics) == 0 {
				return
			}
		}
		left := deadline - d.now()
		if left <= 0 {
			d.log.W()("goneli %s: the group did not let this member leave within %v; closing anyway", d.config.Name, d.closeBound())
			return
		}
		if !served {
			// Nothing was queued: the rebalance that postponed the unsubscribe is still with the
			// coordinator. Wait for its next event in librdkafka rather than spinning.
			d.serve(d.consumer.Poll(int(min(left, 50*time.Millisecond).Milliseconds())))
		}
	}
}

// drainForClose serves what the consumer has queued and reports whether that included anything.
// Rebalance events are served by the callback from within Poll, which then returns nil, so they
// are counted by the callback.
func (d *driver) drainForClose() bool {
	before := d.m.Group.Rebalances
	served := false
	for i := 0; i < core.MaxEventsPerCycle; i++ {
		ev := d.consumer.Poll(0)
		if ev == nil && d.m.Group.Rebalances == before {
			break
		}
		before = d.m.Group.Rebalances
		served = true
		d.serve(ev)
	}
	return served || d.m.Group.Rebalances != before
}

// serve handles an event polled while closing: commit results, which awaitLeft waits for, and
// errors, for the logs.
func (d *driver) serve(ev kafka.Event) {
	switch e := ev.(type) {
	case kafka.OffsetsCommitted:
		d.m.Group.OwedCommit = false
	case kafka.Error:
		d.log.D()("goneli %s: Kafka consumer while closing: %v", d.config.Name, e)
	}
}

type namedConsumer struct {
	what  string
	c     KafkaConsumer
	first func() // run before the consumer's Close, on the goroutine that closes it; may be nil
}

// closeConsumers closes the consumers side by side and waits for all of them until deadline, so
// that Close's bound does not grow with the number of consumers. Called with mu held, since a
// consumer's close may call onRebalance.
func (d *driver) closeConsumers(consumers []namedConsumer, deadline time.Duration) []error {
	results := make([]chan error, len(consumers))
	for i, nc := range consumers {
		results[i] = make(chan error, 1)
		d.closers.Add(1)
		go func() {
			defer d.closers.Done()
			if nc.first != nil {
				nc.first()
			}
			results[i] <- nc.c.Close()
		}()
	}
	bound := d.closeBound()
	expiry := time.NewTimer(max(deadline-d.now(), 0))
	defer expiry.Stop()
	expired := expiry.C
	var errs []error
	for i, nc := range consumers {
		var err error
		select {
		case err = <-results[i]:
		case <-expired:
			// The bound has passed for every consumer still to be collected.
			expired = passed
			select {
			case err = <-results[i]:
			default:
				d.log.W()("goneli %s: %s did not close within %v; it goes on closing in the background", d.config.Name, nc.what, bound)
				errs = append(errs, fmt.Errorf("%w: %s did not close within %v (is the broker reachable?)", ErrCloseTimeout, nc.what, bound))
				continue
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("goneli: closing %s: %w", nc.what, err))
		}
	}
	return errs
}

// passed is a deadline channel that has already fired.
var passed = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()
