package sidechan

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// # Describing the group
//
// A classic group is described with DescribeGroups, a KIP-848 group with ConsumerGroupDescribe,
// and each is asked first as the instance's own protocol says. Apache Kafka answers a request of
// the other kind (GroupMetadataManager.describeGroups and consumerGroupDescribe) with
// GROUP_ID_NOT_FOUND, except DescribeGroups up to version 5, which answers a consumer-protocol
// group as a Dead group without any error, as it answers a group that does not exist: so a Dead
// answer is asked again with ConsumerGroupDescribe, where the broker has it. Members of a classic
// group that migrates to KIP-848 (a mixed group) are then seen, and Describe finds a live KIP-848
// group even when asked as a classic one. A group that neither kind knows is described as
// librdkafka describes it, Dead without an error.

// DescribeConsumerGroups describes the one group asked for; see Channel.
func (c *Client) DescribeConsumerGroups(ctx context.Context, groups []string, _ ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error) {
	if len(groups) != 1 {
		return kafka.DescribeConsumerGroupsResult{}, fmt.Errorf("goneli describes one group at a time, not %d", len(groups))
	}
	desc, err := c.describe(ctx, groups[0])
	if err != nil {
		return kafka.DescribeConsumerGroupsResult{}, err
	}
	return kafka.DescribeConsumerGroupsResult{ConsumerGroupDescriptions: []kafka.ConsumerGroupDescription{desc}}, nil
}

// describe asks in the instance's protocol first, then in the other where the first does not
// know the group.
func (c *Client) describe(ctx context.Context, group string) (kafka.ConsumerGroupDescription, error) {
	first, other := c.describeClassic, c.describeConsumer
	if c.opts.ConsumerProtocol {
		first, other = c.describeConsumer, c.describeClassic
	}
	desc, err := first(ctx, group)
	if errors.Is(err, errNoConsumerGroupDescribe) {
		return c.describeClassic(ctx, group)
	}
	if err != nil || !unknown(desc) {
		return desc, err
	}
	o, err := other(ctx, group)
	switch {
	case errors.Is(err, errNoConsumerGroupDescribe):
		return desc, nil
	case err != nil:
		return desc, err
	case unknown(o):
		// Neither kind knows it: a group without members, as librdkafka describes one (Dead, no
		// error), whichever version of DescribeGroups said so.
		d := newDescription(group)
		d.State, d.Type = kafka.ConsumerGroupStateDead, kafka.ConsumerGroupTypeClassic
		return d, nil
	}
	return o, nil
}

// unknown reports whether a description says the group is not of its kind, or not there.
func unknown(d kafka.ConsumerGroupDescription) bool {
	return d.Error.Code() == kafka.ErrGroupIDNotFound ||
		d.Error.Code() == kafka.ErrNoError && d.State == kafka.ConsumerGroupStateDead && len(d.Members) == 0
}

// errNoConsumerGroupDescribe says that the coordinator does not offer ConsumerGroupDescribe.
var errNoConsumerGroupDescribe = errors.New("the broker does not offer ConsumerGroupDescribe")

// newDescription is a description of group without an error, which describeConsumer and
// describeClassic fill in.
func newDescription(group string) kafka.ConsumerGroupDescription {
	return kafka.ConsumerGroupDescription{GroupID: group, Error: kafka.NewError(kafka.ErrNoError, "", false)}
}

// newMember describes a member as both protocols' descriptions name it.
func newMember(clientID, memberID, host string, instanceID *string) kafka.MemberDescription {
	md := kafka.MemberDescription{ClientID: clientID, ConsumerID: memberID, Host: host}
	if instanceID != nil {
		md.GroupInstanceID = *instanceID
	}
	return md
}

// describeConsumer describes a KIP-848 group, in librdkafka's form.
func (c *Client) describeConsumer(ctx context.Context, group string) (kafka.ConsumerGroupDescription, error) {
	desc := newDescription(group)
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp, err := c.requestGroup(ctx, group, req)
	if err != nil {
		if c.notOffered(ctx, group, kmsg.ConsumerGroupDescribe, err) {
			return desc, errNoConsumerGroupDescribe
		}
		return desc, asKafkaError(err)
	}
	r := resp.(*kmsg.ConsumerGroupDescribeResponse)
	if len(r.Groups) != 1 {
		return desc, fmt.Errorf("ConsumerGroupDescribe for one group answered with %d", len(r.Groups))
	}
	g := r.Groups[0]
	switch {
	case g.ErrorCode == kerr.UnsupportedVersion.Code:
		// Apache Kafka offers the API while the consumer protocol is off, and answers so
		// (KafkaApis.handleConsumerGroupDescribe).
		return desc, errNoConsumerGroupDescribe
	case g.ErrorCode == kerr.TopicAuthorizationFailed.Code:
		// From Kafka 4.0 the broker refuses to describe a group any of whose members
		// subscribes to or is assigned a topic that the principal may not describe (KAFKA-18813,
		// KafkaApis.handleConsumerGroupDescribe). The instance may describe its own leader topic
		// (it reads and writes it), so such a member is on another topic.
		msg := fmt.Sprintf("the broker refuses to describe group %s because a member of it uses a topic that this client's principal "+
			"may not describe (Kafka 4.0 or later, KAFKA-18813): most likely a member on another leader topic", group)
		desc.Error = KafkaError(g.ErrorCode, &msg)
		return desc, nil
	case g.ErrorCode != 0:
		desc.Error = KafkaError(g.ErrorCode, g.ErrorMessage)
		return desc, nil
	}
	desc.Type = kafka.ConsumerGroupTypeConsumer
	// librdkafka maps a state it does not know to Unknown, and returns no error.
	desc.State, _ = kafka.ConsumerGroupStateFromString(g.State)
	desc.PartitionAssignor = g.AssignorName
	names := c.topicNames(ctx, g.Members)
	for _, m := range g.Members {
		md := newMember(m.ClientID, m.MemberID, m.ClientHost, m.InstanceID)
		md.Assignment = kafka.MemberAssignment{TopicPartitions: assigned(m.Assignment, names)}
		md.TargetAssignment = &kafka.MemberAssignment{TopicPartitions: assigned(m.TargetAssignment, names)}
		desc.Members = append(desc.Members, md)
	}
	return desc, nil
}

// notOffered reports whether a request of key for group failed with err because group's
// coordinator does not offer key: the broker answered UNSUPPORTED_VERSION, or kgo did not send it.
// kgo refuses to send a request that the broker's ApiVersions does not list with an error of its
// own that it does not export (errBrokerTooOld, pkg/kgo/errors.go and broker.go), and whose text
// may change, so for any error that is no broker's answer the coordinator is asked what it offers.
func (c *Client) notOffered(ctx context.Context, group string, key kmsg.Key, err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code == kerr.UnsupportedVersion.Code
	}
	if ctx.Err() != nil || IsFallback(err) {
		return false
	}
	node, err := c.FindCoordinator(ctx, GroupCoordinator, group)
	if err != nil {
		return false
	}
	av := kmsg.NewPtrApiVersionsRequest()
	// From version 3 a broker refuses an ApiVersions request that does not name its software
	// (KIP-511).
	av.ClientSoftwareName, av.ClientSoftwareVersion = "goneli", "1"
	resp, err := c.BrokerRequest(ctx, node, av)
	if err != nil || resp.(*kmsg.ApiVersionsResponse).ErrorCode != 0 {
		return false
	}
	for _, k := range resp.(*kmsg.ApiVersionsResponse).ApiKeys {
		if k.ApiKey == key.Int16() {
			return k.MaxVersion < 0
		}
	}
	return true
}

// describeClassic describes a classic group, in librdkafka's form.
func (c *Client) describeClassic(ctx context.Context, group string) (kafka.ConsumerGroupDescription, error) {
	desc := newDescription(group)
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := c.requestGroup(ctx, group, req)
	if err != nil {
		return desc, asKafkaError(err)
	}
	r := resp.(*kmsg.DescribeGroupsResponse)
	if len(r.Groups) != 1 {
		return desc, fmt.Errorf("DescribeGroups for one group answered with %d", len(r.Groups))
	}
	g := r.Groups[0]
	if g.ErrorCode != 0 {
		desc.Error = KafkaError(g.ErrorCode, g.ErrorMessage)
		return desc, nil
	}
	desc.Type = kafka.ConsumerGroupTypeClassic
	desc.State, _ = kafka.ConsumerGroupStateFromString(g.State)
	desc.PartitionAssignor = g.Protocol
	desc.IsSimpleConsumerGroup = g.ProtocolType == "" && len(g.Members) == 0 && g.State == "Empty"
	for _, m := range g.Members {
		md := newMember(m.ClientID, m.MemberID, m.ClientHost, m.InstanceID)
		if g.ProtocolType == "consumer" && len(m.MemberAssignment) > 0 {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				return desc, fmt.Errorf("member %s's assignment cannot be read: %w", m.MemberID, err)
			}
			for _, t := range a.Topics {
				for _, p := range t.Partitions {
					md.Assignment.TopicPartitions = append(md.Assignment.TopicPartitions, kafka.TopicPartition{Topic: &t.Topic, Partition: p})
				}
			}
		}
		desc.Members = append(desc.Members, md)
	}
	return desc, nil
}

// topicNames maps the topic IDs that a KIP-848 description gives without names to names, from
// the cluster's metadata. Apache Kafka names them itself; kfake does not. A map that misses an ID
// leaves the partition nameless, which the group check counts against leading.
func (c *Client) topicNames(ctx context.Context, members []kmsg.ConsumerGroupDescribeResponseGroupMember) map[[16]byte]string {
	unnamed := func(tp kmsg.AssignmentTopicPartition) bool { return tp.Topic == "" }
	if !slices.ContainsFunc(members, func(m kmsg.ConsumerGroupDescribeResponseGroupMember) bool {
		return slices.ContainsFunc(m.Assignment.TopicPartitions, unnamed) || slices.ContainsFunc(m.TargetAssignment.TopicPartitions, unnamed)
	}) {
		return nil
	}
	resp, err := c.Request(ctx, kmsg.NewPtrMetadataRequest()) // Topics nil: every topic
	if err != nil {
		return nil
	}
	names := map[[16]byte]string{}
	for _, t := range resp.(*kmsg.MetadataResponse).Topics {
		if t.Topic != nil && t.TopicID != [16]byte{} {
			names[t.TopicID] = *t.Topic
		}
	}
	return names
}

// assigned lists an assignment's partitions, named where the description or names can.
func assigned(a kmsg.Assignment, names map[[16]byte]string) []kafka.TopicPartition {
	var out []kafka.TopicPartition
	for _, tp := range a.TopicPartitions {
		name := tp.Topic
		if name == "" {
			name = names[tp.TopicID]
		}
		var topic *string
		if name != "" {
			topic = &name
		}
		for _, p := range tp.Partitions {
			out = append(out, kafka.TopicPartition{Topic: topic, Partition: p})
		}
	}
	return out
}
