package sidechan

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeProducer writes nothing; it answers every record with err, and may have given way.
type fakeProducer struct {
	mu       sync.Mutex
	err      error
	fallback error
	rounds   int
}

func (f *fakeProducer) Produce(_ context.Context, _ string, records []Record) []Produced {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rounds++
	out := make([]Produced, len(records))
	for i := range out {
		out[i] = Produced{Offset: int64(i), Err: f.err}
	}
	return out
}

func (f *fakeProducer) Fallback() error { return f.fallback }

// A cycle's heartbeats go to librdkafka for a lease after a round failed (longer after rounds that
// no broker answered), when heartbeats have waited behind a round under way for longer than
// queueFor, and for good once the connection has given way to librdkafka.
func TestBeatsUsable(t *testing.T) {
	const lease, queueFor = time.Second, 100 * time.Millisecond
	p := &fakeProducer{}
	w := NewBeats[int](p, "t", lease/2, queueFor, &sync.WaitGroup{})
	if !w.Usable(0, lease) {
		t.Fatal("not usable at first")
	}
	w.queued = []Beat[int]{{Made: 2 * time.Second}}
	if !w.Usable(2*time.Second+queueFor-time.Millisecond, lease) {
		t.Fatal("not usable while heartbeats have waited for less than queueFor")
	}
	if w.Usable(2*time.Second+queueFor, lease) {
		t.Fatal("usable while heartbeats have waited for queueFor")
	}
	w.queued = nil
	w.Fail(5*time.Second, true)
	for _, c := range []struct {
		now  time.Duration
		want bool
	}{{5 * time.Second, false}, {6*time.Second - time.Millisecond, false}, {6 * time.Second, true}} {
		if got := w.Usable(c.now, lease); got != c.want {
			t.Errorf("Usable at %v after a failure at 5s: %v, want %v", c.now, got, c.want)
		}
	}
	// Rounds that no broker answered, one after another: the pause doubles up to 32 leases; a
	// round that a broker answered brings it back to a lease, and one that worked ends it.
	at := 10 * time.Second
	for i, pause := range []time.Duration{1, 2, 4, 8, 16, 32, 32} {
		w.Fail(at, false)
		if w.Usable(at+pause*lease-time.Millisecond, lease) || !w.Usable(at+pause*lease, lease) {
			t.Errorf("unanswered round %d: not paused for %d leases", i+1, pause)
		}
		at += pause * lease
	}
	w.Fail(at, true)
	if !w.Usable(at+lease, lease) {
		t.Error("an answered round after unanswered ones paused for more than a lease")
	}
	w.Fail(at, false)
	w.Worked()
	if !w.Usable(at, lease) {
		t.Error("paused after a round that worked")
	}
	w.Fail(at, false)
	if !w.Usable(at+lease, lease) {
		t.Error("an unanswered round after one that worked paused for more than a lease")
	}
	p.fallback = &FallbackError{Broker: "b:1", Err: errors.New("x509")}
	if w.Usable(time.Hour, lease) {
		t.Error("usable after the connection gave way to librdkafka")
	}
}

// A round's results come back through Collect, each with its own heartbeat, in order.
func TestBeatsRound(t *testing.T) {
	p := &fakeProducer{err: errors.New("refused")}
	var running sync.WaitGroup
	w := NewBeats[string](p, "t", time.Second, time.Second, &running)
	if !w.Start([]Beat[string]{{Record: Record{Partition: 0}, Of: "a"}, {Record: Record{Partition: 1}, Of: "b"}}) {
		t.Fatal("Start refused the heartbeats")
	}
	w.Await(time.Minute)
	running.Wait()
	res, ok := w.Collect()
	if !ok || len(res) != 2 || res[0].Beat.Of != "a" || res[1].Beat.Of != "b" || res[0].Err == nil {
		t.Fatalf("results %+v", res)
	}
	if _, ok := w.Collect(); ok {
		t.Fatal("results collected twice")
	}
}

// Closed beats start no round.
func TestBeatsClosed(t *testing.T) {
	p := &fakeProducer{}
	w := NewBeats[int](p, "t", time.Second, time.Millisecond, &sync.WaitGroup{})
	w.Close()
	if w.Start([]Beat[int]{{}, {Record: Record{Partition: 1}}}) || p.rounds != 0 {
		t.Fatal("a round started after Close")
	}
}
