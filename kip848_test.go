package goneli

import (
	"testing"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
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
	b, err := kafkatest.Start(kfake.BrokerConfigs(kip848Broker))
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
