package goneli

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// hidingAdmin describes the group as its KafkaAdmin does, but without any member's assignment
// while hide is set, as Apache Kafka describes a classic group that rebalances
// (GroupMetadataManager.describeGroups: members without metadata outside Stable), and counts the
// descriptions.
type hidingAdmin struct {
	KafkaAdmin
	mu           sync.Mutex
	hide         bool
	descriptions int
}

func (a *hidingAdmin) DescribeConsumerGroups(ctx context.Context, groups []string, o ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error) {
	res, err := a.KafkaAdmin.DescribeConsumerGroups(ctx, groups, o...)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.descriptions++
	if a.hide {
		for i := range res.ConsumerGroupDescriptions {
			for j := range res.ConsumerGroupDescriptions[i].Members {
				res.ConsumerGroupDescriptions[i].Members[j].Assignment = kafka.MemberAssignment{}
			}
		}
	}
	return res, err
}

func (a *hidingAdmin) counted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.descriptions
}

// A check that cannot see this instance's assignment, as through a classic rebalance, was made
// again every 20 ms (about fifty descriptions a second per waiting instance); it backs off to a
// group heartbeat interval, and the tenure leads once the group shows the assignment.
func TestGroupCheckBacksOffThroughARebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t)
		base, err := r.n.config.KafkaAdminProvider(nil)
		if err != nil {
			t.Fatal(err)
		}
		a := &hidingAdmin{KafkaAdmin: base, hide: true}
		r.n.d.Inspect(func(c *driver.Config, _ *core.Machine, _ []*core.Role) {
			c.KafkaAdminProvider = func(*driver.KafkaConfigMap) (driver.KafkaAdmin, error) { return a, nil }
		})
		r.assign()
		const rebalance = 2 * scriptLease
		r.pulse(rebalance, false)
		n := a.counted()
		// 20, 40, 80 ms, then every group heartbeat interval (100 ms at this lease).
		limit := int(rebalance/r.n.d.Timing().Heartbeat()) + 4
		t.Logf("%d descriptions in %v of a rebalance", n, rebalance)
		if n > limit {
			t.Errorf("%d descriptions of the group in %v of a rebalance; want at most %d", n, rebalance, limit)
		}
		a.mu.Lock()
		a.hide = false
		a.mu.Unlock()
		if !r.pulse(scriptLease, true) {
			t.Fatalf("no leadership once the group showed the assignment; events %s", r.seen())
		}
		r.close()
	})
}
