package goneli

import (
	"fmt"
	"time"

	"github.com/goneli/goneli/internal/hooks"
)

// The broker-backed tests of this package live in a module of their own (internal/kafkatest/coretest)
// and reach the internals they check through package hooks.
func init() {
	hooks.ClientsClosed = func(n any) <-chan struct{} { return instanceOf(n).life.clientsClosed }
	hooks.Name = func(n any) string { return instanceOf(n).config.Name }
	hooks.LateRebalances = func(n any) int32 { return instanceOf(n).d.group.late.Load() }
	hooks.MinPollInterval = func(n any) time.Duration { return *instanceOf(n).config.MinPollInterval }
	hooks.Heartbeat = func(tenure, seq uint64, sentWall, since, token int64) []byte {
		h := heartbeat{tenure: tenure, seq: seq, sentWall: sentWall, since: since, token: token}
		return h.appendTo(nil)
	}
}

// instanceOf returns the instance behind what New, NewCurator or NewRoles returned.
func instanceOf(n any) *neli {
	switch n := n.(type) {
	case *neli:
		return n
	case *roleSet:
		return n.n
	}
	panic(fmt.Sprintf("goneli: %T is not an instance of goneli", n))
}
