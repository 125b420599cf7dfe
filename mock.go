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
// barrier synchronously from the goroutine that calls AcquireLeader, RevokeLeader, FenceLeader or
// Close, in the same order the real Neli guarantees.
type MockNeli interface {
	Neli

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

	mu       sync.Mutex // serialises transitions and barrier calls
	tenure   int
	inTenure bool
	pulseErr error
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
	defer m.mu.Unlock()
	if m.State() != Live || m.leader.Load() {
		return
	}
	if !m.inTenure {
		m.inTenure = true
		m.tenure++
	}
	m.barrier(LeaderAcquired{Tenure: m.tenureName()})
	m.leader.Store(true)
	m.signal()
}

func (m *mockNeli) FenceLeader() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leader.Load() {
		return
	}
	m.leader.Store(false)
	m.signal()
	m.barrier(LeaderFenced{Tenure: m.tenureName(), Reason: "FenceLeader called on the mock"})
}

func (m *mockNeli) RevokeLeader() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.revoke()
}

func (m *mockNeli) revoke() {
	if !m.inTenure {
		return
	}
	m.inTenure = false
	m.leader.Store(false)
	m.signal()
	m.barrier(LeaderRevoked{Tenure: m.tenureName()})
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
		m.revoke()
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
