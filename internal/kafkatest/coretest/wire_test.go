package coretest

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/testkit"
	"github.com/twmb/franz-go/pkg/kfake"
)

// viaLibrdkafka is what New logs when goneli's own connection cannot follow the settings, or gives
// way to librdkafka.
const viaLibrdkafka = "the group check, Describe and the batched heartbeats go through librdkafka"

// The group check describes the group over a connection of goneli's own, speaking the security
// settings the instance's clients are given. A member on another topic can be refused only from a
// description of the group, so New's refusal shows that the description got through.
func TestGroupCheckSpeaksTheClientsSecurity(t *testing.T) {
	pki := testkit.NewPKI(t, "127.0.0.1", "127.0.0.1", "localhost")
	serverTLS, caFile := pki.ServerTLS(), pki.CAFile
	for _, tc := range []struct {
		name string
		opts []kfake.Opt
		conf KafkaConfigMap
	}{
		{"SASL PLAIN", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("PLAIN", "svc", "pw-plain")},
			KafkaConfigMap{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "svc", "sasl.password": "pw-plain"}},
		{"SASL SCRAM-SHA-256", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "svc", "pw-256")},
			KafkaConfigMap{"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "svc", "sasl.password": "pw-256"}},
		{"SASL SCRAM-SHA-512", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "svc", "pw,=512")},
			KafkaConfigMap{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "svc", "sasl.password": "pw,=512"}},
		{"SSL", []kfake.Opt{kfake.TLS(serverTLS), kfake.ListenFn(net.Listen)},
			KafkaConfigMap{"security.protocol": "SSL", "ssl.ca.location": caFile}},
		{"SASL_SSL SCRAM-SHA-512", []kfake.Opt{kfake.TLS(serverTLS), kfake.ListenFn(net.Listen), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "svc", "pw")},
			KafkaConfigMap{"security.protocol": "SASL_SSL", "ssl.ca.location": caFile, "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "svc", "sasl.password": "pw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startKafka(t, tc.opts...)
			log, r, group := newTestLog(t), newRecorder(), groupName(t)
			config := func(name, topic string) Config {
				c := testConfig(b, group, name, log)
				for k, v := range tc.conf {
					c.KafkaConfig[k] = v
				}
				c.LeaderTopic = topic
				return c
			}
			contender(t, config("x", group+".x"), r)
			r.await(t, "x to lead", has[LeaderAcquired]("x"))
			awaitStable(t, b, group, 1)
			y, err := New(config("y", group+".y"))
			if err == nil {
				_ = y.Close()
			}
			var conflict *GroupConflictError
			if !errors.As(err, &conflict) || len(conflict.Members) != 1 || !slices.Equal(conflict.Members[0].Topics, []string{group + ".x"}) {
				t.Fatalf("New beside a member on another topic: %v, want a GroupConflictError naming %s.x", err, group)
			}
			if log.Contains(viaLibrdkafka) {
				t.Errorf("the group check fell back to librdkafka's admin client")
			}
		})
	}
}

// Settings that goneli's own connection cannot speak leave the check to librdkafka, and New says so.
func TestGroupCheckFallsBackForUnsupportedSecurity(t *testing.T) {
	b := startKafka(t)
	log := newTestLog(t)
	c := testConfig(b, groupName(t), "a", log)
	// librdkafka accepts the setting and ignores it without TLS; goneli's connection cannot follow
	// a keystore.
	c.KafkaConfig["ssl.keystore.location"] = filepath.Join(t.TempDir(), "none.p12")
	c.KafkaConfig["security.protocol"] = "ssl"
	n, err := New(c)
	if err == nil {
		_ = n.Close()
	}
	if !log.Contains(viaLibrdkafka) || !log.Contains("ssl.keystore.location") {
		t.Errorf("New did not say that the check goes through librdkafka, and why (New: %v)", err)
	}
}

// librdkafka 2.11.1 aborts the process when its coordinator-bound admin request meets a coordinator
// connection that has just dropped (confluentinc/librdkafka#4605; TestLibrdkafkaAdminSurvivesCoordinatorCuts
// shows it, opt-in). So no description of the group, neither New's, the group check's nor
// Describe's, is asked of librdkafka where goneli's own connection can make it.
func TestNoGroupDescriptionThroughLibrdkafka(t *testing.T) {
	b := startKafka(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	var admins countingAdmins
	config := func(name, topic string) Config {
		c := testConfig(b, group, name, log)
		c.LeaderTopic = topic
		c.KafkaAdminProvider = admins.provider()
		// A producer that is not a *kafka.Producer keeps the check from borrowing the producer's
		// admin handle: every librdkafka description would go through the provider, and be counted.
		c.KafkaProducerProvider = func(conf *KafkaConfigMap) (KafkaProducer, error) {
			p, err := StandardKafkaProducerProvider()(conf)
			return wrappedProducer{p}, err
		}
		return c
	}
	x := contender(t, config("x", group+".x"), r).(Curator)
	r.await(t, "x to lead", has[LeaderAcquired]("x"))
	if x.Stats().GroupChecks < 2 {
		t.Fatalf("x checked the group %d times, want New's and its first tenure's", x.Stats().GroupChecks)
	}
	awaitStable(t, b, group, 1)
	y, err := New(config("y", group+".y"))
	if err == nil {
		_ = y.Close()
	}
	var conflict *GroupConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("New beside a member on another topic: %v, want a GroupConflictError", err)
	}
	if _, err := Describe(context.Background(), config("z", group+".x")); err != nil {
		t.Fatal(err)
	}
	if n := admins.describes.Load(); n != 0 {
		t.Errorf("%d descriptions of the group went through librdkafka's admin client", n)
	}
}

// countingAdmins counts the group descriptions asked of the admin clients it provides.
type countingAdmins struct{ describes atomic.Int32 }

func (c *countingAdmins) provider() KafkaAdminProvider {
	return func(conf *KafkaConfigMap) (KafkaAdmin, error) {
		a, err := StandardKafkaAdminProvider()(conf)
		return countingAdmin{a, c}, err
	}
}

type countingAdmin struct {
	KafkaAdmin
	c *countingAdmins
}

func (a countingAdmin) DescribeConsumerGroups(ctx context.Context, groups []string, options ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error) {
	a.c.describes.Add(1)
	return a.KafkaAdmin.DescribeConsumerGroups(ctx, groups, options...)
}

// wrappedProducer hides the *kafka.Producer behind a KafkaProducer.
type wrappedProducer struct{ KafkaProducer }

// While the coordinator is cut off and moved, descriptions over goneli's own connection fail or
// succeed, and one succeeds once the member has joined the coordinator it was moved to.
func TestDescribeSurvivesCoordinatorCuts(t *testing.T) {
	b := startKafka(t, kfake.NumBrokers(3))
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	c := testConfig(b, group, "a", log)
	contender(t, c, r)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	failed := 0
	for i := range 30 {
		coord := b.CoordinatorFor(group)
		fault := kafkatest.Refuse
		if i%2 == 0 {
			fault = kafkatest.Blackhole
		}
		b.Net.CutBroker(b.Addrs[coord], fault)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		if _, err := Describe(ctx, c); err != nil {
			failed++
		}
		cancel()
		b.Net.HealBroker(b.Addrs[coord])
		if i%3 == 0 {
			b.RehashCoordinators()
		}
	}
	if failed == 0 {
		t.Error("no description failed while the coordinator was cut off: the cuts did not reach it")
	}
	// A moved coordinator knows the group once its member has joined it there.
	awaitCondition(t, "a description with the member after the cuts", func() bool {
		status, err := Describe(context.Background(), c)
		return err == nil && len(status.Members) == 1
	})
}
