package nelitest

import (
	"slices"
	"testing"

	"github.com/goneli/goneli/internal/testkit"
)

// Every requirement of this go.mod lands in the module graph of each program whose tests import
// nelitest. It needs goneli, the embedded broker (internal/kafkatest, and kfake for the options
// it passes), libstdgo for the Scribe, and goleak for its own tests.
func TestModuleRequiresOnlyWhatNelitestNeeds(t *testing.T) {
	want := []string{"github.com/goneli/goneli", "github.com/goneli/goneli/internal/kafkatest", "github.com/obsidiandynamics/libstdgo", "github.com/twmb/franz-go/pkg/kfake", "go.uber.org/goleak"}
	if got := testkit.DirectRequirements(t, "go.mod"); !slices.Equal(got, want) {
		t.Fatalf("go.mod requires %q directly, want only %q", got, want)
	}
}
