package driver

import (
	"slices"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/core"
)

func topicPartOf(topic string, p int32) kafka.TopicPartition {
	return kafka.TopicPartition{Topic: &topic, Partition: p}
}

// nameless is a partition as confluent-kafka-go gives it when the description names no topic.
func nameless(p int32) kafka.TopicPartition {
	return topicPartOf("", p)
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
		{"alone", []kafka.MemberDescription{member("me", topicPartOf("t", 0))}, nil, true},
		{"with followers", []kafka.MemberDescription{member("me", topicPartOf("t", 0)), member("f")}, nil, true},
		{"assignments hidden", []kafka.MemberDescription{member("me"), member("f")}, nil, false},
		{"other topic", []kafka.MemberDescription{member("me", topicPartOf("t", 0)), member("x", topicPartOf("u", 0))}, []string{"x"}, true},
		{"other topic, self not shown", []kafka.MemberDescription{member("me"), member("x", topicPartOf("u", 0), topicPartOf("v", 3))}, []string{"x"}, false},
		{"nameless partitions (kfake under KIP-848)", []kafka.MemberDescription{member("me", kafka.TopicPartition{Partition: 0})}, nil, true},
		{"nameless, with followers", []kafka.MemberDescription{member("me", nameless(0)), member("f")}, nil, true},
		// Another member's nameless partition 0 may be partition 0 of another leader topic.
		{"another member's nameless partition", []kafka.MemberDescription{member("me", nameless(0)), member("x", nameless(0))}, []string{"x"}, true},
		{"another member's nameless partition, self not shown", []kafka.MemberDescription{member("me"), member("x", nameless(1))}, []string{"x"}, false},
		// Two members with this instance's client.id: which one is this instance cannot be told.
		{"nameless, client.id shared", []kafka.MemberDescription{member("me", nameless(0)), member("me")}, []string{"me"}, false},
		{"own topic, another partition", []kafka.MemberDescription{member("me", topicPartOf("t", 1))}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := core.JudgeGroup(describedOf(kafka.ConsumerGroupDescription{GroupID: "g", Members: tc.members}), "t", "me", "", 0)
			if v.SawSelf != tc.sawSelf {
				t.Errorf("sawSelf = %v, want %v", v.SawSelf, tc.sawSelf)
			}
			var got []string
			if v.Conflict != nil {
				for _, m := range v.Conflict.Members {
					got = append(got, m.ClientID)
				}
			}
			if len(got) != len(tc.conflict) || (len(got) > 0 && got[0] != tc.conflict[0]) {
				t.Errorf("foreign members %v, want %v", got, tc.conflict)
			}
		})
	}
	// A predecessor of the same client.id (a restarted process whose session has not expired)
	// holding the partition does not show this member holding it.
	pred := member("me", topicPartOf("t", 0))
	pred.ConsumerID = "me-old"
	self := member("me")
	self.ConsumerID = "me-new"
	if v := core.JudgeGroup(describedOf(kafka.ConsumerGroupDescription{Members: []kafka.MemberDescription{pred, self}}), "t", "me", "me-new", 0); v.SawSelf {
		t.Error("a predecessor's assignment was taken for this member's")
	}
	self.Assignment.TopicPartitions = []kafka.TopicPartition{topicPartOf("t", 0)}
	if v := core.JudgeGroup(describedOf(kafka.ConsumerGroupDescription{Members: []kafka.MemberDescription{self}}), "t", "me", "me-new", 0); !v.SawSelf {
		t.Error("this member's own assignment not seen by its member id")
	}
	target := member("x")
	target.TargetAssignment = &kafka.MemberAssignment{TopicPartitions: []kafka.TopicPartition{topicPartOf("u", 0)}}
	if v := core.JudgeGroup(describedOf(kafka.ConsumerGroupDescription{Members: []kafka.MemberDescription{target}}), "t", "me", "", 0); v.Conflict == nil {
		t.Error("a partition of another topic in a KIP-848 target assignment must count")
	}
}

// A membership is vouched for from a check that passed under its member id until it may have been
// invisible to another member's check: a new member id, a lost assignment, or a generation in
// which it held no partition.
func TestMembership(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps func(m *core.Membership)
		want  bool
	}{
		{"never checked", func(m *core.Membership) { m.Assigned("m1", true) }, false},
		{"passed", func(m *core.Membership) { m.Assigned("m1", true); m.Passed("m1") }, true},
		{"passed under an earlier member id", func(m *core.Membership) { m.Assigned("m2", true); m.Passed("m1") }, false},
		{"member id unknown", func(m *core.Membership) { m.Assigned("", true); m.Passed("") }, false},
		{"eager rebalance keeps a partition", func(m *core.Membership) {
			m.Assigned("m1", true)
			m.Passed("m1")
			m.Revoked(false, false, false)
			m.Assigned("m1", true)
		}, true},
		{"eager rebalance gives nothing", func(m *core.Membership) {
			m.Assigned("m1", true)
			m.Passed("m1")
			m.Revoked(false, false, false)
			m.Assigned("m1", false)
			m.Assigned("m1", true)
		}, false},
		{"rejoined under a new member id", func(m *core.Membership) {
			m.Assigned("m1", true)
			m.Passed("m1")
			m.Revoked(false, false, false)
			m.Assigned("m2", true)
		}, false},
		{"assignment lost", func(m *core.Membership) {
			m.Assigned("m1", true)
			m.Passed("m1")
			m.Revoked(true, false, false)
			m.Assigned("m1", true)
		}, false},
		{"cooperative revocation keeps a partition", func(m *core.Membership) {
			m.Assigned("m1", true)
			m.Passed("m1")
			m.Revoked(false, true, true)
		}, true},
		{"cooperative revocation of the last partition", func(m *core.Membership) {
			m.Assigned("m1", true)
			m.Passed("m1")
			m.Revoked(false, true, false)
			m.Assigned("m1", true)
		}, false},
		{"left to yield", func(m *core.Membership) {
			m.Assigned("m1", true)
			m.Passed("m1")
			m.Left()
			m.Assigned("m1", true)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m core.Membership
			tc.steps(&m)
			if m.Vouched != tc.want {
				t.Errorf("vouched %v, want %v", m.Vouched, tc.want)
			}
		})
	}
}

// The member id is read from librdkafka's serialized group metadata, and anything unexpected reads
// as unknown.
func TestParseMemberID(t *testing.T) {
	for _, tc := range []struct {
		in, group, want string
	}{
		{"CGMDv2:\x01\x00\x00\x00g\x00cid-d5b85ed9\x00\x01", "g", "cid-d5b85ed9"},
		{"CGMDv2:\xff\xff\xff\xffg\x00\x00\x01", "g", ""},
		{"CGMDv2:\x01\x00\x00\x00other\x00cid-1\x00\x01", "g", ""},
		{"CGMDv3:\x01\x00\x00\x00g\x00cid-1\x00\x01", "g", ""},
		{"CGMDv2:\x01\x00\x00\x00g\x00cid-1", "g", ""},
		{"CGMDv2:\x01", "g", ""},
	} {
		if got := parseMemberID([]byte(tc.in), tc.group); got != tc.want {
			t.Errorf("parseMemberID(%q, %q) = %q, want %q", tc.in, tc.group, got, tc.want)
		}
	}
}

// A conflict that rests only on partitions whose topic is not named does not make New fail, since
// the member may well use the same topic, but it keeps a tenure from leading; its message says why.
func TestUnnamedConflict(t *testing.T) {
	d := kafka.ConsumerGroupDescription{GroupID: "g", Members: []kafka.MemberDescription{
		{ClientID: "me", Assignment: kafka.MemberAssignment{TopicPartitions: []kafka.TopicPartition{nameless(0)}}},
		{ClientID: "x", Host: "/10.0.0.2", Assignment: kafka.MemberAssignment{TopicPartitions: []kafka.TopicPartition{nameless(2), nameless(0)}}},
	}}
	c := core.JudgeGroup(describedOf(d), "t", "me", "", 0).Conflict
	if c == nil || c.Definite() || len(c.Members) != 1 || !slices.Equal(c.Members[0].Unnamed, []int32{0, 2}) {
		t.Fatalf("conflict %+v, want x's partitions 0 and 2 unnamed and nothing definite", c)
	}
	if msg := c.Error(); !strings.Contains(msg, "x on /10.0.0.2 (partitions 0, 2 of a topic the group's description does not name)") {
		t.Errorf("message does not name the member and its partitions: %s", msg)
	}
	d.Members = append(d.Members, kafka.MemberDescription{ClientID: "y", Assignment: kafka.MemberAssignment{TopicPartitions: []kafka.TopicPartition{topicPartOf("u", 0)}}})
	if c := core.JudgeGroup(describedOf(d), "t", "me", "", 0).Conflict; c == nil || !c.Definite() {
		t.Errorf("a member on another named topic must make the conflict definite: %+v", c)
	}
}

// Role names were once hashed joined by NUL bytes, so {"a\x00b", "a"} and {"a", "b\x00a"} had one
// digest: two instances with those lists passed each other's group check and both led role "a".
func TestRolesDigestIsUnambiguous(t *testing.T) {
	for _, pair := range [][2][]string{
		{{"a\x00b", "a"}, {"a", "b\x00a"}},
		{{"ab", "c"}, {"a", "bc"}},
		{{"a", ""}, {"a"}},
	} {
		if a, b := core.RolesDigest(pair[0]), core.RolesDigest(pair[1]); a == b {
			t.Errorf("rolesDigest(%q) = rolesDigest(%q) = %s", pair[0], pair[1], a)
		}
	}
}
