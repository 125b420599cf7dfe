package realtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/member"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/goneli/goneli/internal/verdict"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerBound is how soon leadership must be back after a broker that the group depends on
// crashed. The controller moves the broker's leaderships only once it has fenced it, a broker
// session (broker.session.timeout.ms) after its last heartbeat, as its check of the sessions finds,
// which runs every eighth of a session ("Registering periodic task maybeFenceStaleBroker to run
// every 1125 ms", the controller logs), and takes it out of the in-sync replicas then: until that
// moment no write that waits for every in-sync replica (a heartbeat produced with acks=all, an
// offset commit) completes on a partition it replicates, whichever broker leads. Then the group goes
// on at its coordinator, perhaps a new one that has loaded it, where the members may have to join
// again (a classic rebalance, within its timeout), a session timeout later at most, or a KIP-848
// assignment interval; then the new leader's proof. Three leases more, where bounds gives two: the
// controller, the new coordinator's load and the members finding it all run on the loaded cores
// too (with two, the slowest of 12 runs beside two busy loops at a load average of 20 came within
// 0.6 s of the bound: 14.6 s after the kill).
func brokerBound(tm timing) time.Duration {
	return tm.brokerSession*9/8 + tm.session + tm.rebalance + tm.assignment + 3*lease
}

// Three brokers; the broker that coordinates the group (leads the partition of
// __consumer_offsets that holds it) is killed with SIGKILL, and in another run the broker that
// leads the leader topic's partition, never the same broker. The leader's lease runs out, since it
// can no longer renew; once the controller has moved the dead broker's leaderships, a member leads
// again (the same or another) within brokerBound, at no instant do two act as leader, and after the
// broker restarts the group settles with a leader.
func TestBrokerCrash(t *testing.T) {
	// A restarted broker would otherwise take back the leaderships it had, as their preferred
	// replica, at the controller's next imbalance check (every 300 s), moving a coordinator or a
	// partition by itself in a later run.
	c := realkafka.Start(t, realkafka.Options{Nodes: 3, Configs: map[string]string{"auto.leader.rebalance.enable": "false"}})
	t.Logf("Kafka %s, 3 nodes: %s", c.Version(), c.Timing())
	for _, target := range []string{"coordinator", "partition-leader"} {
		t.Run(target, func(t *testing.T) {
			eachProtocolOn(t, c, func(t *testing.T, c *realkafka.Cluster, p protocol) {
				crashBroker(t, c, p, target)
			})
		})
	}
}

func crashBroker(t *testing.T, c *realkafka.Cluster, p protocol, target string) {
	nodes := c.Nodes(t)
	group := groupName(t)
	topic := group + ".neli"
	cl := client(t, c)
	adm := kadm.NewClient(cl)
	coord := coordinatorOf(t, adm, group)
	// The leader topic's partition is led by a broker other than the coordinator, so that a crash
	// moves the one and not the other (each broker still replicates the other's partition, which
	// holds back writes there too: see brokerBound). The first replica is the preferred leader.
	lead := (coord + 1) % int32(len(nodes))
	createTopic(t, cl, topic, []int32{lead, (coord + 2) % int32(len(nodes)), coord})
	if got := partitionLeader(t, adm, topic); got != lead {
		t.Fatalf("partition 0 of %s is led by node %d, want %d", topic, got, lead)
	}
	victim := coord
	if target == "partition-leader" {
		victim = lead
	}
	t.Logf("group %s: coordinator node %d; %s: led by node %d", group, coord, topic, lead)

	r, tm := elect(t, c, p, 3)
	r.mayResume = map[string]bool{"kill-" + target: true}
	slot := r.leader()
	who := r.procs[slot].Name
	f := verdict.Fault{Kind: "kill-" + target, Victim: who, WasLeader: true, Detail: fmt.Sprintf("node %d", victim)}
	cursor := r.fleet.Cursor()
	f.At = time.Now()
	if err := nodes[victim].Kill(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A run that failed before the restart leaves the cluster whole for the next.
		if !nodes[victim].Running() {
			if err := nodes[victim].Start(); err != nil {
				t.Errorf("restarting node %d: %v", victim, err)
			}
		}
	})
	// The leader cannot renew (no commit reaches the coordinator, or no heartbeat the partition),
	// so its lease ends; leadership is back at the first act after that, by whichever member.
	lost, _, err := r.fleet.WaitFor(cursor, awaitLimit, fmt.Sprintf("the leader %s to lose its lease after node %d died", who, victim), func(l member.Line) bool {
		return l.Name == who && (l.Event == member.EventFenced || l.Event == member.EventRevoked)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.Healed = r.awaitAct(time.Unix(0, lost.At), "", fmt.Sprintf("a leader after node %d died", victim))
	r.faults = append(r.faults, f)
	t.Logf("%s lost its lease %v after node %d was killed (%s); %s",
		who, time.Unix(0, lost.At).Sub(f.At).Round(time.Millisecond), victim, lost.Info, movedTo(t, adm, group, topic, target))

	began := time.Now()
	if err := nodes[victim].Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d served again %v after its restart began", victim, time.Since(began).Round(time.Millisecond))
	r.settle(fmt.Sprintf("after node %d restarted", victim))
	r.check(func(string) time.Duration { return brokerBound(tm) })
}

// client is a Kafka client of the cluster, closed when the test ends.
func client(t *testing.T, c *realkafka.Cluster) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Bootstrap(), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// coordinatorOf is the node that coordinates group now.
func coordinatorOf(t *testing.T, adm *kadm.Client, group string) int32 {
	t.Helper()
	var id int32
	pollUntil(t, "the coordinator of group "+group, func(ctx context.Context) error {
		res := adm.FindGroupCoordinators(ctx, group)[group]
		id = res.NodeID
		return res.Err
	})
	return id
}

// partitionLeader is the node that leads partition 0 of topic now, as the metadata says.
func partitionLeader(t *testing.T, adm *kadm.Client, topic string) int32 {
	t.Helper()
	var id int32
	pollUntil(t, "a leader of "+topic, func(ctx context.Context) error {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return err
		}
		td := md.Topics[topic]
		if td.Err != nil {
			return td.Err
		}
		p, ok := td.Partitions[0]
		if !ok || p.Leader < 0 {
			return fmt.Errorf("partition 0 of %s has no leader", topic)
		}
		if p.Err != nil {
			return p.Err
		}
		id = p.Leader
		return nil
	})
	return id
}

// movedTo says where the crash moved what it hit, for the log.
func movedTo(t *testing.T, adm *kadm.Client, group, topic, target string) string {
	if target == "coordinator" {
		return fmt.Sprintf("the group's coordinator is node %d now", coordinatorOf(t, adm, group))
	}
	return fmt.Sprintf("partition 0 is led by node %d now", partitionLeader(t, adm, topic))
}

// createTopic makes topic with one partition on the replicas given, the first its preferred leader.
func createTopic(t *testing.T, cl *kgo.Client, topic string, replicas []int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = int32(awaitLimit.Milliseconds())
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Partition, ra.Replicas = 0, replicas
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("creating %s: %v", topic, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			t.Fatalf("creating %s: %v", topic, err)
		}
	}
}

// pollUntil calls f every 100 ms until it returns nil (the cluster gives no event to await), and
// fails t if it has not within awaitLimit.
func pollUntil(t *testing.T, what string, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s: %v", what, err)
		case <-tick.C:
		}
	}
}
