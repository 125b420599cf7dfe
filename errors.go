package goneli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"
)

// ErrNonLivePulse is returned by Pulse, PulseCtx, Background and Yield once Close has begun.
var ErrNonLivePulse = driver.ErrNonLivePulse

// ErrCloseTimeout is wrapped by the error Close returns when a Kafka consumer did not finish
// closing within the close bound: the rebalance timeout (max.poll.interval.ms, by default the
// session timeout) plus one HeartbeatTimeout. A close that lands in a rebalance must wait for it,
// so the bound lies above the rebalance timeout; it is exceeded when the group coordinator cannot
// be reached, for which librdkafka waits indefinitely. The consumer then finishes closing in the
// background, and the group expels the instance after its session timeout, as after a crash.
var ErrCloseTimeout = driver.ErrCloseTimeout

// SessionTimeoutError is the fatal error Pulse returns when the group coordinator refuses the
// group session that goneli derives from HeartbeatTimeout (SessionTimeout), or session.timeout.ms, because it lies
// outside the broker's group.min.session.timeout.ms to group.max.session.timeout.ms (6 s to
// 30 min under Kafka's defaults). librdkafka would retry the JoinGroup for ever; the refusal comes
// with the first answer to it, so the error comes from the first Pulse after that answer,
// normally within a second of New.
type SessionTimeoutError struct {
	Session          time.Duration
	HeartbeatTimeout time.Duration
	Err              error
}

func (e *SessionTimeoutError) Error() string {
	advice := "raise KafkaConfig[\"session.timeout.ms\"], or leave it unset and raise HeartbeatTimeout, or lower the broker's " +
		"group.min.session.timeout.ms; New raises a derived session to the brokers' minimum itself where it may describe the brokers' " +
		"configs (DescribeConfigs on the cluster), and to Kafka's default minimum, 6s, where it may not"
	if e.Session > 30*time.Minute {
		advice = "lower HeartbeatTimeout (to at most 26m under Kafka's defaults) or raise the broker's group.max.session.timeout.ms"
	}
	return fmt.Sprintf("goneli: the broker refuses a group session of %v (derived from HeartbeatTimeout %v, or set as "+
		"KafkaConfig[\"session.timeout.ms\"]): it lies outside the broker's group.min.session.timeout.ms to "+
		"group.max.session.timeout.ms (6s to 30m by default); %s (%v)", e.Session, e.HeartbeatTimeout, advice, e.Err)
}

// Unwrap returns the cause.
func (e *SessionTimeoutError) Unwrap() error { return e.Err }

// TopicError reports that the leader topic is missing and could not be created.
type TopicError struct {
	Topic string
	// Partitions is how many partitions it needs, one per role; 0 means 1.
	Partitions int
	Err        error
}

func (e *TopicError) Error() string {
	p := max(e.Partitions, 1)
	create := fmt.Sprintf("create it with %d partition(s), for example: kafka-topics.sh --create --topic %s --partitions %d", p, e.Topic, p)
	var ae *AuthorizationError
	if errors.As(e.Err, &ae) {
		who := grantee(ae.Principal)
		return fmt.Sprintf("goneli: leader topic %q does not exist and %s may not create it (%v); %s, or grant %s Create on topic %s "+
			"(or on the cluster): %s%s", e.Topic, who, ae.Err, create, who, e.Topic,
			aclGrantCommand(who, []string{ae.Operation}, ae.Resource, ae.Name, false), managedNote(ae.Principal))
	}
	return fmt.Sprintf("goneli: leader topic %q does not exist and could not be created (%v); %s", e.Topic, e.Err, create)
}

// PartitionsError reports that the leader topic has fewer partitions than there are roles, and
// that partitions could not be added to it.
type PartitionsError struct {
	Topic      string
	Has, Needs int
	Err        error
}

func (e *PartitionsError) Error() string {
	add := fmt.Sprintf("add them, for example: kafka-topics.sh --alter --topic %s --partitions %d", e.Topic, e.Needs)
	var ae *AuthorizationError
	if errors.As(e.Err, &ae) {
		who := grantee(ae.Principal)
		return fmt.Sprintf("goneli: leader topic %q has %d partition(s) and needs %d, one per role, and %s may not add them (%v); %s, "+
			"or grant %s Alter on topic %s: %s%s", e.Topic, e.Has, e.Needs, who, ae.Err, add, who, e.Topic,
			aclGrantCommand(who, []string{ae.Operation}, ae.Resource, ae.Name, false), managedNote(ae.Principal))
	}
	return fmt.Sprintf("goneli: leader topic %q has %d partition(s) and needs %d, one per role, but none could be added (%v); %s",
		e.Topic, e.Has, e.Needs, e.Err, add)
}

// Unwrap returns the cause.
func (e *PartitionsError) Unwrap() error { return e.Err }

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

// ErrWriteFenced is matched (errors.Is) by every *FencedWriteError.
var ErrWriteFenced = errors.New("goneli: write fenced: the tenure it was made for is over")

// ErrFencedProducerClosed is returned by a FencedProducer's Send and Transaction after Close.
var ErrFencedProducerClosed = errors.New("goneli: the fenced producer is closed")

// FencedWriteError is the error of a FencedProducer write that was refused because its tenure is
// over: the transaction was aborted, or the broker refused it, and read_committed consumers never
// see its records.
type FencedWriteError struct {
	TransactionalID string
	// Token is the tenure the write was made for; 0 if the instance did not lead when it began.
	Token int64
	// Broker is true when the broker fenced the producer: a later tenure, on this instance or
	// another, initialised the transactional id. It is false when the local lease had already
	// ended (or never was held), which was found before anything was committed.
	Broker bool
	// Err is the broker's error, when Broker is true.
	Err error
}

func (e *FencedWriteError) Error() string {
	if e.Broker {
		return fmt.Sprintf("goneli: write fenced by the broker: a successor's producer has initialised transactional id %s, "+
			"so the transaction of tenure token %d was refused and aborted (%v)", e.TransactionalID, e.Token, e.Err)
	}
	if e.Token == 0 {
		return fmt.Sprintf("goneli: write fenced: this instance does not lead, so nothing was written through transactional id %s", e.TransactionalID)
	}
	return fmt.Sprintf("goneli: write fenced: the local lease of tenure token %d had ended before the commit, "+
		"so the transaction through transactional id %s was aborted", e.Token, e.TransactionalID)
}

// Is makes errors.Is(err, ErrWriteFenced) true.
func (e *FencedWriteError) Is(target error) bool { return target == ErrWriteFenced }

// Unwrap returns the broker's error, if any.
func (e *FencedWriteError) Unwrap() error { return e.Err }

// GroupConflictError reports members of the leader group that work on another leader topic, or
// with another list of roles, or whose partitions the group coordinator's description does not name
// the topic of. No instance that sees such a member leads until it has gone: fix the configuration
// so that every contender of the group names the same LeaderTopic and the same roles in the same
// order. Its fields: Group and Topic, this instance's group and leader topic; Roles, the digest of
// this instance's role list (see NewRoles; empty for New); Members, the members that disagree, or
// that cannot be told to agree.
type GroupConflictError = core.GroupConflictError

// ForeignMember is a member of the leader group that holds partitions of other topics (Topics), or
// has another role list (Roles, its digest), or holds partitions whose topic the group's description
// does not name (Unnamed: they may be partitions of another leader topic); ClientID and Host say who
// it is.
type ForeignMember = core.ForeignMember

// NotKafkaError is returned by New when no bootstrap server answers as a Kafka broker and at least
// one accepts connections and then answers otherwise, or not at all: a port of some other service,
// which librdkafka would retry for ever. Servers that refuse connections do not cause it, as a
// broker may be on its way up; New then succeeds and Stats reports Kafka unreachable.
type NotKafkaError struct {
	// Servers are bootstrap.servers as configured.
	Servers string
	// Answers say, for each server that accepted a connection, what it answered.
	Answers []string
}

func (e *NotKafkaError) Error() string {
	return fmt.Sprintf("goneli: no server in bootstrap.servers %q answers as Kafka (%s); check KafkaConfig[\"bootstrap.servers\"] "+
		"and, for a TLS listener, KafkaConfig[\"security.protocol\"]", e.Servers, strings.Join(e.Answers, "; "))
}

// shellErrors makes this package's errors for the driver of an instance of config (driver.Errors),
// so that what New, Pulse and TransferTo return is of the types documented here.
type shellErrors struct{ config Config }

func (e shellErrors) SessionTimeout(session, lease time.Duration, err error) error {
	return &SessionTimeoutError{Session: session, HeartbeatTimeout: lease, Err: err}
}

func (e shellErrors) Authorization(client string, err error) error {
	return authorizationError(e.config, client, err)
}

func (e shellErrors) Refused(operation, resource, name string, err error) error {
	return &AuthorizationError{Principal: principalOf(e.config), Operation: operation, Resource: resource, Name: name, Client: "admin", Err: err}
}

func (e shellErrors) Config(field string, value any, reason string) error {
	return &ConfigError{Field: field, Value: value, Reason: reason}
}

func (e shellErrors) Topic(topic string, partitions int, err error) error {
	return &TopicError{Topic: topic, Partitions: partitions, Err: err}
}

func (e shellErrors) Partitions(topic string, has, needs int, err error) error {
	return &PartitionsError{Topic: topic, Has: has, Needs: needs, Err: err}
}

func (e shellErrors) NotKafka(servers string, answers []string) error {
	return &NotKafkaError{Servers: servers, Answers: answers}
}

func (e shellErrors) Transfer(to, reason string, members []string, err error) error {
	return &TransferError{To: to, Reason: reason, Members: members, Err: err}
}
