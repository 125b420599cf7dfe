package nelitest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli"
)

// Instance is a contender whose leadership WaitLeader and AwaitLeader watch: a goneli.Neli, a
// goneli.Curator, a goneli.MockNeli, or one goneli.Role of a goneli.Roles.
type Instance interface {
	IsLeader() bool
}

// pollEvery is how often WaitLeader looks at its instances. IsLeader only reads atomics and the
// clock, so looking is cheap; an Instance has no way to tell a caller that does not own its
// barrier that its leadership changed, so looking is the only way to find out.
const pollEvery = 5 * time.Millisecond

// WaitLeader waits until exactly one of instances leads, and returns its index in instances. The
// instances' IsLeader are read one after another, not at one instant, so the one returned led when
// it was read; goneli's lease keeps two contenders from leading at once, so two that read true
// in the same round were leading one after the other, and WaitLeader looks again. To wait for a
// successor after cutting off, stopping or closing a leader, pass the other instances: the old
// leader may lead for up to a lease after it was cut. When ctx ends first, the error wraps
// ctx.Err() and says what each instance was doing.
func WaitLeader(ctx context.Context, instances ...Instance) (int, error) {
	if len(instances) == 0 {
		return -1, errors.New("nelitest: WaitLeader needs at least one instance")
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		leading := make([]bool, len(instances))
		who := -1
		n := 0
		for i, in := range instances {
			if leading[i] = in.IsLeader(); leading[i] {
				who = i
				n++
			}
		}
		if n == 1 {
			return who, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("nelitest: %w waiting for exactly one of %d instances to lead; %d led: %s",
				ctx.Err(), len(instances), n, describe(instances, leading))
		case <-tick.C:
		}
	}
}

// describe says what each instance was doing: "0 leading (Live), 1 not leading (Live)". The
// lifecycle state is there for instances that have one (goneli.Neli, goneli.Curator): a Closed
// instance that does not lead is a different failure from a Live one.
func describe(instances []Instance, leading []bool) string {
	parts := make([]string, len(instances))
	for i, in := range instances {
		s := fmt.Sprintf("%d not leading", i)
		if leading[i] {
			s = fmt.Sprintf("%d leading", i)
		}
		if st, ok := in.(interface{ State() goneli.State }); ok {
			s += " (" + st.State().String() + ")"
		}
		parts[i] = s
	}
	return strings.Join(parts, ", ")
}

// AwaitLeader is WaitLeader for a test: it waits up to timeout (DefaultTimeout, say) until exactly
// one of instances leads and returns its index, or fails tb with what each instance was doing. Call
// it from the test's goroutine.
func AwaitLeader(tb testing.TB, timeout time.Duration, instances ...Instance) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	i, err := WaitLeader(ctx, instances...)
	if err != nil {
		tb.Fatal(err)
		return -1
	}
	return i
}
