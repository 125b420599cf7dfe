package coretest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The ACL list of docs/operations.md ("ACLs"; it was the README's, hence the names below), tested
// on the embedded broker with ACLs enforced: a SASL user granted exactly that list runs a
// contender, Watch, Describe and Check; with each grant removed in turn, whatever needs it fails
// with an error that names it.

// aclGrant is one entry of that list.
type aclGrant struct {
	name string // for the subtest
	acl  kfake.ACL
}

func readmeGrants(group, topic string) []aclGrant {
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	g := func(name string, rt kmsg.ACLResourceType, res string, pattern kmsg.ACLResourcePatternType, op kmsg.ACLOperation) aclGrant {
		return aclGrant{name, kfake.ACL{Resource: rt, Name: res, Pattern: pattern, Operation: op, Allow: true}}
	}
	topicT, groupT, txnT := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeTransactionalId
	return []aclGrant{
		g("topic-describe", topicT, topic, lit, kmsg.ACLOperationDescribe),
		g("topic-read", topicT, topic, lit, kmsg.ACLOperationRead),
		g("topic-write", topicT, topic, lit, kmsg.ACLOperationWrite),
		g("topic-create", topicT, topic, lit, kmsg.ACLOperationCreate),
		g("group-read", groupT, group, lit, kmsg.ACLOperationRead),
		g("group-describe", groupT, group, lit, kmsg.ACLOperationDescribe),
		g("observer-describe", groupT, group+".observer", pre, kmsg.ACLOperationDescribe),
		g("fenced-write", txnT, "goneli-fenced."+group, pre, kmsg.ACLOperationWrite),
	}
}

// readmeGrantsWithout is the README's list less the grant called removed (none if empty).
func readmeGrantsWithout(t *testing.T, group, topic, removed string) []aclGrant {
	t.Helper()
	var grants []aclGrant
	found := removed == ""
	for _, g := range readmeGrants(group, topic) {
		if g.name == removed {
			found = true
			continue
		}
		grants = append(grants, g)
	}
	if !found {
		t.Fatalf("no grant %q", removed)
	}
	return grants
}

// aclBroker starts a broker that enforces ACLs, with the superuser "admin" and the user "alice"
// holding grants, and opts.
func aclBroker(t *testing.T, grants []aclGrant, opts ...kfake.Opt) *kafkatest.Broker {
	var acls []kfake.ACL
	for _, g := range grants {
		acls = append(acls, g.acl)
	}
	return startKafka(t, append([]kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin-secret"),
		kfake.User("PLAIN", "alice", "alice-secret", acls...)}, opts...)...)
}

func saslConfig(b *kafkatest.Broker, group, name, user, password string, log *testLog) Config {
	c := testConfig(b, group, name, log)
	c.KafkaConfig["security.protocol"] = "SASL_PLAINTEXT"
	c.KafkaConfig["sasl.mechanism"] = "PLAIN"
	c.KafkaConfig["sasl.username"] = user
	c.KafkaConfig["sasl.password"] = password
	return c
}

// contendOrFail runs an instance until it leads or Pulse returns an error; New's error counts too.
func contendOrFail(t *testing.T, config Config) error {
	t.Helper()
	n, err := New(config)
	if err != nil {
		return err
	}
	defer func() {
		_ = n.Close()
		awaitClientsClosed(t, n)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	for {
		leader, err := n.PulseCtx(ctx)
		switch {
		case ctx.Err() != nil:
			t.Fatalf("%s neither led nor failed within %v: a silent retry", config.Name, awaitLimit)
		case err != nil:
			return err
		case leader:
			return nil
		}
	}
}

// watchOrFail runs Watch until it reports leader, or returns its error.
func watchOrFail(t *testing.T, config Config, leader string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	seen := false
	err := Watch(ctx, config, func(info LeaderInfo) {
		if info.Name == leader {
			seen = true
			cancel()
		}
	})
	if seen {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Watch saw no leader %s and no error within %v: a silent retry", leader, awaitLimit)
	}
	return err
}

// describeOrFail asks Describe until it names leader, or returns its error.
func describeOrFail(t *testing.T, config Config, leader string) error {
	t.Helper()
	st, err := Describe(context.Background(), config)
	if err != nil {
		return err
	}
	if len(st.Roles) != 1 || st.Roles[0].Leader.Name != leader {
		t.Fatalf("Describe as %s: want leader %s, got %+v", config.KafkaConfig["sasl.username"], leader, st)
	}
	return nil
}

// wantDenied checks that err is nil when want is empty, and otherwise an error whose message
// contains want (the missing operation and resource).
func wantDenied(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err != nil {
		t.Logf("%s: %v", what, err)
	}
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v; want it to work", what, err)
	case want != "" && err == nil:
		t.Errorf("%s worked; want an error naming %q", what, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s: %v; want an error naming %q", what, err, want)
	}
}

// TestACLsOfTheREADME runs every part as alice, granted exactly the README's list and then that
// list less one grant. Describe on a topic is implied by Read and Write, and Describe on a group
// by Read (KIP-253, in Kafka as in kfake), so removing those grants alone takes nothing away.
func TestACLsOfTheREADME(t *testing.T) {
	const group, topic = "acl", "acl.neli"
	// fix is a command that a failing line of the doctor's report must give.
	type want struct{ contender, watch, describe, check, fix string }
	cases := []struct {
		removed string
		want    want
	}{
		{"", want{}},
		{"topic-describe", want{}},
		{"topic-read", want{"Read on topic acl.neli", "Read on topic acl.neli", "Read on topic acl.neli", "lacks Read on topic acl.neli", ""}},
		{"topic-write", want{"Write on topic acl.neli", "", "", "lacks Write on topic acl.neli", ""}},
		{"topic-create", want{contender: "Create on topic acl.neli"}},
		{"group-read", want{contender: "Read on group acl", check: "not read it"}},
		{"group-describe", want{}},
		// The observers' groups are acl.observer and acl.observer-<name>: the doctor's command grants
		// the prefix, as the AuthorizationError of Watch and Describe does.
		{"observer-describe", want{watch: "Describe on group acl.observer", describe: "Describe on group acl.observer", check: "may not describe group acl.observer",
			fix: "kafka-acls.sh --add --allow-principal User:alice --operation Describe --group acl.observer --resource-pattern-type prefixed"}},
		// Only a FencedProducer needs it (TestFencedProducerNeedsWriteOnItsTransactionalID); the
		// doctor warns.
		{"fenced-write", want{}},
	}
	for _, tc := range cases {
		name := "all"
		if tc.removed != "" {
			name = "without-" + tc.removed
		}
		t.Run(name, func(t *testing.T) {
			b := aclBroker(t, readmeGrantsWithout(t, group, topic, tc.removed))
			log := newTestLog(t)
			alice := func(name string) Config { return saslConfig(b, group, name, "alice", "alice-secret", log) }

			wantDenied(t, "contender", contendOrFail(t, alice("alice")), tc.want.contender)

			// The observing parts follow a leader that the superuser runs, whatever alice may do.
			r := newRecorder()
			contender(t, saslConfig(b, group, "boss", "admin", "admin-secret", log), r)
			r.await(t, "boss to lead", has[LeaderAcquired]("boss"))
			wantDenied(t, "Watch", watchOrFail(t, alice("alice-watch"), "boss"), tc.want.watch)
			wantDenied(t, "Describe", describeOrFail(t, alice("alice-status"), "boss"), tc.want.describe)

			report, err := Check(context.Background(), alice("alice-doctor"))
			if tc.want.check == "" && err != nil || tc.want.check != "" && (err == nil || !strings.Contains(err.Error(), tc.want.check)) {
				t.Errorf("Check: %v; want a failure naming %q (empty: none); report: %+v", err, tc.want.check, report)
			}
			if tc.want.fix != "" && !slices.ContainsFunc(report.Checks, func(c CheckResult) bool { return c.Status == CheckFail && strings.Contains(c.Fix, tc.want.fix) }) {
				t.Errorf("Check: no failing line gives %q: %+v", tc.want.fix, report)
			}
		})
	}
}

// The classic protocol, a lease under about 4.8 s (so a derived session under Apache Kafka's
// default minimum, 6 s), a broker that keeps that minimum, and a principal granted the list of
// docs/operations.md, which may not describe the cluster's configs, as an application's principal
// on a managed cluster usually may not: New cannot read the brokers' minimum. Before, it kept the
// derived session, 1.25 s, which the broker refused at every JoinGroup, and Pulse returned a fatal
// SessionTimeoutError. Now it raises the session to Kafka's default minimum, says so once, and
// leads.
func TestShortLeaseJoinsWithoutDescribeConfigs(t *testing.T) {
	const group, topic = "minsession", "minsession.neli"
	b := aclBroker(t, readmeGrants(group, topic), kafkatest.MinSession(6*time.Second)...)
	log := newTestLog(t)
	if err := contendOrFail(t, saslConfig(b, group, "alice", "alice", "alice-secret", log)); err != nil {
		t.Fatalf("a 1 s lease on a broker whose minimum session is 6 s, unread: %v", err)
	}
	if n := log.Count("raised from 1.25s to Apache Kafka's default minimum, 6s"); n != 1 {
		t.Errorf("the raised session was logged %d times, want once", n)
	}
}

// A FencedProducer needs Write on its transactional id (goneli-fenced.<group>, and .<role> for a
// role): without it, its first write fails with an *AuthorizationError naming the prefixed grant
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error 53), rather than librdkafka's bare error, and the
// doctor warns of it; with it, the doctor's line is ok.
func TestFencedProducerNeedsWriteOnItsTransactionalID(t *testing.T) {
	const group, topic = "txn", "txn.neli"
	b, log := aclBrokerWithTopic(t, group, readmeGrantsWithout(t, group, topic, "fenced-write"))
	alice := saslConfig(b, group, "alice", "alice", "alice-secret", log)
	a := contender(t, alice, newRecorder()).(Curator)
	awaitLeader(t, "alice to lead", a)
	f := newFenced(t, a, FencedConfig{})
	err := f.Send(context.Background(), record(topic, "x"))
	var denied *AuthorizationError
	if !errors.As(err, &denied) || denied.Resource != "transactional-id" || denied.Name != "goneli-fenced."+group || !denied.Prefixed ||
		denied.Operation != "Write" || !strings.Contains(err.Error(), "--transactional-id goneli-fenced.txn --resource-pattern-type prefixed") {
		t.Fatalf("the fenced producer's write: %v; want an *AuthorizationError for Write on the transactional ids prefixed goneli-fenced.%s", err, group)
	}
	alice.Name = "doctor"
	r, _ := Check(context.Background(), alice)
	wantCheck(t, r, "acl-transactional-id", CheckWarn, "may not use transactional id goneli-fenced.txn")

	granted := aclBroker(t, readmeGrants(group, topic))
	r, _ = Check(context.Background(), saslConfig(granted, group, "doctor", "alice", "alice-secret", log))
	wantCheck(t, r, "acl-transactional-id", CheckOK, "may describe transactional id goneli-fenced.txn")
}

// Describe's consumer needs Describe on its group (under the observer's prefix) because librdkafka
// looks up the group's coordinator, but it hears of a refusal only when that lookup is answered,
// which can be after the records it reads: Describe without the grant failed or succeeded by the
// timing (TestACLsOfTheREADME, 1 of 40 runs under .ci/stress). Here librdkafka's lookups (v3 and
// below; goneli's own connection asks at v4 and later) are answered COORDINATOR_NOT_AVAILABLE, which
// it retries quietly, so that the records always come first; Describe must fail all the same.
func TestDescribeWithoutObserverGrantFailsWhateverTheTiming(t *testing.T) {
	const group, topic = "late", "late.neli"
	b, log := aclBrokerWithTopic(t, group, readmeGrantsWithout(t, group, topic, "observer-describe"))
	statusGroup := group + ".observer-status"
	var held atomic.Int32
	b.ControlKey(int16(kmsg.FindCoordinator), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		q := req.(*kmsg.FindCoordinatorRequest)
		if q.Version >= 4 || q.CoordinatorKey != statusGroup {
			return nil, nil, false
		}
		held.Add(1)
		resp := q.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode, resp.NodeID, resp.Port = kerr.CoordinatorNotAvailable.Code, -1, -1
		return resp, nil, true
	})
	err := describeOrFail(t, saslConfig(b, group, "alice-status", "alice", "alice-secret", log), "")
	wantDenied(t, "Describe", err, "Describe on group late.observer")
	if held.Load() == 0 {
		t.Errorf("librdkafka never looked up the coordinator of %s: the test no longer holds what it meant to", statusGroup)
	}
}
