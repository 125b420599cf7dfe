package driver

import (
	"testing"
	"time"

	"github.com/goneli/goneli/internal/core"
)

// An instance that holds no partition waits in the consumer's poll for up to a group heartbeat
// interval, so that it takes an assignment as it arrives and costs little meanwhile (driver.idlePoll),
// or for MinPollInterval while it watches the leader or cannot reach Kafka; one that holds a
// partition, owes a released marker or yields polls for PollDuration only, since it has work due
// between polls.
func TestPollFor(t *testing.T) {
	const (
		pollDuration = time.Millisecond
		minPoll      = 100 * time.Millisecond
		heartbeat    = 500 * time.Millisecond
	)
	clk := &stepClock{now: time.Unix(1_800_000_000, 0)}
	newDriver := func() *Driver {
		d := &Driver{config: Config{PollDuration: durationOf(pollDuration), MinPollInterval: durationOf(minPoll), HeartbeatTimeout: durationOf(time.Second),
			RenewInterval: durationOf(minPoll)}, clock: clk, base: clk.now, timing: core.GroupTiming{Classic: true, Interval: heartbeat}}
		d.parts = []*core.Role{{Lease: core.NewLease(core.LeaseConfig{Timeout: time.Second, Interval: minPoll, Clock: clk, Base: clk.now})}}
		settings := core.Settings{Lease: time.Second, Renew: minPoll, MinPoll: minPoll, HandOverAfter: core.HandOverBound(time.Second)}
		d.m = core.NewMachine(settings, d.timing, d.parts, d, clk, clk.now)
		return d
	}
	for _, tc := range []struct {
		name  string
		setup func(d *Driver)
		limit time.Duration
		want  time.Duration
	}{
		{"idle, no limit", func(*Driver) {}, -1, heartbeat},
		{"idle, watching the leader", func(d *Driver) { d.observer = &Observer{} }, -1, minPoll},
		{"idle, Kafka unreachable", func(d *Driver) { d.reach.fail(0, "consumer", "all brokers down") }, -1, minPoll},
		{"idle, within Pulse's timeout", func(*Driver) {}, 30 * time.Millisecond, 30 * time.Millisecond},
		{"idle, timeout spent", func(*Driver) {}, 0, pollDuration},
		{"holds a partition", func(d *Driver) { d.parts[0].Lease.Assign(false) }, -1, pollDuration},
		{"owes a released marker", func(d *Driver) { d.m.Releases = []core.Release{{}} }, -1, pollDuration},
		{"yielding", func(d *Driver) { d.m.Yield.Requested.Store(true) }, -1, pollDuration},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver()
			tc.setup(d)
			if got := d.pollFor(tc.limit); got != tc.want {
				t.Errorf("pollFor(%v) = %v, want %v", tc.limit, got, tc.want)
			}
		})
	}
}

// An instance polls fast only while one of its tenures proves its first lease, and not while that
// tenure waits for a predecessor to release the partition.
func TestProving(t *testing.T) {
	clk := &stepClock{now: time.Unix(1_800_000_000, 0)}
	l := core.NewLease(core.LeaseConfig{Timeout: time.Second, Interval: 100 * time.Millisecond, ReleaseWait: 2 * time.Second, Clock: clk, Base: clk.now})
	n := &Driver{clock: clk, base: clk.now, parts: []*core.Role{{Lease: l}}}
	if n.proving() {
		t.Fatal("proving without a tenure")
	}
	l.Assign(false)
	if !n.proving() {
		t.Fatal("not proving a new tenure")
	}
	l.Foreign(core.Heartbeat{Tenure: 7, Kind: core.KindReleasing})
	if n.proving() {
		t.Fatal("proving while a predecessor releases the partition")
	}
	l.Foreign(core.Heartbeat{Tenure: 7, Kind: core.KindReleased})
	if !n.proving() {
		t.Fatal("not proving once the predecessor released the partition")
	}
	clk.advance(time.Second)
	if n.proving() {
		t.Fatal("still proving a lease after the tenure began")
	}
}

// stepClock is a clock that moves only when the test moves it.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time          { return c.now }
func (c *stepClock) advance(d time.Duration) { c.now = c.now.Add(d) }

func durationOf(d time.Duration) *time.Duration { return &d }
