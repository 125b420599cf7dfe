package goneli

import (
	"errors"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// A FencedProducer's TRANSACTIONAL_ID_AUTHORIZATION_FAILED (error 53) is an *AuthorizationError for
// Write on its transactional id, granted on goneli's prefix where the id is goneli's; any other
// error is not.
func TestTransactionalAuthorizationError(t *testing.T) {
	denied := kafka.NewError(kafka.ErrTransactionalIDAuthorizationFailed, "Transactional Id authorization failed", true)
	for _, tc := range []struct {
		txid, name string
		prefixed   bool
	}{
		{"goneli-fenced.g", "goneli-fenced.g", true},
		{"goneli-fenced.g.billing", "goneli-fenced.g", true},
		{"my-own-id", "my-own-id", false},
	} {
		err := transactionalAuthorizationError("User:alice", tc.txid, "g", denied)
		var ae *AuthorizationError
		if !errors.As(err, &ae) || ae.Operation != "Write" || ae.Resource != "transactional-id" || ae.Name != tc.name || ae.Prefixed != tc.prefixed {
			t.Errorf("%s: %#v", tc.txid, err)
			continue
		}
		if !strings.Contains(err.Error(), "--operation Write --transactional-id "+tc.name) {
			t.Errorf("%s: %v; want the kafka-acls command", tc.txid, err)
		}
	}
	if err := transactionalAuthorizationError("", "goneli-fenced.g", "g", kafka.NewError(kafka.ErrTopicAuthorizationFailed, "", false)); err != nil {
		t.Errorf("another error mapped to %v", err)
	}
}

// The principal goneli names is User: and sasl.username; on a managed service whose sasl.username
// is an API key the grant goes to the key's service account, which the message says.
func TestAuthorizationErrorNamesTheServiceAccountCase(t *testing.T) {
	config := Config{LeaderGroupID: "g", LeaderTopic: "t", KafkaConfig: KafkaConfigMap{"sasl.username": "ABCDKEY"}}
	err := authorizationError(config, "producer", kafka.NewError(kafka.ErrTopicAuthorizationFailed, "", false))
	if err == nil || !strings.Contains(err.Error(), "User:ABCDKEY") || !strings.Contains(err.Error(), "service account") {
		t.Fatalf("%v; want the principal and the service-account note", err)
	}
	config.KafkaConfig = KafkaConfigMap{}
	err = authorizationError(config, "producer", kafka.NewError(kafka.ErrTopicAuthorizationFailed, "", false))
	if err == nil || strings.Contains(err.Error(), "service account") {
		t.Fatalf("%v; want no service-account note without sasl.username", err)
	}
}

// A grant that the broker refused the admin client (the KIP-848 session's DescribeConfigs) names
// the configured principal, as the consumer's and producer's do: on Apache Kafka 4.4 the message
// said "User:<the client's principal>" for a client whose sasl.username was set (realtest's
// TestSessionDerivation).
func TestRefusedGrantNamesThePrincipal(t *testing.T) {
	errs := shellErrors{Config{KafkaConfig: KafkaConfigMap{"sasl.username": "alice"}}}
	err := errs.Refused("DescribeConfigs", "group", "g", kafka.NewError(kafka.ErrGroupAuthorizationFailed, "", false))
	var ae *AuthorizationError
	if !errors.As(err, &ae) || ae.Principal != "User:alice" || !strings.Contains(err.Error(), "--allow-principal User:alice ") {
		t.Fatalf("%v; want the grant to User:alice", err)
	}
}
