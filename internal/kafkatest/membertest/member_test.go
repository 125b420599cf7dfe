// Package membertest holds the test of package member that needs a Kafka broker, on the embedded
// one (kafkatest), so that package member can stay in goneli's module without its tests requiring
// the embedded broker's modules.
package membertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	. "github.com/goneli/goneli/internal/member"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sink is the stdout of a member run in this process: it keeps the lines and lets the test wait
// for a condition on them.
type sink struct {
	mu      sync.Mutex
	partial []byte
	lines   []Line
	changed chan struct{}
	bad     []string
}

func newSink() *sink { return &sink{changed: make(chan struct{})} }

func (s *sink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, b...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		var l Line
		if err := json.Unmarshal(s.partial[:i], &l); err != nil {
			s.bad = append(s.bad, string(s.partial[:i]))
		} else {
			s.lines = append(s.lines, l)
		}
		s.partial = s.partial[i+1:]
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return len(b), nil
}

func (s *sink) snapshot() ([]Line, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines), s.changed
}

// await waits until cond holds for the lines, or fails the test after a limit that only guards
// against a hang.
func (s *sink) await(t *testing.T, what string, cond func([]Line) bool) {
	t.Helper()
	limit := time.NewTimer(60 * time.Second)
	defer limit.Stop()
	for {
		lines, changed := s.snapshot()
		if cond(lines) {
			return
		}
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("gave up waiting for %s; lines: %+v", what, lines)
		}
	}
}

// TestRunReportsEachRole runs a member in this process against the embedded broker, without roles
// and with named roles, and checks that every role is led, acted on and given up on Close, with
// its lines naming it.
func TestRunReportsEachRole(t *testing.T) {
	b, err := kafkatest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, roles := range [][]string{nil, {"billing", "audit", "mail"}} {
		t.Run(fmt.Sprintf("roles=%q", roles), func(t *testing.T) {
			out := newSink()
			stop := make(chan struct{})
			done := make(chan error, 1)
			o := Options{
				Broker: b.Addr, Group: fmt.Sprintf("member-test-%d", i), Name: "m",
				HeartbeatTimeout: time.Second, Task: time.Millisecond, LogLevel: "off", Roles: roles,
				Kafka: map[string]string{"enable.metrics.push": "false"},
			}
			go func() { done <- Run(o, out, stop) }()
			want := roles
			if want == nil {
				want = []string{""}
			}
			out.await(t, "an act of every role", func(lines []Line) bool {
				acted := map[string]bool{}
				for _, l := range lines {
					if l.Event == EventAct {
						acted[l.Role] = true
					}
				}
				return len(acted) == len(want)
			})
			close(stop)
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			lines, _ := out.snapshot()
			if len(out.bad) > 0 {
				t.Errorf("lines that are not JSON: %q", out.bad)
			}
			if lines[0].Event != EventStarted || lines[len(lines)-1].Event != EventClosed {
				t.Errorf("first line %+v, last %+v; want started and closed", lines[0], lines[len(lines)-1])
			}
			// Per role: acquired first, revoked last (Close ends every tenure), and acts.
			events, acts := map[string]string{}, map[string]int{}
			for _, l := range lines {
				if l.Name != "m" {
					t.Errorf("line %+v does not carry the member's name", l)
				}
				switch l.Event {
				case EventAcquired, EventRevoked, EventFenced, EventAct:
					if !slices.Contains(want, l.Role) {
						t.Errorf("line %+v names role %q; the member contends for %q", l, l.Role, want)
					}
					if l.Event == EventAct {
						acts[l.Role]++
						if l.From > l.To || l.Runs < 1 {
							t.Errorf("act line %+v: empty span", l)
						}
					} else {
						events[l.Role] += l.Event[:1]
					}
				case EventStarted, EventClosed:
					if l.Role != "" {
						t.Errorf("line %+v names a role", l)
					}
				}
			}
			for _, r := range want {
				if e := events[r]; len(e) < 2 || e[0] != 'a' || e[len(e)-1] != 'r' || acts[r] == 0 {
					t.Errorf("role %q: events %q and %d act lines; want acquired ... revoked, and acts", r, e, acts[r])
				}
			}
		})
	}
}
