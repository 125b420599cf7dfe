package core

import "time"

// settings are what the machine needs of an instance's Config, derived once by New
// (Config.settings): its name and leader topic for notes, and the lease and its intervals.
type Settings struct {
	Name, Topic string
	// lease is HeartbeatTimeout; renew RenewInterval; minPoll MinPollInterval; handOverAfter
	// HandOverAfter, or its default for the lease.
	Lease, Renew, MinPoll, HandOverAfter time.Duration
}
