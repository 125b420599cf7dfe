package metrics

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// A program that imports goneli/metrics has every requirement of this module's go.mod in its
// module graph, those only the tests need included. The package needs goneli and the Prometheus
// client, and its tests goleak, which requires nothing; tests that would bring in more (the
// embedded broker) belong in internal/kafkatest/metricstest (README, "Modules").
func TestModuleRequiresOnlyWhatMetricsNeeds(t *testing.T) {
	want := []string{"github.com/goneli/goneli", "github.com/prometheus/client_golang", "go.uber.org/goleak"}
	if got := directRequirements(t, "go.mod"); !slices.Equal(got, want) {
		t.Fatalf("go.mod requires %q directly, want only %q", got, want)
	}
}

// directRequirements returns the sorted paths of the modules that a go.mod requires other than
// as // indirect.
func directRequirements(t *testing.T, goMod string) []string {
	t.Helper()
	data, err := os.ReadFile(goMod)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	inBlock := false
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case inBlock && fields[0] == ")":
			inBlock = false
		case fields[0] == "require" && len(fields) > 1 && fields[1] == "(":
			inBlock = true
		case (inBlock || fields[0] == "require") && !strings.Contains(line, "// indirect"):
			if fields[0] == "require" {
				fields = fields[1:]
			}
			paths = append(paths, fields[0])
		}
	}
	slices.Sort(paths)
	return paths
}
