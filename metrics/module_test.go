package metrics

import (
	"slices"
	"testing"

	"github.com/goneli/goneli/internal/testkit"
)

// A program that imports goneli/metrics has every requirement of this module's go.mod in its
// module graph, those only the tests need included. The package needs goneli and the Prometheus
// client, and its tests goleak, which requires nothing; tests that would bring in more (the
// embedded broker) belong in internal/kafkatest/metricstest (docs/modules.md).
func TestModuleRequiresOnlyWhatMetricsNeeds(t *testing.T) {
	want := []string{"github.com/goneli/goneli", "github.com/prometheus/client_golang", "go.uber.org/goleak"}
	if got := testkit.DirectRequirements(t, "go.mod"); !slices.Equal(got, want) {
		t.Fatalf("go.mod requires %q directly, want only %q", got, want)
	}
}
