package goneli

import (
	"context"
	"errors"
	"strings"
	"testing"
)

type stubLead struct{ token int64 }

func (s stubLead) IsLeader() bool { return s.token != 0 }
func (s stubLead) Token() int64   { return s.token }

func TestFencedConfigRefusals(t *testing.T) {
	servers := KafkaConfigMap{"bootstrap.servers": "localhost:9092"}
	for _, c := range []struct {
		cfg   FencedConfig
		field string
	}{
		{FencedConfig{TransactionalID: "x", KafkaConfig: KafkaConfigMap{"bootstrap.servers": "h:1", "transactional.id": "y"}}, `FencedConfig.KafkaConfig["transactional.id"]`},
		{FencedConfig{TransactionalID: "x", KafkaConfig: KafkaConfigMap{"bootstrap.servers": "h:1", "enable.idempotence": false}}, `FencedConfig.KafkaConfig["enable.idempotence"]`},
		{FencedConfig{KafkaConfig: servers}, "FencedConfig.TransactionalID"},
		{FencedConfig{TransactionalID: "x"}, `FencedConfig.KafkaConfig["bootstrap.servers"]`},
		{FencedConfig{TransactionalID: "x", KafkaConfig: servers, Timeout: -1}, "FencedConfig.Timeout"},
	} {
		_, err := NewFencedProducer(stubLead{1}, c.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%+v: got %v, want a ConfigError on %s", c.cfg, err, c.field)
		}
	}
}

// A write without leadership is refused before any Kafka client is made.
func TestFencedSendWithoutLeadership(t *testing.T) {
	f, err := NewFencedProducer(stubLead{0}, FencedConfig{TransactionalID: "x", KafkaConfig: KafkaConfigMap{"bootstrap.servers": "localhost:1"}})
	if err != nil {
		t.Fatal(err)
	}
	err = f.Send(context.Background())
	var fe *FencedWriteError
	if !errors.Is(err, ErrWriteFenced) || !errors.As(err, &fe) || fe.Broker || !strings.Contains(err.Error(), "does not lead") {
		t.Fatalf("Send without leadership: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := f.Send(context.Background()); !errors.Is(err, ErrFencedProducerClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
}
