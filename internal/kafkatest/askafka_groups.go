package kafkatest

import (
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeGroups changes kfake's answers to DescribeGroups, ConsumerGroupDescribe and OffsetFetch
// where Kafka's differ: the coordinator's errors per group (askafka_coord.go), consumer-protocol
// groups in DescribeGroups, topics in ConsumerGroupDescribe, and the authorized operations of a
// group's result that carries an error.
func (k *Kafka) describeGroups(x *exchange, node int32) ([]byte, bool) {
	return x.patched(func(req kmsg.Request, resp kmsg.Response) bool {
		changed := len(k.refuseGroups(node, req, resp)) > 0
		switch r := resp.(type) {
		case *kmsg.DescribeGroupsResponse:
			changed = k.deadConsumerGroups(x, r) || changed
			for i := range r.Groups {
				changed = unsetOperations(r.Groups[i].ErrorCode, &r.Groups[i].AuthorizedOperations) || changed
			}
		case *kmsg.ConsumerGroupDescribeResponse:
			changed = k.nameTopics(r) || changed
			if k.cfg.version == Kafka40 {
				changed = authorizeTopics(x, r) || changed
			}
			for i := range r.Groups {
				changed = unsetOperations(r.Groups[i].ErrorCode, &r.Groups[i].AuthorizedOperations) || changed
			}
		}
		return changed
	})
}

// unsetOperations leaves a group's authorized operations unset (the schema's default,
// -2147483648) where its result carries an error, and reports whether it changed them: Kafka fills
// them in only for results without one (KafkaApis.handleDescribeGroupsRequest and
// handleConsumerGroupDescribe: "if (groupResult.errorCode == Errors.NONE.code)"), so a group that
// does not exist, which DescribeGroups answers with GROUP_ID_NOT_FOUND from v6 (KIP-1043), comes
// without them. kfake fills them in for such a group too.
func unsetOperations(code int16, ops *int32) bool {
	if code == 0 || *ops == math.MinInt32 {
		return false
	}
	*ops = math.MinInt32
	return true
}

// deadConsumerGroups answers a consumer-protocol (KIP-848) group as Kafka's DescribeGroups does.
// GroupMetadataManager.describeGroups (group-coordinator/src/main/java/org/apache/kafka/
// coordinator/group/GroupMetadataManager.java) looks the group up with classicGroup(), which
// throws GroupIdNotFoundException ("Group %s is not a classic group.") for a group of another
// type, and answers it as Dead with no error; from v6 (KIP-1043, Kafka 4.0) with
// GROUP_ID_NOT_FOUND and that message. kfake describes such a group as it is, without members.
func (k *Kafka) deadConsumerGroups(x *exchange, r *kmsg.DescribeGroupsResponse) bool {
	live := false
	for _, g := range r.Groups {
		live = live || (g.ErrorCode == 0 && g.State != "Dead")
	}
	if !live {
		return false
	}
	// Which groups are of the consumer type, as kfake sees them on this node for this principal:
	// ListGroups v5 filters by type, and needs Describe on each group, as DescribeGroups does.
	lr := kmsg.NewPtrListGroupsRequest()
	lr.Version = 5
	lr.TypesFilter = []string{"consumer"}
	resp, err := x.c.ask(lr)
	if err != nil {
		return false
	}
	consumer := map[string]bool{}
	for _, g := range resp.(*kmsg.ListGroupsResponse).Groups {
		consumer[g.Group] = true
	}
	changed := false
	for i, g := range r.Groups {
		if g.ErrorCode != 0 || !consumer[g.Group] {
			continue
		}
		dead := kmsg.NewDescribeGroupsResponseGroup()
		dead.Group, dead.State = g.Group, "Dead"
		if r.Version >= 6 {
			msg := fmt.Sprintf("Group %s is not a classic group.", g.Group)
			dead.ErrorCode, dead.ErrorMessage = kerr.GroupIDNotFound.Code, &msg
		} else {
			dead.AuthorizedOperations = g.AuthorizedOperations
		}
		r.Groups[i] = dead
		changed = true
	}
	return changed
}

// nameTopics names each topic of a ConsumerGroupDescribe answer beside its ID, as Kafka does
// (ConsumerGroupMember.asConsumerGroupDescribeMember fills topicName from the metadata image,
// group-coordinator/.../modern/consumer/ConsumerGroupMember.java); kfake gives the IDs only.
func (k *Kafka) nameTopics(r *kmsg.ConsumerGroupDescribeResponse) bool {
	names := map[[16]byte]string{}
	changed := false
	name := func(a *kmsg.Assignment) {
		for i := range a.TopicPartitions {
			tp := &a.TopicPartitions[i]
			if tp.Topic != "" {
				continue
			}
			n, ok := names[tp.TopicID]
			if !ok {
				if info := k.cluster.TopicIDInfo(tp.TopicID); info != nil {
					n = info.Topic
				}
				names[tp.TopicID] = n
			}
			if n != "" {
				tp.Topic, changed = n, true
			}
		}
	}
	for i := range r.Groups {
		for j := range r.Groups[i].Members {
			m := &r.Groups[i].Members[j]
			name(&m.Assignment)
			name(&m.TargetAssignment)
		}
	}
	return changed
}

// authorizeTopics refuses a group whose members are assigned, or are to be assigned, a topic the
// principal may not describe, as Kafka 4.0's KafkaApis.handleConsumerGroupDescribe does
// (core/src/main/scala/kafka/server/KafkaApis.scala, KAFKA-18813, apache/kafka#18989, in 4.0 by
// #19042): it checks DESCRIBE on every topic of the members' assignment and target assignment,
// per group, and answers a group with any denied one as TOPIC_AUTHORIZATION_FAILED without its
// description. kfake checks no topic here.
func authorizeTopics(x *exchange, r *kmsg.ConsumerGroupDescribeResponse) bool {
	topicsOf := func(g *kmsg.ConsumerGroupDescribeResponseGroup) []string {
		var ts []string
		for _, m := range g.Members {
			for _, a := range []kmsg.Assignment{m.Assignment, m.TargetAssignment} {
				for _, tp := range a.TopicPartitions {
					ts = append(ts, tp.Topic)
				}
			}
		}
		return ts
	}
	seen := map[string]bool{}
	mr := kmsg.NewPtrMetadataRequest()
	mr.Version = 7
	mr.AllowAutoTopicCreation = false
	for i := range r.Groups {
		if r.Groups[i].ErrorCode != 0 {
			continue
		}
		for _, t := range topicsOf(&r.Groups[i]) {
			if !seen[t] {
				seen[t] = true
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(t)
				mr.Topics = append(mr.Topics, rt)
			}
		}
	}
	if len(mr.Topics) == 0 {
		return false
	}
	// kfake's Metadata checks DESCRIBE on each topic for this connection's principal.
	resp, err := x.c.ask(mr)
	if err != nil {
		return false
	}
	denied := map[string]bool{}
	for _, t := range resp.(*kmsg.MetadataResponse).Topics {
		if t.Topic != nil && t.ErrorCode == kerr.TopicAuthorizationFailed.Code {
			denied[*t.Topic] = true
		}
	}
	changed := false
	for i := range r.Groups {
		g := &r.Groups[i]
		if g.ErrorCode != 0 {
			continue
		}
		for _, t := range topicsOf(g) {
			if denied[t] {
				msg := "the group's members are assigned topics that the principal is not authorized to describe"
				e := kmsg.NewConsumerGroupDescribeResponseGroup()
				e.Group, e.ErrorCode, e.ErrorMessage, e.AuthorizedOperations = g.Group, kerr.TopicAuthorizationFailed.Code, &msg, math.MinInt32
				r.Groups[i] = e
				changed = true
				break
			}
		}
	}
	return changed
}
