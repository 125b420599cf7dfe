package goneli

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func TestMockTransitions(t *testing.T) {
	r := newRecorder()
	m, err := NewMock(MockConfig{}, r.barrier("m"))
	if err != nil {
		t.Fatal(err)
	}
	if leader, err := m.Pulse(time.Millisecond); leader || err != nil {
		t.Fatalf("Pulse before AcquireLeader = %v, %v", leader, err)
	}
	m.AcquireLeader()
	m.AcquireLeader() // no-op while leading
	if !m.IsLeader() {
		t.Fatal("not leader after AcquireLeader")
	}
	if leader, err := m.Pulse(time.Millisecond); !leader || err != nil {
		t.Fatalf("Pulse as leader = %v, %v", leader, err)
	}
	m.FenceLeader()
	if m.IsLeader() {
		t.Fatal("leader after FenceLeader")
	}
	m.AcquireLeader()
	m.RevokeLeader()
	m.RevokeLeader() // no-op without a tenure
	m.AcquireLeader()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m.Await()
	if m.State() != Closed || m.IsLeader() {
		t.Fatalf("after Close: state %v, leader %v", m.State(), m.IsLeader())
	}
	if _, err := m.Pulse(time.Millisecond); !errors.Is(err, ErrNonLivePulse) {
		t.Fatalf("Pulse after Close: %v", err)
	}
	var got string
	for _, e := range r.snapshot() {
		got += fmt.Sprintf("%T ", e.what)
	}
	want := "goneli.LeaderAcquired goneli.LeaderFenced goneli.LeaderAcquired goneli.LeaderRevoked goneli.LeaderAcquired goneli.LeaderRevoked "
	if got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	checkGrammar(t, r.snapshot())
}

func TestMockPulseError(t *testing.T) {
	m, _ := NewMock(MockConfig{})
	boom := errors.New("boom")
	m.PulseError(boom)
	if _, err := m.Pulse(time.Millisecond); !errors.Is(err, boom) {
		t.Fatalf("first Pulse: %v", err)
	}
	if _, err := m.Pulse(time.Millisecond); err != nil {
		t.Fatalf("the error must be applied once: %v", err)
	}
}

func TestMockPulseWakesOnAcquire(t *testing.T) {
	m, _ := NewMock(MockConfig{})
	defer m.Close()
	done := make(chan bool)
	go func() {
		leader, _ := m.PulseCtx(context.Background())
		done <- leader
	}()
	m.AcquireLeader()
	if !<-done {
		t.Fatal("PulseCtx returned without leadership")
	}
}

func TestMockBackgroundRunsTaskWhileLeader(t *testing.T) {
	m, _ := NewMock(MockConfig{MinPollInterval: Duration(time.Millisecond)})
	ran := make(chan struct{}, 1)
	p, err := m.Background(func() {
		select {
		case ran <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	m.AcquireLeader()
	<-ran
	m.Close()
	if err := p.Await(); err != nil {
		t.Fatalf("pulser stopped by Close should report nil, got %v", err)
	}
}

func TestMockBackgroundReportsFatalError(t *testing.T) {
	m, _ := NewMock(MockConfig{})
	defer m.Close()
	boom := errors.New("boom")
	p, _ := m.Background(func() {})
	m.PulseError(boom)
	if err := p.Await(); !errors.Is(err, boom) {
		t.Fatalf("Await = %v", err)
	}
	if !errors.Is(p.Error(), boom) {
		t.Fatalf("Error = %v", p.Error())
	}
}

func TestMockConfigValidation(t *testing.T) {
	_, err := NewMock(MockConfig{MinPollInterval: Duration(0)})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "MinPollInterval" {
		t.Fatalf("got %v", err)
	}
	if s := (MockConfig{MinPollInterval: Duration(time.Second)}).String(); s != "MockConfig[MinPollInterval=1s]" {
		t.Fatalf("String = %q", s)
	}
}

func TestBackgroundRejectsNilTask(t *testing.T) {
	m, _ := NewMock(MockConfig{})
	defer m.Close()
	if _, err := m.Background(nil); err == nil {
		t.Fatal("want an error for a nil task")
	}
}

// A test of application code drives leadership by hand.
func ExampleNewMock() {
	m, _ := NewMock(MockConfig{}, func(e Event) {
		fmt.Printf("%T\n", e)
	})
	m.AcquireLeader()
	fmt.Println("leader:", m.IsLeader())
	m.FenceLeader()
	fmt.Println("leader:", m.IsLeader())
	_ = m.Close()
	// Output:
	// goneli.LeaderAcquired
	// leader: true
	// goneli.LeaderFenced
	// leader: false
	// goneli.LeaderRevoked
}

func TestMockBarrierMayCallBack(t *testing.T) {
	var m MockNeli
	var tokens []int64
	m, _ = NewMock(MockConfig{}, func(e Event) {
		tokens = append(tokens, m.Token())
		_, _ = m.Leader()
		_ = m.Stats()
		if _, ok := e.(LeaderFenced); ok {
			_ = m.Close()
		}
	})
	m.AcquireLeader()
	m.FenceLeader()
	m.Await()
	if m.State() != Closed {
		t.Fatalf("state %v", m.State())
	}
	// Acquired sees no lease yet; Fenced sees it gone.
	if len(tokens) != 3 || tokens[0] != 0 || tokens[1] != 0 {
		t.Fatalf("tokens seen by the barrier: %v", tokens)
	}
}

func TestMockYield(t *testing.T) {
	r := newRecorder()
	m, _ := NewMock(MockConfig{}, r.barrier("m"))
	defer m.Close()
	m.AcquireLeader()
	if m.Token() != 1 {
		t.Fatalf("token %d", m.Token())
	}
	if err := m.Yield(time.Hour); err != nil {
		t.Fatal(err)
	}
	m.AcquireLeader()
	if m.IsLeader() {
		t.Fatal("AcquireLeader must not take effect during a yield")
	}
	if err := m.Yield(0); err == nil {
		t.Fatal("Yield(0) must fail")
	}
	if s := m.Stats(); s.YieldRemaining <= 0 || s.Acquired != 1 || s.Revoked != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A task that returns at once must not turn the pulser into a busy loop: every run that ends within
// MinTaskInterval of its start is followed by a pause for the rest of it. The contract is about runs
// that returned early by the pulser's clock, so the test freezes that clock: on a loaded machine a
// run of a real clock may take longer than MinTaskInterval and rightly get no pause.
func TestBackgroundPacesATaskThatReturnsAtOnce(t *testing.T) {
	var runs, pauses atomic.Int64
	saved, savedNow := taskPause, taskNow
	frozen := time.Unix(1_800_000_000, 0)
	taskNow = func() time.Time { return frozen }
	defer func() { taskNow = savedNow }()
	taskPause = func(ctx context.Context, d time.Duration) {
		if d <= 0 || d > MinTaskInterval {
			t.Errorf("pause of %v, want (0, %v]", d, MinTaskInterval)
		}
		pauses.Add(1)
	}
	m, _ := NewMock(MockConfig{})
	m.AcquireLeader()
	done := make(chan struct{})
	p, err := m.Background(func() {
		if runs.Add(1) == 100 {
			close(done)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	p.Close()
	if err := p.Await(); err != nil {
		t.Fatal(err)
	}
	taskPause = saved
	_ = m.Close()
	if pauses.Load() != runs.Load() {
		t.Fatalf("%d runs, %d pauses; want a pause after every run", runs.Load(), pauses.Load())
	}
}
