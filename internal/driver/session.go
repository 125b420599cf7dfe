package driver

import (
	"slices"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// groupSession is what the rebalance callback asks of the consumer whose assignment changed. In
// production it is a *kafka.Consumer (kafkaSession); the driver's tests give a scripted consumer
// that implements it, so that rebalances run through the same code without a broker.
type groupSession interface {
	// Cooperative reports whether the group uses an incremental assignor.
	Cooperative() bool
	// AssignmentLost reports whether the revocation being served was forced by a lost session.
	AssignmentLost() bool
	// MemberID is this member's id in the group, or "" if the consumer cannot tell.
	MemberID() string
	// Take starts fetching the partitions assigned, from the offsets given.
	Take(tps []kafka.TopicPartition) error
	// GiveBack stops fetching the partitions revoked.
	GiveBack(tps []kafka.TopicPartition) error
}

// kafkaSession is the groupSession of a librdkafka consumer.
type kafkaSession struct {
	c     *kafka.Consumer
	group string
}

func (s kafkaSession) Cooperative() bool    { return s.c.GetRebalanceProtocol() == "COOPERATIVE" }
func (s kafkaSession) AssignmentLost() bool { return s.c.AssignmentLost() }
func (s kafkaSession) MemberID() string     { return memberID(s.c, s.group) }

func (s kafkaSession) Take(tps []kafka.TopicPartition) error {
	if s.Cooperative() {
		if err := s.c.IncrementalAssign(tps); err != nil {
			return err
		}
		s.wakeFetchers(tps)
		return nil
	}
	return s.c.Assign(tps)
}

func (s kafkaSession) GiveBack(tps []kafka.TopicPartition) error {
	if s.Cooperative() {
		if err := s.c.IncrementalUnassign(tps); err != nil {
			return err
		}
		s.wakeFetchers(tps)
		return nil
	}
	return s.c.Unassign()
}

// wakeFetchers restarts the fetch of the partitions that an incremental assignment or unassignment
// left in place (all but changed). librdkafka 2.11.1 pauses every assigned partition while a
// rebalance callback is due and resumes them when the callback assigns or unassigns, but the
// resume only clears a flag: it does not wake the broker thread that fetches them, which, having
// found them paused, sleeps until its idle wait of up to a second ends (rd_kafka_max_block_ms in
// rdkafka_broker.c; a partition's change of fetch state to active does wake it, in
// rd_kafka_toppar_set_fetch_state). A leader that kept partition 0 through a follower's join then
// read none of its heartbeats back for up to a second and renewed nothing (issue 46: 435 and 664
// ms in 81 rebalances). A seek to the position it resumes from anyway, without a leader epoch so
// that nothing is validated first, is such a change of state. The seek moves nothing: records
// fetched but not yet polled are fetched again, and what a lease proves rests on commits and send
// times, never on when a heartbeat was read. A partition with no position (nothing read since it
// was assigned or last sought) is left as it is.
func (s kafkaSession) wakeFetchers(changed []kafka.TopicPartition) {
	held, err := s.c.Assignment()
	if err != nil {
		return
	}
	kept := slices.DeleteFunc(held, func(tp kafka.TopicPartition) bool {
		return slices.ContainsFunc(changed, func(c kafka.TopicPartition) bool {
			return c.Partition == tp.Partition && c.Topic != nil && tp.Topic != nil && *c.Topic == *tp.Topic
		})
	})
	if len(kept) == 0 {
		return
	}
	at, err := s.c.Position(kept)
	if err != nil {
		return
	}
	at = slices.DeleteFunc(at, func(tp kafka.TopicPartition) bool { return tp.Offset < 0 })
	for i := range at {
		at[i].LeaderEpoch, at[i].Metadata, at[i].Error = nil, nil, nil
	}
	if len(at) > 0 {
		_, _ = s.c.SeekPartitions(at)
	}
}

// noSession serves a rebalance callback that was handed no consumer: confluent-kafka-go applies
// the change itself when the callback does not.
type noSession struct{}

func (noSession) Cooperative() bool                     { return false }
func (noSession) AssignmentLost() bool                  { return false }
func (noSession) MemberID() string                      { return "" }
func (noSession) Take([]kafka.TopicPartition) error     { return nil }
func (noSession) GiveBack([]kafka.TopicPartition) error { return nil }
