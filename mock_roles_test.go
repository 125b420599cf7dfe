package goneli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// roleRecorder records events under their role, so that checkGrammar checks each role's order.
func roleRecorder() (*recorder, Barrier) {
	r := newRecorder()
	return r, func(e Event) { r.add(roleOfEvent(e), e) }
}

// eventLog renders events as "Kind(role,token)" for exact comparison.
func eventLog(events []stamped) string {
	var out []string
	for _, e := range events {
		var token int64
		switch e := e.what.(type) {
		case LeaderAcquired:
			token = e.Token
		case LeaderFenced:
			token = e.Token
		case LeaderRevoked:
			token = e.Token
		}
		out = append(out, fmt.Sprintf("%s(%s,%d)", strings.TrimPrefix(fmt.Sprintf("%T", e.what), "goneli.Leader"), roleOfEvent(e.what), token))
	}
	return strings.Join(out, " ")
}

func TestMockRolesTransitions(t *testing.T) {
	rec, barrier := roleRecorder()
	m, err := NewMockRoles(MockConfig{}, []string{"billing", "audit", "search"}, barrier)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Leading(); len(got) != 0 {
		t.Fatalf("Leading before any AcquireLeader = %v", got)
	}
	m.AcquireLeader("billing")
	m.AcquireLeader("audit")
	m.AcquireLeader("audit") // no-op while leading
	if got := m.Leading(); !slices.Equal(got, []string{"billing", "audit"}) {
		t.Fatalf("Leading = %v, want [billing audit]", got)
	}
	m.FenceLeader("billing")
	if m.Role("billing").IsLeader() || !m.Role("audit").IsLeader() {
		t.Fatalf("fencing billing must leave audit alone: billing %v, audit %v", m.Role("billing").IsLeader(), m.Role("audit").IsLeader())
	}
	if tok := m.Role("billing").Token(); tok != 0 {
		t.Fatalf("token of a fenced role = %d, want 0", tok)
	}
	m.AcquireLeader("billing") // resumes the fenced tenure: same token
	if tok := m.Role("billing").Token(); tok != 1 {
		t.Fatalf("token after resuming = %d, want 1", tok)
	}
	m.RevokeLeader("billing")
	m.RevokeLeader("billing") // no-op without a tenure
	m.RevokeLeader("search")  // never acquired: no event
	m.FenceLeader("search")   // not leading: no event
	m.AcquireLeader("billing")
	if a, b := m.Role("audit").Token(), m.Role("billing").Token(); a != 1 || b != 2 {
		t.Fatalf("tokens audit %d, billing %d; want 1 and 2: each role counts its own tenures", a, b)
	}
	info, ok := m.Role("billing").Leader()
	if !ok || info.Role != "billing" || info.Partition != 0 || info.Token != 2 || info.Name != "mock" {
		t.Fatalf("Leader of billing = %+v, %v", info, ok)
	}
	if _, ok := m.Role("search").Leader(); ok {
		t.Fatal("search has a leader though it was never acquired")
	}
	s := m.Role("billing").Stats()
	if s.Role != "billing" || !s.Leader || s.Token != 2 || s.Acquired != 3 || s.Fenced != 1 || s.Revoked != 1 {
		t.Fatalf("Stats of billing = %+v", s)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m.Await()
	if m.State() != Closed || len(m.Leading()) != 0 {
		t.Fatalf("after Close: state %v, leading %v", m.State(), m.Leading())
	}
	m.AcquireLeader("audit") // no-op once closed
	want := "Acquired(billing,1) Acquired(audit,1) Fenced(billing,1) Acquired(billing,1) Revoked(billing,1) " +
		"Acquired(billing,2) Revoked(billing,2) Revoked(audit,1)"
	events := rec.snapshot()
	if got := eventLog(events); got != want {
		t.Fatalf("events\n %s\nwant\n %s", got, want)
	}
	checkGrammar(t, events)
}

func TestMockRolesAllAndRole(t *testing.T) {
	m, err := NewMockRoles(MockConfig{}, Shards(3))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, r := range m.All() {
		if r.Name() != fmt.Sprint(i) || r.Partition() != int32(i) {
			t.Errorf("All()[%d] is %s on partition %d", i, r.Name(), r.Partition())
		}
	}
	if r := m.Role("3"); r != nil {
		t.Errorf("Role(%q) = %v, want nil", "3", r)
	}
	if r := m.Role("2"); r == nil || r.Partition() != 2 {
		t.Errorf("Role(%q) = %v", "2", r)
	}
}

// gate holds a barrier call until the test releases it.
type gate struct {
	entered, release chan struct{}
}

func newGate() *gate {
	return &gate{make(chan struct{}), make(chan struct{})}
}

// hold is called from the barrier, once.
func (g *gate) hold() {
	close(g.entered)
	<-g.release
}

// run starts transition on a goroutine of its own, waits until its barrier call is held, and
// returns a channel closed when transition returns.
func (g *gate) run(transition func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		transition()
	}()
	<-g.entered
	return done
}

// The barrier runs on the goroutine making the transition with no lock held: while one role's
// barrier blocks, another goroutine can move another role, and the blocked role does not lead
// until its barrier returns.
func TestMockRolesBarrierHoldsNoLock(t *testing.T) {
	g := newGate()
	var m MockRoles
	var seen sync.Map // role -> IsLeader as the barrier saw it on LeaderAcquired
	m, err := NewMockRoles(MockConfig{}, []string{"billing", "audit"}, func(e Event) {
		a, ok := e.(LeaderAcquired)
		if !ok {
			return
		}
		// Calling back into the mock must not deadlock.
		seen.Store(a.Role, m.Role(a.Role).IsLeader())
		_ = m.Role(a.Role).Stats()
		_ = m.Leading()
		if a.Role == "billing" {
			g.hold()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	done := g.run(func() { m.AcquireLeader("billing") })
	m.AcquireLeader("audit")
	if got := m.Leading(); !slices.Equal(got, []string{"audit"}) {
		t.Fatalf("while billing's barrier blocks, Leading = %v, want [audit]", got)
	}
	close(g.release)
	<-done
	if got := m.Leading(); !slices.Equal(got, []string{"billing", "audit"}) {
		t.Fatalf("after billing's barrier returned, Leading = %v", got)
	}
	for _, role := range []string{"billing", "audit"} {
		if led, _ := seen.Load(role); led != false {
			t.Errorf("%s led already while its barrier saw LeaderAcquired", role)
		}
	}
}

// A role revoked while its LeaderAcquired is still in the barrier must not lead when the barrier
// returns: that tenure is over.
func TestMockRolesRevokeDuringAcquire(t *testing.T) {
	g := newGate()
	m, _ := NewMockRoles(MockConfig{}, []string{"billing"}, func(e Event) {
		if _, ok := e.(LeaderAcquired); ok {
			g.hold()
		}
	})
	defer m.Close()
	done := g.run(func() { m.AcquireLeader("billing") })
	m.RevokeLeader("billing")
	close(g.release)
	<-done
	if m.Role("billing").IsLeader() {
		t.Fatal("billing leads after its tenure was revoked during LeaderAcquired")
	}
}

func TestMockRolesYield(t *testing.T) {
	rec, barrier := roleRecorder()
	m, _ := NewMockRoles(MockConfig{}, []string{"billing", "audit", "search"}, barrier)
	defer m.Close()
	m.AcquireLeader("search")
	m.AcquireLeader("billing")
	if err := m.Yield(time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := m.Leading(); len(got) != 0 {
		t.Fatalf("Leading after Yield = %v", got)
	}
	m.AcquireLeader("audit")
	if m.Role("audit").IsLeader() {
		t.Fatal("AcquireLeader must not take effect during a yield")
	}
	if err := m.Yield(-time.Second); err == nil {
		t.Fatal("Yield(-1s) must fail")
	}
	for _, r := range m.All() {
		if s := r.Stats(); s.YieldRemaining <= 0 {
			t.Errorf("%s: YieldRemaining %v during a yield", r.Name(), s.YieldRemaining)
		}
	}
	// Revoked in partition order, whatever the order of acquisition.
	if got, want := eventLog(rec.snapshot()), "Acquired(search,1) Acquired(billing,1) Revoked(billing,1) Revoked(search,1)"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	_ = m.Close()
	if err := m.Yield(time.Second); !errors.Is(err, ErrNonLivePulse) {
		t.Fatalf("Yield after Close = %v", err)
	}
}

func TestMockRolesPulse(t *testing.T) {
	m, _ := NewMockRoles(MockConfig{}, []string{"billing", "audit"})
	defer m.Close()
	if leader, err := m.Pulse(time.Millisecond); leader || err != nil {
		t.Fatalf("Pulse leading nothing = %v, %v", leader, err)
	}
	done := make(chan bool)
	go func() {
		leader, _ := m.PulseCtx(context.Background())
		done <- leader
	}()
	m.AcquireLeader("audit")
	if !<-done {
		t.Fatal("PulseCtx returned without leadership")
	}
	boom := errors.New("boom")
	m.PulseError(boom)
	if _, err := m.Pulse(time.Millisecond); !errors.Is(err, boom) {
		t.Fatalf("Pulse after PulseError = %v", err)
	}
	if leader, err := m.Pulse(time.Millisecond); !leader || err != nil {
		t.Fatalf("the error applies once; then Pulse = %v, %v", leader, err)
	}
}

// Background runs each led role's task on its own, and never the task of a role not led.
func TestMockRolesBackground(t *testing.T) {
	m, _ := NewMockRoles(MockConfig{}, []string{"billing", "audit", "search"})
	runs := make(chan string, 100)
	p, err := m.Background(func(role string) {
		select {
		case runs <- role:
		default:
		}
		time.Sleep(time.Millisecond) // leader work takes a while
	})
	if err != nil {
		t.Fatal(err)
	}
	awaitRun := func(role string) {
		t.Helper()
		for got := range runs {
			if got == "search" {
				t.Fatal("the task ran for search, which was never led")
			}
			if got == role {
				return
			}
		}
	}
	m.AcquireLeader("audit")
	awaitRun("audit")
	m.AcquireLeader("billing")
	awaitRun("billing")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Await(); err != nil {
		t.Fatalf("a pulser stopped by Close reports %v, want nil", err)
	}
	close(runs)
	for got := range runs {
		if got == "search" {
			t.Fatal("the task ran for search, which was never led")
		}
	}
	if _, err := m.Background(func(string) {}); !errors.Is(err, ErrNonLivePulse) {
		t.Fatalf("Background after Close = %v", err)
	}
}

func TestMockRolesBackgroundStops(t *testing.T) {
	m, _ := NewMockRoles(MockConfig{}, []string{"billing"})
	defer m.Close()
	if _, err := m.Background(nil); err == nil {
		t.Fatal("want an error for a nil task")
	}
	boom := errors.New("boom")
	p, _ := m.Background(func(string) {})
	m.AcquireLeader("billing")
	m.PulseError(boom)
	if err := p.Await(); !errors.Is(err, boom) {
		t.Fatalf("Await = %v, want the pulse error", err)
	}
	q, _ := m.Background(func(string) {})
	q.Close()
	if err := q.Await(); err != nil {
		t.Fatalf("a pulser stopped by its Close reports %v", err)
	}
}

func TestMockRolesRejectsBadRoles(t *testing.T) {
	for _, roles := range [][]string{nil, {}, {"a", ""}, {"a", "b", "a"}, {strings.Repeat("x", 256)}} {
		_, err := NewMockRoles(MockConfig{}, roles)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(ce.Field, "roles") {
			t.Errorf("NewMockRoles(%q) = %v, want a ConfigError for roles", roles, err)
		}
	}
	if _, err := NewMockRoles(MockConfig{MinPollInterval: Duration(0)}, []string{"a"}); err == nil {
		t.Error("want an error for MinPollInterval 0")
	}
}

func TestMockRolesUnknownRolePanics(t *testing.T) {
	m, _ := NewMockRoles(MockConfig{}, []string{"billing", "audit"})
	defer m.Close()
	for name, call := range map[string]func(string){"AcquireLeader": m.AcquireLeader, "FenceLeader": m.FenceLeader, "RevokeLeader": m.RevokeLeader} {
		func() {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.Contains(msg, name+`("biling")`) || !strings.Contains(msg, `"billing"`) {
					t.Errorf("%s of an unknown role panicked with %q; want it to name the call and the roles", name, msg)
				}
			}()
			call("biling")
		}()
	}
}

// A test of application code drives each role by hand.
func ExampleNewMockRoles() {
	m, _ := NewMockRoles(MockConfig{}, []string{"billing", "audit"}, func(e Event) {
		fmt.Println(e)
	})
	m.AcquireLeader("billing")
	m.AcquireLeader("audit")
	m.FenceLeader("audit")
	fmt.Println("leading:", m.Leading())
	_ = m.Close()
	// Output:
	// LeaderAcquired[Role=billing, Tenure=mock-1, Token=1]
	// LeaderAcquired[Role=audit, Tenure=mock-1, Token=1]
	// LeaderFenced[Role=audit, Tenure=mock-1, Reason=FenceLeader called on the mock, LeaseAge=0s]
	// leading: [billing]
	// LeaderRevoked[Role=billing, Tenure=mock-1]
	// LeaderRevoked[Role=audit, Tenure=mock-1]
}
