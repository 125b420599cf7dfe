package coretest

import (
	"testing"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
)

// A follower that loses the broker says so in Stats, and stops saying so once the broker is back,
// though a follower reads no heartbeats: the probe, or the rebalance that readmits it, clears it.
func TestStatsTellUnreachableFromFollowing(t *testing.T) {
	b := startBroker(t)
	group, log, r := groupName(t), newTestLog(t), newRecorder()
	a := contender(t, testConfig(b, group, "a", log), r).(Curator)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	c := contender(t, testConfig(b, group, "c", log), r).(Curator)
	awaitStable(t, b, group, 2)
	for _, n := range []Curator{a, c} {
		if s := n.Stats(); !s.UnreachableSince.IsZero() || s.UnreachableReason != "" {
			t.Fatalf("%s reports Kafka unreachable before any fault: since %v, %q", s.Role, s.UnreachableSince, s.UnreachableReason)
		}
	}

	b.Net.CutBroker(b.Addr, kafkatest.Refuse)
	awaitCondition(t, "the follower to report Kafka unreachable", func() bool { return !c.Stats().UnreachableSince.IsZero() })
	awaitCondition(t, "the leader to report Kafka unreachable", func() bool { return !a.Stats().UnreachableSince.IsZero() })
	if s := c.Stats(); s.UnreachableReason == "" || s.State != Live {
		t.Fatalf("the cut-off follower: reason %q, state %v; want a reason and Live", s.UnreachableReason, s.State)
	}

	b.Net.HealBroker(b.Addr)
	for name, n := range map[string]Curator{"follower": c, "leader": a} {
		awaitCondition(t, "the "+name+" to reach Kafka again", func() bool {
			s := n.Stats()
			return s.UnreachableSince.IsZero() && s.UnreachableReason == ""
		})
	}
}
