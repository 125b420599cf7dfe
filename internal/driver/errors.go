package driver

import (
	"errors"
	"time"
)

// The sentinel errors of the public API that the shell returns; the root package names each of
// them (the same value) and documents it.

// ErrNonLivePulse is goneli.ErrNonLivePulse.
var ErrNonLivePulse = errors.New("goneli: cannot pulse in non-live state")

// ErrCloseTimeout is goneli.ErrCloseTimeout.
var ErrCloseTimeout = errors.New("goneli: Kafka client close timed out")

// Errors makes the errors of goneli's API that the shell returns. The root package implements it,
// so that they are its own types, which it documents (goneli.SessionTimeoutError and the others
// named here).
type Errors interface {
	// SessionTimeout is the error for a group session the coordinator refuses.
	SessionTimeout(session, lease time.Duration, err error) error
	// Authorization is the error that a Kafka error seen by client ("consumer", "producer")
	// stands for if it is an authorization failure, else nil.
	Authorization(client string, err error) error
	// Refused is the error for a grant the broker refused the admin client: operation on the
	// resource of that kind and name.
	Refused(operation, resource, name string, err error) error
	// Config is the error for an invalid setting.
	Config(field string, value any, reason string) error
	// Topic is the error for a leader topic that is missing and could not be created with the
	// partitions it needs.
	Topic(topic string, partitions int, err error) error
	// Partitions is the error for a leader topic that has fewer partitions than it needs, which
	// could not be added.
	Partitions(topic string, has, needs int, err error) error
	// NotKafka is the error for bootstrap servers of which none answers as Kafka.
	NotKafka(servers string, answers []string) error
	// Transfer is the error for a transfer of leadership refused, with the reason, the members
	// for a target that is not one of them, and a sentinel (ErrNotLeader, ErrNotMember,
	// ErrRolesTransfer) or nil.
	Transfer(to, reason string, members []string, err error) error
}
