package core

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// storeAll stores whatever it is asked to.
func storeAll(offsets []OffsetRef) ([]OffsetRef, error) {
	return offsets, nil
}

// advance lets d pass, calling the gate's alarm at each of its deadlines as the driver's alarm does.
func advance(g *commitGate, now func() time.Duration, d time.Duration) {
	end := now() + d
	for {
		at, ok := g.due()
		if !ok || at > end {
			time.Sleep(end - now())
			return
		}
		if wait := at - now(); wait > 0 {
			time.Sleep(wait)
		}
		g.alarm(now())
	}
}

// at is offset of partition 0.
func at(offset int64) []OffsetRef {
	return []OffsetRef{{Partition: 0, Offset: offset}}
}

// A store that the gate makes after the stores since its last answer were all presumed unsent
// belongs to the chain the first of them began, and anchors there: each presumption comes a patience after its
// withdrawal, doubling up to a quarter lease, so a chain of them would otherwise let a store come
// long after a rebalance's first group heartbeat with nothing answered to show the wait, and its
// offset anchor the window for explicit commits late (commitWindow). An answer ends the chain.
func TestGateChainOfPresumptionsKeepsTheFirstStoreTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick, late, most = 25 * time.Millisecond, 500 * time.Millisecond, 1250 * time.Millisecond
		start := time.Now()
		now := func() time.Duration { return time.Since(start) + time.Second }
		g := newCommitGate(storeAll, tick, late, most, now, &gateCounts{})
		defer g.Close()
		g.answered(5 * time.Millisecond) // an answer time known: stores are held less than a tick
		offset := int64(100)
		// store returns when the store's chain began.
		store := func() time.Duration {
			offset++
			at, chain, stored, err := g.Store(at(offset), 0)
			if err != nil || len(stored) != 1 {
				t.Fatalf("store of %d: %v, %v", offset, stored, err)
			}
			if at != now() {
				t.Fatalf("store of %d made at %v, want now (%v)", offset, at, now())
			}
			return chain
		}
		// presume waits until the gate presumes its store unsent, and returns how long that took.
		presume := func() time.Duration {
			from := now()
			for {
				advance(g, now, time.Millisecond)
				if busy, presumed := g.busy(now()); !busy {
					if len(presumed) != 1 {
						t.Fatalf("gate idle with %d stores presumed, want 1", len(presumed))
					}
					return now() - from
				}
			}
		}

		first := store()
		if first != now() {
			t.Fatalf("a chain's first store begins it at %v, want now (%v)", first, now())
		}
		var waits []time.Duration
		for range 4 {
			waits = append(waits, presume())
			if at := store(); at != first {
				t.Fatalf("a store after %d presumptions is in a chain that began at %v, want the first store, %v", len(waits), at, first)
			}
		}
		if waits[3] <= waits[0] || waits[3] > most+tick {
			t.Errorf("presumptions took %v; want them to lengthen, up to a quarter lease and a hold", waits)
		}
		// The last store's commit is answered: the chain ends, and the next store counts from now.
		advance(g, now, tick)
		g.answer(at(offset), now())
		if busy, _ := g.busy(now()); busy {
			t.Fatal("gate busy after the answer of its only store")
		}
		if at := store(); at != now() || at == first {
			t.Errorf("a store after an answer is in a chain that began at %v, want now (%v)", at, now())
		}
		// A store presumed unsent whose commit is answered after all ends the chain too.
		presume()
		advance(g, now, 10*time.Millisecond)
		g.answer(at(offset), now())
		if at := store(); at != now() {
			t.Errorf("a store after a late answer is in a chain that began at %v, want now (%v)", at, now())
		}
	})
}

// An answer seen after the driver's loop paused tells the gate little of how long the commit took:
// the pause is the loop's own, and recording it would stretch every presumption that follows up to
// half a lease (the simulation found a new tenure's first proof, after a missed tick, too late for
// the failover bound so). What the gate learns is bounded by the last time the loop found its queue
// empty.
func TestGateAnswerAfterAPausedLoopKeepsItsPatience(t *testing.T) {
	for _, tc := range []struct {
		name   string
		paused bool
	}{{"prompt loop", false}, {"paused loop", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const tick, late, most = 25 * time.Millisecond, 500 * time.Millisecond, 1250 * time.Millisecond
				start := time.Now()
				now := func() time.Duration { return time.Since(start) + time.Second }
				g := newCommitGate(storeAll, tick, late, most, now, &gateCounts{})
				defer g.Close()
				g.answered(5 * time.Millisecond)
				offset := int64(100)
				store := func() {
					offset++
					if _, _, stored, err := g.Store(at(offset), 0); err != nil || len(stored) != 1 {
						t.Fatalf("store of %d: %v, %v", offset, stored, err)
					}
				}
				store()
				// The commit is answered within a few milliseconds, but the loop sees the answer only
				// after a pause of two seconds, or at once.
				drained := now()
				advance(g, now, 5*time.Millisecond)
				if tc.paused {
					advance(g, now, 2*time.Second)
				} else {
					drained = now()
				}
				g.answer(at(offset), drained)
				// The next store's tick is missed: how long until the gate presumes it unsent?
				store()
				from := now()
				for {
					advance(g, now, time.Millisecond)
					if busy, _ := g.busy(now()); !busy {
						break
					}
				}
				if waited := now() - from; waited > 4*tick {
					t.Errorf("presumed a missed store unsent after %v, want within a few ticks (%v) of a commit answered in 5 ms", waited, tick)
				}
			})
		})
	}
}

// recordingConsumer records when each offset was stored (not withdrawn), on the gate's clock.
type recordingConsumer struct {
	now    func() time.Duration
	mu     sync.Mutex
	placed map[int64]time.Duration
}

func (c *recordingConsumer) store(offsets []OffsetRef) ([]OffsetRef, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range offsets {
		if o.Offset >= 0 {
			c.placed[o.Offset] = c.now()
		}
	}
	return offsets, nil
}

func (c *recordingConsumer) placedAt(offset int64) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.placed[offset]
	return at, ok
}

// A store made after a presumption comes half a tick late if the store presumed was made on time:
// goneli's cycles can be commensurate with librdkafka's tick, and a store at a phase that misses the
// tick (made just after one, withdrawn just before the next) would otherwise be made at that phase
// every time, each presumed unsent, and a new tenure would never lead (simulation seeds 7008093,
// 7013515). Every other store is shifted, not each, so that a phase shifted onto a missing one is
// not kept there either; a store after an answer is made at once, and one withdrawn before it was
// placed stores nothing and leaves nothing in flight.
func TestGateShiftsEveryOtherStoreAfterAPresumption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick, late, most = 25 * time.Millisecond, 500 * time.Millisecond, 1250 * time.Millisecond
		start := time.Now()
		now := func() time.Duration { return time.Since(start) + time.Second }
		c := &recordingConsumer{now: now, placed: map[int64]time.Duration{}}
		g := newCommitGate(c.store, tick, late, most, now, &gateCounts{})
		defer g.Close()
		g.answered(5 * time.Millisecond)
		offset := int64(100)
		// store stores the next offset and returns how much later than asked it was stored.
		store := func() time.Duration {
			offset++
			at, _, stored, err := g.Store(at(offset), 0)
			if err != nil || len(stored) != 1 || at != now() {
				t.Fatalf("store of %d: %v, %v at %v; want it stored, as of now (%v)", offset, stored, err, at, now())
			}
			advance(g, now, tick)
			placed, ok := c.placedAt(offset)
			if !ok {
				t.Fatalf("offset %d never stored", offset)
			}
			return placed - at
		}
		presume := func() {
			for {
				if busy, presumed := g.busy(now()); !busy {
					if len(presumed) != 1 {
						t.Fatalf("gate idle with %d stores presumed, want 1", len(presumed))
					}
					return
				}
				advance(g, now, time.Millisecond)
			}
		}
		var shifts []time.Duration
		shifts = append(shifts, store())
		for range 4 {
			presume()
			shifts = append(shifts, store())
		}
		want := []time.Duration{0, tick / 2, 0, tick / 2, 0}
		if !slices.Equal(shifts, want) {
			t.Errorf("stores made %v after they were asked for, want %v", shifts, want)
		}
		// An answer ends the doubt: the store after it is made at once.
		g.answer(at(offset), now())
		if d := store(); d != 0 {
			t.Errorf("a store after an answer made %v late, want at once", d)
		}
		// A shifted store withdrawn before its time (a revocation) stores nothing, and the gate
		// has nothing in flight.
		presume()
		offset++
		if _, _, stored, err := g.Store(at(offset), 0); err != nil || len(stored) != 1 {
			t.Fatalf("store of %d: %v, %v", offset, stored, err)
		}
		g.withdraw(0)
		advance(g, now, tick)
		if at, ok := c.placedAt(offset); ok {
			t.Errorf("offset %d withdrawn before it was placed was stored at %v", offset, at)
		}
		if busy, presumed := g.busy(now()); busy || len(presumed) != 0 {
			t.Errorf("gate busy %v, %d presumed after a store that was never placed; want idle, none", busy, len(presumed))
		}
		// The presumed store's commit answered late, while a store of its offset waits for its
		// shifted time: nothing is stored.
		store() // made at once: the store presumed before was shifted
		presume()
		if _, _, stored, err := g.Store(at(offset), 0); err != nil || len(stored) != 1 {
			t.Fatalf("store of %d again: %v, %v", offset, stored, err)
		}
		before, _ := c.placedAt(offset)
		g.answer(at(offset), now())
		advance(g, now, tick)
		if at, _ := c.placedAt(offset); at != before {
			t.Errorf("offset %d stored again at %v after its commit was answered", offset, at)
		}
		if busy, _ := g.busy(now()); busy {
			t.Error("gate busy after the late answer of the only store in flight")
		}
	})
}
