package goneli

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// closeBound is how long Close may take: the rebalance timeout plus one HeartbeatTimeout.
func (n *neli) closeBound() time.Duration {
	return n.timing.maxPoll + *n.config.HeartbeatTimeout
}

// shutdown runs the close sequence on a goroutine of its own, so that a Close made by the barrier
// does not wait for itself.
func (n *neli) shutdown() {
	deadline := time.Now().Add(n.closeBound())
	var errs []error
	// The pulsing goroutine gives up mu within a poll, or at once if it waits in the rebalance
	// callback for the barrier: that wait ends when closing does.
	n.mu.Lock()
	n.endAll(deadline)
	// librdkafka 2.11 under the cooperative-sticky assignor can skip the LeaveGroup when a member
	// that owns no partition closes; the coordinator then waits for it through the next rebalance,
	// and whoever joins or leaves next is held up to a rebalance timeout. An explicit unsubscribe
	// sent the LeaveGroup in every run measured (TestSequentialCloseLeavesPromptly).
	if err := n.consumer.Unsubscribe(); err != nil {
		n.log.D()("goneli %s: unsubscribing before close: %v", n.config.Name, err)
	} else {
		n.awaitLeft(deadline)
	}
	closing := []namedConsumer{{"Kafka consumer", n.consumer, n.commits.close}}
	if n.observer != nil {
		closing = append(closing, namedConsumer{"leader observer", n.observer.consumer, nil})
	}
	n.consumerClosing.Store(true)
	errs = append(errs, n.closeConsumers(closing, deadline)...)
	n.mu.Unlock()
	n.watchdog.wait()
	n.events.stop()
	// librdkafka may still log from a consumer that is finishing its close in the background;
	// its logs keep flowing until it is done.
	go func() {
		n.closers.Wait()
		n.logs.close()
		n.events.wait()
		close(n.clientsClosed)
	}()
	n.closeErr = errors.Join(errs...)
	// Closed before any Close returns, so that a caller sees it whichever way Close returned.
	n.state.Store(int32(Closed))
	n.log.I()("goneli %s: closed", n.config.Name)
	close(n.kafkaClosed)
	// A barrier call that is still under way returns once the Close it may have made has: Await
	// and a Close from elsewhere wait for the last events too, within the close bound.
	events := make(chan struct{})
	go func() {
		n.events.wait()
		close(events)
	}()
	select {
	case <-events:
	case <-time.After(time.Until(deadline)):
	}
	close(n.closed)
}

// endAll ends every tenure for Close. Close waits for the final LeaderRevoked events, up to the
// rebalance timeout, before it leaves the group, as a revocation in a rebalance would. It does
// not wait while a barrier call made Close (fromBarrier): that call cannot return before Close
// does. Roles whose LeaderRevoked was not delivered, then or after the rebalance timeout, get
// releasing markers instead, so that their successors still wait for the barrier, and the
// released markers follow from a goroutine that keeps the producer open until then (or until
// deadline). Called with mu held.
func (n *neli) endAll(deadline time.Time) {
	for _, p := range n.parts {
		out := p.lease.revoke(false)
		if d := n.apply(p, out); d != nil && out.release != nil {
			n.releases = append(n.releases, release{p: p, marker: *out.release, done: d, fresh: true})
		}
	}
	var finals []*delivery
	for _, r := range n.releases {
		finals = append(finals, r.done)
	}
	if !awaitDeliveries(finals, n.timing.maxPoll, n.fromBarrier) {
		select {
		case <-n.fromBarrier:
		default:
			n.log.W()("goneli %s: the barrier has not returned from LeaderRevoked after %v (the rebalance timeout); leaving the group regardless",
				n.config.Name, n.timing.maxPoll)
		}
	}
	var done, busy, unmarked []release
	for _, r := range n.releases {
		select {
		case <-r.done.done:
			r.marker.kind = kindReleased
			done = append(done, r)
		default:
			busy = append(busy, r)
			if r.fresh {
				unmarked = append(unmarked, r)
			}
		}
	}
	n.releases = nil
	// Released markers also tell observers at once that these roles have no leader.
	n.writeMarkers(append(unmarked, done...), n.releaseFlush())
	// A group check may be using the producer's connections.
	n.checker.stop()
	if n.producer == nil {
		return
	}
	if len(busy) == 0 {
		// confluent-kafka-go's producer Close waits up to 100 ms for its poller goroutine to notice,
		// and nothing in the rest of the sequence needs the producer: leaving the group first
		// gives the successor its assignment that much sooner.
		n.closers.Add(1)
		go func() {
			defer n.closers.Done()
			n.producer.Close()
		}()
		return
	}
	// Each role's released marker goes out as soon as its own barrier call returns; the producer
	// closes after the last of them, or at deadline.
	n.closers.Add(1)
	go func() {
		defer n.closers.Done()
		defer n.producer.Close()
		var writers sync.WaitGroup
		for _, r := range busy {
			writers.Add(1)
			go func() {
				defer writers.Done()
				if awaitDelivery(r.done, time.Until(deadline), nil) {
					r.marker.kind = kindReleased
					n.writeMarkers([]release{r}, n.releaseFlush())
				}
			}()
		}
		writers.Wait()
	}()
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
func (n *neli) awaitLeft(deadline time.Time) {
	sr, ok := n.consumer.(subscriptionReader)
	if !ok {
		return
	}
	for {
		served := n.drainForClose()
		// Revoking partition 0 commits the offset stored last, and only once that commit is
		// answered does librdkafka send the LeaveGroup; a close that comes first skips it, and
		// the group then waits a session timeout for this member (librdkafka 2.11.1).
		if !served && len(n.groupParts) == 0 && !n.owedCommit {
			if topics, err := sr.Subscription(); err != nil || len(topics) == 0 {
				return
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			n.log.W()("goneli %s: the group did not let this member leave within %v; closing anyway", n.config.Name, n.closeBound())
			return
		}
		if !served {
			// Nothing was queued: the rebalance that postponed the unsubscribe is still with the
			// coordinator. Wait for its next event in librdkafka rather than spinning.
			n.serve(n.consumer.Poll(int(min(left, 50*time.Millisecond).Milliseconds())))
		}
	}
}

// drainForClose serves what the consumer has queued and reports whether that included anything.
// Rebalance events are served by the callback from within Poll, which then returns nil, so they
// are counted by the callback.
func (n *neli) drainForClose() bool {
	before := n.rebalances
	served := false
	for i := 0; i < maxEventsPerCycle; i++ {
		ev := n.consumer.Poll(0)
		if ev == nil && n.rebalances == before {
			break
		}
		before = n.rebalances
		served = true
		n.serve(ev)
	}
	return served || n.rebalances != before
}

// serve handles an event polled while closing: commit results, which awaitLeft waits for, and
// errors, for the logs.
func (n *neli) serve(ev kafka.Event) {
	switch e := ev.(type) {
	case kafka.OffsetsCommitted:
		n.owedCommit = false
	case kafka.Error:
		n.log.D()("goneli %s: Kafka consumer while closing: %v", n.config.Name, e)
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
func (n *neli) closeConsumers(consumers []namedConsumer, deadline time.Time) []error {
	results := make([]chan error, len(consumers))
	for i, nc := range consumers {
		results[i] = make(chan error, 1)
		n.closers.Add(1)
		go func() {
			defer n.closers.Done()
			if nc.first != nil {
				nc.first()
			}
			results[i] <- nc.c.Close()
		}()
	}
	bound := n.closeBound()
	expired := time.After(time.Until(deadline))
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
				n.log.W()("goneli %s: %s did not close within %v; it goes on closing in the background", n.config.Name, nc.what, bound)
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

// logForwarder passes librdkafka's log lines to scribe from a goroutine of its own. Clients write
// to its channel, which their config names (attach); it runs until stopped, which must wait until
// every client writing to it has finished closing, since a client logs until then.
type logForwarder struct {
	ch      chan kafka.LogEvent
	stop    chan struct{}
	running sync.WaitGroup
}

func startLogForwarder(log scribe.Scribe, name string) *logForwarder {
	f := &logForwarder{ch: make(chan kafka.LogEvent, 64), stop: make(chan struct{})}
	f.running.Add(1)
	go func() {
		defer f.running.Done()
		for {
			select {
			case <-f.stop:
				return
			case l := <-f.ch:
				logger := log.D()
				switch {
				case l.Level <= 3:
					logger = log.E()
				case l.Level == 4:
					logger = log.W()
				case l.Level <= 6:
					logger = log.I()
				}
				logger("goneli %s: librdkafka %s [%s] %s", name, l.Name, l.Tag, l.Message)
			}
		}
	}()
	return f
}

// attach makes a client built from cm log through the forwarder.
func (f *logForwarder) attach(cm kafka.ConfigMap) {
	cm["go.logs.channel.enable"] = true
	cm["go.logs.channel"] = f.ch
}

// close stops the goroutine and waits for it.
func (f *logForwarder) close() {
	close(f.stop)
	f.running.Wait()
}
