package goneli

import (
	"slices"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func topicPart(topic string, p int32) kafka.TopicPartition {
	return kafka.TopicPartition{Topic: &topic, Partition: p}
}

// nameless is a partition as confluent-kafka-go gives it when the description names no topic.
func nameless(p int32) kafka.TopicPartition {
	return topicPart("", p)
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
		{"nameless, with followers", []kafka.MemberDescription{member("me", nameless(0)), member("f")}, nil, true},
		// Another member's nameless partition 0 may be partition 0 of another leader topic.
		{"another member's nameless partition", []kafka.MemberDescription{member("me", nameless(0)), member("x", nameless(0))}, []string{"x"}, true},
		{"another member's nameless partition, self not shown", []kafka.MemberDescription{member("me"), member("x", nameless(1))}, []string{"x"}, false},
		// Two members with this instance's client.id: which one is this instance cannot be told.
		{"nameless, client.id shared", []kafka.MemberDescription{member("me", nameless(0)), member("me")}, []string{"me"}, false},
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

// A conflict that rests only on partitions whose topic is not named does not make New fail, since
// the member may well use the same topic, but it keeps a tenure from leading; its message says why.
func TestUnnamedConflict(t *testing.T) {
	d := kafka.ConsumerGroupDescription{GroupID: "g", Members: []kafka.MemberDescription{
		{ClientID: "me", Assignment: kafka.MemberAssignment{TopicPartitions: []kafka.TopicPartition{nameless(0)}}},
		{ClientID: "x", Host: "/10.0.0.2", Assignment: kafka.MemberAssignment{TopicPartitions: []kafka.TopicPartition{nameless(2), nameless(0)}}},
	}}
	c := judgeGroup(d, "t", "me", 0).conflict
	if c == nil || c.definite() || len(c.Members) != 1 || !slices.Equal(c.Members[0].Unnamed, []int32{0, 2}) {
		t.Fatalf("conflict %+v, want x's partitions 0 and 2 unnamed and nothing definite", c)
	}
	if msg := c.Error(); !strings.Contains(msg, "x on /10.0.0.2 (partitions 0, 2 of a topic the group's description does not name)") {
		t.Errorf("message does not name the member and its partitions: %s", msg)
	}
	d.Members = append(d.Members, kafka.MemberDescription{ClientID: "y", Assignment: kafka.MemberAssignment{TopicPartitions: []kafka.TopicPartition{topicPart("u", 0)}}})
	if c := judgeGroup(d, "t", "me", 0).conflict; c == nil || !c.definite() {
		t.Errorf("a member on another named topic must make the conflict definite: %+v", c)
	}
}
