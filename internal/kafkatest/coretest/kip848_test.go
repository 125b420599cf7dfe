package coretest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KIP-848 moves the session timeout and heartbeat interval to the broker. These settings keep the
// safety margin for testLease: 2000 >= 1000 + 2 x 100.
var kip848Broker = map[string]string{
	"group.consumer.heartbeat.interval.ms": "100",
	"group.consumer.session.timeout.ms":    "2000",
}

func kip848Config(b *kafkatest.Broker, group, name string, log *testLog) Config {
	c := testConfig(b, group, name, log)
	c.KafkaConfig["group.protocol"] = "consumer"
	return c
}

func TestConsumerProtocolHandoffs(t *testing.T) {
	b, err := kafkatest.Start(kafkatest.AsKafkaByDefault(), kfake.BrokerConfigs(kip848Broker))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	a := contender(t, kip848Config(b, group, "a", log), r)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	contender(t, kip848Config(b, group, "c", log), r)
	contender(t, kip848Config(b, group, "d", log), r)
	awaitStable(t, b, group, 3)

	// Graceful: a closes.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	events := r.await(t, "a successor to a", func(events []stamped) bool {
		i, _ := first[LeaderAcquired](events, "c", 0)
		j, _ := first[LeaderAcquired](events, "d", 0)
		return i >= 0 || j >= 0
	})
	_, next := first[LeaderAcquired](events, "", 1)
	leader, follower := next.who, map[string]string{"c": "d", "d": "c"}[next.who]

	// Cut: the new leader must fence itself before the other is elected.
	b.Net.Cut("goneli-"+leader, kafkatest.Refuse)
	t.Cleanup(func() { b.Net.Heal("goneli-" + leader) })
	events = r.await(t, follower+" to take over", has[LeaderAcquired](follower))
	iFence, _ := first[LeaderFenced](events, leader, 0)
	iAcq, _ := first[LeaderAcquired](events, follower, 0)
	if iFence < 0 || iFence > iAcq {
		t.Fatalf("%s must fence before %s is elected: %s", leader, follower, describe(events))
	}
	checkExclusive(t, events)
	checkGrammar(t, events)
}

// A follower that dies without leaving stays in the group until its session times out. Under the
// classic protocol a member joining meanwhile starts a rebalance that waits for the dead member,
// and the leader, parked in JoinGroup, cannot renew its lease and is fenced (see the package doc's
// Liveness section). Under KIP-848 there is no such barrier: the leader keeps partition 0 and
// renews throughout.
func TestConsumerProtocolLeaderRidesOutDeadFollowerAndJoin(t *testing.T) {
	b, err := kafkatest.Start(kafkatest.AsKafkaByDefault(), kfake.BrokerConfigs(kip848Broker))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	contender(t, kip848Config(b, group, "a", log), r)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	contender(t, kip848Config(b, group, "f", log), r)
	awaitStable(t, b, group, 2)

	b.Net.Cut("goneli-f", kafkatest.Blackhole)
	t.Cleanup(func() { b.Net.Heal("goneli-f") })
	contender(t, kip848Config(b, group, "j", log), r)
	// j joins while f is still a member; then f's session runs out and the group settles.
	awaitGroup(t, b, group, "j to join beside the dead f", func(g *kfake.GroupInfo) bool {
		return hasMembers(g, "goneli-a", "goneli-f", "goneli-j")
	})
	awaitGroup(t, b, group, "f to be expelled", func(g *kfake.GroupInfo) bool {
		return g.State == "Stable" && len(g.Members) == 2 && hasMembers(g, "goneli-a", "goneli-j")
	})
	events := r.snapshot()
	if i, _ := first[LeaderFenced](events, "a", 0); i >= 0 {
		t.Fatalf("a was fenced while a dead follower was expelled: %s", describe(events))
	}
	if i, _ := first[LeaderAcquired](events, "", 1); i >= 0 {
		t.Fatalf("leadership moved: %s", describe(events))
	}
}

// awaitGroup waits until cond holds for the group as the broker sees it.
func awaitGroup(t *testing.T, b *kafkatest.Broker, group, what string, cond func(*kfake.GroupInfo) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	if g, err := b.WaitGroupInfo(ctx, group, func(g *kfake.GroupInfo) bool { return g != nil && cond(g) }); err != nil {
		t.Fatalf("gave up waiting for %s: %+v", what, g)
	}
}

// hasMembers reports whether every one of clientIDs is a member of g.
func hasMembers(g *kfake.GroupInfo, clientIDs ...string) bool {
	for _, id := range clientIDs {
		if !slices.ContainsFunc(g.Members, func(m kfake.GroupMember) bool { return m.ClientID == id }) {
			return false
		}
	}
	return true
}

// Under KIP-848 the embedded broker describes a member's assignment by topic ID and leaves the
// topic's name out (Apache Kafka gives both). The group check maps the IDs to names from the
// cluster's metadata, so a member on another leader topic is refused as under the classic protocol;
// and a partition whose topic it cannot name counts against leading (groupcheck.go), since
// counting it as the instance's own topic's let two members lead.
func TestConsumerProtocolGroupSharedByTwoTopics(t *testing.T) {
	b := startKafka(t, kfake.BrokerConfigs(kip848Broker))
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	onTopic := func(name, topic string) Config {
		c := kip848Config(b, group, name, log)
		c.LeaderTopic = topic
		return c
	}
	acquired := func(who string) bool {
		i, _ := first[LeaderAcquired](r.snapshot(), who, 0)
		return i >= 0
	}

	// While x leads, New refuses an instance on another topic, naming x's.
	x := contender(t, onTopic("x", group+".x"), r).(Curator)
	r.await(t, "x to lead", has[LeaderAcquired]("x"))
	awaitStable(t, b, group, 1)
	y, err := New(onTopic("y", group+".y"))
	var conflict *GroupConflictError
	if err == nil {
		_ = y.Close()
	}
	if !errors.As(err, &conflict) || len(conflict.Members) != 1 || !slices.Equal(conflict.Members[0].Topics, []string{group + ".x"}) {
		t.Fatalf("New beside a member on another topic: %v, want a GroupConflictError naming topic %s.x", err, group)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}

	// Two that are assigned before either checks the group each see the other and hold back.
	refuse := b.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ConsumerGroupDescribe}, Err: kerr.GroupAuthorizationFailed, Count: -1})
	v := contender(t, onTopic("v", group+".v"), r).(Curator)
	w := contender(t, onTopic("w", group+".w"), r).(Curator)
	awaitCondition(t, "v and w to own partition 0 of their topics", func() bool {
		return v.Stats().Assigned && w.Stats().Assigned
	})
	refuse.Remove()
	awaitCondition(t, "v and w to see each other", func() bool {
		return v.Stats().GroupConflict != nil && w.Stats().GroupConflict != nil
	})
	if acquired("v") || acquired("w") {
		t.Fatalf("v or w led while the other was in the group: %s", describe(r.snapshot()))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	events := r.await(t, "v to lead once w has left", has[LeaderAcquired]("v"))
	checkExclusive(t, events)
	checkGrammar(t, events)
}

// Under KIP-848 the broker owns the session timeout, so New reads it and refuses a lease that it
// does not cover with two group heartbeat intervals to spare: a leader cut off from Kafka would
// otherwise still lead when the coordinator expels it and assigns its partition to another.
func TestConsumerProtocolSessionMustCoverLease(t *testing.T) {
	const lease = 3 * time.Second
	start := func(t *testing.T, session string) (*kafkatest.Broker, Config) {
		b := startKafka(t, kfake.BrokerConfigs(map[string]string{
			"group.consumer.heartbeat.interval.ms": "100",
			"group.consumer.session.timeout.ms":    session,
		}))
		c := kip848Config(b, groupName(t), "a", newTestLog(t))
		c.HeartbeatTimeout = Duration(lease)
		return b, c
	}

	t.Run("session shorter than the lease", func(t *testing.T) {
		_, c := start(t, "2000")
		n, err := New(c)
		if err == nil {
			_ = n.Close()
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "HeartbeatTimeout" || !strings.Contains(err.Error(), "3s") ||
			!strings.Contains(err.Error(), "2s (broker") || !strings.Contains(err.Error(), "group.consumer.session.timeout.ms") {
			t.Fatalf("New with a 3 s lease and a 2 s broker session: want a ConfigError naming both, got %v", err)
		}
		t.Log(err)
	})

	t.Run("session covers the lease", func(t *testing.T) {
		_, c := start(t, "10000")
		r := newRecorder()
		contender(t, c, r)
		r.await(t, "a to lead", has[LeaderAcquired]("a"))
	})

	// New cannot read it through a KafkaAdmin that cannot describe configs: it warns, and the
	// tenure, which reads it over goneli's own connection, finds it too short and does not lead.
	t.Run("session cannot be read", func(t *testing.T) {
		_, c := start(t, "2000")
		log, r := newTestLog(t), newRecorder()
		c.Scribe = log.Scribe()
		c.KafkaAdminProvider = func(conf *KafkaConfigMap) (KafkaAdmin, error) {
			a, err := StandardKafkaAdminProvider()(conf)
			return adminWithoutConfigs{a}, err
		}
		contender(t, c, r)
		if !log.Contains("cannot tell the session timeout that the broker applies to group") || !log.Contains("no tenure leads until it can be read") {
			t.Error("New let an unchecked lease through without a warning")
		}
		awaitLog(t, log, "not leading: goneli: invalid HeartbeatTimeout")
		if i, _ := first[LeaderAcquired](r.snapshot(), "a", 0); i >= 0 {
			t.Fatalf("a led on a session too short for its lease: %s", describe(r.snapshot()))
		}
	})
}

// adminWithoutConfigs hides DescribeConfigs, as a KafkaAdmin written for earlier versions may.
type adminWithoutConfigs struct{ KafkaAdmin }

// Under KIP-848 the broker owns the session, and an operator can lower a group's
// consumer.session.timeout.ms (Kafka 4.0) while instances run. A lease longer than the session no
// longer runs out before the coordinator can expel its holder, so a tenure reads the session again
// before it leads, and after every fence (issue 38): here the leader, fenced once the session was
// lowered below what the lease needs, does not lead again until it is raised.
func TestConsumerProtocolSessionReadAgainBeforeLeading(t *testing.T) {
	b, err := kafkatest.Start(kafkatest.AsKafkaByDefault(), kfake.BrokerConfigs(kip848Broker))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	contender(t, kip848Config(b, group, "a", log), r)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))

	// 1100 ms no longer covers a 1 s lease, two 100 ms group heartbeats and a 50 ms margin.
	b.SetGroupConfigs(group, map[string]string{"consumer.session.timeout.ms": "1100"})
	refuse := b.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: group + ".neli", Err: kerr.NotEnoughReplicas, Count: -1})
	r.await(t, "a to be fenced", has[LeaderFenced]("a"))
	refuse.Remove()
	awaitLog(t, log, "not leading: goneli: invalid HeartbeatTimeout")
	if i, _ := first[LeaderAcquired](r.snapshot(), "a", 1); i >= 0 {
		t.Fatalf("a led again on a session too short for its lease: %s", describe(r.snapshot()))
	}

	b.SetGroupConfigs(group, map[string]string{"consumer.session.timeout.ms": "2000"})
	events := r.await(t, "a to lead again", func(events []stamped) bool {
		i, _ := first[LeaderAcquired](events, "a", 1)
		return i >= 0
	})
	checkGrammar(t, events)
}

// awaitLog waits until a line of the log contains s.
func awaitLog(t *testing.T, log *testLog, s string) {
	t.Helper()
	if !log.Await(s, awaitLimit) {
		t.Fatalf("no log line says %q within %v", s, awaitLimit)
	}
}

// Issue 46 C2: under KIP-848 a group's own consumer.session.timeout.ms (Kafka 4.0) is what its
// coordinator applies, however long the brokers' default (GroupMetadataManager). A principal that
// may not describe the group's config resource (GROUP_AUTHORIZATION_FAILED) cannot tell it, and
// before, the brokers' default was taken instead with no warning: a 20 s lease passed against a
// 45 s default on a group whose session is 2 s, in New, in every tenure's check and in the doctor.
// Now unknown means unknown: New fails, naming the grant; a tenure does not lead while the group's
// resource is refused; the doctor FAILs its session line.
func TestConsumerProtocolGroupSessionRefusedIsUnknown(t *testing.T) {
	t.Run("New and the doctor", func(t *testing.T) {
		b := startBroker(t, kafkatest.AsKafka(kafkatest.GroupConfigsDeniedTo("ANONYMOUS")), kfake.BrokerConfigs(map[string]string{
			"group.consumer.heartbeat.interval.ms": "100",
			"group.consumer.session.timeout.ms":    "45000",
		}))
		group := groupName(t)
		b.SetGroupConfigs(group, map[string]string{"consumer.session.timeout.ms": "2000"})
		c := kip848Config(b, group, "a", newTestLog(t))
		c.HeartbeatTimeout = Duration(20 * time.Second)
		n, err := New(c)
		if err == nil {
			_ = n.Close()
			awaitClientsClosed(t, n)
		}
		var refused *AuthorizationError
		if !errors.As(err, &refused) || refused.Operation != "DescribeConfigs" || refused.Resource != "group" || refused.Name != group {
			t.Fatalf("New with a 20 s lease, the group's resource refused: %v; want an error naming DescribeConfigs on group %s", err, group)
		}
		c.Name = "doctor"
		r, _ := Check(context.Background(), c)
		wantCheck(t, r, "session", CheckFail, "cannot tell the session timeout that the broker applies to group "+group)
		if fix := resultOf(t, r, "session").Fix; !strings.Contains(fix, "--operation DescribeConfigs --group "+group) {
			t.Errorf("session fix %q; want the grant of DescribeConfigs on the group", fix)
		}
	})

	t.Run("tenure", func(t *testing.T) {
		b := startBroker(t, kafkatest.AsKafka(), kfake.BrokerConfigs(kip848Broker))
		log, r, group := newTestLog(t), newRecorder(), groupName(t)
		contender(t, kip848Config(b, group, "a", log), r)
		r.await(t, "a to lead", has[LeaderAcquired]("a"))

		// The group's grant goes while a leads; a fence makes its tenure check the session again.
		b.Kafka.DenyGroupConfigs("ANONYMOUS")
		refuse := b.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: group + ".neli", Err: kerr.NotEnoughReplicas, Count: -1})
		r.await(t, "a to be fenced", has[LeaderFenced]("a"))
		refuse.Remove()
		awaitLog(t, log, "not leading: goneli: cannot tell the session timeout that the broker applies to group "+group)
		if i, _ := first[LeaderAcquired](r.snapshot(), "a", 1); i >= 0 {
			t.Fatalf("a led again while its group's session could not be read: %s", describe(r.snapshot()))
		}

		b.Kafka.DenyGroupConfigs()
		events := r.await(t, "a to lead again", func(events []stamped) bool {
			i, _ := first[LeaderAcquired](events, "a", 1)
			return i >= 0
		})
		checkGrammar(t, events)
	})
}

// Issue 46 C3: under KIP-848 every tenure reads the session the brokers apply before it leads.
// Before, it asked every broker and waited for every answer, bounded only by the lease: one broker
// cut off from the instance (a zone outage) held every new leader back by about a lease. Now a
// broker that answered before is waited for a tenth of a lease and then counts with its last
// answer, and the group's own resource goes to its coordinator: a successor takes over well within
// half a lease of the leader's leaving, the cut-off broker notwithstanding.
func TestConsumerProtocolSuccessorNotHeldByACutOffBroker(t *testing.T) {
	const lease = 4 * time.Second
	b := startKafka(t, kfake.NumBrokers(3), kfake.BrokerConfigs(map[string]string{
		"group.consumer.heartbeat.interval.ms": "100",
		"group.consumer.session.timeout.ms":    "6000",
	}))
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	config := func(name string) Config {
		c := kip848Config(b, group, name, log)
		c.KafkaConfig["bootstrap.servers"] = strings.Join(b.Addrs, ",")
		c.HeartbeatTimeout = Duration(lease)
		return c
	}
	a := contender(t, config("a"), r)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	contender(t, config("c"), r)
	awaitStable(t, b, group, 2)

	// A broker that neither coordinates the group nor leads partition 0 goes silent.
	coordinator, leader := b.CoordinatorFor(group), int32(-1)
	for _, p := range b.PartitionInfos(group + ".neli") {
		if p.Partition == 0 {
			leader = p.Leader
		}
	}
	cut := slices.IndexFunc(b.Addrs, func(addr string) bool {
		id := int32(slices.Index(b.Addrs, addr))
		return id != coordinator && id != leader
	})
	b.Net.CutBroker(b.Addrs[cut], kafkatest.Blackhole)
	t.Cleanup(func() { b.Net.HealBroker(b.Addrs[cut]) })

	left := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	events := r.await(t, "c to take over", has[LeaderAcquired]("c"))
	_, took := first[LeaderAcquired](events, "c", 0)
	t.Logf("c led %v after a left, broker %d cut off (coordinator %d, partition 0's leader %d)",
		took.at.Sub(left).Round(time.Millisecond), cut, coordinator, leader)
	if took.at.Sub(left) > lease/2 {
		t.Errorf("c led %v after a left: a broker cut off held the successor back by half a lease or more", took.at.Sub(left))
	}
	checkExclusive(t, events)
}
