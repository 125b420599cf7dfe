package goneli

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// gateConsumer takes stores, and nothing else.
type gateConsumer struct {
	KafkaConsumer
}

func (gateConsumer) StoreOffsets(tps []kafka.TopicPartition) ([]kafka.TopicPartition, error) {
	return tps, nil
}

// A store that the gate makes after the stores since its last answer were all presumed unsent
// belongs to the chain the first of them began, and anchors there: each presumption comes a patience after its
// withdrawal, doubling up to a quarter lease, so a chain of them would otherwise let a store come
// long after a rebalance's first group heartbeat with nothing answered to show the wait, and its
// offset anchor the window for explicit commits late (commitWindow). An answer ends the chain.
func TestGateChainOfPresumptionsKeepsTheFirstStoreTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick, late, most = 25 * time.Millisecond, 500 * time.Millisecond, 1250 * time.Millisecond
		topic := "t"
		start := time.Now()
		now := func() time.Duration { return time.Since(start) + time.Second }
		g := newCommitGate(gateConsumer{}, &topic, tick, late, most, now, &gateCounts{})
		defer g.close()
		g.answered(5 * time.Millisecond) // an answer time known: stores are held less than a tick
		offset := int64(100)
		// store returns when the store's chain began.
		store := func() time.Duration {
			offset++
			at, chain, stored, err := g.store([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.Offset(offset)}}, 0)
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
				time.Sleep(time.Millisecond)
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
		time.Sleep(tick)
		g.answer(kafka.OffsetsCommitted{Offsets: []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.Offset(offset)}}}, now())
		if busy, _ := g.busy(now()); busy {
			t.Fatal("gate busy after the answer of its only store")
		}
		if at := store(); at != now() || at == first {
			t.Errorf("a store after an answer is in a chain that began at %v, want now (%v)", at, now())
		}
		// A store presumed unsent whose commit is answered after all ends the chain too.
		presume()
		time.Sleep(10 * time.Millisecond)
		g.answer(kafka.OffsetsCommitted{Offsets: []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.Offset(offset)}}}, now())
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
				topic := "t"
				start := time.Now()
				now := func() time.Duration { return time.Since(start) + time.Second }
				g := newCommitGate(gateConsumer{}, &topic, tick, late, most, now, &gateCounts{})
				defer g.close()
				g.answered(5 * time.Millisecond)
				offset := int64(100)
				store := func() {
					offset++
					if _, _, stored, err := g.store([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.Offset(offset)}}, 0); err != nil || len(stored) != 1 {
						t.Fatalf("store of %d: %v, %v", offset, stored, err)
					}
				}
				store()
				// The commit is answered within a few milliseconds, but the loop sees the answer only
				// after a pause of two seconds, or at once.
				drained := now()
				time.Sleep(5 * time.Millisecond)
				if tc.paused {
					time.Sleep(2 * time.Second)
				} else {
					drained = now()
				}
				g.answer(kafka.OffsetsCommitted{Offsets: []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.Offset(offset)}}}, drained)
				// The next store's tick is missed: how long until the gate presumes it unsent?
				store()
				from := now()
				for {
					time.Sleep(time.Millisecond)
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
