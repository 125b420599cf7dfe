package coretest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Issue 46, A: an assignment taken late must hold renewals back however late it was taken. x holds
// two roles but leads neither (it cannot read their partitions), and is given a's two when a
// leaves: several partitions at once while no role leads, so the rebalance callback first reads
// where they end over goneli's own connection (tails.go), for up to half a lease. Here that read is
// slow, and d joins meanwhile: the coordinator begins a rebalance that x, waiting in its callback,
// does not hear of (librdkafka ignores the news until the assignment is taken), and that x cannot
// rejoin (every JoinGroup of x's is refused from then on). Once x takes the assignment librdkafka
// counts itself steady and auto-commits, and the coordinator accepts those commits until the
// rebalance ends. Had the assignment been judged prompt, as it was when judged before the wait, x
// would lead all four roles on those commits and renew by explicit ones in a window anchored after
// the wait, past the moment the coordinator removes it and d leads (two leaders for 175-286 ms on
// each role at the defaults in the review, 1.2 s with 250 ms group heartbeats).
func TestAssignmentTakenAfterASlowReadOfTheEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kafka KafkaConfigMap
		renew time.Duration
		poll  time.Duration
		// slow is how late the read of the ends is answered: within tailsWait (2.5 s), and
		// between two of librdkafka's group heartbeats, which it goes on sending at its interval
		// from the assignment on. A Take at a multiple of that interval after the assignment
		// coincides with a heartbeat, whose answer tells librdkafka of the rebalance before it
		// can commit anything.
		slow time.Duration
	}{
		{"defaults", KafkaConfigMap{}, 0, 0, 2400 * time.Millisecond},
		{"250ms group heartbeats", KafkaConfigMap{"heartbeat.interval.ms": 250}, 100 * time.Millisecond, 50 * time.Millisecond, 2100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t)
			group, log, r := groupName(t), newTestLog(t), newRecorder()
			roles := Shards(4)
			config := func(name string) Config {
				c := testConfig(b, group, name, log)
				c.HeartbeatTimeout = nil // the default lease, 5 s
				c.MinPollInterval, c.RenewInterval = nil, nil
				if tc.poll > 0 {
					c.MinPollInterval, c.RenewInterval = Duration(tc.poll), Duration(tc.renew)
				}
				// x must keep its roles while it cannot lead them, rather than hand them over.
				c.HandOverAfter = Duration(time.Minute)
				for k, v := range tc.kafka {
					c.KafkaConfig[k] = v
				}
				return c
			}
			sets := map[string]Roles{"a": roleContender(t, config("a"), roles, r)}
			awaitLed(t, "a to lead every role", roles, sets, func(map[string][]string) bool { return true })
			sets["x"] = roleContender(t, config("x"), roles, r)
			led := awaitLed(t, "a and x to lead two roles each", roles, sets, balanced(len(roles)))
			overlaps := watchOverlaps(t, sets)

			// x cannot read its roles' partitions: no heartbeat of its comes back, its leases run
			// out, and it keeps its roles. (Nothing of its waits for a commit, which a fault on its
			// commits would leave behind, their answers held up by the wait below.)
			var xs []int32
			for _, role := range led["x"] {
				p, _ := strconv.Atoi(role)
				xs = append(xs, int32(p))
			}
			blocked := b.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: group + ".neli", Partitions: xs, Count: -1})
			defer blocked.Remove()
			awaitCondition(t, "x to lead none", func() bool { return len(sets["x"].Leading()) == 0 })

			// The read of the ends that x's callback makes for a's roles (one request for both;
			// librdkafka asks for one partition at a time) is answered late.
			waiting := make(chan struct{})
			var once sync.Once
			b.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
				b.KeepControl()
				n := 0
				for _, t := range req.(*kmsg.ListOffsetsRequest).Topics {
					n += len(t.Partitions)
				}
				if n >= 2 {
					once.Do(func() {
						close(waiting)
						b.SleepControl(func() { time.Sleep(tc.slow) })
					})
				}
				return nil, nil, false
			})
			// a leaves: x is given a's roles and waits in its callback for their ends.
			closeRoles(t, sets["a"])
			select {
			case <-waiting:
			case <-time.After(awaitLimit):
				t.Fatal("x never read where a's partitions end in one request")
			}
			// From now on x reads its partitions again, and x cannot rejoin (its JoinGroup for
			// this assignment has been answered): the coordinator removes it a rebalance timeout
			// after the next rebalance begins.
			blocked.Remove()
			refuse := b.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Count: -1, When: func(req kmsg.Request) bool {
				return strings.HasPrefix(req.(*kmsg.JoinGroupRequest).MemberID, "goneli-x-")
			}})
			defer refuse.Remove()
			// Meanwhile d joins: the rebalance that x does not hear of until it has taken its
			// assignment.
			d := roleContender(t, config("d"), roles, r)
			overlaps.add(d)

			// The coordinator removes x 10 s (the rebalance timeout) after d's join, and d then
			// leads every role. A lease x renewed after the wait would run on a second or so more.
			awaitLed(t, "d to lead every role", roles, map[string]Roles{"d": d}, func(map[string][]string) bool { return true })
			time.Sleep(3 * time.Second) // x's leases, had they been renewed so, end within this
			for role, d := range overlaps.snapshot() {
				t.Errorf("role %s had two leaders for %v (IsLeader sampled every millisecond)", role, d)
			}
			checkRoles(t, r.snapshot())
		})
	}
}

// overlapWatch samples every instance's Leading every millisecond and sums, per role, the time two
// of them led it at once.
type overlapWatch struct {
	mu   sync.Mutex
	sums map[string]time.Duration
	all  []Roles
}

// add samples rs too from now on.
func (w *overlapWatch) add(rs Roles) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all = append(w.all, rs)
}

func (w *overlapWatch) snapshot() map[string]time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Duration{}
	for k, v := range w.sums {
		out[k] = v
	}
	return out
}

// watchOverlaps samples sets, and those added later (add), until the test ends.
func watchOverlaps(t *testing.T, sets map[string]Roles) *overlapWatch {
	t.Helper()
	w := &overlapWatch{sums: map[string]time.Duration{}}
	for _, rs := range sets {
		w.add(rs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				w.mu.Lock()
				all := w.all
				w.mu.Unlock()
				count := map[string]int{}
				for _, rs := range all {
					for _, role := range rs.Leading() {
						count[role]++
					}
				}
				w.mu.Lock()
				for role, n := range count {
					if n > 1 {
						w.sums[role] += now.Sub(last)
					}
				}
				w.mu.Unlock()
				last = now
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return w
}

// closeRoles closes an instance of roleContender's before the test ends (its cleanup closes it
// again, which does nothing).
func closeRoles(t *testing.T, rs Roles) {
	t.Helper()
	if err := rs.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
