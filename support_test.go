package goneli

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/testkit"
	"go.uber.org/goleak"
)

// The tests of this package need no broker. Those that do, on the embedded Kafka broker, are in
// internal/kafkatest/coretest, a module of its own, so that a program importing goneli has nothing
// of the embedded broker in its module graph. Helpers that need neither a broker nor goneli's types
// are shared with those tests through internal/testkit; the recorder and checkGrammar below name
// goneli's Event, which testkit cannot import, so coretest's support_test.go has a copy of them:
// keep the two in step.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// awaitLimit bounds every wait; see testkit.AwaitLimit.
const awaitLimit = testkit.AwaitLimit

// testLog collects the log lines of a test's instances.
type testLog = testkit.Log

func newTestLog(t *testing.T) *testLog { return testkit.NewLog(t) }

// stamped is an event with the instance that saw it and when, on this process's clock.
type stamped struct {
	at   time.Time
	who  string
	what Event
}

// recorder is a barrier shared by all instances of a test, so that events can be ordered on one
// clock and awaited.
type recorder struct {
	mu      sync.Mutex
	events  []stamped
	changed chan struct{}
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{})}
}

func (r *recorder) barrier(who string) Barrier {
	return func(e Event) { r.add(who, e) }
}

func (r *recorder) add(who string, e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, stamped{at: time.Now(), who: who, what: e})
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) snapshot() []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]stamped(nil), r.events...)
}

// await blocks until cond holds over the events so far.
func (r *recorder) await(t *testing.T, what string, cond func([]stamped) bool) []stamped {
	t.Helper()
	limit := time.NewTimer(awaitLimit)
	defer limit.Stop()
	for {
		r.mu.Lock()
		events, changed := append([]stamped(nil), r.events...), r.changed
		r.mu.Unlock()
		if cond(events) {
			return events
		}
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("gave up waiting for %s; events: %v", what, describe(events))
		}
	}
}

func describe(events []stamped) string {
	var sb strings.Builder
	for _, e := range events {
		fmt.Fprintf(&sb, "\n  %s %s %v", e.at.Format("15:04:05.000"), e.who, e.what)
	}
	return sb.String()
}

var grammar = regexp.MustCompile(`^(A(FA)*F?R)*(A(FA)*F?)?$`)

// checkGrammar asserts that each instance's events follow the documented order.
func checkGrammar(t *testing.T, events []stamped) {
	t.Helper()
	seq := map[string]string{}
	for _, e := range events {
		seq[e.who] += map[string]string{"LeaderAcquired": "A", "LeaderFenced": "F", "LeaderRevoked": "R"}[fmt.Sprintf("%T", e.what)[len("goneli."):]]
	}
	for who, s := range seq {
		if !grammar.MatchString(s) {
			t.Errorf("%s: events %q break the documented order; events: %s", who, s, describe(events))
		}
	}
}

// roleOfEvent returns the role an event is for.
func roleOfEvent(e Event) string {
	switch e := e.(type) {
	case LeaderAcquired:
		return e.Role
	case LeaderFenced:
		return e.Role
	case LeaderRevoked:
		return e.Role
	}
	return ""
}

// stepClock is a clock that moves only when told to.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time          { return c.now }
func (c *stepClock) advance(d time.Duration) { c.now = c.now.Add(d) }
