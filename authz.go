package goneli

import (
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// librdkafka treats an authorization failure like any other broker error: it logs it and tries
// again for ever. An instance without Read on its group or topic, or Write on its topic, then
// looks like a healthy follower that is never elected, which is the hardest misconfiguration to
// spot. No retry can mend a missing ACL, so goneli ends the instance with an *AuthorizationError
// instead (the same way as a session the broker refuses), and Watch and Describe return one.

// AuthorizationError is the fatal error Pulse returns (and Watch and Describe return) when the
// broker refuses an operation that goneli cannot do without: the configured principal lacks an
// ACL. A lease the instance may still hold runs out on its own, as nothing can renew it.
type AuthorizationError struct {
	// Principal is "User:" and KafkaConfig's sasl.username, or empty when none is configured.
	Principal string
	// Operation is the ACL operation missing, for example "Read" or "Write".
	Operation string
	// Resource is "topic" or "group", and Name its name.
	Resource, Name string
	// Prefixed is set when the grant is best given on every resource whose name starts with
	// Name: the observers' groups are Name and Name-status.
	Prefixed bool
	// Client is the Kafka client that was refused: "consumer", "producer" or "observer".
	Client string
	Err    error
}

func (e *AuthorizationError) Error() string {
	who := e.Principal
	if who == "" {
		who = "User:<the client's principal>"
	}
	pattern := ""
	if e.Prefixed {
		pattern = " --resource-pattern-type prefixed"
	}
	return fmt.Sprintf("goneli: the broker refuses %s %s on %s %s (%s: %v); grant it, for example: "+
		"kafka-acls.sh --add --allow-principal %s --operation %s --%s %s%s (the README's Production notes list every ACL goneli needs)",
		who, e.Operation, e.Resource, e.Name, e.Client, e.Err, who, e.Operation, e.Resource, e.Name, pattern)
}

// Unwrap returns the cause.
func (e *AuthorizationError) Unwrap() error { return e.Err }

// authorizationError returns the *AuthorizationError that a Kafka error seen by client stands
// for, or nil if err is no authorization failure. The operation is the one that the client's
// requests need and that implies the others (Read and Write imply Describe).
func authorizationError(config Config, client string, err error) error {
	ke, ok := err.(kafka.Error)
	if !ok {
		return nil
	}
	e := &AuthorizationError{Client: client, Err: ke}
	if u, ok := config.KafkaConfig["sasl.username"]; ok {
		e.Principal = "User:" + fmt.Sprint(u)
	}
	switch {
	case ke.Code() == kafka.ErrGroupAuthorizationFailed && client == "consumer":
		e.Operation, e.Resource, e.Name = "Read", "group", config.LeaderGroupID
	case ke.Code() == kafka.ErrGroupAuthorizationFailed:
		// The observer never joins its group, but librdkafka looks up its coordinator.
		e.Operation, e.Resource, e.Name, e.Prefixed = "Describe", "group", config.LeaderGroupID+".observer", true
	case ke.Code() == kafka.ErrTopicAuthorizationFailed && client == "producer":
		e.Operation, e.Resource, e.Name = "Write", "topic", config.LeaderTopic
	case ke.Code() == kafka.ErrTopicAuthorizationFailed:
		e.Operation, e.Resource, e.Name = "Read", "topic", config.LeaderTopic
	default:
		return nil
	}
	return e
}
