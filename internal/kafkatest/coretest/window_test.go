package coretest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The commit window's hole of issue 38, on the three settings the safety review found it at. The
// leader's poll loop stops right after a cycle that stored a heartbeat's offset; librdkafka's
// auto-commit of that offset is accepted meanwhile and its result waits in the queue. A member
// joins, and every JoinGroup of the leader is refused, so that it cannot rejoin: the coordinator
// removes it once the rebalance timeout has passed since the join and hands partition 0 on. The
// leader's loop resumes shortly before that. Had the queued result anchored the window for
// explicit commits at the moment it was seen, the leader's explicit commits of heartbeats sent
// after the pause would renew its lease past its removal, and the new assignee would lead while it
// still did (98-693 ms in the review). Anchored at the offset's store time, which the acceptance
// cannot precede, the window is over by the time the loop resumes, and no explicit commit renews.
func TestCommitWindowAfterAPausedLoop(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lease      time.Duration
		kafka      KafkaConfigMap // beside bootstrap.servers
		minSession time.Duration  // the broker's group.min.session.timeout.ms
		// resume is how long after the join the leader's loop resumes: before the coordinator
		// removes it, and late enough that a lease renewed then outlasts the removal.
		resume time.Duration
		// handOver, if set, is HandOverAfter: long enough that a leader fenced for most of a
		// long rebalance still renews rather than hands over when its loop resumes.
		handOver time.Duration
	}{
		{"500ms lease, 1s session and rebalance timeout", 500 * time.Millisecond,
			KafkaConfigMap{"session.timeout.ms": 1000, "max.poll.interval.ms": 1000}, kafkatest.DefaultGroupMinSessionTimeout, 600 * time.Millisecond, 0},
		{"1s lease, session of twice the lease", time.Second,
			KafkaConfigMap{"session.timeout.ms": 2000}, kafkatest.DefaultGroupMinSessionTimeout, 1500 * time.Millisecond, 0},
		{"1s lease, broker minimum session 6s", time.Second,
			KafkaConfigMap{}, 6 * time.Second, 5500 * time.Millisecond, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startKafka(t, kafkatest.MinSession(tc.minSession)...)
			group := groupName(t)
			log := newTestLog(t)
			r := newRecorder()
			config := func(name string) Config {
				c := testConfig(b, group, name, log)
				c.HeartbeatTimeout = Duration(tc.lease)
				c.MinPollInterval = nil // the lease's default
				if tc.handOver > 0 {
					c.HandOverAfter = Duration(tc.handOver)
				}
				for k, v := range tc.kafka {
					c.KafkaConfig[k] = v
				}
				return c
			}
			a := newNeli(t, config("a"), r)
			if want := fmt.Sprintf("(lease %v, session %v,", tc.lease, max(tc.minSession, SessionTimeout(tc.lease))); tc.kafka["session.timeout.ms"] == nil && !log.Contains(want) {
				t.Errorf("no line says %q: New's line names the session before it was raised to the broker's minimum", want)
			}
			loop := startLoop(t, a)
			r.await(t, "a to lead", has[LeaderAcquired]("a"))

			// Every JoinGroup of a's consumer is refused from now on; b's first JoinGroup is the
			// join that begins the rebalance.
			refuse := b.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Count: -1, When: func(req kmsg.Request) bool {
				return strings.HasPrefix(req.(*kmsg.JoinGroupRequest).MemberID, "goneli-a-")
			}})
			defer refuse.Remove()
			joins := b.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Observe: true, Count: -1, When: func(req kmsg.Request) bool {
				return strings.HasPrefix(req.(*kmsg.JoinGroupRequest).MemberID, "goneli-b-") || req.(*kmsg.JoinGroupRequest).MemberID == ""
			}})
			defer joins.Remove()

			loop.stopAfterStore(t)
			contender(t, config("b"), r)
			ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
			defer cancel()
			if err := joins.Wait(ctx, 1); err != nil {
				t.Fatalf("b never joined: %v", err)
			}
			// The pause is the fault itself: nothing of a's to wait for.
			time.Sleep(tc.resume)
			loop.resume()

			events := r.await(t, "b to lead", has[LeaderAcquired]("b"))
			refuse.Remove()
			// Give a's lease, had it been renewed at the resumption, the time to show.
			time.Sleep(tc.lease)
			checkExclusive(t, r.snapshot())
			checkGrammar(t, events)
		})
	}
}

// loop pulses an instance from a goroutine of the test's, which the test can stop and resume, as
// an application's loop would stop during a long pause.
type loop struct {
	n       Neli
	mu      sync.Mutex
	paused  bool
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
}

func startLoop(t *testing.T, n Neli) *loop {
	l := &loop{n: n, wake: make(chan struct{}), done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(l.stopped)
		for {
			l.mu.Lock()
			paused, wake := l.paused, l.wake
			l.mu.Unlock()
			if paused {
				select {
				case <-wake:
				case <-l.done:
					return
				}
				continue
			}
			select {
			case <-l.done:
				return
			default:
			}
			if _, err := n.Pulse(10 * time.Millisecond); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(l.done)
		<-l.stopped
	})
	return l
}

// stopAfterStore pauses the loop right after a cycle in which a heartbeat of the leader came back
// and its offset was stored for commit.
func (l *loop) stopAfterStore(t *testing.T) {
	t.Helper()
	c := l.n.(Curator)
	l.mu.Lock()
	l.paused = true
	l.mu.Unlock()
	// The loop finishes the Pulse under way; from here on this goroutine pulses alone.
	base := c.Stats().HeartbeatsConfirmed
	deadline := time.Now().Add(awaitLimit)
	for c.Stats().HeartbeatsConfirmed == base {
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat read back within %v", awaitLimit)
		}
		if _, err := l.n.Pulse(time.Millisecond); err != nil {
			t.Fatalf("Pulse: %v", err)
		}
	}
}

func (l *loop) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paused = false
	close(l.wake)
	l.wake = make(chan struct{})
}
