package askafka

import (
	"slices"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// idle is the connections.max.idle.ms of the new clusters: short, so that the closing of an idle
// connection can be awaited.
const idle = 3 * time.Second

// What a new cluster answers before and while it creates __consumer_offsets, and what it does with
// an idle connection, compared on Kafka and AsKafka.
func TestNewClusterAgainstKafka(t *testing.T) {
	rk := realkafka.Start(t, realkafka.Options{Cold: true, Configs: map[string]string{"connections.max.idle.ms": itoa(int32(idle.Milliseconds()))}})
	p := newPair(t, rk, false, []kafkatest.KafkaOpt{kafkatest.IdleTimeout(idle)})
	t.Logf("%s against %s", p.real.name, p.as.name)
	compare(t, p, []kcase{
		{name: "before any lookup", run: beforeLookup},
		{name: "a lookup creates the offsets topic", run: firstLookup},
		{name: "the doctor creates no transaction state", run: doctorOnNewCluster},
		{name: "idle connection", run: idleConnection},
	})
}

// beforeLookup sends each group request to a cluster on which no FindCoordinator has yet made
// Kafka create __consumer_offsets: no broker coordinates any group.
func beforeLookup(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	group, topic := p.name("fresh"), p.name("fresh-topic")
	w := s.dial(t)
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{group}
	o.set("DescribeGroups", "%s", code(w.send(dg, 5).(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode))
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.ProtocolType, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = group, "consumer", 30000, 30000
	pr := kmsg.NewJoinGroupRequestProtocol()
	pr.Name = "range"
	jg.Protocols = append(jg.Protocols, pr)
	o.set("JoinGroup", "%s", code(w.send(jg, 9).(*kmsg.JoinGroupResponse).ErrorCode))
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID = group, "someone"
	o.set("Heartbeat", "%s", code(w.send(hb, 4).(*kmsg.HeartbeatResponse).ErrorCode))
	of := kmsg.NewPtrOffsetFetchRequest()
	og := kmsg.NewOffsetFetchRequestGroup()
	og.Group = group
	of.Groups = append(of.Groups, og)
	o.set("OffsetFetch", "%s", code(w.send(of, 8).(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode))
	s.createTopic(t, topic, 1)
	o.set("OffsetCommit", "%s", code(commitOffset(t, w, group, "", -1, topic, 1)))
	if p.kip848 {
		cg := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		cg.Group, cg.MemberID, cg.RebalanceTimeoutMillis, cg.SubscribedTopicNames = group, kafkaUUID(), 30000, []string{topic}
		cg.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		o.set("ConsumerGroupHeartbeat", "%s", code(w.send(cg, 1).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode))
	}
	o.set("internal topics", "%v", s.internalTopics(t))
	return o
}

// firstLookup looks a group's coordinator up: Kafka creates __consumer_offsets, answers
// COORDINATOR_NOT_AVAILABLE meanwhile, and the group requests' answers go from NOT_COORDINATOR to
// COORDINATOR_LOAD_IN_PROGRESS to none. Which of those a poll meets depends on timing, so what is
// compared is the first answer, that every later one says to ask again, and the end.
func firstLookup(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	group := p.name("fresh")
	w := s.dial(t)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKeys = []string{group}
	first := w.send(fc, 4).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode
	o.set("FindCoordinator first", "%s", code(first))
	var seen []string
	limit := time.Now().Add(await)
	poll := func(what string, answer func() int16) {
		for {
			c := answer()
			if c == 0 {
				return
			}
			if !slices.Contains(seen, code(c)) {
				seen = append(seen, code(c))
			}
			if time.Now().After(limit) {
				t.Fatalf("%s: %s still answers %s", s.name, what, code(c))
			}
			time.Sleep(100 * time.Millisecond) // the topic is created and loaded on the broker's schedule
		}
	}
	poll("FindCoordinator", func() int16 { return w.send(fc, 4).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode })
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{group}
	poll("DescribeGroups", func() int16 { return w.send(dg, 5).(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode })
	o.set("until served", "%v", allowedWhileCreating(seen))
	g := w.send(dg, 5).(*kmsg.DescribeGroupsResponse).Groups[0]
	o.set("DescribeGroups once served", "%s %s", code(g.ErrorCode), g.State)
	o.set("internal topics", "%v", s.internalTopics(t))
	return o
}

// idleConnection awaits the closing of a connection that sends nothing after its first request
// (connections.max.idle.ms, Selector.maybeCloseOldestConnection).
func idleConnection(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	w := s.dial(t)
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "askafka-check", "1"
	if r := w.send(req, 3).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
		t.Fatalf("%s: ApiVersions: %s", s.name, code(r.ErrorCode))
	}
	o.set("open a third of the idle time later", "%v", !w.closed(idle/3))
	o.set("closed within the idle time and a minute", "%v", w.closed(idle+time.Minute))
	return o
}

// kip848SessionCase: a KIP-848 member's session ends a session timeout after its last heartbeat,
// however often it commits offsets (Kafka refreshes sessions on commits for classic groups only:
// OffsetMetadataManager.commitOffset); its next heartbeat is then refused.
func kip848SessionCase() kcase {
	return kcase{
		name: "KIP-848 session without heartbeats",
		skip: onlyKIP848,
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			group, topic := p.name("expiring"), p.name("expiring-topic")
			s.awaitCoordinator(t, group)
			s.createTopic(t, topic, 1)
			w := s.dial(t)
			member, epoch := joinConsumer(t, w, group, topic)
			limit := time.Now().Add(await)
			commits := 0
			for {
				req := kmsg.NewPtrOffsetCommitRequest()
				req.Group, req.MemberID, req.Generation = group, member, epoch
				rt := kmsg.NewOffsetCommitRequestTopic()
				rt.Topic = topic
				rp := kmsg.NewOffsetCommitRequestTopicPartition()
				rp.Offset, rp.LeaderEpoch = int64(commits), -1
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
				c := w.send(req, 9).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
				if c != 0 {
					o.set("commit refused with", "%s", code(c))
					break
				}
				commits++
				if time.Now().After(limit) {
					t.Fatalf("%s: commits were accepted for %v without a heartbeat", s.name, await)
				}
				time.Sleep(200 * time.Millisecond) // a commit every 200 ms, as a leader's would come
			}
			o.set("commits accepted first", "%v", commits > 0)
			hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			hb.Group, hb.MemberID, hb.MemberEpoch = group, member, epoch
			o.set("next heartbeat", "%s", code(w.send(hb, 1).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode))
			return o
		},
	}
}
