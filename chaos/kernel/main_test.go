package kernel

import (
	"testing"

	"github.com/goneli/goneli/internal/member"
	"go.uber.org/goleak"
)

// memberEnv, when set, turns the test binary into a member process (internal/member).
const memberEnv = "GONELI_KERNEL_MEMBER"

func TestMain(m *testing.M) {
	member.MainIfChild(memberEnv)
	goleak.VerifyTestMain(m)
}
