package goneli

import (
	"slices"
	"testing"

	"github.com/goneli/goneli/internal/testkit"
)

// A program that imports goneli has every requirement of this module's go.mod in its module graph,
// those only the tests need included. The package needs confluent-kafka-go and libstdgo, and its
// tests goleak, which requires nothing; whatever else a test would bring in (the embedded broker,
// franz-go) belongs with the tests in internal/kafkatest, a module of its own (README, "Modules").
func TestModuleRequiresOnlyWhatTheCoreNeeds(t *testing.T) {
	want := []string{"github.com/confluentinc/confluent-kafka-go/v2", "github.com/obsidiandynamics/libstdgo", "go.uber.org/goleak"}
	if got := testkit.DirectRequirements(t, "go.mod"); !slices.Equal(got, want) {
		t.Fatalf("go.mod requires %q directly, want only %q", got, want)
	}
}
