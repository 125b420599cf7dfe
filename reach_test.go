package goneli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/testkit"
)

// New against a port of another service fails once its metadata request has timed out, rather
// than leaving librdkafka to retry for ever.
func TestNewAgainstAnotherService(t *testing.T) {
	log := newTestLog(t)
	config := Config{
		KafkaConfig:      KafkaConfigMap{"bootstrap.servers": testkit.ListenLocal(t, testkit.HTTPServer)},
		LeaderGroupID:    "g",
		Name:             "a",
		Scribe:           log.Scribe(),
		HeartbeatTimeout: Duration(time.Second),
	}
	n, err := New(config)
	var nk *NotKafkaError
	if !errors.As(err, &nk) {
		if n != nil {
			_ = n.Close()
		}
		t.Fatalf("New against a web server: %v; want a NotKafkaError", err)
	}
}

// New against a port that accepts connections and never answers returned an instance that
// retried for ever, while neli gave up on the same port in seconds: it fails with a NotKafkaError
// too, once its metadata request and the probe after it have both gone unanswered.
func TestNewAgainstASilentPort(t *testing.T) {
	config := Config{
		KafkaConfig:      KafkaConfigMap{"bootstrap.servers": testkit.ListenLocal(t, testkit.SilentServer)},
		LeaderGroupID:    "g",
		Name:             "a",
		Scribe:           newTestLog(t).Scribe(),
		HeartbeatTimeout: Duration(time.Second),
	}
	n, err := New(config)
	if n != nil {
		_ = n.Close()
	}
	var nk *NotKafkaError
	if !errors.As(err, &nk) {
		t.Fatalf("New against a silent port: %v; want a NotKafkaError", err)
	}
	if !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("the error does not say that the server stayed silent: %v", err)
	}
}

// New against a port where no broker listens yet succeeds, and Stats says since when Kafka has
// been unreachable, and why.
func TestNewAgainstNoBroker(t *testing.T) {
	log := newTestLog(t)
	config := Config{
		KafkaConfig:      KafkaConfigMap{"bootstrap.servers": testkit.FreePort(t)},
		LeaderGroupID:    "g",
		Name:             "a",
		Scribe:           log.Scribe(),
		HeartbeatTimeout: Duration(time.Second),
	}
	before := time.Now()
	n, err := New(config)
	if err != nil {
		t.Fatalf("New without a broker: %v", err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		select {
		case <-n.(*neli).life.clientsClosed:
		case <-time.After(awaitLimit):
			t.Errorf("Kafka clients still closing %v after Close", awaitLimit)
		}
	})
	s := n.(Curator).Stats()
	if s.UnreachableSince.Before(before) || s.UnreachableSince.After(time.Now()) || !strings.Contains(s.UnreachableReason, "metadata") {
		t.Fatalf("Stats after New without a broker: unreachable since %v (New began at %v), reason %q; want a time within New and the metadata failure",
			s.UnreachableSince, before, s.UnreachableReason)
	}
	if ok, err := n.Pulse(10 * time.Millisecond); ok || err != nil {
		t.Fatalf("Pulse without a broker = %v, %v; want false, nil", ok, err)
	}
}
