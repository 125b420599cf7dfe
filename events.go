package goneli

import (
	"fmt"
	"time"

	"github.com/goneli/goneli/internal/core"
)

// Event is a change of leadership status, delivered to the Barrier. The concrete types are
// LeaderAcquired, LeaderRevoked and LeaderFenced; they are values, so a type switch on
// `case LeaderAcquired:` works, and they may gain fields over time.
//
// For one instance and one role the events of a tenure (one assignment of the role's partition)
// always come in this order:
//
//	LeaderAcquired (LeaderFenced LeaderAcquired)* [LeaderFenced] LeaderRevoked
//
// LeaderRevoked ends every tenure that began with LeaderAcquired, including on Close. A tenure that
// never acquired (its first heartbeat never came back) ends silently. Each event names its Role:
// empty for the single leader of New, the role's name for NewRoles.
type Event interface {
	fmt.Stringer
}

// Barrier receives leadership events. For each role it is called from a goroutine of the role's
// own, one event at a time and in order, never with a lock of goneli's held; events of different
// roles may be delivered at the same time, from different goroutines. OnLeaderChange is called
// from the goroutine of the first role. Pulse does not wait for the barrier, except that a role's
// leadership (IsLeader) begins only once the barrier has returned from its LeaderAcquired, and a
// successor does not lead a revoked role before the barrier has returned from its LeaderRevoked,
// or the rebalance timeout (max.poll.interval.ms) has passed, so that a leader may finish
// in-flight work first. Close waits likewise for the final LeaderRevoked events. The barrier may
// call IsLeader, State, Token, Leader, Stats, Yield and Close (Close then returns once the
// instance has left the group; see Neli.Close), but not Pulse.
//
// What a barrier that misbehaves costs:
//   - Blocking in LeaderAcquired, for however long, delays IsLeader; the lease goes on being
//     renewed meanwhile, so leadership begins when the barrier returns, if the tenure lasted.
//   - Blocking in LeaderRevoked holds the role's successor back for at most the rebalance timeout,
//     and Close for at most its bound; after that the successor may lead while the barrier runs.
//   - Blocking in LeaderFenced delays the role's later events, not its renewals.
//   - A panic, here or in OnLeaderChange or a leader task, is not recovered: it ends the process
//     as any panic on a goroutine does, and the group handles that as a crash (a successor after
//     the session timeout). A panic in LeaderAcquired comes before IsLeader could turn true.
type Barrier func(e Event)

// NopBarrier returns a barrier that ignores every event.
func NopBarrier() Barrier {
	return func(Event) {}
}

// LeaderAcquired is delivered when this instance becomes leader: the first heartbeat of a new
// tenure came back and the group coordinator accepted its offset, or, after a LeaderFenced, a fresh
// heartbeat of the same tenure did. IsLeader returns true only after the barrier returns, so the
// application can initialise leader state here before any leader work runs.
type LeaderAcquired struct {
	// Role is the role led: empty for the single leader of New.
	Role string
	// Tenure identifies the assignment of the role's partition that this leadership belongs to; it
	// stays the same when a fenced leader resumes.
	Tenure string
	// Token is the tenure's fencing token: it is larger than the token of every earlier tenure of
	// the group, whoever held it, and stays the same when a fenced leader resumes. See
	// Curator.Token.
	Token int64
	// Since is when the tenure first acquired leadership, on this host's wall clock.
	Since time.Time
}

// String describes the event.
func (e LeaderAcquired) String() string {
	return fmt.Sprintf("LeaderAcquired[%sTenure=%s, Token=%d]", roleField(e.Role), e.Tenure, e.Token)
}

// roleField renders a role for an event's String, nothing for the unnamed role.
func roleField(role string) string {
	if role == "" {
		return ""
	}
	return "Role=" + role + ", "
}

// LeaderRevoked is delivered when this instance's tenure ends in an orderly way: the role's
// partition was revoked in a rebalance, or Close or Yield was called. IsLeader is already false.
// Blocking in the barrier holds back the successor (for up to max.poll.interval.ms, which goneli
// sets to the session timeout unless raised), so a leader may finish in-flight work first; it
// does not hold back the other roles. After a LeaderFenced that says the assignment was lost, the
// group has moved on already and a successor may lead at any moment: nothing is held back.
type LeaderRevoked struct {
	Role   string
	Tenure string
	Token  int64
}

// String describes the event.
func (e LeaderRevoked) String() string {
	return fmt.Sprintf("LeaderRevoked[%sTenure=%s]", roleField(e.Role), e.Tenure)
}

// LeaderFenced is delivered when this instance stops being leader without the group's agreement:
// its lease ran out because its own heartbeats stopped coming back in time, the coordinator
// rejected its offset commit (it was expelled or the generation moved on), or its assignment was
// lost. Another instance may be elected at any moment: stop leader work at once. Blocking in the
// barrier holds nothing back. Leadership resumes with LeaderAcquired if a fresh heartbeat of the
// same tenure comes back.
type LeaderFenced struct {
	Role   string
	Tenure string
	Token  int64
	// Reason says why, for logs.
	Reason string
	// LeaseAge is how long ago the newest heartbeat that renewed the lease was sent.
	LeaseAge time.Duration
}

// String describes the event.
func (e LeaderFenced) String() string {
	return fmt.Sprintf("LeaderFenced[%sTenure=%s, Reason=%s, LeaseAge=%v]", roleField(e.Role), e.Tenure, e.Reason, e.LeaseAge)
}

// publicEvents are the events of a tenure as the application sees them.
func publicEvents(events []core.TenureEvent) []Event {
	out := make([]Event, len(events))
	for i, e := range events {
		switch e := e.(type) {
		case core.Acquired:
			out[i] = LeaderAcquired{Role: e.Role, Tenure: e.Tenure, Token: e.Token, Since: e.Since}
		case core.Fenced:
			out[i] = LeaderFenced{Role: e.Role, Tenure: e.Tenure, Token: e.Token, Reason: e.Reason, LeaseAge: e.LeaseAge}
		case core.Revoked:
			out[i] = LeaderRevoked{Role: e.Role, Tenure: e.Tenure, Token: e.Token}
		}
	}
	return out
}
