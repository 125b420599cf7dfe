package coretest

import (
	"sync"
	"testing"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
)

// A barrier that blocks in LeaderFenced holds back the role's later events, not its renewals: the
// lease is renewed again once the fault is over, but leadership resumes only when the barrier has
// returned and then taken the LeaderAcquired that follows.
func TestBlockingFencedBarrierDelaysOnlyEvents(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	release := make(chan struct{})
	var once sync.Once
	n, err := New(testConfig(b, group, "a", log), func(e Event) {
		r.add("a", e)
		if _, ok := e.(LeaderFenced); ok {
			once.Do(func() { <-release })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	released := sync.OnceFunc(func() { close(release) })
	t.Cleanup(func() {
		released()
		_ = n.Close()
		awaitClientsClosed(t, n)
	})
	pulse(t, n)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))

	// Cut until the lease runs out, which is sooner than the group session (about 1.25 leases), so
	// the tenure outlives the cut.
	b.Net.Cut("goneli-a", kafkatest.Blackhole)
	r.await(t, "a to be fenced", has[LeaderFenced]("a"))
	b.Net.Heal("goneli-a")
	c := n.(Curator)
	atFence := c.Stats()
	awaitCondition(t, "a heartbeat confirmed while the barrier blocks in LeaderFenced", func() bool {
		s := c.Stats()
		return s.Tenure == atFence.Tenure && s.HeartbeatsConfirmed > atFence.HeartbeatsConfirmed
	})
	if n.IsLeader() {
		t.Fatal("IsLeader true while the barrier still handles LeaderFenced")
	}
	if events := r.snapshot(); countOf[LeaderAcquired](events, "a") != 1 {
		t.Fatalf("an event was delivered while the barrier blocked: %s", describe(events))
	}

	released()
	events := r.await(t, "a to lead again", func(events []stamped) bool { return countOf[LeaderAcquired](events, "a") == 2 })
	awaitCondition(t, "IsLeader after the barrier returned", n.IsLeader)
	checkGrammar(t, events)
}
