package goneli

import (
	"context"
	"fmt"
	"sync"
)

// MockRoles is a Roles that talks to no broker: the test decides which roles this instance leads.
// Each role behaves as a MockNeli of its own: events reach the barrier synchronously from the
// goroutine that calls AcquireLeader, RevokeLeader, FenceLeader, Yield or Close, with no lock
// held, so the barrier may call any method of the mock; transitions of a role made from one
// goroutine arrive in the order the real Roles guarantees; each role's tokens count its tenures
// from 1. Events name their role in their Role field, and Role.Leader names the leader "mock".
//
// What is shared works on every role at once, as it does for the real Roles: Yield revokes every
// role, in partition order, and makes AcquireLeader a no-op until the yield is over; Close revokes
// every role in partition order; Pulse returns true while any role is led.
//
// AcquireLeader, RevokeLeader and FenceLeader panic if given a role that NewMockRoles was not
// given: a misspelt role in a test would otherwise pass silently.
type MockRoles interface {
	Roles

	// PulseError makes the next Pulse return err, and stops a Background pulser with it, as a
	// fatal Kafka error would.
	PulseError(err error)

	// AcquireLeader makes this instance leader of role and delivers LeaderAcquired (no-op if it
	// leads the role).
	AcquireLeader(role string)

	// RevokeLeader ends role's tenure and delivers LeaderRevoked (no-op if it has no tenure).
	RevokeLeader(role string)

	// FenceLeader withdraws the leadership of role and delivers LeaderFenced, keeping the tenure
	// so that AcquireLeader resumes it (no-op if not leading the role).
	FenceLeader(role string)
}

// NewMockRoles creates a MockRoles for roles, which NewRoles would accept: at least one, each
// non-empty, free of control characters and listed once. If no barrier is given, events are
// discarded.
func NewMockRoles(config MockConfig, roles []string, barrier ...Barrier) (MockRoles, error) {
	if err := validateRoles(roles); err != nil {
		return nil, err
	}
	m, err := newMock(config, roles, barrier)
	if err != nil {
		return nil, err
	}
	return &mockRoles{m}, nil
}

// mockRoles is the MockRoles.
type mockRoles struct {
	*mock
}

// mockRoleOf is the Role view of one role of a mock.
type mockRoleOf struct {
	m *mock
	r *mockRole
}

// must returns the named role, and panics, naming the method, if there is none.
func (m *mockRoles) must(method, name string) *mockRole {
	for _, r := range m.roles {
		if r.name == name {
			return r
		}
	}
	names := make([]string, len(m.roles))
	for i, r := range m.roles {
		names[i] = r.name
	}
	panic(fmt.Sprintf("goneli: MockRoles.%s(%q): no such role; the roles are %q", method, name, names))
}

func (m *mockRoles) AcquireLeader(role string) { m.acquire(m.must("AcquireLeader", role)) }
func (m *mockRoles) FenceLeader(role string)   { m.fence(m.must("FenceLeader", role)) }
func (m *mockRoles) RevokeLeader(role string)  { m.revokeOne(m.must("RevokeLeader", role)) }

func (m *mockRoles) TransferTo(role, name string) error {
	for _, r := range m.roles {
		if r.name == role {
			return m.transferTo(r, name)
		}
	}
	return &TransferError{To: name, Reason: fmt.Sprintf("this instance does not contend for role %q", role)}
}

func (m *mockRoles) Role(name string) Role {
	for _, r := range m.roles {
		if r.name == name {
			return mockRoleOf{m.mock, r}
		}
	}
	return nil
}

func (m *mockRoles) All() []Role {
	out := make([]Role, len(m.roles))
	for i, r := range m.roles {
		out[i] = mockRoleOf{m.mock, r}
	}
	return out
}

func (m *mockRoles) Leading() []string {
	var out []string
	for _, r := range m.roles {
		if r.leader.Load() {
			out = append(out, r.name)
		}
	}
	return out
}

// Background runs task for each role on a goroutine of the role's own while the role is led, as
// the real Roles does, until the pulser is closed, the mock is closed, or PulseError is called.
func (m *mockRoles) Background(task RoleTask) (Pulser, error) {
	p, ctx, err := newPulser(m.State(), task == nil, "RoleTask")
	if err != nil {
		return nil, err
	}
	var runs sync.WaitGroup
	for _, r := range m.roles {
		runs.Add(1)
		go func() {
			defer runs.Done()
			m.runRole(ctx, r, task)
		}()
	}
	go func() {
		defer close(p.done)
		p.err = m.awaitPulseError(ctx)
		p.cancel()
		runs.Wait()
	}()
	return p, nil
}

// awaitPulseError stands in for the pulse loop, which a mock does not need: it returns the error
// set by PulseError, or nil once ctx ends or the mock closes.
func (m *mockRoles) awaitPulseError(ctx context.Context) error {
	for {
		m.mu.Lock()
		err, changed, live := m.pulseErr, m.changed, m.State() == Live
		m.pulseErr = nil
		m.mu.Unlock()
		if err != nil || !live {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// runRole runs task for r whenever r is led, until ctx ends.
func (m *mockRoles) runRole(ctx context.Context, r *mockRole, task RoleTask) {
	for ctx.Err() == nil {
		// The channel is taken before leadership is read, so that an acquisition in between
		// still wakes the wait below.
		m.mu.Lock()
		changed := m.changed
		m.mu.Unlock()
		if !r.leader.Load() {
			select {
			case <-ctx.Done():
			case <-changed:
			}
			continue
		}
		runPaced(ctx, func() { task(r.name) })
	}
}

// runPaced runs run once and then, if it returned within MinTaskInterval, pauses for the rest of
// it, so that a task with nothing to do does not spin.
func runPaced(ctx context.Context, run func()) {
	start := taskNow()
	run()
	if rest := MinTaskInterval - taskNow().Sub(start); rest > 0 {
		taskPause(ctx, rest)
	}
}

func (r mockRoleOf) Name() string               { return r.r.name }
func (r mockRoleOf) Partition() int32           { return r.r.partition }
func (r mockRoleOf) IsLeader() bool             { return r.r.leader.Load() }
func (r mockRoleOf) Token() int64               { return r.m.tokenOf(r.r) }
func (r mockRoleOf) Leader() (LeaderInfo, bool) { return r.m.leaderOf(r.r) }
func (r mockRoleOf) Stats() Stats               { return r.m.statsOf(r.r) }
