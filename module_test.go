package goneli

import (
	"slices"
	"testing"

	"github.com/goneli/goneli/internal/testkit"
)

// A program that imports goneli has every requirement of this module's go.mod in its module graph,
// those only the tests need included. The package needs confluent-kafka-go and libstdgo; franz-go's
// client (kgo) and its kmsg for goneli's own connection beside librdkafka (internal/sidechan: the
// group check, since librdkafka 2.11.1 aborted the process on its own admin request during broker
// restarts, and the heartbeats of several roles in one request); and its tests goleak, which
// requires nothing. franz-go brings klauspost/compress, which the graph held already, and
// pierrec/lz4. Whatever else a test would bring in (the embedded broker, kfake) belongs with the
// tests in internal/kafkatest, a module of its own (docs/modules.md).
func TestModuleRequiresOnlyWhatTheCoreNeeds(t *testing.T) {
	want := []string{"github.com/confluentinc/confluent-kafka-go/v2", "github.com/obsidiandynamics/libstdgo", "github.com/twmb/franz-go",
		"github.com/twmb/franz-go/pkg/kmsg", "go.uber.org/goleak"}
	if got := testkit.DirectRequirements(t, "go.mod"); !slices.Equal(got, want) {
		t.Fatalf("go.mod requires %q directly, want only %q", got, want)
	}
}
