package core

import (
	"testing"

	"go.uber.org/goleak"
)

// The core starts no goroutine; the check keeps it so.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
