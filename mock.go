package goneli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/obsidiandynamics/libstdgo/concurrent"
)

// MockConfig configures a MockNeli.
type MockConfig struct {
	// MinPollInterval paces a non-leader's Pulse, as it does for the real thing. Default:
	// DefaultMinPollInterval.
	MinPollInterval *time.Duration
}

// SetDefaults fills the unset optional fields with their defaults.
func (c *MockConfig) SetDefaults() {
	if c.MinPollInterval == nil {
		c.MinPollInterval = Duration(DefaultMinPollInterval)
	}
}

// Validate checks the configuration.
func (c MockConfig) Validate() error {
	switch {
	case c.MinPollInterval == nil:
		return &ConfigError{Field: "MinPollInterval", Reason: "must be set"}
	case *c.MinPollInterval < time.Millisecond:
		return &ConfigError{Field: "MinPollInterval", Value: *c.MinPollInterval, Reason: "must be at least 1ms"}
	}
	return nil
}

// String renders the configuration.
func (c MockConfig) String() string {
	return fmt.Sprintf("MockConfig[MinPollInterval=%s]", durationString(c.MinPollInterval))
}

// MockNeli is a Neli that talks to no broker: the test decides when it leads. Events reach the
// barrier synchronously from the goroutine that calls AcquireLeader, RevokeLeader, FenceLeader,
// Yield or Close, with no lock held, so the barrier may call any method of the mock; transitions
// made from one goroutine arrive in the order the real Neli guarantees. Tokens count tenures from 1. Yield revokes
// and makes AcquireLeader a no-op until the yield is over.
type MockNeli interface {
	Curator

	// PulseError makes the next Pulse return err, as a fatal Kafka error would.
	PulseError(err error)

	// AcquireLeader makes this instance leader and delivers LeaderAcquired (no-op if it leads).
	AcquireLeader()

	// RevokeLeader ends the tenure and delivers LeaderRevoked (no-op if there is no tenure).
	RevokeLeader()

	// FenceLeader withdraws leadership and delivers LeaderFenced, keeping the tenure so that
	// AcquireLeader resumes it (no-op if not leading).
	FenceLeader()
}

type mockNeli struct {
	config   MockConfig
	barrier  Barrier
	deadline concurrent.Deadline

	state     atomic.Int32
	leader    atomic.Bool
	changed   chan struct{} // closed and replaced on every change of leadership or state
	closeOnce sync.Once
	closed    chan struct{}

	mu         sync.Mutex // serialises transitions and barrier calls
	tenure     int
	inTenure   bool
	pulseErr   error
	since      time.Time
	yieldUntil time.Time
	stats      Stats
}

// NewMock creates a MockNeli. If no barrier is given, events are discarded.
func NewMock(config MockConfig, barrier ...Barrier) (MockNeli, error) {
	config.SetDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	m := &mockNeli{
		config:   config,
		barrier:  NopBarrier(),
		deadline: concurrent.NewDeadline(*config.MinPollInterval),
		changed:  make(chan struct{}),
		closed:   make(chan struct{}),
	}
	if len(barrier) > 0 && barrier[0] != nil {
		m.barrier = barrier[0]
	}
	return m, nil
}

func (m *mockNeli) tenureName() string {
	return fmt.Sprintf("mock-%d", m.tenure)
}

// signal wakes pulses waiting for a change. Called with mu held.
func (m *mockNeli) signal() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *mockNeli) AcquireLeader() {
	m.mu.Lock()
	if m.State() != Live || m.leader.Load() || time.Now().Before(m.yieldUntil) {
		m.mu.Unlock()
		return
	}
	if !m.inTenure {
		m.inTenure = true
		m.tenure++
		m.since = time.Now()
	}
	m.stats.Acquired++
	e := LeaderAcquired{Tenure: m.tenureName(), Token: int64(m.tenure), Since: m.since}
	m.mu.Unlock()

	// As with the real thing, IsLeader turns true only once the barrier has returned.
	m.barrier(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.State() == Live && m.inTenure {
		m.leader.Store(true)
		m.signal()
	}
}

func (m *mockNeli) FenceLeader() {
	m.mu.Lock()
	if !m.leader.Load() {
		m.mu.Unlock()
		return
	}
	m.leader.Store(false)
	m.signal()
	m.stats.Fenced++
	e := LeaderFenced{Tenure: m.tenureName(), Token: int64(m.tenure), Reason: "FenceLeader called on the mock"}
	m.mu.Unlock()
	m.barrier(e)
}

func (m *mockNeli) RevokeLeader() {
	m.mu.Lock()
	e := m.revoke()
	m.mu.Unlock()
	m.deliver(e)
}

// revoke ends the tenure and returns the event to deliver once mu is released. Called with mu held.
func (m *mockNeli) revoke() Event {
	if !m.inTenure {
		return nil
	}
	m.inTenure = false
	m.leader.Store(false)
	m.signal()
	m.stats.Revoked++
	return LeaderRevoked{Tenure: m.tenureName(), Token: int64(m.tenure)}
}

func (m *mockNeli) deliver(e Event) {
	if e != nil {
		m.barrier(e)
	}
}

func (m *mockNeli) Token() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leader.Load() {
		return 0
	}
	return int64(m.tenure)
}

// Leader knows only this mock itself: a mock observes no one else.
func (m *mockNeli) Leader() (LeaderInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leader.Load() {
		return LeaderInfo{}, false
	}
	return LeaderInfo{Name: "mock", Tenure: m.tenureName(), Token: int64(m.tenure), Since: m.since, LastHeartbeat: time.Now()}, true
}

func (m *mockNeli) Yield(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("goneli: Yield needs a positive duration, got %v", d)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.State() != Live {
		return ErrNonLivePulse
	}
	if until := time.Now().Add(d); until.After(m.yieldUntil) {
		m.yieldUntil = until
	}
	e := m.revoke()
	m.mu.Unlock()
	m.deliver(e)
	m.mu.Lock()
	return nil
}

func (m *mockNeli) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.State, s.Leader, s.Leading, s.Assigned = m.State(), m.leader.Load(), m.leader.Load(), m.inTenure
	if m.inTenure {
		s.Tenure, s.Token, s.Since = m.tenureName(), int64(m.tenure), m.since
	}
	if r := time.Until(m.yieldUntil); r > 0 {
		s.YieldRemaining = r
	}
	return s
}

func (m *mockNeli) PulseError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pulseErr = err
	m.signal()
}

func (m *mockNeli) IsLeader() bool {
	return m.leader.Load()
}

func (m *mockNeli) Pulse(timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return m.PulseCtx(ctx)
}

func (m *mockNeli) PulseCtx(ctx context.Context) (bool, error) {
	for {
		m.mu.Lock()
		if m.State() != Live {
			m.mu.Unlock()
			return false, ErrNonLivePulse
		}
		m.deadline.TryRun(func() {})
		if err := m.pulseErr; err != nil {
			m.pulseErr = nil
			m.mu.Unlock()
			return false, err
		}
		changed := m.changed
		m.mu.Unlock()
		if m.leader.Load() {
			return true, nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return false, nil
			}
			return false, ctx.Err()
		case <-changed:
		}
	}
}

func (m *mockNeli) Deadline() concurrent.Deadline {
	return m.deadline
}

func (m *mockNeli) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.state.Store(int32(Closing))
		e := m.revoke()
		m.signal()
		m.mu.Unlock()
		m.deliver(e)
		m.mu.Lock()
		m.state.Store(int32(Closed))
		m.signal()
		m.mu.Unlock()
		close(m.closed)
	})
	return nil
}

func (m *mockNeli) Await() {
	<-m.closed
}

func (m *mockNeli) State() State {
	return State(m.state.Load())
}

func (m *mockNeli) Background(task LeaderTask) (Pulser, error) {
	return background(m, task)
}
