package goneli

import (
	"fmt"
	"time"
)

// Event is a change of leadership status, delivered to the Barrier. The concrete types are
// LeaderAcquired, LeaderRevoked and LeaderFenced; they are values, so a type switch on
// `case LeaderAcquired:` works, and they may gain fields over time.
//
// For one instance the events of a tenure (one assignment of partition 0) always come in this
// order:
//
//	LeaderAcquired (LeaderFenced LeaderAcquired)* [LeaderFenced] LeaderRevoked
//
// LeaderRevoked ends every tenure that began with LeaderAcquired, including on Close. A tenure that
// never acquired (its first heartbeat never came back) ends silently.
type Event interface {
	fmt.Stringer
}

// Barrier receives leadership events. It is called from a goroutine of the instance's own, one
// event at a time and in order, never with a lock of goneli's held; OnLeaderChange is called from
// the same goroutine. Pulse does not wait for it, except that leadership (IsLeader) begins only
// once the barrier has returned from LeaderAcquired, and a revocation of partition 0 waits for it
// to return from LeaderRevoked, for up to the rebalance timeout (max.poll.interval.ms), so that
// the successor is assigned the partition only after it. Close waits likewise for the final
// LeaderRevoked. The barrier may call IsLeader, State, Token, Leader, Stats, Yield and Close
// (Close then returns once the instance has left the group; see Neli.Close), but not Pulse.
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
	// Tenure identifies the assignment of partition 0 that this leadership belongs to; it stays the
	// same when a fenced leader resumes.
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
	return fmt.Sprintf("LeaderAcquired[Tenure=%s, Token=%d]", e.Tenure, e.Token)
}

// LeaderRevoked is delivered when this instance's tenure ends in an orderly way: partition 0 was
// revoked in a rebalance, or Close was called. IsLeader is already false. Blocking in the barrier
// holds back the reassignment of partition 0 (for up to max.poll.interval.ms, which goneli sets
// to the session timeout unless raised), so a leader may finish in-flight work first.
type LeaderRevoked struct {
	Tenure string
	Token  int64
}

// String describes the event.
func (e LeaderRevoked) String() string {
	return fmt.Sprintf("LeaderRevoked[Tenure=%s]", e.Tenure)
}

// LeaderFenced is delivered when this instance stops being leader without the group's agreement:
// its lease ran out because its own heartbeats stopped coming back in time, the coordinator
// rejected its offset commit (it was expelled or the generation moved on), or its assignment was
// lost. Another instance may be elected at any moment: stop leader work at once. Blocking in the
// barrier holds nothing back. Leadership resumes with LeaderAcquired if a fresh heartbeat of the
// same tenure comes back.
type LeaderFenced struct {
	Tenure string
	Token  int64
	// Reason says why, for logs.
	Reason string
	// LeaseAge is how long ago the newest heartbeat that renewed the lease was sent.
	LeaseAge time.Duration
}

// String describes the event.
func (e LeaderFenced) String() string {
	return fmt.Sprintf("LeaderFenced[Tenure=%s, Reason=%s, LeaseAge=%v]", e.Tenure, e.Reason, e.LeaseAge)
}
