package driver

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goneli/goneli/internal/core"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// closeBound is how long Close may take: the rebalance timeout plus one HeartbeatTimeout
// (Config.CloseBound, with the session New fitted to the brokers).
func (d *Driver) closeBound() time.Duration {
	return d.timing.CloseBound(*d.config.HeartbeatTimeout)
}

// leave ends every tenure, leaves the group and closes the consumers, by deadline (on the driver's
// clock), and returns what went wrong. The pulsing goroutine gives up mu within a poll, or at once
// if it waits in the rebalance callback for the barrier: that wait ends when closing does.
func (d *Driver) leave(deadline time.Duration) error {
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
	closing := []namedConsumer{{"Kafka consumer", d.consumer, func() { commits.close() }, d.fatal}}
	if d.observer != nil {
		closing = append(closing, namedConsumer{"leader observer", d.observer.consumer, nil, nil})
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
func (d *Driver) endAll(deadline time.Duration) {
	// Nothing stored is committed from here on: the tenures end, and the unassign that comes
	// before the LeaveGroup would wait for the commit's answer.
	var releases []core.Release
	d.machine(func(m *core.Machine) { releases = m.EndAll() })
	var finals []*core.Delivery
	for _, r := range releases {
		finals = append(finals, r.Done)
	}
	if !AwaitDeliveries(finals, d.timing.MaxPoll, d.life.FromBarrier(), d.now) {
		select {
		case <-d.life.FromBarrier():
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
				if AwaitDelivery(r.Done, deadline-d.now(), nil) {
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
func (d *Driver) closeSide() {
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
func (d *Driver) awaitLeft(deadline time.Duration) {
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
func (d *Driver) drainForClose() bool {
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
func (d *Driver) serve(ev kafka.Event) {
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
	// fatal is the fatal error the consumer raised, if any. librdkafka refuses to close such a
	// consumer (rd_kafka_consumer_close_q returns the error and starts no close), and
	// confluent-kafka-go v2.11.1 drops that answer and polls for a close that never comes
	// (confluentinc/confluent-kafka-go#1588, fixed in a later release): its Close never returns.
	fatal error
}

// closeConsumers closes the consumers side by side and waits for all of them until deadline, so
// that Close's bound does not grow with the number of consumers. Called with mu held, since a
// consumer's close may call onRebalance.
func (d *Driver) closeConsumers(consumers []namedConsumer, deadline time.Duration) []error {
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
				why := "is the broker reachable?"
				if nc.fatal != nil {
					why = fmt.Sprintf("it raised a fatal error, %v, and confluent-kafka-go v2.11.1 never finishes closing such a consumer: "+
						"its client stays behind until the process exits (confluentinc/confluent-kafka-go#1588)", nc.fatal)
				}
				d.log.W()("goneli %s: %s did not close within %v (%s); it goes on closing in the background", d.config.Name, nc.what, bound, why)
				errs = append(errs, fmt.Errorf("%w: %s did not close within %v (%s)", ErrCloseTimeout, nc.what, bound, why))
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
