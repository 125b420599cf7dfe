package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/realkafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The chaos suite on Apache Kafka itself (issue 47, `make chaos-real`): the same members, fault
// schedule and checker as TestChaos, against a KRaft cluster of realkafka's JVMs. Each member
// reaches every node through a Proxy of its own (one per member and node), so that a member, or
// one node, can be cut off from the members; the harness's own clients (admin, write check) go
// around the proxies.

// Fault kinds of real Kafka only: a node of the cluster fails, by the harness's own means.
const (
	kindBrokerKill    = "broker-kill"    // a node is killed with SIGKILL, and restarted after a while
	kindBrokerRestart = "broker-restart" // a node stops gracefully (controlled shutdown) and restarts
	kindBrokerPause   = "broker-pause"   // a node's JVM is stopped with SIGSTOP, then continued
)

// realBrokerKinds are the kinds above; only TestChaosReal draws them.
var realBrokerKinds = []string{kindBrokerKill, kindBrokerRestart, kindBrokerPause}

// realKinds are the kinds of TestChaosReal, and its default mix: the member faults, and broker
// faults made on real Kafka by real means. coord-move and part-move reorder a partition's replicas
// (AlterPartitionReassignments) and elect the new first one (ElectLeaders), as an operator would;
// broker-cut and blackhole cut the members' proxies.
//
// Left out, for want of a real counterpart:
//   - refuse and slow: a Proxy cuts silently (a blackhole); it neither resets connections nor
//     delays them.
//   - stall, no-rejoin and leave-cut: they hold produce requests, fail JoinGroups or cut a broker
//     as it handles a LeaveGroup, through kfake's request hooks; a real broker has none, and a
//     proxy that parses the protocol would be a second kfake.
//   - restart and wipe: they restart the whole cluster at once (wipe without its data). On two
//     cores three JVMs take tens of seconds to come back, each time; broker-kill and
//     broker-restart restart one node, which is what a cluster of three survives.
//   - node-leave and rolling-restart: a node leaving and coming back is broker-restart here (a
//     controlled shutdown moves its leaderships, as kfake's RemoveNode does); rolling-restart, all
//     three in turn, would take minutes per fault.
var realKinds = []string{kindTerm, kindKill, kindStopShort, kindStopLong, kindStopEdge, kindBlackhole,
	kindBrokerKill, kindBrokerRestart, kindBrokerPause, kindCoordMove, kindPartMove, kindBrokerCut}

// realAwaitLimit bounds each wait for the group after a fault on real Kafka. A crashed or frozen
// node holds back every write that waits for its in-sync replicas until the controller fences it,
// a broker session (9 s) and a check (1.1 s) later; then the coordinator moves and loads the group,
// all on two shared cores beside three JVMs (realtest's awaitLimit is the same).
const realAwaitLimit = 90 * time.Second

// realEnv runs TestChaosReal; `make chaos-real` sets it.
const realEnv = "CHAOS_REAL"

// TestChaosReal is TestChaos on Apache Kafka: CHAOS_BROKERS nodes (3 by default) of realkafka's
// cluster, the kinds of realKinds (CHAOS_KINDS may name only those), and the same CHAOS_* settings
// otherwise. It runs only with CHAOS_REAL=1 (`make chaos-real`): a trial takes minutes, and
// `go test work` (CI) has the real-Kafka tests of internal/realkafka/realtest. Where java or mvn is
// missing it skips (realkafka's package doc; GONELI_REAL_KAFKA=require fails it instead).
func TestChaosReal(t *testing.T) {
	if os.Getenv(realEnv) == "" {
		t.Skipf("%s is not set: the chaos suite on Apache Kafka runs with `make chaos-real` (minutes per trial)", realEnv)
	}
	s := readSettings(t, true)
	trials := fmt.Sprintf("%d trial(s)", s.trials)
	if s.duration > 0 {
		trials = fmt.Sprintf("trials for %v", s.duration)
	}
	t.Logf("chaos on Apache Kafka %s: seed %d (replay the fault schedule with CHAOS_SEED=%d), %s, %d node(s), %d members, %s, kinds %v",
		s.kafka(), s.seed, s.seed, trials, s.brokers, s.members, s.mode(), s.kinds)
	runTrials(t, s)
}

// kafka is the Kafka version the run uses: "" for the embedded cluster.
func (s settings) kafka() string {
	if !s.real {
		return ""
	}
	if v := os.Getenv("GONELI_KAFKA_VERSION"); v != "" {
		return v
	}
	return realkafka.DefaultVersion
}

// realCluster is a trial's Apache Kafka cluster, and the proxies through which the members reach it.
type realCluster struct {
	t     *testing.T
	c     *realkafka.Cluster
	nodes []*realkafka.Node
	adm   *kadm.Client
	// proxies[slot][node] relays the member in slot to node, on a listener of that member's own.
	proxies [][]*realkafka.Proxy
	rng     func(n int) int
}

// startReal starts the cluster of h.nodes nodes, the members' proxies, and the topic of the
// members' fenced writes.
func (h *harness) startReal(members int) {
	t := h.t
	r := &realCluster{t: t, rng: h.rng.IntN, proxies: make([][]*realkafka.Proxy, members)}
	listeners := make([]realkafka.Listener, members)
	for slot := range members {
		l := realkafka.Listener{Name: fmt.Sprintf("MEMBER%d", slot)}
		for range h.nodes {
			p, err := realkafka.NewProxy()
			if err != nil {
				t.Fatal(err)
			}
			// Registered before the cluster: closed after it and after every member.
			t.Cleanup(func() { _ = p.Close() })
			r.proxies[slot] = append(r.proxies[slot], p)
			// A broker tells a client the addresses advertised on the listener it came in by:
			// each node advertises the member's proxy to it, so all of the member's connections,
			// to every node, pass through the member's proxies.
			l.Advertise = append(l.Advertise, p.Addr())
		}
		listeners[slot] = l
	}
	r.c = realkafka.Start(t, realkafka.Options{Nodes: h.nodes, Listeners: listeners, Configs: map[string]string{
		// A restarted node would take back the leaderships it had, as their preferred replica, at
		// the controller's next imbalance check (every 300 s): a coordinator move that no fault
		// made, which the summary would blame on whatever fault came last.
		"auto.leader.rebalance.enable": "false",
	}})
	t.Logf("Kafka %s, %d nodes: %s", r.c.Version(), h.nodes, r.c.Timing())
	r.nodes = r.c.Nodes(t)
	for slot, ps := range r.proxies {
		for i, p := range ps {
			p.SetTarget(r.nodes[i].ListenerAddr(t, listeners[slot].Name))
		}
	}
	// kadm answers Metadata from the client's cache, up to MetadataMinAge old (5 s by default):
	// too stale to see a move complete, or a node's partitions move away from it.
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(r.c.Bootstrap(), ",")...), kgo.MetadataMinAge(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r.adm = kadm.NewClient(cl)
	if writesOn() {
		// The embedded cluster is seeded with it; here it is made as an operator would, with a
		// replica on every node.
		r.poll("creating "+writesTopic, func(ctx context.Context) error {
			res, err := r.adm.CreateTopic(ctx, 1, -1, nil, writesTopic)
			if err == nil {
				err = res.Err
			}
			if errors.Is(err, kerr.TopicAlreadyExists) {
				return nil
			}
			return err
		})
	}
	h.real = r
}

// memberBootstrap is the bootstrap.servers of the member in slot: on real Kafka, its proxies.
func (h *harness) memberBootstrap(slot int) string {
	if h.real == nil {
		return h.bootstrap()
	}
	var addrs []string
	for _, p := range h.real.proxies[slot] {
		addrs = append(addrs, p.Addr())
	}
	return strings.Join(addrs, ",")
}

// poll calls f every 100 ms until it returns nil, with each call bounded by 10 s (a frozen node
// answers nothing), and fails the trial if it has not within realAwaitLimit. The cluster gives no
// event to await.
func (r *realCluster) poll(what string, f func(ctx context.Context) error) {
	r.t.Helper()
	deadline := time.Now().Add(realAwaitLimit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("gave up %s after %v: %v", what, realAwaitLimit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// coordinator is the node that coordinates the group, as FindCoordinator says.
func (r *realCluster) coordinator() int32 {
	var id int32
	r.poll("finding the group's coordinator", func(ctx context.Context) error {
		res := r.adm.FindGroupCoordinators(ctx, group)[group]
		id = res.NodeID
		return res.Err
	})
	return id
}

// partitions describes topic's partitions 0..n-1 (fewer if it has fewer yet).
func (r *realCluster) partitions(ctx context.Context, topic string) (kadm.PartitionDetails, error) {
	md, err := r.adm.Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	td, ok := md.Topics[topic]
	if !ok {
		return nil, fmt.Errorf("no metadata of %s", topic)
	}
	return td.Partitions, td.Err
}

// leaders are the leaders of topic's partitions 0..n-1 as the metadata says, -1 where it names none
// (a partition the members have yet to create, or one without a leader while a node is away).
func (r *realCluster) leaders(topic string, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := r.partitions(ctx, topic)
	if err != nil {
		return out
	}
	for p, d := range ps {
		if int(p) < n && d.Err == nil {
			out[p] = d.Leader
		}
	}
	return out
}

// offsetsPartition is the partition of __consumer_offsets that holds group: Kafka's
// Utils.abs(groupId.hashCode()) % partitions (GroupCoordinatorService.partitionFor), with Java's
// String.hashCode, which for an ASCII name is h = 31*h + c over its bytes, in 32 bits.
func offsetsPartition(group string, partitions int) int32 {
	var h int32
	for i := 0; i < len(group); i++ {
		h = 31*h + int32(group[i])
	}
	if h == -1<<31 {
		return 0
	}
	if h < 0 {
		h = -h
	}
	return h % int32(partitions)
}

// moveCoordinator moves the group's coordinator to another node: it makes an in-sync replica of
// the group's partition of __consumer_offsets its preferred one, and elects it. The old node
// unloads the group and the new one loads it from the partition; the members learn of it from
// NOT_COORDINATOR answers. The move fails the trial unless FindCoordinator then names the new node.
func (r *realCluster) moveCoordinator() string {
	const offsets = "__consumer_offsets"
	var n int
	r.poll("describing "+offsets, func(ctx context.Context) error {
		ps, err := r.partitions(ctx, offsets)
		n = len(ps)
		return err
	})
	p := offsetsPartition(group, n)
	began := time.Now()
	from, to, took, ok := r.moveLeader(offsets, p)
	if !ok {
		return fmt.Sprintf("coordinator node %d stays: no other in-sync replica of %s-%d", from, offsets, p)
	}
	r.poll(fmt.Sprintf("the coordinator to move to node %d", to), func(ctx context.Context) error {
		res := r.adm.FindGroupCoordinators(ctx, group)[group]
		if res.Err != nil {
			return res.Err
		}
		if res.NodeID != to {
			return fmt.Errorf("FindCoordinator names node %d", res.NodeID)
		}
		return nil
	})
	return fmt.Sprintf("coordinator node %d -> %d (%s-%d; led by node %d after %v, named by FindCoordinator after %v)",
		from, to, offsets, p, to, took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// movePartitions moves the leadership of each of the leader topic's partitions parts to another
// in-sync replica, as moveCoordinator does.
func (r *realCluster) movePartitions(parts []int32) string {
	var moves []string
	for _, p := range parts {
		from, to, took, ok := r.moveLeader(topic, p)
		if !ok {
			moves = append(moves, fmt.Sprintf("partition %d stays on node %d (no other in-sync replica)", p, from))
			continue
		}
		moves = append(moves, fmt.Sprintf("partition %d node %d -> %d in %v", p, from, to, took.Round(time.Millisecond)))
	}
	return strings.Join(moves, ", ")
}

// moveLeader makes a random in-sync replica of topic's partition p, other than its leader, the
// partition's first replica and elects it leader; it returns once the metadata names it. ok is
// false if the partition has no other in-sync replica (a node restarted a moment ago catches up).
func (r *realCluster) moveLeader(topic string, p int32) (from, to int32, took time.Duration, ok bool) {
	var d kadm.PartitionDetail
	r.poll(fmt.Sprintf("describing %s-%d", topic, p), func(ctx context.Context) error {
		ps, err := r.partitions(ctx, topic)
		if err != nil {
			return err
		}
		var found bool
		if d, found = ps[p]; !found {
			return fmt.Errorf("%s has no partition %d", topic, p)
		}
		if d.Err == nil && d.Leader < 0 {
			return fmt.Errorf("%s-%d has no leader", topic, p)
		}
		return d.Err
	})
	from = d.Leader
	var others []int32
	for _, id := range d.ISR {
		if id != from {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return from, from, 0, false
	}
	to = others[r.rng(len(others))]
	began := time.Now()
	// The same replicas, to first: no data moves, and the reassignment completes at once.
	replicas := append([]int32{to}, slices.DeleteFunc(slices.Clone(d.Replicas), func(id int32) bool { return id == to })...)
	r.poll(fmt.Sprintf("reordering the replicas of %s-%d to %v", topic, p, replicas), func(ctx context.Context) error {
		var req kadm.AlterPartitionAssignmentsReq
		req.Assign(topic, p, replicas)
		res, err := r.adm.AlterPartitionAssignments(ctx, req)
		if err != nil {
			return err
		}
		return res.Error()
	})
	r.poll(fmt.Sprintf("node %d to lead %s-%d", to, topic, p), func(ctx context.Context) error {
		ps, err := r.partitions(ctx, topic)
		if err != nil {
			return err
		}
		if ps[p].Leader == to {
			return nil
		}
		// The preferred replica is elected only if it is in sync; the election is asked for again
		// until the metadata names it.
		res, err := r.adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {p: {}}})
		if err != nil {
			return err
		}
		if e := res[topic][p].Err; e != nil {
			return e
		}
		return fmt.Errorf("%s-%d is led by node %d", topic, p, ps[p].Leader)
	})
	took = time.Since(began)
	return from, to, took, true
}

// nodeFault kills, stops or pauses node id for a random while and brings it back.
func (h *harness) nodeFault(kind string, id int32) string {
	r := h.real
	what := h.describe(id)
	n := r.nodes[id]
	switch kind {
	case kindBrokerPause:
		if err := n.Pause(); err != nil {
			h.t.Fatal(err)
		}
		// Up to beyond the broker session (9 s), after which the controller fences the node and
		// moves its leaderships.
		d := h.sleep(300*time.Millisecond, 12*time.Second)
		if err := n.Resume(); err != nil {
			h.t.Fatal(err)
		}
		return fmt.Sprintf("%s paused for %v", what, d.Round(time.Millisecond))
	case kindBrokerKill:
		if err := n.Kill(); err != nil {
			h.t.Fatal(err)
		}
	case kindBrokerRestart:
		if err := n.Stop(); err != nil {
			h.t.Fatal(err)
		}
	}
	// Until the controller fences a killed node (a broker session later), the metadata and
	// FindCoordinator still name it.
	after := fmt.Sprintf("coordinator %d, partition 0 on %d", r.coordinator(), h.leaders()[0])
	down := h.sleep(time.Second, 12*time.Second)
	began := time.Now()
	if err := n.Start(); err != nil {
		h.t.Fatal(err)
	}
	verb := map[string]string{kindBrokerKill: "killed", kindBrokerRestart: "stopped"}[kind]
	return fmt.Sprintf("%s %s (then %s), restarted after %v, serving %v later", what, verb, after,
		down.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// cutMember cuts the member in slot off from every node; healMember heals it.
func (r *realCluster) cutMember(slot int) {
	for _, p := range r.proxies[slot] {
		p.Cut()
	}
}

func (r *realCluster) healMember(slot int) {
	for _, p := range r.proxies[slot] {
		p.Heal()
	}
}

// cutNode cuts node id off from every member; healNode heals it. The nodes still reach one another.
func (r *realCluster) cutNode(id int32) {
	for _, ps := range r.proxies {
		ps[id].Cut()
	}
}

func (r *realCluster) healNode(id int32) {
	for _, ps := range r.proxies {
		ps[id].Heal()
	}
}

// awaitStable waits until the group is Stable with n members, or ctx ends.
func (r *realCluster) awaitStable(ctx context.Context, n int) {
	for ctx.Err() == nil {
		gs, err := r.adm.DescribeGroups(ctx, group)
		if err == nil {
			if g := gs[group]; g.Err == nil && g.State == "Stable" && len(g.Members) == n {
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// offsetsPartition must agree with Java's String.hashCode, whose values for these names are well
// known ("polygenelubricants" hashes to Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0); a
// wrong partition would fail coord-move's check that FindCoordinator follows the move.
func TestOffsetsPartition(t *testing.T) {
	for _, c := range []struct {
		group      string
		partitions int
		want       int32
	}{
		{"hello", 1 << 30, 99162322},
		{"hello", 10, 99162322 % 10},
		{"polygenelubricants", 10, 0},
		{"", 50, 0},
	} {
		if got := offsetsPartition(c.group, c.partitions); got != c.want {
			t.Errorf("offsetsPartition(%q, %d) = %d, want %d", c.group, c.partitions, got, c.want)
		}
	}
}
