package goneli

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
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
