// Command fullcontrol pulses goneli from its own loop and uses a Barrier to tie leader work to the
// tenure: work started while leading is cancelled the moment leadership is fenced or revoked.
package main

import (
	"context"
	"log"
	"sync"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/examples/internal/local"
)

// tenure holds the context of the current leadership, cancelled when it ends. The barrier and the
// pulse loop run on different goroutines (a fence can come from goneli's lease watchdog), hence
// the mutex.
type tenure struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

func (t *tenure) begin() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ctx, t.cancel = context.WithCancel(context.Background())
}

func (t *tenure) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cancel != nil {
		t.cancel()
	}
}

func (t *tenure) context() context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}
	return t.ctx
}

func main() {
	env, done := local.Start()
	defer done()

	var t tenure
	barrier := func(e goneli.Event) {
		switch e := e.(type) {
		case goneli.LeaderAcquired:
			// IsLeader turns true only when this returns, so leader state set up here is ready
			// before any leader work runs.
			log.Printf("acquired leadership (tenure %s)", e.Tenure)
			t.begin()
		case goneli.LeaderFenced:
			// Another leader may be elected any moment: stop now, do not wait for anything.
			log.Printf("fenced: %s", e.Reason)
			t.end()
		case goneli.LeaderRevoked:
			// An orderly handover: the successor waits until this returns, so in-flight work could
			// be finished here.
			log.Printf("revoked (tenure %s)", e.Tenure)
			t.end()
		}
	}
	n, err := goneli.New(goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": env.Servers},
		LeaderGroupID: "example-fullcontrol",
	}, barrier)
	if err != nil {
		log.Fatal(err)
	}

	for env.Ctx.Err() == nil {
		// A follower waits here up to 100 ms for leadership; a leader returns at once.
		leader, err := n.Pulse(100 * time.Millisecond)
		if err != nil {
			log.Printf("fatal: %v", err)
			break
		}
		if leader {
			work(t.context())
		}
	}
	if err := n.Close(); err != nil {
		log.Print(err)
	}
}

// work is one short step of leader work that gives up as soon as the tenure ends.
func work(ctx context.Context) {
	select {
	case <-time.After(250 * time.Millisecond):
		log.Printf("leader: finished one step")
	case <-ctx.Done():
		log.Printf("leader: step abandoned, no longer leader")
	}
}
