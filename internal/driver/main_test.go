package driver

import (
	"testing"

	"go.uber.org/goleak"
)

// The driver's own tests are of its parts, without a broker and without the API type. Those that run
// it whole, on scripted clients, are the root package's (driver_test.go there), as they drive it
// through Pulse and Close.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
