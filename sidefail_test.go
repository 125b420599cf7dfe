package goneli

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
)

// brokenWire is goneli's own connection failing at everything, as one that cannot do what
// librdkafka does would (a proxy, an answer it cannot read): every request fails without any
// answer from a broker. It gives way when told to.
type brokenWire struct {
	mu        sync.Mutex
	fallback  error
	describes int
}

var errBrokenWire = errors.New("read tcp 127.0.0.1:9092: connection reset by peer")

func (w *brokenWire) DescribeConsumerGroups(context.Context, []string, ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.describes++
	if w.fallback != nil {
		return kafka.DescribeConsumerGroupsResult{}, w.fallback
	}
	return kafka.DescribeConsumerGroupsResult{}, errBrokenWire
}

func (w *brokenWire) Produce(_ context.Context, _ string, records []sidechan.Record) []sidechan.Produced {
	out := make([]sidechan.Produced, len(records))
	for i := range out {
		out[i].Err = errBrokenWire
	}
	return out
}

func (w *brokenWire) EndOffsets(context.Context, string, []int32) (map[int32]int64, error) {
	return nil, errBrokenWire
}

func (w *brokenWire) Fallback() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fallback
}

func (w *brokenWire) GiveWay(why error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fallback == nil {
		w.fallback = &sidechan.FallbackError{Err: why}
	}
}

func (w *brokenWire) Close() {}

// newBrokenWireRig is newScriptRig with a brokenWire for goneli's own connection.
func newBrokenWireRig(t *testing.T) (*scriptRig, *brokenWire) {
	r, w := newScriptRig(t), &brokenWire{}
	r.n.d.UseWire(w)
	return r, w
}

// Before, only a TLS certificate that Go refused made goneli's own connection give way to
// librdkafka: a connection that failed in any other way failed every group check, and the
// instance never led while librdkafka was assigned the partition and had its commits accepted.
// Now the check gives way once it has failed for a lease while librdkafka's commits were
// accepted, and the tenure leads; while librdkafka's commits fail too, it does not give way.
func TestGroupCheckGivesWayToLibrdkafka(t *testing.T) {
	t.Run("librdkafka commits", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, w := newBrokenWireRig(t)
			r.assign()
			if !r.pulse(5*scriptLease, true) {
				t.Fatalf("no leadership within five leases of a broken own connection; events %s", r.seen())
			}
			if !sidechan.IsFallback(w.Fallback()) || !strings.Contains(w.Fallback().Error(), "librdkafka's commits were accepted") {
				t.Errorf("the connection did not give way, or not for the reason: %v", w.Fallback())
			}
			r.close()
		})
	})
	t.Run("librdkafka's commits fail too", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r, w := newBrokenWireRig(t)
			r.consumer.mu.Lock()
			r.consumer.commitErr = kafka.NewError(kafka.ErrCoordinatorNotAvailable, "coordinator not available", false)
			r.consumer.mu.Unlock()
			r.assign()
			if r.pulse(5*scriptLease, true) {
				t.Fatalf("led without a group check; events %s", r.seen())
			}
			if err := w.Fallback(); err != nil {
				t.Errorf("gave way while librdkafka's commits failed as well: %v", err)
			}
			r.close()
		})
	})
}
