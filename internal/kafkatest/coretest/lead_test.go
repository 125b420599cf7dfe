package coretest

import (
	"context"
	"slices"
	"strings"
	"testing"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/testkit"
)

// Two Run instances: ending the leader's context stops its task, hands over, and the successor's
// task starts only after the first one ended and its LeaderRevoked was delivered.
func TestRunHandsOverBetweenTasks(t *testing.T) {
	b := startBroker(t)
	log, tl, group := newTestLog(t), testkit.NewTaskLog(), groupName(t)
	type instance struct {
		cancel context.CancelFunc
		done   chan error
	}
	run := func(name string) instance {
		ctx, cancel := context.WithCancel(context.Background())
		in := instance{cancel: cancel, done: make(chan error, 1)}
		go func() {
			in.done <- Run(ctx, testConfig(b, group, name, log), func(ctx context.Context) {
				tl.Add("start %s", name)
				<-ctx.Done()
				tl.Add("end %s", name)
			}, func(e Event) {
				tl.Add("%s %T", name, e)
			})
		}()
		t.Cleanup(func() {
			cancel()
			<-in.done
		})
		return in
	}
	instances := map[string]instance{"a": run("a"), "c": run("c")}
	i := tl.AwaitFunc(t, "task start", func(e string) bool { return strings.HasPrefix(e, "start ") })
	first := strings.TrimPrefix(tl.Snapshot()[i], "start ")
	second := map[string]string{"a": "c", "c": "a"}[first]
	instances[first].cancel()
	if err := <-instances[first].done; err != nil {
		t.Fatalf("Run of %s: %v", first, err)
	}
	instances[first].done <- nil // for the cleanup
	tl.Await(t, "start "+second)
	got := tl.Snapshot()
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
	if !slices.Contains(tl.Snapshot(), "end "+second) {
		t.Fatalf("Run returned before its task ended: %q", tl.Snapshot())
	}
}

// RunRoles runs one call per role led, each with its role's name, and stops them all when its
// context ends.
func TestRunRolesRunsEachRole(t *testing.T) {
	b := startBroker(t)
	log, tl, group := newTestLog(t), testkit.NewTaskLog(), groupName(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunRoles(ctx, testConfig(b, group, "a", log), []string{"billing", "audit"}, func(ctx context.Context, role string) {
			tl.Add("start %s", role)
			<-ctx.Done()
			tl.Add("end %s", role)
		})
	}()
	tl.Await(t, "start billing")
	tl.Await(t, "start audit")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunRoles: %v", err)
	}
	got := tl.Snapshot()
	if !slices.Contains(got, "end billing") || !slices.Contains(got, "end audit") || len(got) != 4 {
		t.Fatalf("RunRoles returned with %q", got)
	}
}
