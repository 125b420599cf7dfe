package kernel

import (
	"io"
	"os"
	"testing"

	"github.com/goneli/goneli/internal/member"
	"go.uber.org/goleak"
)

// memberEnv, when set, turns the test binary into a member process (internal/member).
const memberEnv = "GONELI_KERNEL_MEMBER"

func TestMain(m *testing.M) {
	if os.Getenv(memberEnv) != "" {
		// The harness holds stdin open and never writes to it: end of input means it is gone.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			os.Exit(3)
		}()
		os.Exit(member.Main(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}
