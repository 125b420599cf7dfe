package core

import "time"

// The events a lease makes of its tenure, for the application: the shell hands them to the barrier
// as the public events (LeaderAcquired, LeaderFenced, LeaderRevoked; neli.deliver).

// tenureEvent is one of acquired, fenced and revoked.
type TenureEvent interface {
	tenureEvent()
}

// acquired says that the tenure leads from now on (LeaderAcquired).
type Acquired struct {
	Role, Tenure string
	Token        int64
	Since        time.Time
}

// fenced says that the tenure stopped leading and still holds the partition (LeaderFenced).
type Fenced struct {
	Role, Tenure, Reason string
	Token                int64
	LeaseAge             time.Duration
}

// revoked says that the tenure is over (LeaderRevoked).
type Revoked struct {
	Role, Tenure string
	Token        int64
}

func (Acquired) tenureEvent() {}
func (Fenced) tenureEvent()   {}
func (Revoked) tenureEvent()  {}
