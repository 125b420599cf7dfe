package kafkatest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Requests that a client pipelines on one connection wait in the socket while the broker answers
// the first, and the Wire counts them all in flight from the moment they arrive until each is
// answered.
func TestWireCountsPipelinedRequests(t *testing.T) {
	w := NewWire()
	nm := NewNetem()
	b, err := StartNet(nm, kfake.ListenFn(w.Listen(nm.Listen)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n = 3
	key := WireKey{Client: "piper", Key: int16(kmsg.ListGroups)}
	var held bool
	b.ControlKey(int16(kmsg.ListGroups), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held {
			return nil, nil, false
		}
		held = true
		// The first answer waits until the other requests have arrived behind it (a fixed 100 ms
		// was not always enough for their goroutines to send them under .ci/stress's load).
		b.SleepControl(func() {
			for deadline := time.Now().Add(10 * time.Second); w.Most()[key] < n && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
		})
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ClientID("piper"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := ping(cl, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, cl); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if most, total := w.Most()[key], w.Totals()[key]; most != n || total != n {
		t.Errorf("%d list-groups requests in flight at most, %d sent; want %d and %d", most, total, n, n)
	}
	w.Reset()
	if most := w.Most()[key]; most != 0 {
		t.Errorf("%d requests still in flight after every answer, want 0", most)
	}
}
