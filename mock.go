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

// MockConfig configures a MockNeli or MockRoles.
type MockConfig struct {
	// MinPollInterval paces a non-leader's Pulse, as it does for the real thing. Default:
	// DefaultMinPollInterval.
	MinPollInterval *time.Duration

	// Address is what the mock's LeaderInfo reports as Address while it leads. Default: empty.
	Address string
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
	case len(c.Address) > MaxAddressLength:
		return &ConfigError{Field: "Address", Value: c.Address[:32] + "...", Reason: fmt.Sprintf("must be at most %d bytes", MaxAddressLength)}
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
// made from one goroutine arrive in the order the real Neli guarantees. Tokens count tenures from
// 1. Yield revokes and makes AcquireLeader a no-op until the yield is over. TransferTo revokes,
// whatever name it is given (a mock has no other members), and is refused while the mock does not
// lead.
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

// mock is what MockNeli and MockRoles share: the lifecycle, pulsing, yielding and the barrier, over
// one or more roles. A MockNeli is a mock with a single unnamed role.
type mock struct {
	config   MockConfig
	barrier  Barrier
	deadline concurrent.Deadline
	roles    []*mockRole // in partition order

	state     atomic.Int32
	closeOnce sync.Once
	closed    chan struct{}

	// mu serialises transitions and guards what follows and the roles' tenures. It is never held
	// while the barrier runs, so that the barrier may call back into the mock.
	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every change of leadership or state
	pulseErr   error
	yieldUntil time.Time
}

// mockRole is one role of a mock. leader is atomic so that IsLeader takes no lock; the other
// fields are guarded by the mock's mu.
type mockRole struct {
	name      string
	partition int32
	leader    atomic.Bool
	tenure    int // tenures so far, which is also the current tenure's token
	inTenure  bool
	since     time.Time
	stats     Stats
}

// NewMock creates a MockNeli. If no barrier is given, events are discarded.
func NewMock(config MockConfig, barrier ...Barrier) (MockNeli, error) {
	m, err := newMock(config, []string{""}, barrier)
	if err != nil {
		return nil, err
	}
	return &mockNeli{m}, nil
}

func newMock(config MockConfig, roles []string, barrier []Barrier) (*mock, error) {
	config.SetDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	m := &mock{
		config:   config,
		barrier:  NopBarrier(),
		deadline: concurrent.NewDeadline(*config.MinPollInterval),
		changed:  make(chan struct{}),
		closed:   make(chan struct{}),
	}
	for i, name := range roles {
		m.roles = append(m.roles, &mockRole{name: name, partition: int32(i)})
	}
	if len(barrier) > 0 && barrier[0] != nil {
		m.barrier = barrier[0]
	}
	return m, nil
}

func (r *mockRole) tenureName() string {
	return fmt.Sprintf("mock-%d", r.tenure)
}

// signal wakes pulses waiting for a change. Called with mu held.
func (m *mock) signal() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// acquire makes r led and delivers LeaderAcquired, unless it is led already, the mock is not
// live, or a yield is in force.
func (m *mock) acquire(r *mockRole) {
	m.mu.Lock()
	if m.State() != Live || r.leader.Load() || time.Now().Before(m.yieldUntil) {
		m.mu.Unlock()
		return
	}
	if !r.inTenure {
		r.inTenure = true
		r.tenure++
		r.since = time.Now()
	}
	r.stats.Acquired++
	tenure := r.tenure
	e := LeaderAcquired{Role: r.name, Tenure: r.tenureName(), Token: int64(tenure), Since: r.since}
	m.mu.Unlock()

	// As with the real thing, IsLeader turns true only once the barrier has returned, and not at
	// all if the tenure ended meanwhile.
	m.barrier(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.State() == Live && r.inTenure && r.tenure == tenure {
		r.leader.Store(true)
		m.signal()
	}
}

// fence withdraws r's leadership, keeping its tenure, and delivers LeaderFenced.
func (m *mock) fence(r *mockRole) {
	m.mu.Lock()
	if !r.leader.Load() {
		m.mu.Unlock()
		return
	}
	r.leader.Store(false)
	m.signal()
	r.stats.Fenced++
	e := LeaderFenced{Role: r.name, Tenure: r.tenureName(), Token: int64(r.tenure), Reason: "FenceLeader called on the mock"}
	m.mu.Unlock()
	m.barrier(e)
}

// revokeOne ends r's tenure and delivers LeaderRevoked.
func (m *mock) revokeOne(r *mockRole) {
	m.mu.Lock()
	e := m.revoke(r)
	m.mu.Unlock()
	m.deliver(e)
}

// revoke ends r's tenure and returns the event to deliver once mu is released, or nil if r has
// no tenure. Called with mu held.
func (m *mock) revoke(r *mockRole) Event {
	if !r.inTenure {
		return nil
	}
	r.inTenure = false
	r.leader.Store(false)
	m.signal()
	r.stats.Revoked++
	return LeaderRevoked{Role: r.name, Tenure: r.tenureName(), Token: int64(r.tenure)}
}

// revokeAll ends every role's tenure and returns the events to deliver, in partition order. Called
// with mu held.
func (m *mock) revokeAll() []Event {
	var events []Event
	for _, r := range m.roles {
		if e := m.revoke(r); e != nil {
			events = append(events, e)
		}
	}
	return events
}

func (m *mock) deliver(events ...Event) {
	for _, e := range events {
		if e != nil {
			m.barrier(e)
		}
	}
}

func (m *mock) tokenOf(r *mockRole) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !r.leader.Load() {
		return 0
	}
	return int64(r.tenure)
}

// leaderOf knows only this mock itself: a mock observes no one else.
func (m *mock) leaderOf(r *mockRole) (LeaderInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !r.leader.Load() {
		return LeaderInfo{}, false
	}
	return LeaderInfo{Role: r.name, Partition: r.partition, Name: "mock", Address: m.config.Address, Tenure: r.tenureName(), Token: int64(r.tenure),
		Since: r.since, LastHeartbeat: time.Now()}, true
}

func (m *mock) statsOf(r *mockRole) Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := r.stats
	s.Role = r.name
	s.State, s.Leader, s.Leading, s.Assigned = m.State(), r.leader.Load(), r.leader.Load(), r.inTenure
	// As with the real thing, a fenced tenure keeps its name but shows no token.
	if r.inTenure {
		s.Tenure = r.tenureName()
	}
	if s.Leading {
		s.Token, s.Since = int64(r.tenure), r.since
	}
	if y := time.Until(m.yieldUntil); y > 0 {
		s.YieldRemaining = y
	}
	return s
}

// leadsAny reports whether any role is led.
func (m *mock) leadsAny() bool {
	for _, r := range m.roles {
		if r.leader.Load() {
			return true
		}
	}
	return false
}

// Yield revokes every role and makes AcquireLeader a no-op until d has passed.
func (m *mock) Yield(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("goneli: Yield needs a positive duration, got %v", d)
	}
	m.mu.Lock()
	if m.State() != Live {
		m.mu.Unlock()
		return ErrNonLivePulse
	}
	if until := time.Now().Add(d); until.After(m.yieldUntil) {
		m.yieldUntil = until
	}
	events := m.revokeAll()
	m.mu.Unlock()
	m.deliver(events...)
	return nil
}

// transferTo ends r's tenure, as a hand-over to name would: a mock has no other members, so name
// is not checked, and AcquireLeader makes it lead again at once. It is refused while r is not led,
// and on a mock of several roles, as the real thing refuses.
func (m *mock) transferTo(r *mockRole, name string) error {
	if len(m.roles) > 1 {
		return &TransferError{To: name, Reason: "this instance contends for several roles", Err: ErrRolesTransfer}
	}
	m.mu.Lock()
	if m.State() != Live {
		m.mu.Unlock()
		return ErrNonLivePulse
	}
	if !r.leader.Load() {
		m.mu.Unlock()
		return &TransferError{To: name, Reason: "this instance does not lead", Err: ErrNotLeader}
	}
	r.stats.Transfers++
	e := m.revoke(r)
	m.mu.Unlock()
	m.deliver(e)
	return nil
}

// PulseError makes the next Pulse return err.
func (m *mock) PulseError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pulseErr = err
	m.signal()
}

func (m *mock) Pulse(timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return m.PulseCtx(ctx)
}

// PulseCtx returns true at once while any role is led, and otherwise waits for a role to be
// acquired, an error set by PulseError, Close, or the end of ctx.
func (m *mock) PulseCtx(ctx context.Context) (bool, error) {
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
		if m.leadsAny() {
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

func (m *mock) Deadline() concurrent.Deadline {
	return m.deadline
}

// Close revokes every role, in partition order, and closes the mock.
func (m *mock) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.state.Store(int32(Closing))
		events := m.revokeAll()
		m.signal()
		m.mu.Unlock()
		m.deliver(events...)
		m.mu.Lock()
		m.state.Store(int32(Closed))
		m.signal()
		m.mu.Unlock()
		close(m.closed)
	})
	return nil
}

func (m *mock) Await() {
	<-m.closed
}

func (m *mock) State() State {
	return State(m.state.Load())
}

// mockNeli is the MockNeli: a mock of one unnamed role.
type mockNeli struct {
	*mock
}

func (m *mockNeli) AcquireLeader()               { m.acquire(m.roles[0]) }
func (m *mockNeli) FenceLeader()                 { m.fence(m.roles[0]) }
func (m *mockNeli) RevokeLeader()                { m.revokeOne(m.roles[0]) }
func (m *mockNeli) IsLeader() bool               { return m.roles[0].leader.Load() }
func (m *mockNeli) Token() int64                 { return m.tokenOf(m.roles[0]) }
func (m *mockNeli) Leader() (LeaderInfo, bool)   { return m.leaderOf(m.roles[0]) }
func (m *mockNeli) Stats() Stats                 { return m.statsOf(m.roles[0]) }
func (m *mockNeli) TransferTo(name string) error { return m.transferTo(m.roles[0], name) }

func (m *mockNeli) Background(task LeaderTask) (Pulser, error) {
	return background(m, task)
}
