package askafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A classic member's offset commits through a rebalance, as goneli's leader commits in its
// revocation callback: Kafka accepts a commit at the current generation while the group is Stable
// or PreparingRebalance, refuses it with REBALANCE_IN_PROGRESS while the group is
// CompletingRebalance (between JoinGroup's answer and SyncGroup), and one at an earlier generation
// with ILLEGAL_GENERATION (ClassicGroup.validateOffsetCommit,
// group-coordinator/src/main/java/org/apache/kafka/coordinator/group/classic/ClassicGroup.java).
func offsetCommitRebalanceCase() kcase {
	return kcase{
		name: "OffsetCommit through a rebalance",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			group, topic := p.name("rebalancing"), p.name("rebalancing-topic")
			s.awaitCoordinator(t, group)
			s.createTopic(t, topic, 1)
			a := s.dial(t)
			member, gen := joinClassic(t, a, group, topic)
			o.set("Stable: commit", "%s", code(commitOffset(t, a, group, member, gen, topic, 1)))
			o.set("Stable: state", "%s", groupState(t, s, group))

			// A second member's join starts a rebalance; its JoinGroup is answered only once the
			// first member has joined again, so it waits on a connection of its own.
			b := s.dial(t)
			bJoin := joinRequest(group, "", topic)
			first := b.send(bJoin, 9).(*kmsg.JoinGroupResponse)
			if first.ErrorCode != kerr.MemberIDRequired.Code {
				t.Fatalf("%s: a new member's first JoinGroup: %s, want MEMBER_ID_REQUIRED (KIP-394)", s.name, code(first.ErrorCode))
			}
			bJoin = joinRequest(group, first.MemberID, topic)
			joined := make(chan joinAnswer, 1)
			go func() {
				resp, err := b.try(bJoin, 9)
				joined <- joinAnswer{resp, err}
			}()
			// The first member learns of the rebalance from its heartbeat: the event awaited.
			limit := time.Now().Add(await)
			for {
				hb := kmsg.NewPtrHeartbeatRequest()
				hb.Group, hb.MemberID, hb.Generation = group, member, gen
				c := a.send(hb, 4).(*kmsg.HeartbeatResponse).ErrorCode
				if c == kerr.RebalanceInProgress.Code {
					break
				}
				if c != 0 || time.Now().After(limit) {
					t.Fatalf("%s: the first member's heartbeat answered %s while the second joined", s.name, code(c))
				}
				time.Sleep(50 * time.Millisecond) // the join reaches the coordinator on its own
			}
			o.set("PreparingRebalance: state", "%s", groupState(t, s, group))
			o.set("PreparingRebalance: commit", "%s", code(commitOffset(t, a, group, member, gen, topic, 2)))

			aJoin := a.send(joinRequest(group, member, topic), 9).(*kmsg.JoinGroupResponse)
			bAnswer := <-joined
			if bAnswer.err != nil {
				t.Fatalf("%s: the second member's JoinGroup: %v", s.name, bAnswer.err)
			}
			bResp := bAnswer.resp.(*kmsg.JoinGroupResponse)
			o.set("rejoined", "%s %s, one generation on %v, same leader %v", code(aJoin.ErrorCode), code(bResp.ErrorCode),
				aJoin.Generation == gen+1 && bResp.Generation == gen+1, aJoin.LeaderID == bResp.LeaderID)
			o.set("CompletingRebalance: state", "%s", groupState(t, s, group))
			o.set("CompletingRebalance: commit", "%s", code(commitOffset(t, a, group, member, aJoin.Generation, topic, 3)))
			o.set("CompletingRebalance: commit at the earlier generation", "%s", code(commitOffset(t, a, group, member, gen, topic, 3)))

			// The group's leader syncs first: the other's SyncGroup is answered once it has.
			syncs := []struct {
				w  *wire
				id string
			}{{a, member}, {b, bResp.MemberID}}
			if aJoin.LeaderID == bResp.MemberID {
				syncs[0], syncs[1] = syncs[1], syncs[0]
			}
			for i, sy := range syncs {
				req := kmsg.NewPtrSyncGroupRequest()
				req.Group, req.Generation, req.MemberID = group, aJoin.Generation, sy.id
				req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
				if i == 0 {
					empty := kmsg.NewConsumerMemberAssignment()
					for _, id := range []string{member, bResp.MemberID} {
						sa := kmsg.NewSyncGroupRequestGroupAssignment()
						sa.MemberID, sa.MemberAssignment = id, empty.AppendTo(nil)
						req.GroupAssignment = append(req.GroupAssignment, sa)
					}
				}
				if c := sy.w.send(req, 5).(*kmsg.SyncGroupResponse).ErrorCode; c != 0 {
					t.Fatalf("%s: SyncGroup: %s", s.name, code(c))
				}
			}
			o.set("Stable again: state", "%s", groupState(t, s, group))
			o.set("Stable again: commit", "%s", code(commitOffset(t, a, group, member, aJoin.Generation, topic, 4)))
			o.set("Stable again: commit at the earlier generation", "%s", code(commitOffset(t, a, group, member, gen, topic, 4)))
			for _, w := range []struct {
				w  *wire
				id string
			}{{a, member}, {b, bResp.MemberID}} {
				lg := kmsg.NewPtrLeaveGroupRequest()
				lg.Group = group
				lm := kmsg.NewLeaveGroupRequestMember()
				lm.MemberID = w.id
				lg.Members = append(lg.Members, lm)
				w.w.send(lg, 3)
			}
			return o
		},
	}
}

type joinAnswer struct {
	resp kmsg.Response
	err  error
}

// joinRequest is a consumer's JoinGroup for group as member ("" for a new one), subscribed to topic.
func joinRequest(group, member, topic string) *kmsg.JoinGroupRequest {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30000, 30000
	pr := kmsg.NewJoinGroupRequestProtocol()
	pr.Name, pr.Metadata = "range", meta.AppendTo(nil)
	req.Protocols = append(req.Protocols, pr)
	return req
}

// groupState is the group's state as DescribeGroups (v5) tells it.
func groupState(t *testing.T, s *side, group string) string {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	g := s.dial(t).send(req, 5).(*kmsg.DescribeGroupsResponse).Groups[0]
	return code(g.ErrorCode) + " " + g.State
}
