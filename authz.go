package goneli

import (
	"errors"
	"fmt"
	"strings"

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
	// On a managed service whose sasl.username is an API key (Confluent Cloud, for one), the
	// principal that ACLs name is the key's service account instead, which the client cannot
	// tell; the message says so.
	Principal string
	// Operation is the ACL operation missing, for example "Read" or "Write".
	Operation string
	// Resource is "topic", "group" or "transactional-id" (as kafka-acls.sh names it), and Name its
	// name.
	Resource, Name string
	// Prefixed is set when the grant is best given on every resource whose name starts with
	// Name: the observers' groups are Name and Name-status, a FencedProducer's transactional ids
	// Name and Name.<role>.
	Prefixed bool
	// Client is the Kafka client that was refused: "consumer", "producer", "observer" or
	// "fenced producer".
	Client string
	Err    error
}

func (e *AuthorizationError) Error() string {
	who := grantee(e.Principal)
	return fmt.Sprintf("goneli: the broker refuses %s %s on %s %s (%s: %v); grant it, for example: %s%s "+
		"(docs/operations.md lists every ACL goneli needs, under ACLs)",
		who, e.Operation, e.Resource, e.Name, e.Client, e.Err, aclGrantCommand(who, []string{e.Operation}, e.Resource, e.Name, e.Prefixed),
		managedNote(e.Principal))
}

// managedNote reminds that a principal read from sasl.username may not be the one ACLs name.
func managedNote(principal string) string {
	if principal == "" {
		return ""
	}
	return " (on a managed service where sasl.username is an API key, grant it to the key's service account instead)"
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
	e := &AuthorizationError{Principal: principalOf(config), Client: client, Err: ke}
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

// transactionalAuthorizationError returns the *AuthorizationError that a FencedProducer's
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) stands for, or nil if err is not that: it needs Write
// on its transactional id, and, where the id is goneli's (fencedPrefix + group, and "." + role for
// a role), the grant is given on the prefix so that it covers every role.
func transactionalAuthorizationError(principal, txid, group string, err error) error {
	var ke kafka.Error
	if !errors.As(err, &ke) || ke.Code() != kafka.ErrTransactionalIDAuthorizationFailed {
		return nil
	}
	e := &AuthorizationError{Principal: principal, Operation: "Write", Resource: "transactional-id", Name: txid, Client: "fenced producer", Err: ke}
	if prefix := fencedPrefix + group; group != "" && strings.HasPrefix(txid, prefix) {
		e.Name, e.Prefixed = prefix, true
	}
	return e
}

// principalOf is the principal that the broker knows the client by when it can be told from
// config: "User:" and the SASL user name; empty otherwise (a TLS client's is its certificate's).
// A managed service may map the user name (an API key) to another principal (a service account);
// what is shown to the operator says so (managedNote).
func principalOf(config Config) string {
	if u, ok := config.KafkaConfig["sasl.username"]; ok {
		return "User:" + fmt.Sprint(u)
	}
	return ""
}

// grantee is principal, or a placeholder for the advice to name when it is not known.
func grantee(principal string) string {
	if principal == "" {
		return "User:<the client's principal>"
	}
	return principal
}

// aclGrantCommand is the kafka-acls.sh command that grants ops on a resource to who: kind is
// "topic", "group", "transactional-id" or "cluster" (whose name the command does not take).
func aclGrantCommand(who string, ops []string, kind, name string, prefixed bool) string {
	var b strings.Builder
	b.WriteString("kafka-acls.sh --add --allow-principal " + who)
	for _, op := range ops {
		b.WriteString(" --operation " + op)
	}
	if kind == "cluster" {
		b.WriteString(" --cluster")
	} else {
		b.WriteString(" --" + kind + " " + name)
	}
	if prefixed {
		b.WriteString(" --resource-pattern-type prefixed")
	}
	return b.String()
}
