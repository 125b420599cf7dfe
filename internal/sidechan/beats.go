package sidechan

import (
	"context"
	"sync"
	"time"
)

// # Heartbeats of several roles in one request
//
// Roles renew on shared ticks, so an instance that leads many produces all their heartbeats in one
// cycle. librdkafka 2.11.1 would still send each in a ProduceRequest of its own, since its
// producer puts one partition in a request (confluentinc/librdkafka#1700): an instance leading 64
// roles sent some 120 produce requests a second, nine in ten of what it cost the broker. So when a
// cycle has heartbeats for two partitions or more, Beats writes them over goneli's own connection,
// one ProduceRequest per broker that leads any of them (Client.Produce). A single role's
// heartbeat, the release markers and everything this connection cannot carry stay with
// librdkafka.
//
// Nothing of the lease's argument changes: every heartbeat is a record on its own role's
// partition, read back by the consumer and committed as before; only the connection that carries
// it differs. A heartbeat that this path fails to write goes back to the caller at once, to be
// handed to librdkafka with the send time it was made with.

// Producer is what Beats writes through; *Client is one.
type Producer interface {
	Produce(ctx context.Context, topic string, records []Record) []Produced
	Fallback() error
}

// Beat is one heartbeat of a round.
type Beat[T any] struct {
	Record
	// Made is when the heartbeat was made, on the caller's clock (Usable measures waits by it).
	Made time.Duration
	// Of is the caller's own handle on the heartbeat, returned with its result.
	Of T
}

// BeatResult is what became of one heartbeat of a round.
type BeatResult[T any] struct {
	Beat   Beat[T]
	Offset int64
	Err    error
}

// Beats writes heartbeats from a goroutine of its own: the caller's poll loop must not wait for a
// broker with its lock held, so the results come back through Collect, on a later cycle.
// Heartbeats handed over while a round is under way wait for it and then go out together in the
// next round, as librdkafka's linger would gather them.
type Beats[T any] struct {
	producer Producer
	topic    string
	// limit bounds a round; queueFor is how long heartbeats may wait behind a round under way
	// before the caller's heartbeats go to librdkafka instead.
	limit, queueFor time.Duration
	// running counts the goroutine of the rounds (the caller's wait group of closers).
	running *sync.WaitGroup

	// failedAt and streak are the caller's, guarded by its lock (Usable, Fail, Worked): when the
	// last round with a failed heartbeat ended, and how many rounds in a row no broker answered.
	failedAt time.Duration
	failed   bool
	streak   int

	// mu guards what the caller and the rounds' goroutine share. active says that the goroutine
	// runs; idle is closed when it stops. queued waits for the next round, results for Collect.
	mu      sync.Mutex
	active  bool
	idle    chan struct{}
	queued  []Beat[T]
	results []BeatResult[T]
	closed  bool
}

// NewBeats writes heartbeats to topic through p, a round taking at most limit.
func NewBeats[T any](p Producer, topic string, limit, queueFor time.Duration, running *sync.WaitGroup) *Beats[T] {
	return &Beats[T]{producer: p, topic: topic, limit: limit, queueFor: queueFor, running: running}
}

// Usable reports whether a cycle's heartbeats may go this way at now: the connection has not given
// way to librdkafka, no round failed within the pause that follows a failed round (a lease, during
// which librdkafka renews every role as it would without this path, doubled for each further round
// in a row that no broker answered, up to 32 leases: see Fail), and no heartbeat has waited behind
// a round under way for longer than queueFor. Called with the caller's lock held.
func (w *Beats[T]) Usable(now, lease time.Duration) bool {
	if w.producer.Fallback() != nil || w.failed && now-w.failedAt < w.Pause(lease) {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.closed && (len(w.queued) == 0 || now-w.queued[0].Made < w.queueFor)
}

// Start hands beats to the next round, starting the goroutine that runs rounds unless it runs,
// and reports whether it took them: not once Close was called.
func (w *Beats[T]) Start(beats []Beat[T]) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(beats) == 0 {
		return false
	}
	w.queued = append(w.queued, beats...)
	if !w.active {
		w.active, w.idle = true, make(chan struct{})
		w.running.Add(1)
		go w.rounds()
	}
	return true
}

// rounds runs rounds until nothing waits for one.
func (w *Beats[T]) rounds() {
	defer w.running.Done()
	for {
		w.mu.Lock()
		beats := w.queued
		if len(beats) == 0 || w.closed {
			w.active = false
			close(w.idle)
			w.mu.Unlock()
			return
		}
		w.queued = nil
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), w.limit)
		res := w.round(ctx, beats)
		cancel()
		w.mu.Lock()
		w.results = append(w.results, res...)
		w.mu.Unlock()
	}
}

// round writes beats and returns what became of each.
func (w *Beats[T]) round(ctx context.Context, beats []Beat[T]) []BeatResult[T] {
	records := make([]Record, len(beats))
	for i, b := range beats {
		records[i] = b.Record
	}
	produced := w.producer.Produce(ctx, w.topic, records)
	out := make([]BeatResult[T], len(beats))
	for i, b := range beats {
		out[i] = BeatResult[T]{Beat: b, Offset: produced[i].Offset, Err: produced[i].Err}
	}
	return out
}

// Busy reports whether a round is under way or waits to start: the caller keeps one round of
// heartbeats in flight at most (goneli's driver.mayProduce).
func (w *Beats[T]) Busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active
}

// Collect returns the results of the rounds that ended since it was last called.
func (w *Beats[T]) Collect() ([]BeatResult[T], bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res := w.results
	w.results = nil
	return res, len(res) > 0
}

// Await waits up to limit for the rounds under way or waiting, if any, to end, leaving their
// results for Collect.
func (w *Beats[T]) Await(limit time.Duration) {
	w.mu.Lock()
	active, idle := w.active, w.idle
	w.mu.Unlock()
	if !active {
		return
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-idle:
	case <-timer.C:
	}
}

// Fail notes a round with a failed heartbeat at now, and answered says whether any broker answered
// in it, if only to refuse. Called with the caller's lock held.
//
// Rounds that no broker answers do not make the connection give way, as a failing group check
// does (the driver's sidefail.go): a heartbeat that fails here goes to librdkafka at once, and the
// next ones go there for the pause, so an instance leads as it would without this path, and the
// process keeps away from librdkafka's admin client (confluentinc/librdkafka#4605). Nor can they
// tell a connection that cannot do what librdkafka does from brokers restarting one after another,
// which fail a round on each broker in turn while librdkafka delivers to the others between them.
// The pause doubles instead, so that a connection that never works costs one round per 32 leases,
// and one that works again is back within that.
func (w *Beats[T]) Fail(now time.Duration, answered bool) {
	w.failed, w.failedAt = true, now
	if answered {
		w.streak = 0
	} else {
		w.streak++
	}
}

// Worked notes a round in which every heartbeat was written. Called with the caller's lock held.
func (w *Beats[T]) Worked() {
	w.failed, w.streak = false, 0
}

// Pause is how long the rounds stop after a failed one: a lease, doubled for each further round in
// a row that no broker answered, up to 32 leases. Called with the caller's lock held.
func (w *Beats[T]) Pause(lease time.Duration) time.Duration {
	return lease << min(max(w.streak-1, 0), 5)
}

// Close keeps rounds from starting; the one under way, if any, finishes within its limit.
func (w *Beats[T]) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}
