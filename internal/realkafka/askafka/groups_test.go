package askafka

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groups are the kinds of group a case describes, made on a side by makeGroups.
type groups struct {
	classic, simple, consumer, unknown string
	topic                              string
}

// groups names the groups of a pair.
func (p *pair) groups() groups {
	return groups{classic: p.name("classic"), simple: p.name("simple"), consumer: p.name("kip848"), unknown: p.name("nobody"),
		topic: p.name("groups-topic")}
}

// makeGroups makes on s a classic group with one member that holds the topic's partition, a group
// that has only committed an offset (simple), and, where the protocol is served, a KIP-848 group
// with one member that holds the partition. The members heartbeat until the test ends.
func (p *pair) makeGroups(t *testing.T, s *side) {
	t.Helper()
	g := p.groups()
	s.awaitCoordinator(t, g.classic, g.simple, g.consumer, g.unknown)
	s.createTopic(t, g.topic, 1)
	keepClassic(t, s.dial(t), g.classic, g.topic)
	if c := commitOffset(t, s.dial(t), g.simple, "", -1, g.topic, 7); c != 0 {
		t.Fatalf("%s: the simple group's commit: %s", s.name, code(c))
	}
	if p.kip848 {
		keepConsumer(t, s, g.consumer, g.topic)
	}
}

// keepClassic makes w a member of a classic group that holds topic's partition 0 (joinClassic)
// and heartbeats for it every second until the test ends.
func keepClassic(t *testing.T, w *wire, group, topic string) {
	t.Helper()
	member, gen := joinClassic(t, w, group, topic)
	keep(t, func() error {
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Group, hb.MemberID, hb.Generation = group, member, gen
		_, err := w.try(hb, 4)
		return err
	}, time.Second)
}

// keepConsumer makes a connection of its own to s a KIP-848 member of group that holds topic's
// partition 0 (joinConsumer) and heartbeats for it every 100 ms until the test ends.
func keepConsumer(t *testing.T, s *side, group, topic string) {
	t.Helper()
	w := s.dial(t)
	member, epoch := joinConsumer(t, w, group, topic)
	keep(t, func() error {
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Group, hb.MemberID, hb.MemberEpoch = group, member, epoch
		resp, err := w.try(hb, 1)
		if err == nil {
			epoch = resp.(*kmsg.ConsumerGroupHeartbeatResponse).MemberEpoch
		}
		return err
	}, 100*time.Millisecond)
}

// keep calls beat, a member's heartbeat, every interval until the test ends; a connection that
// fails ends it, and a case that then finds the member gone fails.
func keep(t *testing.T, beat func() error, interval time.Duration) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if beat() != nil {
				return
			}
		}
	}()
	// Registered after dial's: runs first, so the connection closes once the keeper is done.
	t.Cleanup(func() {
		close(stop)
		<-done
	})
}

// joinClassic makes w a member of a classic group that subscribes to topic, and its leader, which
// assigns itself partition 0; it returns the member id and generation.
func joinClassic(t *testing.T, w *wire, group, topic string) (string, int32) {
	t.Helper()
	member := ""
	var join *kmsg.JoinGroupResponse
	for range 2 {
		req := joinRequest(group, member, topic)
		join = w.send(req, 9).(*kmsg.JoinGroupResponse)
		if join.ErrorCode != kerr.MemberIDRequired.Code {
			break
		}
		member = join.MemberID // KIP-394: the second join names the id the first was given
	}
	if join.ErrorCode != 0 {
		t.Fatalf("%s: joining %s: %s", w.name, group, code(join.ErrorCode))
	}
	a := kmsg.NewConsumerMemberAssignment()
	at := kmsg.NewConsumerMemberAssignmentTopic()
	at.Topic, at.Partitions = topic, []int32{0}
	a.Topics = append(a.Topics, at)
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.Generation, sync.MemberID = group, join.Generation, join.MemberID
	sync.ProtocolType, sync.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	sa := kmsg.NewSyncGroupRequestGroupAssignment()
	sa.MemberID, sa.MemberAssignment = join.MemberID, a.AppendTo(nil)
	sync.GroupAssignment = append(sync.GroupAssignment, sa)
	if r := w.send(sync, 5).(*kmsg.SyncGroupResponse); r.ErrorCode != 0 {
		t.Fatalf("%s: syncing %s: %s", w.name, group, code(r.ErrorCode))
	}
	return join.MemberID, join.Generation
}

// joinConsumer makes w a KIP-848 member of group subscribed to topic, and heartbeats until it holds
// partition 0 and has said so; it returns the member id and epoch.
func joinConsumer(t *testing.T, w *wire, group, topic string) (string, int32) {
	t.Helper()
	member, epoch := kafkaUUID(), int32(0)
	owned := []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	limit := time.Now().Add(await)
	for !time.Now().After(limit) {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.MemberEpoch = group, member, epoch
		req.RebalanceTimeoutMillis, req.SubscribedTopicNames, req.Topics = 30000, []string{topic}, owned
		r := w.send(req, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
		if r.ErrorCode != 0 {
			t.Fatalf("%s: heartbeat of a member of %s: %s %s", w.name, group, code(r.ErrorCode), str(r.ErrorMessage))
		}
		epoch = r.MemberEpoch
		// Kafka repeats the assignment in its answer to every heartbeat that names all the fields,
		// as these do; kfake only when it changes.
		var next []kmsg.ConsumerGroupHeartbeatRequestTopic
		if r.Assignment != nil {
			for _, tp := range r.Assignment.Topics {
				ot := kmsg.NewConsumerGroupHeartbeatRequestTopic()
				ot.TopicID, ot.Partitions = tp.TopicID, tp.Partitions
				next = append(next, ot)
			}
		}
		switch {
		case len(owned) > 0 && (r.Assignment == nil || slices.EqualFunc(next, owned, sameTopic)):
			// The heartbeat said it holds what it was given, and the coordinator wants no change.
			return member, epoch
		case r.Assignment != nil && len(next) > 0:
			owned = next
			continue
		}
		time.Sleep(100 * time.Millisecond) // the coordinator assigns on its own schedule
	}
	t.Fatalf("%s: a member of %s was never assigned %s", w.name, group, topic)
	return "", 0
}

// commitOffset commits offset at partition 0 of topic for group as member at generation (a simple
// group's: member "", generation -1) and returns the partition's error code.
func commitOffset(t *testing.T, w *wire, group, member string, generation int32, topic string, offset int64) int16 {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = group, member, generation
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Offset, rp.LeaderEpoch = offset, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	r := w.send(req, 8).(*kmsg.OffsetCommitResponse)
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		t.Fatalf("OffsetCommit answered %+v", r)
	}
	return r.Topics[0].Partitions[0].ErrorCode
}

// maxVersion is the highest version of key the side offers, -1 if none.
func maxVersion(t *testing.T, s *side, key kmsg.Key) int16 {
	t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "askafka-check", "1"
	for _, k := range s.dial(t).send(req, 3).(*kmsg.ApiVersionsResponse).ApiKeys {
		if k.ApiKey == key.Int16() {
			return k.MaxVersion
		}
	}
	return -1
}

// describeGroupsCase describes every kind of group with DescribeGroups at version.
func describeGroupsCase(version int16) kcase {
	return kcase{
		name:   "DescribeGroups v" + itoa(int32(version)),
		argued: describeArgued,
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			if maxVersion(t, s, kmsg.DescribeGroups) < version {
				o.set("offered", "no")
				return o
			}
			g := p.groups()
			req := kmsg.NewPtrDescribeGroupsRequest()
			req.Groups = []string{g.classic, g.simple, g.unknown}
			if p.kip848 {
				req.Groups = append(req.Groups, g.consumer)
			}
			req.IncludeAuthorizedOperations = true
			r := s.dial(t).send(req, version).(*kmsg.DescribeGroupsResponse)
			for i, dg := range r.Groups {
				k := "group " + p.strip(dg.Group)
				o.set(k+" at", "%d", i)
				o.set(k+" error", "%s", code(dg.ErrorCode))
				o.set(k+" message", "%s", p.strip(str(dg.ErrorMessage)))
				o.set(k+" state", "%s", dg.State)
				o.set(k+" protocol", "%q %q", dg.ProtocolType, dg.Protocol)
				groupOps(o, k, dg.AuthorizedOperations)
				o.set(k+" members", "%d", len(dg.Members))
				for _, m := range dg.Members {
					o.set(k+" member client", "%q %q %s", m.ClientID, m.ClientHost, str(m.InstanceID))
					o.set(k+" member id", "%v", strings.HasPrefix(m.MemberID, m.ClientID+"-"))
					var a kmsg.ConsumerMemberAssignment
					if err := a.ReadFrom(m.MemberAssignment); err != nil {
						o.set(k+" member assignment", "unreadable: %v", err)
						continue
					}
					var parts []string
					for _, at := range a.Topics {
						parts = append(parts, p.strip(at.Topic)+":"+joinInts(at.Partitions))
					}
					o.set(k+" member assignment", "%v", parts)
				}
			}
			return o
		},
	}
}

// consumerGroupDescribeCase describes every kind of group with ConsumerGroupDescribe.
func consumerGroupDescribeCase() kcase {
	return kcase{
		name:   "ConsumerGroupDescribe",
		argued: describeArgued,
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			v := maxVersion(t, s, kmsg.ConsumerGroupDescribe)
			o.set("offered", "%v", v >= 0)
			if v < 0 {
				return o
			}
			g := p.groups()
			req := kmsg.NewPtrConsumerGroupDescribeRequest()
			req.Groups = []string{g.classic, g.simple, g.unknown}
			if p.kip848 {
				req.Groups = append(req.Groups, g.consumer)
			}
			req.IncludeAuthorizedOperations = true
			r := s.dial(t).send(req, 0).(*kmsg.ConsumerGroupDescribeResponse)
			for i, dg := range r.Groups {
				k := "group " + p.strip(dg.Group)
				o.set(k+" at", "%d", i)
				o.set(k+" error", "%s", code(dg.ErrorCode))
				o.set(k+" message", "%v", dg.ErrorMessage != nil)
				o.set(k+" state", "%s", dg.State)
				o.set(k+" assignor", "%s", dg.AssignorName)

				groupOps(o, k, dg.AuthorizedOperations)
				o.set(k+" members", "%d", len(dg.Members))
				for _, m := range dg.Members {
					o.set(k+" member client", "%q %q %s", m.ClientID, m.ClientHost, str(m.InstanceID))
					o.set(k+" member epoch", "%v", m.MemberEpoch > 0)
					o.set(k+" member subscribed", "%v", p.strip(strings.Join(m.SubscribedTopics, ",")))
					o.set(k+" member assignment", "%v", assignment(p, m.Assignment))
					o.set(k+" member target", "%v", assignment(p, m.TargetAssignment))
				}
			}
			return o
		},
	}
}

// configOps are a group's operations on its configs (Kafka 4.0, KIP-848).
const configOps = 1<<kmsg.ACLOperationDescribeConfigs | 1<<kmsg.ACLOperationAlterConfigs

// groupOps records a group's authorized operations, those on its configs apart.
func groupOps(o *obs, k string, bits int32) {
	if bits == -2147483648 {
		o.set(k+" operations", "unset")
		return
	}
	o.set(k+" operations", "%s", ops(bits&^configOps))
	o.set(k+" config operations", "%s", ops(bits&configOps))
}

// describeArgued argues what differs in the descriptions of several groups without mattering to
// goneli, which describes one group a request and reads Read and Describe of its operations.
func describeArgued(p *pair, d difference) string {
	field := d.field
	if why := reconcilingArgued(d); why != "" {
		return why
	}
	switch {
	case strings.HasSuffix(field, " at"):
		return "Kafka answers the groups of each __consumer_offsets partition together (GroupCoordinatorService), not in the " +
			"order asked; goneli asks for one group at a time"
	case strings.HasSuffix(field, " config operations"):
		return "Kafka 4.0 reports DescribeConfigs and AlterConfigs on a group (AclEntry.supportedOperations), which kfake has no " +
			"ACL for; the doctor reads Read and Describe"
	}
	return ""
}

// reconcilingArgued argues a KIP-848 group that AsKafka describes as Reconciling where Kafka has it
// Stable. kfake bumps the epoch of every KIP-848 group whenever any topic is created or deleted
// (Cluster.notifyTopicChange in kfake's groups.go), and the group reconciles at its member's next
// heartbeat (100 ms here), whereas Kafka bumps it only when the metadata of a topic the group
// subscribes to changes (GroupMetadataManager.consumerGroupHeartbeat, which compares
// computeSubscriptionMetadata with the group's, group-coordinator/src/main/java/org/apache/kafka/
// coordinator/group/GroupMetadataManager.java). The cases create topics, so a description can fall
// in that window. AsKafka cannot undo the bump from the wire; goneli reads a group's state only to
// tell Dead and Empty groups apart (sidechan's describe), and its tenures ride on the assignment,
// which the bump leaves as it was.
//
// librdkafka 2.11.1's ConsumerGroupState, in which sidechan renders a description, has no
// Reconciling and makes it Unknown.
func reconcilingArgued(d difference) string {
	as := d.as
	if strings.HasPrefix(as, "Unknown ") {
		as = "Reconciling " + strings.TrimPrefix(as, "Unknown ")
	}
	if !strings.Contains(as, "Reconciling") || strings.ReplaceAll(as, "Reconciling", "Stable") != d.real {
		return ""
	}
	return "kfake bumps every KIP-848 group's epoch when any topic is created, Kafka only a group whose topics changed: " +
		"Reconciling until the member's next heartbeat; goneli reads a state only for Dead and Empty"
}

func sameTopic(a, b kmsg.ConsumerGroupHeartbeatRequestTopic) bool {
	return a.TopicID == b.TopicID && slices.Equal(a.Partitions, b.Partitions)
}

func assignment(p *pair, a kmsg.Assignment) []string {
	var out []string
	for _, tp := range a.TopicPartitions {
		out = append(out, p.strip(tp.Topic)+":"+joinInts(tp.Partitions))
	}
	slices.Sort(out)
	return out
}

// offsetFetchCase reads the committed offsets of the simple group and of one that does not exist.
func offsetFetchCase() kcase {
	return kcase{
		name: "OffsetFetch",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			g := p.groups()
			// librdkafka reads committed offsets at v7 and below (one group), kgo at v8 and up.
			for _, v := range []int16{7, 8} {
				if v > maxVersion(t, s, kmsg.OffsetFetch) {
					continue
				}
				req := kmsg.NewPtrOffsetFetchRequest()
				if v < 8 {
					for _, group := range []string{g.simple, g.unknown} {
						req.Group = group
						rt := kmsg.NewOffsetFetchRequestTopic()
						rt.Topic, rt.Partitions = g.topic, []int32{0}
						req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
						r := s.dial(t).send(req, v).(*kmsg.OffsetFetchResponse)
						k := "v7 " + p.strip(group)
						o.set(k+" error", "%s", code(r.ErrorCode))
						for _, tp := range r.Topics {
							for _, pp := range tp.Partitions {
								o.set(k+" offset", "%d %s %s", pp.Offset, code(pp.ErrorCode), str(pp.Metadata))
							}
						}
					}
					continue
				}
				for _, group := range []string{g.simple, g.unknown} {
					rg := kmsg.NewOffsetFetchRequestGroup()
					rg.Group = group
					rt := kmsg.NewOffsetFetchRequestGroupTopic()
					rt.Topic, rt.Partitions = g.topic, []int32{0}
					rg.Topics = append(rg.Topics, rt)
					req.Groups = append(req.Groups, rg)
				}
				r := s.dial(t).send(req, v).(*kmsg.OffsetFetchResponse)
				for _, rg := range r.Groups {
					k := "v8 " + p.strip(rg.Group)
					o.set(k+" error", "%s", code(rg.ErrorCode))
					for _, tp := range rg.Topics {
						for _, pp := range tp.Partitions {
							o.set(k+" offset", "%d %s %s", pp.Offset, code(pp.ErrorCode), str(pp.Metadata))
						}
					}
				}
			}
			return o
		},
	}
}

func joinInts(ns []int32) string {
	var parts []string
	for _, n := range ns {
		parts = append(parts, itoa(n))
	}
	return strings.Join(parts, ",")
}
