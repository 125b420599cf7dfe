package driver

import (
	"fmt"
	"strings"
	"time"
)

// testErrors makes the errors of goneli's API as the root package's do (shellErrors there), in one
// type that keeps every field and says in its message what those do, so that the driver's tests
// check the errors the shell asks for.
type testErrors struct{}

// apiError is the error testErrors makes: kind says which of goneli's types it stands for.
type apiError struct {
	kind                      string
	Field                     string
	Value                     any
	Reason                    string
	Operation, Resource, Name string
	Servers                   string
	Answers, Members          []string
	To                        string
	Err                       error
}

func (e *apiError) Error() string {
	switch e.kind {
	case "config":
		return fmt.Sprintf("invalid %s (%v): %s", e.Field, e.Value, e.Reason)
	case "refused":
		return fmt.Sprintf("refused %s on %s %s: %v", e.Operation, e.Resource, e.Name, e.Err)
	case "not kafka":
		return fmt.Sprintf("no server in bootstrap.servers %q answers as Kafka (%s)", e.Servers, strings.Join(e.Answers, "; "))
	case "transfer":
		return fmt.Sprintf("cannot transfer to %q: %s (members %v)", e.To, e.Reason, e.Members)
	}
	return fmt.Sprintf("%s: %s %v", e.kind, e.Reason, e.Err)
}

func (e *apiError) Unwrap() error { return e.Err }

func (testErrors) SessionTimeout(session, lease time.Duration, err error) error {
	return &apiError{kind: "session timeout", Reason: fmt.Sprintf("session %v for lease %v", session, lease), Err: err}
}

func (testErrors) Authorization(string, error) error { return nil }

func (testErrors) Refused(operation, resource, name string, err error) error {
	return &apiError{kind: "refused", Operation: operation, Resource: resource, Name: name, Err: err}
}

func (testErrors) Config(field string, value any, reason string) error {
	return &apiError{kind: "config", Field: field, Value: value, Reason: reason}
}

func (testErrors) Topic(topic string, partitions int, err error) error {
	return &apiError{kind: "topic", Name: topic, Reason: fmt.Sprintf("%d partitions", partitions), Err: err}
}

func (testErrors) Partitions(topic string, has, needs int, err error) error {
	return &apiError{kind: "partitions", Name: topic, Reason: fmt.Sprintf("has %d, needs %d", has, needs), Err: err}
}

func (testErrors) NotKafka(servers string, answers []string) error {
	return &apiError{kind: "not kafka", Servers: servers, Answers: answers}
}

func (testErrors) Transfer(to, reason string, members []string, err error) error {
	return &apiError{kind: "transfer", To: to, Reason: reason, Members: members, Err: err}
}
