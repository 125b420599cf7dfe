package goneli

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// A program that imports goneli has every requirement of this module's go.mod in its module graph,
// those only the tests need included. The package needs confluent-kafka-go and libstdgo, and its
// tests goleak, which requires nothing; whatever else a test would bring in (the embedded broker,
// franz-go) belongs with the tests in internal/kafkatest, a module of its own (README, "Modules").
func TestModuleRequiresOnlyWhatTheCoreNeeds(t *testing.T) {
	want := []string{"github.com/confluentinc/confluent-kafka-go/v2", "github.com/obsidiandynamics/libstdgo", "go.uber.org/goleak"}
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
