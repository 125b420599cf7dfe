package goneli

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNonLivePulse is returned by Pulse, PulseCtx, Background and Yield once Close has begun.
var ErrNonLivePulse = errors.New("goneli: cannot pulse in non-live state")

// ErrCloseTimeout is wrapped by the error Close returns when a Kafka consumer did not finish
// closing within the close bound: the rebalance timeout (max.poll.interval.ms, by default the
// session timeout) plus one HeartbeatTimeout. A close that lands in a rebalance must wait for it,
// so the bound lies above the rebalance timeout; it is exceeded when the group coordinator cannot
// be reached, for which librdkafka waits indefinitely. The consumer then finishes closing in the
// background, and the group expels the instance after its session timeout, as after a crash.
var ErrCloseTimeout = errors.New("goneli: Kafka client close timed out")

// TopicError reports that the leader topic is missing and could not be created.
type TopicError struct {
	Topic string
	Err   error
}

func (e *TopicError) Error() string {
	return fmt.Sprintf("goneli: leader topic %q does not exist and could not be created (%v); "+
		"create it with one partition, for example: kafka-topics.sh --create --topic %s --partitions 1",
		e.Topic, e.Err, e.Topic)
}

// Unwrap returns the cause.
func (e *TopicError) Unwrap() error { return e.Err }

// ConfigError reports one invalid setting: a Config field, or a key of KafkaConfig written as
// KafkaConfig["key"].
type ConfigError struct {
	Field  string
	Value  interface{}
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Value == nil {
		return fmt.Sprintf("goneli: invalid %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("goneli: invalid %s (%v): %s", e.Field, e.Value, e.Reason)
}

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
