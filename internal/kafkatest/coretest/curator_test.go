package coretest

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
)

// watcher records what Watch reports, for awaiting and for checking tokens.
type watcher struct {
	mu      sync.Mutex
	seen    []LeaderInfo
	changed chan struct{}
}

func watch(t *testing.T, b *kafkatest.Broker, group string, log *testLog) *watcher {
	t.Helper()
	w := &watcher{changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, testConfig(b, group, "watcher", log), func(info LeaderInfo) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.seen = append(w.seen, info)
			close(w.changed)
			w.changed = make(chan struct{})
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	})
	return w
}

func (w *watcher) await(t *testing.T, what string, cond func(LeaderInfo) bool) LeaderInfo {
	t.Helper()
	limit := time.NewTimer(awaitLimit)
	defer limit.Stop()
	for i := 0; ; {
		w.mu.Lock()
		seen, changed := w.seen, w.changed
		w.mu.Unlock()
		for ; i < len(seen); i++ {
			if cond(seen[i]) {
				return seen[i]
			}
		}
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("watcher gave up waiting for %s; saw %v", what, seen)
		}
	}
}

func named(name string) func(LeaderInfo) bool {
	return func(l LeaderInfo) bool { return l.Name == name }
}

// Tokens must increase across every kind of handoff, as seen by the leaders themselves and by an
// outside observer.
func TestFencingTokenIncreasesAcrossHandoffs(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	w := watch(t, b, group, log)

	child, childEvents := startChild(t, b, group, "child")
	for ev := range childEvents {
		if ev == "LeaderAcquired" {
			break
		}
	}
	childInfo := w.await(t, "the child to lead", named("child"))

	a := contender(t, testConfig(b, group, "a", log), r)
	c := contender(t, testConfig(b, group, "c", log), r)
	awaitStable(t, b, group, 3)

	// Crash handoff.
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	events := r.await(t, "a successor to the killed child", has[LeaderAcquired](""))
	_, second := first[LeaderAcquired](events, "", 0)
	tokens := []int64{childInfo.Token, second.what.(LeaderAcquired).Token}

	// Graceful handoff, then a cut handoff, from whichever of a and c leads.
	leader, other := a, c
	if second.who == "c" {
		leader, other = c, a
	}
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	otherName := map[Neli]string{a: "a", c: "c"}[other]
	events = r.await(t, otherName+" to take over", has[LeaderAcquired](otherName))
	_, third := first[LeaderAcquired](events, otherName, 0)
	tokens = append(tokens, third.what.(LeaderAcquired).Token)
	if got := other.(Curator).Token(); got != tokens[2] {
		t.Fatalf("Token() = %d, LeaderAcquired said %d", got, tokens[2])
	}

	contender(t, testConfig(b, group, "d", log), r)
	awaitStable(t, b, group, 2)
	b.Net.Cut("goneli-"+otherName, kafkatest.Refuse)
	events = r.await(t, "d to take over from the cut leader", has[LeaderAcquired]("d"))
	_, fourth := first[LeaderAcquired](events, "d", 0)
	tokens = append(tokens, fourth.what.(LeaderAcquired).Token)
	w.await(t, "the watcher to see d", named("d"))

	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens do not increase: %v", tokens)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var last int64
	for _, info := range w.seen {
		if info.Name == "" {
			continue
		}
		if info.Token < last {
			t.Fatalf("the watcher saw tokens go backwards: %v", w.seen)
		}
		last = info.Token
	}
	checkExclusive(t, r.snapshot())
}

func TestFollowerObservesLeader(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	// f joins while a leads; a 3 s lease outlasts the join's rebalance (see
	// TestSingleLeaderAmongSeveral), so a's Token stays valid for the comparison below.
	leaderConfig := testConfig(b, group, "a", log)
	leaderConfig.HeartbeatTimeout = Duration(3 * time.Second)
	leaderConfig.Address = "http://a.example:8080"
	a := contender(t, leaderConfig, r)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))

	changes := make(chan LeaderInfo, 16)
	config := testConfig(b, group, "f", log)
	config.HeartbeatTimeout = Duration(3 * time.Second)
	config.OnLeaderChange = func(info LeaderInfo) { changes <- info }
	config.Address = "http://f.example:8080"
	f := contender(t, config, r).(Curator)
	awaitInfo := func(name string) LeaderInfo {
		t.Helper()
		limit := time.After(awaitLimit)
		for {
			select {
			case info := <-changes:
				if info.Name == name {
					return info
				}
			case <-limit:
				t.Fatalf("follower never observed %q as leader", name)
			}
		}
	}
	info := awaitInfo("a")
	if info.Token != a.(Curator).Token() || info.Since.IsZero() || info.Address != leaderConfig.Address {
		t.Fatalf("observed %v, a's token is %d", info, a.(Curator).Token())
	}
	if got, ok := f.Leader(); !ok || got.Name != "a" || got.Address != leaderConfig.Address {
		t.Fatalf("Leader() = %v, %v", got, ok)
	}
	if got, ok := a.(Curator).Leader(); !ok || got.Name != "a" || got.Address != leaderConfig.Address {
		t.Fatalf("the leader does not know itself: %v, %v", got, ok)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if next := awaitInfo("f"); next.Token <= info.Token || next.Address != config.Address {
		t.Fatalf("f took over as %v; a's token was %d", next, info.Token)
	}
}

func TestYieldHandsOverAndRejoins(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	a := leaderAndFollower(t, b, group, log, r)

	if err := a.Yield(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if a.IsLeader() {
		t.Fatal("IsLeader true right after Yield")
	}
	if s := a.Stats(); s.YieldRemaining <= 0 {
		t.Fatalf("YieldRemaining %v", s.YieldRemaining)
	}
	events := r.await(t, "c to take over", has[LeaderAcquired]("c"))
	iRev, _ := first[LeaderRevoked](events, "a", 0)
	iAcq, _ := first[LeaderAcquired](events, "c", 0)
	if iRev < 0 || iRev > iAcq {
		t.Fatalf("a must be revoked before c acquires: %s", describe(events))
	}
	awaitStable(t, b, group, 1)
	awaitStable(t, b, group, 2)
	checkExclusive(t, r.snapshot())
	checkGrammar(t, r.snapshot())
}

func TestStatsOfLeader(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	a := contender(t, testConfig(b, group, "a", log), r).(Curator)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	s := a.Stats()
	if !s.Leader || !s.Leading || !s.Assigned || s.Token <= 0 || s.Tenure == "" || s.Acquired != 1 ||
		s.HeartbeatsSent == 0 || s.HeartbeatsConfirmed == 0 || s.HeartbeatRTT <= 0 || s.RenewalLag < s.HeartbeatRTT ||
		s.LeaseRemaining <= 0 || s.LeaseRemaining > testLease || s.LeaseOverdue != 0 || s.State != Live {
		t.Fatalf("implausible leader stats: %+v", s)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	s = a.Stats()
	if s.Leader || s.Leading || s.Assigned || s.Revoked != 1 || s.State != Closed {
		t.Fatalf("stats after Close: %+v", s)
	}
}

// A watcher that starts after the last leader has gone must not announce it from its stale
// heartbeat: the first leader it reports is the next one.
func TestWatchIgnoresStaleLastHeartbeat(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	a := contender(t, testConfig(b, group, "a", log), r)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// Let a's last heartbeat age past a lease: this is the condition under test, not a wait for
	// an event.
	time.Sleep(testLease + 100*time.Millisecond)
	w := watch(t, b, group, log)
	contender(t, testConfig(b, group, "c", log), r)
	w.await(t, "c", named("c"))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[0].Name != "c" {
		t.Fatalf("the watcher reported %v before c", w.seen[:len(w.seen)-1])
	}
}
