package goneli

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The group coordinator checks an offset commit against the member id and generation only, not
// against the partitions the member owns. Members of one group that subscribe to different leader
// topics (a rolling deploy that changes LeaderTopic, two services sharing a group id) are each
// assigned partition 0 of their own topic, and each one's heartbeat commits pass: two leaders at
// once. So before a tenure first leads, its instance describes the group and refuses to lead while
// any member holds a partition of another topic. A member that leads holds partition 0 of its own
// topic in every generation it belongs to, and the coordinator keeps it in the group for as long as
// its lease can run, so whichever of two such members is assigned later sees the other and holds
// back. New makes the same check, so that a misconfigured instance is usually refused at once.

// GroupConflictError reports members of the leader group that work on another leader topic. No
// instance that sees such a member leads until it has gone: fix the configuration so that every
// contender of the group names the same LeaderTopic.
type GroupConflictError struct {
	Group string
	Topic string
	// Members are the members holding partitions of other topics.
	Members []ForeignMember
}

// ForeignMember is a member of the leader group that holds partitions of other topics.
type ForeignMember struct {
	ClientID string
	Host     string
	Topics   []string
}

func (e *GroupConflictError) Error() string {
	var sb strings.Builder
	for i, m := range e.Members {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s on %s (%s)", m.ClientID, m.Host, strings.Join(m.Topics, ", "))
	}
	return fmt.Sprintf("goneli: group %s is shared with members that use another leader topic than %s: %s; "+
		"every contender of a group must use the same LeaderTopic, and no other consumer may use the group",
		e.Group, e.Topic, sb.String())
}

// groupDescriber is the part of *kafka.AdminClient that the check needs.
type groupDescriber interface {
	DescribeConsumerGroups(ctx context.Context, groups []string, options ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error)
}

// groupVerdict is what a description of the group says about this instance's tenure.
type groupVerdict struct {
	conflict *GroupConflictError
	// sawSelf is set when the description shows this instance holding partition 0 of its topic,
	// which proves that it reflects a generation no older than the tenure's assignment. kfake, for
	// one, shows no assignments while a group rebalances.
	sawSelf bool
}

// judgeGroup reads a group description. Topic names may be missing (kfake leaves them out under
// KIP-848); a nameless partition counts as the instance's own topic.
func judgeGroup(d kafka.ConsumerGroupDescription, topic, clientID string) groupVerdict {
	var v groupVerdict
	for _, m := range d.Members {
		parts := m.Assignment.TopicPartitions
		if m.TargetAssignment != nil {
			parts = append(append([]kafka.TopicPartition(nil), parts...), m.TargetAssignment.TopicPartitions...)
		}
		var foreign []string
		for _, tp := range parts {
			name := ""
			if tp.Topic != nil {
				name = *tp.Topic
			}
			switch {
			case name != "" && name != topic:
				if !slices.Contains(foreign, name) {
					foreign = append(foreign, name)
				}
			case m.ClientID == clientID && tp.Partition == 0:
				v.sawSelf = true
			}
		}
		if len(foreign) > 0 {
			if v.conflict == nil {
				v.conflict = &GroupConflictError{Group: d.GroupID, Topic: topic}
			}
			sort.Strings(foreign)
			v.conflict.Members = append(v.conflict.Members, ForeignMember{ClientID: m.ClientID, Host: m.Host, Topics: foreign})
		}
	}
	return v
}

// describeGroup asks the coordinator for the group, waiting at most timeout.
func describeGroup(ctx context.Context, d groupDescriber, group string, timeout time.Duration) (kafka.ConsumerGroupDescription, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	res, err := d.DescribeConsumerGroups(ctx, []string{group}, kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		return kafka.ConsumerGroupDescription{}, err
	}
	if len(res.ConsumerGroupDescriptions) != 1 {
		return kafka.ConsumerGroupDescription{}, fmt.Errorf("asked for one group, got %d", len(res.ConsumerGroupDescriptions))
	}
	desc := res.ConsumerGroupDescriptions[0]
	if desc.Error.Code() != kafka.ErrNoError {
		return desc, desc.Error
	}
	return desc, nil
}

// groupCheck is one check of the group for one tenure, running on its own goroutine.
type groupCheck struct {
	tenure  uint64
	verdict groupVerdict
	err     error
}
