package goneli

import "github.com/confluentinc/confluent-kafka-go/v2/kafka"

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
		return s.c.IncrementalAssign(tps)
	}
	return s.c.Assign(tps)
}

func (s kafkaSession) GiveBack(tps []kafka.TopicPartition) error {
	if s.Cooperative() {
		return s.c.IncrementalUnassign(tps)
	}
	return s.c.Unassign()
}

// noSession serves a rebalance callback that was handed no consumer: confluent-kafka-go applies
// the change itself when the callback does not.
type noSession struct{}

func (noSession) Cooperative() bool                     { return false }
func (noSession) AssignmentLost() bool                  { return false }
func (noSession) MemberID() string                      { return "" }
func (noSession) Take([]kafka.TopicPartition) error     { return nil }
func (noSession) GiveBack([]kafka.TopicPartition) error { return nil }
