package coretest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goneli/goneli"
)

// taskLog records what tasks and barriers did, in one order.
type taskLog struct {
	mu      sync.Mutex
	entries []string
	changed chan struct{}
}

func newTaskLog() *taskLog {
	return &taskLog{changed: make(chan struct{})}
}

func (l *taskLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, fmt.Sprintf(format, args...))
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *taskLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// await waits until the log has an entry equal to want, and returns its index.
func (l *taskLog) await(t *testing.T, want string) int {
	t.Helper()
	return l.awaitFunc(t, want, func(e string) bool { return e == want })
}

// awaitFunc waits until the log has an entry that match accepts, and returns its index.
func (l *taskLog) awaitFunc(t *testing.T, what string, match func(string) bool) int {
	t.Helper()
	limit := time.NewTimer(awaitLimit)
	defer limit.Stop()
	for {
		l.mu.Lock()
		i, changed := slices.IndexFunc(l.entries, match), l.changed
		l.mu.Unlock()
		if i >= 0 {
			return i
		}
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("no %s within %v; log: %q", what, awaitLimit, l.snapshot())
		}
	}
}

// Two Run instances: ending the leader's context stops its task, hands over, and the successor's
// task starts only after the first one ended and its LeaderRevoked was delivered.
func TestRunHandsOverBetweenTasks(t *testing.T) {
	b := startBroker(t)
	log, tl, group := newTestLog(t), newTaskLog(), groupName(t)
	type instance struct {
		cancel context.CancelFunc
		done   chan error
	}
	run := func(name string) instance {
		ctx, cancel := context.WithCancel(context.Background())
		in := instance{cancel: cancel, done: make(chan error, 1)}
		go func() {
			in.done <- Run(ctx, testConfig(b, group, name, log), func(ctx context.Context) {
				tl.add("start %s", name)
				<-ctx.Done()
				tl.add("end %s", name)
			}, func(e Event) {
				tl.add("%s %T", name, e)
			})
		}()
		t.Cleanup(func() {
			cancel()
			<-in.done
		})
		return in
	}
	instances := map[string]instance{"a": run("a"), "c": run("c")}
	i := tl.awaitFunc(t, "task start", func(e string) bool { return strings.HasPrefix(e, "start ") })
	first := strings.TrimPrefix(tl.snapshot()[i], "start ")
	second := map[string]string{"a": "c", "c": "a"}[first]
	instances[first].cancel()
	if err := <-instances[first].done; err != nil {
		t.Fatalf("Run of %s: %v", first, err)
	}
	instances[first].done <- nil // for the cleanup
	tl.await(t, "start "+second)
	got := tl.snapshot()
	order := []string{first + " goneli.LeaderAcquired", "start " + first, "end " + first, first + " goneli.LeaderRevoked",
		second + " goneli.LeaderAcquired", "start " + second}
	for i := 1; i < len(order); i++ {
		if a, b := slices.Index(got, order[i-1]), slices.Index(got, order[i]); a < 0 || a > b {
			t.Fatalf("%q should come before %q: %q", order[i-1], order[i], got)
		}
	}
	instances[second].cancel()
	if err := <-instances[second].done; err != nil {
		t.Fatalf("Run of %s: %v", second, err)
	}
	instances[second].done <- nil
	if !slices.Contains(tl.snapshot(), "end "+second) {
		t.Fatalf("Run returned before its task ended: %q", tl.snapshot())
	}
}

// RunRoles runs one call per role led, each with its role's name, and stops them all when its
// context ends.
func TestRunRolesRunsEachRole(t *testing.T) {
	b := startBroker(t)
	log, tl, group := newTestLog(t), newTaskLog(), groupName(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunRoles(ctx, testConfig(b, group, "a", log), []string{"billing", "audit"}, func(ctx context.Context, role string) {
			tl.add("start %s", role)
			<-ctx.Done()
			tl.add("end %s", role)
		})
	}()
	tl.await(t, "start billing")
	tl.await(t, "start audit")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunRoles: %v", err)
	}
	got := tl.snapshot()
	if !slices.Contains(got, "end billing") || !slices.Contains(got, "end audit") || len(got) != 4 {
		t.Fatalf("RunRoles returned with %q", got)
	}
}
