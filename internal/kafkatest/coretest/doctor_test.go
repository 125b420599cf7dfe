package coretest

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// resultOf returns the first result of the named check, failing the test if there is none.
func resultOf(t *testing.T, r CheckReport, name string) CheckResult {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check in %+v", name, r)
	return CheckResult{}
}

func wantCheck(t *testing.T, r CheckReport, name string, status CheckStatus, detail string) {
	t.Helper()
	c := resultOf(t, r, name)
	if c.Status != status || !strings.Contains(c.Detail, detail) || (status != CheckOK) != (c.Fix != "") {
		t.Errorf("%s: %v %q (fix %q); want %v with %q and a fix unless ok", name, c.Status, c.Detail, c.Fix, status, detail)
	}
}

// TestCheckHealthy checks a broker that a group with a 1 s lease works on: nothing fails, and the
// check changes nothing (the group does not exist afterwards, nor the topic, nor
// __transaction_state: issue 46 C5, the transactional id's check looked up its coordinator, which
// makes Kafka create the topic). The group that does not exist yet is no warning: Kafka 4.0's
// DescribeGroups v6 answers it GROUP_ID_NOT_FOUND without the principal's operations, which the
// doctor read as "the broker did not say" (issue 46 C5); it asks at v5, which answers with them.
func TestCheckHealthy(t *testing.T) {
	b := startKafka(t, kafkatest.MinSession(500*time.Millisecond)...)
	group := groupName(t)
	config := testConfig(b, group, "doctor", newTestLog(t))
	r, err := Check(context.Background(), config)
	if err != nil {
		t.Fatalf("Check: %v; report %+v", err, r)
	}
	wantCheck(t, r, "config", CheckOK, "lease 1s, classic")
	wantCheck(t, r, "reach", CheckOK, "answers as Kafka")
	wantCheck(t, r, "broker", CheckOK, "group protocols: classic, consumer (KIP-848)")
	wantCheck(t, r, "session", CheckOK, "the group session, 1.25s, lies within the broker's 500ms to")
	// One broker: the topic could only have one replica.
	wantCheck(t, r, "topic", CheckWarn, "does not exist; the broker would let this client create it with 1 partition(s), replication factor 1")
	wantCheck(t, r, "acl-group", CheckOK, "may read and describe group "+group)
	if r.Worst() != CheckWarn {
		t.Errorf("Worst = %v; want warn", r.Worst())
	}
	if b.GroupInfo(group) != nil {
		t.Errorf("the check made group %s exist", group)
	}
	if b.Kafka != nil && slices.Contains(b.Kafka.InternalTopics(), "__transaction_state") {
		t.Errorf("the check made Kafka create __transaction_state")
	}
	wantCheck(t, r, "acl-transactional-id", CheckOK, "may describe transactional id goneli-fenced."+group)
	// A contender then finds the topic missing and creates it, which shows the check did not.
	r2 := newRecorder()
	contender(t, config, r2)
	r2.await(t, "doctor to lead", has[LeaderAcquired]("doctor"))
	r, err = Check(context.Background(), config)
	if err != nil {
		t.Fatalf("Check beside a leader: %v", err)
	}
	wantCheck(t, r, "topic", CheckWarn, "exists with 1 partition(s) and replication factor 1")
	wantCheck(t, r, "topic-config", CheckOK, "cleanup.policy delete, retention.ms 600000")
	wantCheck(t, r, "acl-topic", CheckOK, "may describe, read and write")
}

// TestCheckSessionBelowBrokerMinimum: a 1 s lease implies a 1.25 s session, below a broker's 6 s
// minimum (Kafka's default). New raises a derived session to the minimum, which the check warns of;
// a session set by hand is refused at every join, which fails the check.
func TestCheckSessionBelowBrokerMinimum(t *testing.T) {
	b := startKafka(t, kafkatest.MinSession(6*time.Second)...)
	config := testConfig(b, groupName(t), "doctor", newTestLog(t))
	r, err := Check(context.Background(), config)
	if err != nil {
		t.Fatalf("Check of a derived session: %v; report %+v", err, r)
	}
	wantCheck(t, r, "session", CheckWarn, "the group session that the lease 1s implies, 1.25s, is below the broker's minimum, 6s")
	config.KafkaConfig["session.timeout.ms"] = 2000
	r, err = Check(context.Background(), config)
	var failed *CheckFailedError
	if !errors.As(err, &failed) || len(failed.Failed) != 1 || failed.Failed[0].Name != "session" {
		t.Fatalf("Check: %v; want a *CheckFailedError of the session check alone; report %+v", err, r)
	}
	wantCheck(t, r, "session", CheckFail, "the group session, 2s (session.timeout.ms), is below the broker's minimum, 6s")
	if c := resultOf(t, r, "session"); !strings.Contains(c.Fix, "raise session.timeout.ms to at least 6000") {
		t.Errorf("session fix %q; want it to name the session the broker allows, 6000", c.Fix)
	}
}

// TestCheckConsumerProtocolThreeBrokers: under KIP-848 the session check describes every broker's
// configs at once, over connections that the topic and group checks then use again.
func TestCheckConsumerProtocolThreeBrokers(t *testing.T) {
	b := startKafka(t, kfake.NumBrokers(3), kfake.BrokerConfigs(kip848Broker))
	r, err := Check(context.Background(), kip848Config(b, groupName(t), "doctor", newTestLog(t)))
	if err != nil {
		t.Fatalf("Check: %v; report %+v", err, r)
	}
	wantCheck(t, r, "session", CheckOK, "covers the lease 1s and its heartbeat interval 100ms")
	wantCheck(t, r, "acl-group", CheckOK, "may read and describe group ")
	wantCheck(t, r, "topic", CheckOK, "the broker would let this client create it with 1 partition(s), replication factor 3")
}

// TestCheckTooFewPartitions: three roles on a topic of one partition.
func TestCheckTooFewPartitions(t *testing.T) {
	group := "roles3"
	b := startKafka(t, append(kafkatest.MinSession(500*time.Millisecond), kfake.SeedTopics(1, group+".neli"))...)
	config := testConfig(b, group, "doctor", newTestLog(t))
	r, err := Check(context.Background(), config, Shards(3)...)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	// Nothing forbids adding partitions here, so NewRoles will; with ACLs it needs Alter, which
	// TestCheckTooFewPartitionsWithoutAlter takes away.
	wantCheck(t, r, "topic", CheckWarn, "has 1 partition(s) and 3 roles need 3: NewRoles will add them")
}

// aclBrokerWithTopic starts an aclBroker on which the superuser has led group, and so made its
// leader topic, with one partition.
func aclBrokerWithTopic(t *testing.T, group string, grants []aclGrant) (*kafkatest.Broker, *testLog) {
	t.Helper()
	b := aclBroker(t, grants)
	log := newTestLog(t)
	if err := contendOrFail(t, saslConfig(b, group, "admin", "admin", "admin-secret", log)); err != nil {
		t.Fatalf("the superuser could not lead group %s: %v", group, err)
	}
	return b, log
}

func TestCheckTooFewPartitionsWithoutAlter(t *testing.T) {
	const group, topic = "roles3", "roles3.neli"
	b, log := aclBrokerWithTopic(t, group, readmeGrantsWithout(t, group, topic, ""))
	r, err := Check(context.Background(), saslConfig(b, group, "doctor", "alice", "alice-secret", log), Shards(3)...)
	if err == nil || !strings.Contains(err.Error(), "may not add partitions (no Alter)") {
		t.Fatalf("Check: %v; want a failure for the missing Alter", err)
	}
	wantCheck(t, r, "topic", CheckFail, "has 1 partition(s) and 3 roles need 3, and User:alice may not add partitions")
}

// TestCheckMissingGrant: alice lacks Write on the topic; the check says so, and how to grant it.
func TestCheckMissingGrant(t *testing.T) {
	const group, topic = "grant", "grant.neli"
	b, log := aclBrokerWithTopic(t, group, readmeGrantsWithout(t, group, topic, "topic-write"))
	r, _ := Check(context.Background(), saslConfig(b, group, "doctor", "alice", "alice-secret", log))
	wantCheck(t, r, "reach", CheckOK, "authenticates User:alice with SASL PLAIN")
	wantCheck(t, r, "acl-topic", CheckFail, "User:alice lacks Write on topic grant.neli")
	if c := resultOf(t, r, "acl-topic"); !strings.Contains(c.Fix, "kafka-acls.sh --add --allow-principal User:alice --operation Write --topic grant.neli") {
		t.Errorf("fix %q; want the kafka-acls command that grants Write", c.Fix)
	}
	// Reading the broker's session bounds takes DescribeConfigs on the cluster, which docs/operations.md
	// does not ask of a classic group: a warning, not a failure.
	wantCheck(t, r, "session", CheckWarn, "could not read the broker's group.min/max.session.timeout.ms")
	// alice answers to that warning with the grant's command, as to the failures.
	if c := resultOf(t, r, "session"); !strings.Contains(c.Fix, "kafka-acls.sh --add --allow-principal User:alice --operation DescribeConfigs --cluster") {
		t.Errorf("session's fix %q; want the kafka-acls command that grants DescribeConfigs on the cluster", c.Fix)
	}
}

// TestCheckWrongPassword: the bootstrap server is Kafka, but it does not let the user in.
func TestCheckWrongPassword(t *testing.T) {
	b := aclBroker(t, nil)
	r, err := Check(context.Background(), saslConfig(b, "g", "doctor", "alice", "wrong", newTestLog(t)))
	if err == nil {
		t.Fatal("Check passed with a wrong password")
	}
	wantCheck(t, r, "reach", CheckFail, "authentication failed")
}

// TestCheckNotKafka: a port that accepts connections and never answers fails the reach check,
// within CheckTimeout (the check reports it rather than running out of time).
func TestCheckNotKafka(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	config := Config{KafkaConfig: KafkaConfigMap{"bootstrap.servers": ln.Addr().String()}, LeaderGroupID: "g", Scribe: newTestLog(t).Scribe()}
	r, err := Check(context.Background(), config)
	var failed *CheckFailedError
	if !errors.As(err, &failed) {
		t.Fatalf("Check: %v; want a *CheckFailedError, not a check that ran out of time", err)
	}
	wantCheck(t, r, "reach", CheckFail, "accepts connections but did not answer an ApiVersions request")
	if len(r.Checks) != 2 {
		t.Errorf("checks after a failed reach: %+v; want only config and reach", r.Checks)
	}
}

// TestCheckRefusedSettings: every setting New would refuse is a failure of its own, and the
// cluster is still checked.
func TestCheckRefusedSettings(t *testing.T) {
	b := startKafka(t, kafkatest.MinSession(500*time.Millisecond)...)
	config := testConfig(b, groupName(t), "doctor", newTestLog(t))
	config.KafkaConfig["group.id"] = "mine"
	config.KafkaConfig["fetch.min.bytes"] = 1000
	r, err := Check(context.Background(), config)
	var failed *CheckFailedError
	if !errors.As(err, &failed) || len(failed.Failed) != 2 {
		t.Fatalf("Check: %v; want the two refused settings", err)
	}
	for _, f := range failed.Failed {
		if f.Name != "config" || !strings.Contains(f.Detail, `KafkaConfig["group.id"]`) && !strings.Contains(f.Detail, `KafkaConfig["fetch.min.bytes"]`) {
			t.Errorf("failure %+v; want one naming each refused setting", f)
		}
	}
	wantCheck(t, r, "reach", CheckOK, "answers as Kafka")
}

// Apache Kafka tells the replication factor that a topic it would create gets only to a principal
// that may describe the topic's configs (AsKafka's createTopics): to one granted only the list of
// docs/operations.md the doctor says that it cannot tell, rather than "replication factor -1" as
// it did on Kafka 4.4 (internal/realkafka/realtest, TestACLsOnKafka); a grant of DescribeConfigs on
// the topic shows it.
func TestCheckReplicationFactorUntold(t *testing.T) {
	const group, topic = "untold", "untold.neli"
	configs := aclGrant{"topic-describe-configs", kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic,
		Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribeConfigs, Allow: true}}
	log := newTestLog(t)
	for _, tc := range []struct {
		grants []aclGrant
		status CheckStatus
		says   string
	}{
		{readmeGrants(group, topic), CheckWarn, "at its default replication factor, which it tells only to a principal that may describe the topic's configs"},
		{append(readmeGrants(group, topic), configs), CheckWarn, "replication factor 1: with one replica"},
	} {
		b := aclBroker(t, tc.grants)
		r, _ := Check(context.Background(), saslConfig(b, group, "doctor", "alice", "alice-secret", log))
		wantCheck(t, r, "topic", tc.status, tc.says)
	}
}
