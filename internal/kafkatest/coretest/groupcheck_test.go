package coretest

import (
	"errors"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// awaitCondition polls cond until it holds; it stands for an event the library does not publish.
func awaitCondition(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(awaitLimit)
	for !cond() {
		if time.Now().After(limit) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Members of one group on different leader topics are each assigned partition 0 of their own
// topic, and each one's commits pass the coordinator's member and generation check: both led.
func TestGroupSharedByTwoTopics(t *testing.T) {
	b := startKafka(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	onTopic := func(name, topic string) Config {
		c := testConfig(b, group, name, log)
		c.LeaderTopic = topic
		return c
	}

	// While x leads, an instance configured with another topic is refused at once.
	x := contender(t, onTopic("x", group+".x"), r).(Curator)
	r.await(t, "x to lead", has[LeaderAcquired]("x"))
	awaitStable(t, b, group, 1)
	_, err := New(onTopic("early", group+".y"))
	var gc *GroupConflictError
	if !errors.As(err, &gc) || len(gc.Members) != 1 || gc.Members[0].ClientID != "goneli-x" || gc.Members[0].Topics[0] != group+".x" {
		t.Fatalf("New with another topic: want a *GroupConflictError naming goneli-x on %s.x, got %v", group, err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}

	// New cannot see an instance that has yet to join, so two can start side by side: with the
	// broker refusing to describe the group, New lets both through, and neither may lead.
	refuse := b.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeGroups, kmsg.ConsumerGroupDescribe},
		Err: kerr.GroupAuthorizationFailed, Count: -1})
	y := contender(t, onTopic("y", group+".y"), r).(Curator)
	z := contender(t, onTopic("z", group+".z"), r).(Curator)
	awaitCondition(t, "y and z to own partition 0 of their topics", func() bool {
		return y.Stats().Assigned && z.Stats().Assigned
	})
	refuse.Remove()
	awaitCondition(t, "y and z to see each other", func() bool {
		return y.Stats().GroupConflict != nil && z.Stats().GroupConflict != nil
	})
	if y.IsLeader() || z.IsLeader() {
		t.Fatal("an instance leads while the group has a member on another topic")
	}
	if i, _ := first[LeaderAcquired](r.snapshot(), "y", 0); i >= 0 {
		t.Fatalf("y led: %s", describe(r.snapshot()))
	}
	if i, _ := first[LeaderAcquired](r.snapshot(), "z", 0); i >= 0 {
		t.Fatalf("z led: %s", describe(r.snapshot()))
	}

	// Once z has gone, y leads.
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	events := r.await(t, "y to lead once z has left", has[LeaderAcquired]("y"))
	if y.Stats().GroupConflict != nil {
		t.Error("GroupConflict still set on the leader")
	}
	checkExclusive(t, events)
	checkGrammar(t, events)
}

// A membership that passed a group check is not checked again while it keeps its member id and a
// partition: the rebalances caused by followers joining and leaving cost the leader no description
// of the group (each is a coordinator-bound admin request; see GroupConflictError), even under
// eager assignment, where each of them ends the leader's tenure and begins another (range gives
// partition 0 to the first member id in order, so the leader is named "a"). A follower
// that leads after the leader leaves is checked at its first tenure.
func TestGroupCheckedOncePerMembership(t *testing.T) {
	for _, strategy := range []string{"range", "cooperative-sticky"} {
		t.Run(strategy, func(t *testing.T) {
			b := startKafka(t)
			log, r, group := newTestLog(t), newRecorder(), groupName(t)
			config := func(name string) Config {
				c := testConfig(b, group, name, log)
				c.KafkaConfig["partition.assignment.strategy"] = strategy
				return c
			}
			x := contender(t, config("a"), r).(Curator)
			r.await(t, "a to lead", has[LeaderAcquired]("a"))
			checks := x.Stats().GroupChecks
			if checks < 2 {
				t.Fatalf("a made %d group checks before leading, want New's and its tenure's", checks)
			}
			contender(t, config("f1"), r)
			awaitStable(t, b, group, 2)
			f2 := contender(t, config("f2"), r)
			awaitStable(t, b, group, 3)
			if err := f2.Close(); err != nil {
				t.Fatal(err)
			}
			awaitStable(t, b, group, 2)
			// IsLeader turns true only once the barrier has returned from LeaderAcquired, after the
			// recorder has seen it, so it is polled rather than checked on each event.
			awaitCondition(t, "a to lead again", x.IsLeader)
			if got := x.Stats().GroupChecks; got != checks {
				t.Errorf("a made %d more group checks while followers came and went; want none", got-checks)
			}
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
			events := r.await(t, "f1 to lead once a has left", has[LeaderAcquired]("f1"))
			checkExclusive(t, events)
			checkGrammar(t, events)
		})
	}
}
