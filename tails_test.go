package goneli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
)

// tailWire is goneli's own connection as far as the start of an assignment needs it: it answers
// EndOffsets from ends (err for every partition if set), and describes the group as the scripted
// admin does.
type tailWire struct {
	admin *scriptAdmin
	ends  map[int32]int64
	err   error
	// slow makes EndOffsets wait until its context ends, as a broker that does not answer in time.
	slow bool

	mu    sync.Mutex
	asked [][]int32
}

func (w *tailWire) DescribeConsumerGroups(ctx context.Context, groups []string, o ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error) {
	return w.admin.DescribeConsumerGroups(ctx, groups, o...)
}

func (w *tailWire) Produce(_ context.Context, _ string, records []sidechan.Record) []sidechan.Produced {
	out := make([]sidechan.Produced, len(records))
	for i := range out {
		out[i].Err = errors.New("not used")
	}
	return out
}

func (w *tailWire) EndOffsets(ctx context.Context, _ string, partitions []int32) (map[int32]int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked = append(w.asked, partitions)
	if w.slow {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if w.err != nil {
		return nil, w.err
	}
	out := map[int32]int64{}
	for _, p := range partitions {
		if end, ok := w.ends[p]; ok {
			out[p] = end
		}
	}
	return out, nil
}

func (w *tailWire) Fallback() error { return nil }
func (w *tailWire) Close()          {}

// newTailRig is a scripted instance of n roles whose own connection is a tailWire answering ends
// (or err).
func newTailRig(t *testing.T, n int, ends map[int32]int64, err error) (*scriptRig, *tailWire) {
	roles := Shards(n)
	r := newScriptRigFor(t, roles, core.RolesDigest(roles), Config{})
	w := &tailWire{admin: &scriptAdmin{log: r.consumer.log, partitions: n, clientID: r.n.d.ClientID()}, ends: ends, err: err}
	r.n.d.UseWire(w)
	return r, w
}

// An assignment of several partitions starts each at releaseLookback records before its end, read
// in one request over goneli's own connection; what that request cannot tell, a lone partition,
// and any assignment while a role of the instance leads start at OffsetTail for librdkafka.
func TestAssignmentStartsReadInOneRequest(t *testing.T) {
	tail := kafka.OffsetTail(core.ReleaseLookback)
	for _, c := range []struct {
		name  string
		roles int
		ends  map[int32]int64
		err   error
		want  []kafka.Offset
		asked int
	}{
		{"three partitions", 3, map[int32]int64{0: 100, 1: 5, 2: 16}, nil, []kafka.Offset{84, 0, 0}, 1},
		{"one unanswered", 3, map[int32]int64{0: 100, 2: 40}, nil, []kafka.Offset{84, tail, 24}, 1},
		{"request failed", 3, nil, errors.New("broker gone"), []kafka.Offset{tail, tail, tail}, 1},
		{"one partition", 1, map[int32]int64{0: 100}, nil, []kafka.Offset{tail}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, w := newTailRig(t, c.roles, c.ends, c.err)
				var all []int32
				for i := range c.roles {
					all = append(all, int32(i))
				}
				r.consumer.push(rebalanceEvent{kafka.AssignedPartitions{Partitions: r.consumer.tps(all)}})
				r.pulse(*r.n.config.MinPollInterval, false)
				r.consumer.mu.Lock()
				taken := r.consumer.taken
				r.consumer.mu.Unlock()
				if len(taken) != 1 {
					t.Fatalf("%d assignments taken, want 1", len(taken))
				}
				var got []kafka.Offset
				for _, tp := range taken[0] {
					got = append(got, tp.Offset)
				}
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Errorf("taken at %v, want %v", got, c.want)
				}
				if len(w.asked) != c.asked {
					t.Errorf("ends asked %d times, want %d", len(w.asked), c.asked)
				}
				r.close()
			})
		})
	}
}

// While a role leads, the rebalance callback does not wait on the connection: the watchdog that
// fences that role needs the loop's lock.
func TestAssignmentStartsLeftToLibrdkafkaWhileLeading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w := newTailRig(t, 3, map[int32]int64{0: 100, 1: 100, 2: 100}, nil)
		r.consumer.push(rebalanceEvent{kafka.AssignedPartitions{Partitions: r.consumer.tps([]int32{0})}})
		for i := 0; len((&roleSet{n: r.n}).Leading()) == 0; i++ {
			if i == 100 {
				t.Fatalf("role 0 never led; events %s", r.seen())
			}
			r.pulse(*r.n.config.MinPollInterval, false)
		}
		// The eager assignor hands out the whole assignment each time.
		r.consumer.push(rebalanceEvent{kafka.AssignedPartitions{Partitions: r.consumer.tps([]int32{0, 1, 2})}})
		r.pulse(*r.n.config.MinPollInterval, false)
		r.consumer.mu.Lock()
		taken := r.consumer.taken
		r.consumer.mu.Unlock()
		if len(taken) != 2 {
			t.Fatalf("%d assignments taken, want 2", len(taken))
		}
		for _, tp := range taken[1] {
			if tp.Offset != kafka.OffsetTail(core.ReleaseLookback) {
				t.Errorf("partition %d taken at %v while role 0 leads, want OffsetTail(%d)", tp.Partition, tp.Offset, core.ReleaseLookback)
			}
		}
		if len(w.asked) != 0 {
			t.Errorf("ends asked %d times while a role leads, want 0", len(w.asked))
		}
		r.close()
	})
}

// An assignment whose callback waited for the ends (up to tailsWait) is taken late: librdkafka
// counts itself steady from the Take on, and ignored a further rebalance's news meanwhile, so the
// leases hold renewals back from before the wait until an answer bound after the Take, and anchor
// nothing stored until then (issue 46: judged before the wait, two leaders at the default lease).
func TestAssignmentTakenAfterTheWaitHoldsRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w := newTailRig(t, 3, nil, nil)
		w.slow = true
		r.consumer.push(rebalanceEvent{kafka.AssignedPartitions{Partitions: r.consumer.tps([]int32{0, 1, 2})}})
		before := r.n.d.Now()
		r.pulse(*r.n.config.MinPollInterval, false)
		var taken int
		bound := r.n.d.Timing().AnswerBound(r.n.config.settings())
		type hold struct{ from, until, storeFrom, storeUntil time.Duration }
		var holds []hold
		r.n.d.Inspect(func(_ *driver.Config, _ *core.Machine, roles []*core.Role) {
			taken = len(r.consumer.taken)
			for _, p := range roles {
				holds = append(holds, hold{p.Lease.HeldFrom, p.Lease.HeldUntil, p.Lease.StoreFrom, p.Lease.StoreUntil})
			}
		})
		if taken != 1 {
			t.Fatalf("%d assignments taken, want 1", taken)
		}
		// The Take came after the whole wait: the hold must reach an answer bound past it.
		// The callback waits up to half a lease for the ends (internal/driver, tails.go).
		want := before + *r.n.config.HeartbeatTimeout/2 + bound
		for i, h := range holds {
			if h.from > before || h.until < want || h.storeFrom > before || h.storeUntil < want {
				t.Errorf("role %d: renewals held over (%v, %v], stores over (%v, %v]; want both from at most %v to at least %v",
					i, h.from, h.until, h.storeFrom, h.storeUntil, before, want)
			}
		}
		r.close()
	})
}
