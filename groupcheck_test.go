package goneli

import (
	"errors"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func topicPart(topic string, p int32) kafka.TopicPartition {
	return kafka.TopicPartition{Topic: &topic, Partition: p}
}

func TestJudgeGroup(t *testing.T) {
	member := func(client string, parts ...kafka.TopicPartition) kafka.MemberDescription {
		return kafka.MemberDescription{ClientID: client, Host: "/10.0.0.1", Assignment: kafka.MemberAssignment{TopicPartitions: parts}}
	}
	for _, tc := range []struct {
		name     string
		members  []kafka.MemberDescription
		conflict []string // client ids of foreign members
		sawSelf  bool
	}{
		{"alone", []kafka.MemberDescription{member("me", topicPart("t", 0))}, nil, true},
		{"with followers", []kafka.MemberDescription{member("me", topicPart("t", 0)), member("f")}, nil, true},
		{"assignments hidden", []kafka.MemberDescription{member("me"), member("f")}, nil, false},
		{"other topic", []kafka.MemberDescription{member("me", topicPart("t", 0)), member("x", topicPart("u", 0))}, []string{"x"}, true},
		{"other topic, self not shown", []kafka.MemberDescription{member("me"), member("x", topicPart("u", 0), topicPart("v", 3))}, []string{"x"}, false},
		{"nameless partitions (kfake under KIP-848)", []kafka.MemberDescription{member("me", kafka.TopicPartition{Partition: 0})}, nil, true},
		{"own topic, another partition", []kafka.MemberDescription{member("me", topicPart("t", 1))}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeGroup(kafka.ConsumerGroupDescription{GroupID: "g", Members: tc.members}, "t", "me", 0)
			if v.sawSelf != tc.sawSelf {
				t.Errorf("sawSelf = %v, want %v", v.sawSelf, tc.sawSelf)
			}
			var got []string
			if v.conflict != nil {
				for _, m := range v.conflict.Members {
					got = append(got, m.ClientID)
				}
			}
			if len(got) != len(tc.conflict) || (len(got) > 0 && got[0] != tc.conflict[0]) {
				t.Errorf("foreign members %v, want %v", got, tc.conflict)
			}
		})
	}
	target := member("x")
	target.TargetAssignment = &kafka.MemberAssignment{TopicPartitions: []kafka.TopicPartition{topicPart("u", 0)}}
	if v := judgeGroup(kafka.ConsumerGroupDescription{Members: []kafka.MemberDescription{target}}, "t", "me", 0); v.conflict == nil {
		t.Error("a partition of another topic in a KIP-848 target assignment must count")
	}
}

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
	b := startBroker(t)
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
