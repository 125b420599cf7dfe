package kafkatest

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeGroups changes kfake's answers to DescribeGroups, ConsumerGroupDescribe and OffsetFetch
// where Kafka's differ: the coordinator's errors per group (askafka_coord.go), consumer-protocol
// groups in DescribeGroups, topics in ConsumerGroupDescribe, and the authorized operations of a
// group's result that carries an error.
func (k *Kafka) describeGroups(x *exchange, node int32) ([]byte, bool) {
	return x.patched(func(req kmsg.Request, resp kmsg.Response) bool {
		refused := k.refuseGroups(node, req, resp)
		changed := len(refused) > 0
		switch r := resp.(type) {
		case *kmsg.DescribeGroupsResponse:
			changed = k.deadConsumerGroups(x, r) || changed
			for i := range r.Groups {
				g := &r.Groups[i]
				changed = unsetOperations(g.ErrorCode, &g.AuthorizedOperations) || changed
				changed = notFoundMessage(g.ErrorCode, &g.ErrorMessage, "Group %s not found.", g.Group) || changed
				for j := range g.Members {
					changed = clientHost(&g.Members[j].ClientHost) || changed
				}
			}
		case *kmsg.ConsumerGroupDescribeResponse:
			changed = k.nameTopics(r) || changed
			if k.cfg.version == Kafka40 {
				changed = authorizeTopics(x, r) || changed
			}
			changed = k.consumerGroupMessages(x, r) || changed
			for i := range r.Groups {
				g := &r.Groups[i]
				changed = unsetOperations(g.ErrorCode, &g.AuthorizedOperations) || changed
				if g.ErrorCode == 0 && g.AssignorName == "" {
					// GroupMetadataManager.consumerGroupDescribe names the default server assignor,
					// the first of group.consumer.assignors ("uniform"), for a group whose members
					// name none; kfake names none.
					g.AssignorName, changed = "uniform", true
				}
				for j := range g.Members {
					changed = clientHost(&g.Members[j].ClientHost) || changed
				}
			}
		case *kmsg.OffsetFetchResponse:
			changed = unknownGroupOffsets(req.(*kmsg.OffsetFetchRequest), r, refused) || changed
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

// clientHost renders a member's host as Kafka does, the client's address without its port behind a
// slash ("/127.0.0.1": the group coordinator keeps RequestContext.clientAddress's
// InetAddress.toString, GroupCoordinatorShard and GroupMetadataManager); kfake gives the remote
// address with its port. goneli shows it (neli status, the group check's messages).
func clientHost(h *string) bool {
	if strings.HasPrefix(*h, "/") {
		return false
	}
	host, _, err := net.SplitHostPort(*h)
	if err != nil {
		host = *h
	}
	*h = "/" + host
	return true
}

// notFoundMessage gives a GROUP_ID_NOT_FOUND result Kafka's message where kfake gives none
// (GroupMetadataManager.group: "Group %s not found."), which goneli puts in the error it reports.
func notFoundMessage(code int16, msg **string, format, group string) bool {
	if code != kerr.GroupIDNotFound.Code || *msg != nil {
		return false
	}
	m := fmt.Sprintf(format, group)
	*msg = &m
	return true
}

// consumerGroupMessages gives ConsumerGroupDescribe's GROUP_ID_NOT_FOUND results Kafka's messages:
// GroupMetadataManager.consumerGroup says "Group %s not found." of a group that does not exist and
// "Group %s is not a consumer group." of a classic one. Which it is, ListGroups tells, asked as the
// principal on the same connection.
func (k *Kafka) consumerGroupMessages(x *exchange, r *kmsg.ConsumerGroupDescribeResponse) bool {
	missing := slices.ContainsFunc(r.Groups, func(g kmsg.ConsumerGroupDescribeResponseGroup) bool {
		return g.ErrorCode == kerr.GroupIDNotFound.Code && g.ErrorMessage == nil
	})
	if !missing {
		return false
	}
	known := map[string]bool{}
	if resp, err := x.c.ask(kmsg.NewPtrListGroupsRequest()); err == nil {
		for _, g := range resp.(*kmsg.ListGroupsResponse).Groups {
			known[g.Group] = true
		}
	}
	changed := false
	for i := range r.Groups {
		g := &r.Groups[i]
		format := "Group %s not found."
		if known[g.Group] {
			format = "Group %s is not a consumer group."
		}
		changed = notFoundMessage(g.ErrorCode, &g.ErrorMessage, format, g.Group) || changed
	}
	return changed
}

// unknownGroupOffsets answers OffsetFetch for a group that does not exist as Kafka does: no error,
// and each partition asked for at offset -1 with metadata "" (OffsetMetadataManager.fetchOffsets,
// which treats GROUP_ID_NOT_FOUND from validateOffsetFetch as "no offsets"); kfake answers
// GROUP_ID_NOT_FOUND. Kafka's metadata of an offset committed without any is "" (OffsetAndMetadata's
// NO_METADATA), where kfake gives null. Groups the coordinator refused (refused) keep their error.
func unknownGroupOffsets(req *kmsg.OffsetFetchRequest, r *kmsg.OffsetFetchResponse, refused map[string]bool) bool {
	changed := false
	empty := func(m **string) {
		if *m == nil {
			*m, changed = kmsg.StringPtr(""), true
		}
	}
	if r.Version >= 8 {
		for i := range r.Groups {
			g := &r.Groups[i]
			if g.ErrorCode == kerr.GroupIDNotFound.Code && !refused[g.Group] && i < len(req.Groups) && req.Groups[i].Group == g.Group {
				g.ErrorCode, g.Topics, changed = 0, nil, true
				for _, rt := range req.Groups[i].Topics {
					t := kmsg.NewOffsetFetchResponseGroupTopic()
					t.Topic = rt.Topic
					for _, p := range rt.Partitions {
						pp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
						pp.Partition, pp.Offset, pp.LeaderEpoch, pp.Metadata = p, -1, -1, kmsg.StringPtr("")
						t.Partitions = append(t.Partitions, pp)
					}
					g.Topics = append(g.Topics, t)
				}
			}
			for j := range g.Topics {
				for l := range g.Topics[j].Partitions {
					empty(&g.Topics[j].Partitions[l].Metadata)
				}
			}
		}
		return changed
	}
	if r.ErrorCode == kerr.GroupIDNotFound.Code && !refused[req.Group] {
		r.ErrorCode, r.Topics, changed = 0, nil, true
		for _, rt := range req.Topics {
			t := kmsg.NewOffsetFetchResponseTopic()
			t.Topic = rt.Topic
			for _, p := range rt.Partitions {
				pp := kmsg.NewOffsetFetchResponseTopicPartition()
				pp.Partition, pp.Offset, pp.LeaderEpoch, pp.Metadata = p, -1, -1, kmsg.StringPtr("")
				t.Partitions = append(t.Partitions, pp)
			}
			r.Topics = append(r.Topics, t)
		}
	}
	for j := range r.Topics {
		for l := range r.Topics[j].Partitions {
			empty(&r.Topics[j].Partitions[l].Metadata)
		}
	}
	return changed
}
