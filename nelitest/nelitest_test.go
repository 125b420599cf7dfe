package nelitest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goneli/goneli"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// contender starts a goneli instance on b, pulsed in the background, and closes it when the test
// ends, before b stops (cleanups run last-registered first). The cleanup waits for the instance's
// Kafka clients too (Await): one may still be closing, or probing a broker it lost, after Close has
// returned, and would outlive the broker and the test (goleak saw a probe's metadata request).
func contender(t *testing.T, b *Broker, name string) goneli.Neli {
	t.Helper()
	n, err := goneli.New(b.Config(name))
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	p, err := n.Background(func() {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("closing %s: %v", name, err)
		}
		if err := p.Await(); err != nil {
			t.Errorf("pulser of %s: %v", name, err)
		}
		n.Await()
	})
	return n
}

// settle waits until b's group has members members and no rebalance under way, so that the test's
// cleanups close no contender in the middle of one (Broker.WaitSettled says why).
func settle(t *testing.T, b *Broker, members int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	if err := b.WaitSettled(ctx, members); err != nil {
		t.Fatal(err)
	}
}

// contenders starts a contender on b for each of names, in that order.
func contenders(t *testing.T, b *Broker, names ...string) []Instance {
	t.Helper()
	ns := make([]Instance, len(names))
	for i, name := range names {
		ns[i] = contender(t, b, name)
	}
	return ns
}

// Config's configurations are valid as they are, of one group, and told apart by their names.
func TestConfig(t *testing.T) {
	b := Start(t)
	x, y := b.Config("x"), b.Config("y/2")
	for _, c := range []goneli.Config{x, y} {
		// Validated as New would: with the defaults filled in, on a copy.
		valid := c
		valid.SetDefaults()
		if err := valid.Validate(); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
		if got := c.KafkaConfig["bootstrap.servers"]; got != b.Addr() {
			t.Errorf("%s: bootstrap.servers %v, want %s", c.Name, got, b.Addr())
		}
		if c.LeaderGroupID != b.Group() || c.LeaderTopic != b.Group()+".neli" {
			t.Errorf("%s: group %q, topic %q; want %q and its .neli topic", c.Name, c.LeaderGroupID, c.LeaderTopic, b.Group())
		}
		if *c.HeartbeatTimeout != Lease || *c.MinPollInterval != MinPollInterval {
			t.Errorf("%s: lease %v, min poll interval %v", c.Name, *c.HeartbeatTimeout, *c.MinPollInterval)
		}
	}
	if x.Name != "x" || y.Name != "y/2" {
		t.Errorf("names %q and %q", x.Name, y.Name)
	}
	if want := "nelitest.TestConfig"; b.Group() != want {
		t.Errorf("group %q, want %q", b.Group(), want)
	}
}

// Subtests get groups of their own, named for Kafka's rules on topic names.
func TestGroupPerTest(t *testing.T) {
	if got, want := groupOf("TestX/case 1"), "nelitest.TestX_case_1"; got != want {
		t.Errorf("groupOf: %q, want %q", got, want)
	}
	if got := groupOf(strings.Repeat("x", 300)); len(got)+len(".neli") > 249 {
		t.Errorf("group of %d bytes makes a topic name Kafka refuses", len(got))
	}
}

// Every client of a contender is known by the base of its name, so that one Cut covers them all;
// clients of other contenders, even ones whose names begin with it, are not.
func TestClientKey(t *testing.T) {
	b := &Broker{bases: map[string]bool{}}
	for _, n := range []string{"a", "a-2", "b c"} {
		b.register(n)
	}
	for id, want := range map[string]string{
		"goneli-a":                            "goneli-a",
		"goneli-a-observer":                   "goneli-a",
		"goneli-a-status":                     "goneli-a",
		"goneli-a--roles-ce27a023":            "goneli-a",
		"goneli-a--roles-ce27a023-observer":   "goneli-a",
		"goneli-a-2":                          "goneli-a-2",
		"goneli-a-2-observer":                 "goneli-a-2",
		"goneli-a-2--roles-ce27a023-observer": "goneli-a-2",
		"goneli-ab":                           "goneli-ab",
		"goneli-b_c":                          "goneli-b_c",
		"someone-else":                        "someone-else",
	} {
		if got := b.clientKey(id); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", id, got, want)
		}
	}
}

// fixedInstance is an Instance whose leadership and state stay as they are.
type fixedInstance struct {
	leads bool
	state goneli.State
}

func (f fixedInstance) IsLeader() bool      { return f.leads }
func (f fixedInstance) State() goneli.State { return f.state }

func TestWaitLeaderFindsTheOne(t *testing.T) {
	m0, _ := goneli.NewMock(goneli.MockConfig{})
	m1, _ := goneli.NewMock(goneli.MockConfig{})
	defer m0.Close()
	defer m1.Close()
	m1.AcquireLeader()
	if i, err := WaitLeader(context.Background(), m0, m1); i != 1 || err != nil {
		t.Fatalf("WaitLeader: %d, %v; want 1", i, err)
	}
}

// A WaitLeader that gives up says what each instance was doing.
func TestWaitLeaderNamesTheStates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		instances []Instance
		want      string
	}{
		{[]Instance{fixedInstance{true, goneli.Live}, fixedInstance{true, goneli.Live}},
			"2 led: 0 leading (Live), 1 leading (Live)"},
		{[]Instance{fixedInstance{false, goneli.Live}, fixedInstance{false, goneli.Closed}},
			"0 led: 0 not leading (Live), 1 not leading (Closed)"},
	} {
		_, err := WaitLeader(ctx, c.instances...)
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("WaitLeader: %v; want context.Canceled and %q", err, c.want)
		}
	}
	if _, err := WaitLeader(ctx); err == nil {
		t.Error("WaitLeader of no instances: no error")
	}
}

// fatalTB records the failure of a test instead of ending it.
type fatalTB struct {
	testing.TB
	failure string
}

func (f *fatalTB) Helper()                           {}
func (f *fatalTB) Fatal(args ...any)                 { f.failure = fmt.Sprint(args...) }
func (f *fatalTB) Fatalf(format string, args ...any) { f.failure = fmt.Sprintf(format, args...) }

func TestAwaitLeaderFailsTheTest(t *testing.T) {
	tb := &fatalTB{TB: t}
	m, _ := goneli.NewMock(goneli.MockConfig{})
	defer m.Close()
	if i := AwaitLeader(tb, 0, m); i != -1 {
		t.Errorf("AwaitLeader returned %d", i)
	}
	if want := "0 not leading (Live)"; !strings.Contains(tb.failure, want) {
		t.Errorf("failure %q does not say %q", tb.failure, want)
	}
}

// The leader cut off loses the lead and the other contender takes over; once healed, the cut one
// rejoins as a follower. Both kinds of cut, with the instances' every connection cut: a leader
// whose observer (ObserveLeader) still reached the broker would not be cut off at all.
func TestCutAndHeal(t *testing.T) {
	for _, kind := range []string{"Cut", "Refuse"} {
		t.Run(kind, func(t *testing.T) {
			b := Start(t)
			names := []string{"a", "b"}
			ns := contenders(t, b, names...)
			first := AwaitLeader(t, DefaultTimeout, ns...)
			if kind == "Cut" {
				b.Cut(names[first])
			} else {
				b.Refuse(names[first])
			}
			other := 1 - first
			AwaitLeader(t, DefaultTimeout, ns[other])
			if ns[first].IsLeader() {
				t.Fatalf("%s leads alongside its successor %s", names[first], names[other])
			}
			b.Heal(names[first])
			if i := AwaitLeader(t, DefaultTimeout, ns...); i != other {
				t.Fatalf("%s leads again after the heal; want its successor %s", names[i], names[other])
			}
			// Not a check of who leads once the rebalance that the healed one's return begins is over:
			// at a 1 s lease it can fence the successor (docs/safety.md), which may then hand over.
			settle(t, b, len(names))
		})
	}
}

// A broker that stops and restarts comes back on the same address with the leader topic and the
// group: the contender leads again with no help. When Restart returns, no lease from before Stop
// is still running.
func TestStopAndRestart(t *testing.T) {
	b := Start(t)
	addr := b.Addr()
	n := contender(t, b, "a")
	AwaitLeader(t, DefaultTimeout, n)
	b.Stop()
	b.Restart()
	if n.IsLeader() {
		t.Fatal("a still leads on a lease from before Stop")
	}
	if b.Addr() != addr {
		t.Fatalf("the broker came back on %s, not %s", b.Addr(), addr)
	}
	AwaitLeader(t, DefaultTimeout, n)
}

// A cut outlasts a restart, as a partition of the network would.
func TestCutOutlastsRestart(t *testing.T) {
	b := Start(t)
	names := []string{"a", "b"}
	ns := contenders(t, b, names...)
	first := AwaitLeader(t, DefaultTimeout, ns...)
	b.Cut(names[first])
	b.Restart()
	AwaitLeader(t, DefaultTimeout, ns[1-first])
	if ns[first].IsLeader() {
		t.Fatalf("%s, cut off, leads alongside %s", names[first], names[1-first])
	}
	b.Heal(names[first])
	settle(t, b, len(names))
}

// Config without a name fails the test: Cut could not find the contender.
func TestConfigNeedsAName(t *testing.T) {
	tb := &fatalTB{TB: t}
	b := &Broker{tb: tb, bases: map[string]bool{}}
	b.Config("")
	if !strings.Contains(tb.failure, "needs a name") {
		t.Errorf("failure %q", tb.failure)
	}
}

// WaitSettled gives up when its context ends, or at once on a stopped broker, and says why.
func TestWaitSettledGivesUp(t *testing.T) {
	b := Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.WaitSettled(ctx, 1); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), b.Group()) {
		t.Errorf("WaitSettled with no member and a cancelled context: %v; want context.Canceled naming the group", err)
	}
	b.Stop()
	if err := b.WaitSettled(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("WaitSettled on a stopped broker: %v", err)
	}
}
