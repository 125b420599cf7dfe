// Package hooks lets the broker-backed tests of package goneli reach the few internals they check.
// Those tests run on an embedded broker, so they live in internal/kafkatest/coretest, a module of
// its own, where they cannot see goneli's unexported names; package goneli sets every variable
// here when it is initialised, and nothing else may. An instance is passed as the goneli.Neli,
// goneli.Curator or goneli.Roles that New, NewCurator or NewRoles returned.
package hooks

import "time"

var (
	// ClientsClosed returns the channel an instance closes once every Kafka client it made has
	// finished closing, which can be after its Close returned.
	ClientsClosed func(instance any) <-chan struct{}

	// Name returns the instance's Config.Name, with the default applied.
	Name func(instance any) string

	// LateRebalances returns how many rebalance events reached the instance's rebalance callback
	// only while its consumer was closing.
	LateRebalances func(instance any) int32

	// MinPollInterval returns the instance's Config.MinPollInterval, with the default applied.
	MinPollInterval func(instance any) time.Duration

	// Heartbeat encodes the value of a heartbeat record as a leader of the single-leader topic
	// writes it: tenure and seq, the wall clock time it was sent and the tenure began (Unix
	// nanoseconds), and the tenure's token.
	Heartbeat func(tenure, seq uint64, sentWall, since, token int64) []byte
)
