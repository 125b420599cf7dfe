package goneli

import "time"

// The events a lease makes of its tenure, for the application: the shell hands them to the barrier
// as the public events (LeaderAcquired, LeaderFenced, LeaderRevoked; neli.deliver).

// tenureEvent is one of acquired, fenced and revoked.
type tenureEvent interface {
	tenureEvent()
}

// acquired says that the tenure leads from now on (LeaderAcquired).
type acquired struct {
	role, tenure string
	token        int64
	since        time.Time
}

// fenced says that the tenure stopped leading and still holds the partition (LeaderFenced).
type fenced struct {
	role, tenure, reason string
	token                int64
	leaseAge             time.Duration
}

// revoked says that the tenure is over (LeaderRevoked).
type revoked struct {
	role, tenure string
	token        int64
}

func (acquired) tenureEvent() {}
func (fenced) tenureEvent()   {}
func (revoked) tenureEvent()  {}
