package coretest

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/testkit"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Goneli's own connection (internal/sidechan) is never less available than librdkafka: where it
// cannot reach, verify or authenticate what librdkafka can, librdkafka does the work. And where
// Apache Kafka answers otherwise than the embedded broker, the broker is made to answer as Kafka
// does here, by a control function that cites the Kafka source it follows.

// namedListener is a listener whose address names host instead of its IP address, so that kfake
// advertises the brokers by that name, as a real cluster advertises its brokers' host names.
type namedListener struct {
	net.Listener
	host string
}

func (l namedListener) Addr() net.Addr { return namedAddr{l.Listener.Addr(), l.host} }

type namedAddr struct {
	net.Addr
	host string
}

func (a namedAddr) String() string {
	_, port, _ := net.SplitHostPort(a.Addr.String())
	return net.JoinHostPort(a.host, port)
}

// listenAs makes kfake listen on its loopback address and advertise host.
func listenAs(host string) kfake.Opt {
	return kfake.ListenFn(func(network, address string) (net.Listener, error) {
		l, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		return namedListener{l, host}, nil
	})
}

// timeToLead starts one instance on config (roles > 1: NewRoles with that many) and returns how
// long it took to lead every role.
func timeToLead(t *testing.T, config Config, roles int) time.Duration {
	t.Helper()
	start := time.Now()
	if roles > 1 {
		rs := roleContender(t, config, Shards(roles), newRecorder())
		awaitLed(t, config.Name+" to lead every role", Shards(roles), map[string]Roles{config.Name: rs}, func(map[string][]string) bool { return true })
	} else {
		r := newRecorder()
		contender(t, config, r)
		r.await(t, config.Name+" to lead", has[LeaderAcquired](config.Name))
	}
	return time.Since(start)
}

// A broker certificate that names its host only in the subject's CN: Go's crypto/x509 refuses it
// ("certificate relies on legacy Common Name field"), librdkafka (OpenSSL) accepts it. Before,
// every group check failed on it and the instance never led. Now the first description gives way
// to librdkafka, which New logs once, and the instance leads about as soon as on a certificate
// with a subject alternative name; Check says the same on its reach line.
func TestLeadsWithCertificateNamingItsHostOnlyInCN(t *testing.T) {
	for _, roles := range []int{1, 3} {
		t.Run(map[int]string{1: "New", 3: "NewRoles"}[roles], func(t *testing.T) {
			healthy := testkit.NewPKI(t, "localhost", "localhost")
			cnOnly := testkit.NewPKI(t, "localhost")
			lead := func(pki testkit.PKI, log *testLog) time.Duration {
				b := startBroker(t, kfake.TLS(pki.ServerTLS()), listenAs("localhost"))
				config := testConfig(b, groupName(t), "a", log)
				config.KafkaConfig["security.protocol"] = "SSL"
				config.KafkaConfig["ssl.ca.location"] = pki.CAFile
				return timeToLead(t, config, roles)
			}
			healthyLog, log := newTestLog(t), newTestLog(t)
			base := lead(healthy, healthyLog)
			took := lead(cnOnly, log)
			t.Logf("led after %v with a SAN certificate, %v with a CN-only one", base.Round(time.Millisecond), took.Round(time.Millisecond))
			if healthyLog.Contains(viaLibrdkafka) {
				t.Errorf("with a SAN certificate, goneli's own connection gave way to librdkafka")
			}
			if n := log.Count(viaLibrdkafka); n != 1 || !log.Contains("certificate") {
				t.Errorf("the fallback to librdkafka was logged %d times (want once, naming the certificate)", n)
			}
			// The bound: a lease or two of a healthy start.
			if took > base+2*testLease {
				t.Errorf("led %v after start with a CN-only certificate, %v with a SAN one: more than two leases later", took, base)
			}
		})
	}
	t.Run("Check", func(t *testing.T) {
		pki := testkit.NewPKI(t, "localhost")
		b := startBroker(t, kfake.TLS(pki.ServerTLS()), listenAs("localhost"))
		config := testConfig(b, groupName(t), "doctor", newTestLog(t))
		config.KafkaConfig["security.protocol"] = "SSL"
		config.KafkaConfig["ssl.ca.location"] = pki.CAFile
		r, _ := Check(context.Background(), config)
		wantCheck(t, r, "reach", CheckWarn, viaLibrdkafka)
		if c := resultOf(t, r, "reach"); !strings.Contains(c.Detail, "certificate") {
			t.Errorf("reach: %q; want it to name the certificate", c.Detail)
		}
	})
}

// Brokers whose TLS only OpenSSL (librdkafka) gets past, and Go's crypto/tls does not, without any
// *tls.CertificateVerificationError: a certificate with a negative serial number, which
// crypto/x509 refuses to parse (Go 1.23 and later) and OpenSSL accepts, and a listener that accepts
// only the TLS_RSA_* suites, which Go 1.22 and later do not offer and OpenSSL 3 does (the handshake
// fails with a handshake_failure alert). Before, the first gave way to librdkafka only on a failed
// verification: every group check failed, and the instance never led while librdkafka joined and
// committed. Now a TLS handshake that fails for a reason of TLS makes goneli's own connection give
// way to librdkafka, which New logs once, and the instance leads within about a lease of a broker
// with a certificate Go accepts; Check says so on its reach line.
func TestLeadsWhereOnlyOpenSSLCompletesTheHandshake(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server func(t *testing.T) (*tls.Config, string) // the listener's configuration and its CA's file
		cause  string                                   // in the fallback's log line
	}{
		{"negative serial", func(t *testing.T) (*tls.Config, string) {
			p := testkit.NewPKIOf(t, testkit.PKIOpts{NegativeSerial: true}, "localhost", "localhost")
			return p.ServerTLS(), p.CAFile
		}, "negative serial number"},
		{"TLS_RSA only", func(t *testing.T) (*tls.Config, string) {
			p := testkit.NewPKIOf(t, testkit.PKIOpts{RSA: true}, "localhost", "localhost")
			return p.RSAKeyExchangeOnly(), p.CAFile
		}, "handshake failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, roles := range []int{1, 3} {
				t.Run(map[int]string{1: "New", 3: "NewRoles"}[roles], func(t *testing.T) {
					healthy := testkit.NewPKI(t, "localhost", "localhost")
					lead := func(server *tls.Config, ca string, log *testLog) time.Duration {
						b := startBroker(t, kfake.TLS(server), listenAs("localhost"))
						config := testConfig(b, groupName(t), "a", log)
						config.KafkaConfig["security.protocol"] = "SSL"
						config.KafkaConfig["ssl.ca.location"] = ca
						return timeToLead(t, config, roles)
					}
					server, ca := tc.server(t)
					healthyLog, log := newTestLog(t), newTestLog(t)
					base := lead(healthy.ServerTLS(), healthy.CAFile, healthyLog)
					took := lead(server, ca, log)
					t.Logf("led after %v with a certificate Go accepts, %v here", base.Round(time.Millisecond), took.Round(time.Millisecond))
					if healthyLog.Contains(viaLibrdkafka) {
						t.Errorf("with a certificate Go accepts, goneli's own connection gave way to librdkafka")
					}
					if n := log.Count(viaLibrdkafka); n != 1 || !log.Contains(tc.cause) {
						t.Errorf("the fallback to librdkafka was logged %d times (want once, naming %q)", n, tc.cause)
					}
					if took > base+2*testLease {
						t.Errorf("led %v after start, %v with a certificate Go accepts: more than two leases later", took, base)
					}
				})
			}
			t.Run("Check", func(t *testing.T) {
				server, ca := tc.server(t)
				b := startBroker(t, kfake.TLS(server), listenAs("localhost"))
				config := testConfig(b, groupName(t), "doctor", newTestLog(t))
				config.KafkaConfig["security.protocol"] = "SSL"
				config.KafkaConfig["ssl.ca.location"] = ca
				r, _ := Check(context.Background(), config)
				wantCheck(t, r, "reach", CheckWarn, viaLibrdkafka)
				if c := resultOf(t, r, "reach"); !strings.Contains(c.Detail, tc.cause) {
					t.Errorf("reach: %q; want it to name %q", c.Detail, tc.cause)
				}
			})
		})
	}
}

// bootstrap.servers=localhost, the broker on 9092: librdkafka takes the missing port as 9092, and
// so does goneli's own connection now ("missing port in address" before, on every group check:
// the instance never led). The group is described over goneli's own connection, not librdkafka's.
func TestLeadsWithBootstrapServerWithoutPort(t *testing.T) {
	b, err := kafkatest.Start(kafkatest.AsKafkaByDefault(), kfake.Ports(9092))
	if err != nil {
		t.Skipf("port 9092 is taken here (%v)", err)
	}
	t.Cleanup(b.Close)
	log, group := newTestLog(t), groupName(t)
	var admins countingAdmins
	config := testConfig(b, group, "a", log)
	config.KafkaConfig["bootstrap.servers"] = "localhost"
	config.KafkaAdminProvider = admins.provider()
	config.KafkaProducerProvider = func(conf *KafkaConfigMap) (KafkaProducer, error) {
		p, err := StandardKafkaProducerProvider()(conf)
		return wrappedProducer{p}, err
	}
	timeToLead(t, config, 1)
	if _, err := Describe(context.Background(), config); err != nil {
		t.Fatalf("Describe: %v", err)
	}
	if n := admins.describes.Load(); n != 0 || log.Contains(viaLibrdkafka) {
		t.Errorf("%d descriptions of the group went through librdkafka's admin client", n)
	}
	r, _ := Check(context.Background(), config)
	wantCheck(t, r, "reach", CheckOK, "localhost:9092 answers as Kafka")
}

// SASL mechanisms that goneli's own connection does not speak: New says once that librdkafka does
// the work, and why, and Check's reach line says the same.
func TestUnspokenMechanismsFallBackToLibrdkafka(t *testing.T) {
	b := startKafka(t)
	for _, mech := range []string{"OAUTHBEARER", "GSSAPI"} {
		t.Run(mech, func(t *testing.T) {
			log := newTestLog(t)
			config := testConfig(b, groupName(t), "a", log)
			config.KafkaConfig["security.protocol"] = "SASL_PLAINTEXT"
			config.KafkaConfig["sasl.mechanism"] = mech
			if mech == "OAUTHBEARER" {
				config.KafkaConfig["sasl.oauthbearer.config"] = "principal=svc"
			}
			// librdkafka may refuse the mechanism itself (GSSAPI needs libsasl2), or fail to
			// authenticate with a broker that has no SASL: either way New has decided by then.
			if n, err := New(config); err == nil {
				_ = n.Close()
			}
			want := "sasl.mechanism=" + mech
			if log.Count(viaLibrdkafka) != 1 || !log.Contains(want) {
				t.Errorf("New did not say once that librdkafka does the work because of %s", want)
			}
			config.Name = "doctor"
			r, _ := Check(context.Background(), config)
			wantCheck(t, r, "reach", CheckWarn, viaLibrdkafka)
			if c := resultOf(t, r, "reach"); !strings.Contains(c.Detail, want) {
				t.Errorf("reach: %q; want it to name %s", c.Detail, want)
			}
		})
	}
}

// asKafkaDescribesConsumerGroups makes the broker answer DescribeGroups for group, a group of the
// consumer protocol (KIP-848), as Apache Kafka does: a Dead group without an error up to version
// 5, GROUP_ID_NOT_FOUND from version 6 (GroupMetadataManager.describeGroups: the group is not a
// classic group). kfake describes it as if it were one. upToV5 answers every version as Kafka 3.7
// to 3.9 do, whose DescribeGroups goes no higher than 5.
func asKafkaDescribesConsumerGroups(b *kafkatest.Broker, group string, upToV5 bool) {
	b.ControlKey(int16(kmsg.DescribeGroups), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		r := req.(*kmsg.DescribeGroupsRequest)
		if len(r.Groups) != 1 || r.Groups[0] != group {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		resp.SetVersion(r.Version)
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group = group
		g.State = "Dead"
		if r.Version >= 6 && !upToV5 {
			g.ErrorCode = kerr.GroupIDNotFound.Code
			g.ErrorMessage = kmsg.StringPtr("Group " + group + " is not a classic group.")
		}
		resp.Groups = append(resp.Groups, g)
		return resp, nil, true
	})
}

// A live KIP-848 group described as a classic one (neli status without group.protocol=consumer):
// Kafka up to DescribeGroups v5 says Dead, which was taken for "no such group"; it is asked again
// with ConsumerGroupDescribe. Both a Kafka 4 broker (v6) and a 3.7-3.9 one (v5) are tried.
func TestDescribeFindsConsumerProtocolGroupAsKafkaAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		upToV5 bool
	}{{"Kafka 4", false}, {"Kafka 3.9", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := startKafka(t, kfake.BrokerConfigs(kip848Broker))
			log, r, group := newTestLog(t), newRecorder(), groupName(t)
			contender(t, kip848Config(b, group, "a", log), r)
			r.await(t, "a to lead", has[LeaderAcquired]("a"))
			asKafkaDescribesConsumerGroups(b, group, tc.upToV5)
			st, err := Describe(context.Background(), testConfig(b, group, "status", log))
			if err != nil {
				t.Fatalf("Describe of a live KIP-848 group as a classic one: %v", err)
			}
			if st.Protocol != "consumer" || len(st.Members) != 1 || st.Roles[0].Leader.Name != "a" {
				t.Fatalf("Describe: %+v; want the consumer group with a leading", st)
			}
		})
	}
}

// From Kafka 4.0 ConsumerGroupDescribe refuses a group any of whose members uses a topic that the
// principal may not describe (KafkaApis.handleConsumerGroupDescribe, KAFKA-18813). The instance
// reads and writes its own topic, so that member is on another: the check fails closed (no
// tenure leads while the broker refuses) and says why, and Describe reports the refusal rather
// than "no such group".
func TestConsumerGroupDescribeRefusedForAnotherMembersTopic(t *testing.T) {
	b := startKafka(t, kfake.BrokerConfigs(kip848Broker))
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	var refusing atomic.Bool
	refusing.Store(true)
	b.ControlKey(int16(kmsg.ConsumerGroupDescribe), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		q := req.(*kmsg.ConsumerGroupDescribeRequest)
		if !refusing.Load() || len(q.Groups) != 1 || q.Groups[0] != group {
			return nil, nil, false
		}
		resp := q.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
		resp.SetVersion(q.Version)
		g := kmsg.NewConsumerGroupDescribeResponseGroup()
		g.Group, g.ErrorCode = group, kerr.TopicAuthorizationFailed.Code
		resp.Groups = append(resp.Groups, g)
		return resp, nil, true
	})
	asKafkaDescribesConsumerGroups(b, group, true)
	a := contender(t, kip848Config(b, group, "a", log), r).(Curator)
	awaitCondition(t, "a tenure's group check to be refused", func() bool { return log.Count("KAFKA-18813") >= 2 })
	if a.IsLeader() {
		t.Fatal("a leads while the broker refuses to describe its group")
	}
	for _, config := range []Config{kip848Config(b, group, "status", log), testConfig(b, group, "status", log)} {
		_, err := Describe(context.Background(), config)
		if err == nil || errors.Is(err, ErrNoSuchGroup) || !strings.Contains(err.Error(), "KAFKA-18813") {
			t.Errorf("Describe (%v): %v; want the refusal, explained", config.KafkaConfig["group.protocol"], err)
		}
	}
	refusing.Store(false)
	r.await(t, "a to lead once the broker describes the group", has[LeaderAcquired]("a"))
}

// Kafka answers NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE inside a
// group's result of DescribeGroups, not as a request error, while the coordinator moves or loads
// (GroupCoordinatorService). They are retried, not taken for the description.
func TestDescribeRetriesPerGroupCoordinatorErrors(t *testing.T) {
	b := startKafka(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	contender(t, testConfig(b, group, "a", log), r)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	for _, code := range []*kerr.Error{kerr.NotCoordinator, kerr.CoordinatorLoadInProgress, kerr.CoordinatorNotAvailable} {
		t.Run(code.Message, func(t *testing.T) {
			var answered atomic.Int32
			b.ControlKey(int16(kmsg.DescribeGroups), func(req kmsg.Request) (kmsg.Response, error, bool) {
				q := req.(*kmsg.DescribeGroupsRequest)
				if answered.Load() == 2 || len(q.Groups) != 1 || q.Groups[0] != group {
					b.DropControl()
					return nil, nil, false
				}
				b.KeepControl()
				answered.Add(1)
				resp := q.ResponseKind().(*kmsg.DescribeGroupsResponse)
				resp.SetVersion(q.Version)
				g := kmsg.NewDescribeGroupsResponseGroup()
				g.Group, g.ErrorCode = group, code.Code
				resp.Groups = append(resp.Groups, g)
				return resp, nil, true
			})
			st, err := Describe(context.Background(), testConfig(b, group, "status", log))
			if err != nil || len(st.Members) != 1 {
				t.Fatalf("Describe after two %s answers: %+v, %v", code.Message, st, err)
			}
			if answered.Load() != 2 {
				t.Fatalf("the broker answered %s %d times, want 2", code.Message, answered.Load())
			}
		})
	}
}

// coordinatorNotAvailable makes FindCoordinator for key answer COORDINATOR_NOT_AVAILABLE the first
// n times, as Kafka answers it while it creates __consumer_offsets on a fresh cluster
// (KafkaApis.handleFindCoordinatorRequest), and counts those answers.
func coordinatorNotAvailable(b *kafkatest.Broker, key string, n int32) *atomic.Int32 {
	var answered atomic.Int32
	b.ControlKey(int16(kmsg.FindCoordinator), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		q := req.(*kmsg.FindCoordinatorRequest)
		keys := q.CoordinatorKeys
		if q.Version < 4 {
			keys = []string{q.CoordinatorKey}
		}
		if answered.Load() >= n || len(keys) != 1 || keys[0] != key {
			return nil, nil, false
		}
		answered.Add(1)
		resp := q.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.SetVersion(q.Version)
		resp.ErrorCode, resp.NodeID = kerr.CoordinatorNotAvailable.Code, -1
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.ErrorCode = key, -1, kerr.CoordinatorNotAvailable.Code
		resp.Coordinators = append(resp.Coordinators, c)
		return resp, nil, true
	})
	return &answered
}

// On a fresh cluster the doctor's coordinator lookups are retried while the broker answers
// COORDINATOR_NOT_AVAILABLE; the group's ACLs are then checked as usual.
func TestCheckRetriesCoordinatorNotAvailable(t *testing.T) {
	b := startKafka(t)
	group := groupName(t)
	answered := coordinatorNotAvailable(b, group, 3)
	r, err := Check(context.Background(), testConfig(b, group, "doctor", newTestLog(t)))
	if err != nil {
		t.Fatalf("Check: %v; report %+v", err, r)
	}
	wantCheck(t, r, "acl-group", CheckOK, "may read and describe group "+group)
	if answered.Load() != 3 {
		t.Errorf("COORDINATOR_NOT_AVAILABLE answered %d times, want 3", answered.Load())
	}
}

// Kafka reports the cluster's authorized operations as 0 unless the principal may describe the
// cluster (KafkaApis.handleTopicMetadataRequest); docs/operations.md asks only for DescribeConfigs
// on it. A 0 is not taken for a missing DescribeConfigs: the doctor asks a broker's configs
// instead, and warns only when they are refused.
func TestCheckClusterOperationsZeroIsNoMissingGrant(t *testing.T) {
	b := startKafka(t, kfake.BrokerConfigs(kip848Broker))
	group := groupName(t)
	config := kip848Config(b, group, "doctor", newTestLog(t))
	b.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		q := req.(*kmsg.MetadataRequest)
		if !q.IncludeClusterAuthorizedOperations {
			return nil, nil, false
		}
		resp := q.ResponseKind().(*kmsg.MetadataResponse)
		resp.SetVersion(q.Version)
		for i, addr := range b.Addrs {
			host, port, _ := net.SplitHostPort(addr)
			mb := kmsg.NewMetadataResponseBroker()
			p, _ := strconv.Atoi(port)
			mb.NodeID, mb.Host, mb.Port = int32(i), host, int32(p)
			resp.Brokers = append(resp.Brokers, mb)
		}
		for _, rt := range q.Topics {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.ErrorCode = rt.Topic, kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, mt)
		}
		resp.AuthorizedOperations = 0 // no Describe on the cluster
		return resp, nil, true
	})
	r, err := Check(context.Background(), config)
	if err != nil {
		t.Fatalf("Check: %v; report %+v", err, r)
	}
	for _, c := range r.Checks {
		if c.Name == "acl-cluster" {
			t.Errorf("acl-cluster: %v %q; the broker's configs can be read", c.Status, c.Detail)
		}
	}
	wantCheck(t, r, "session", CheckOK, "covers the lease 1s")
}

// Kafka lists ConsumerGroupHeartbeat in ApiVersions from 3.7 whether or not the consumer protocol
// is enabled; it serves it only when group.coordinator.rebalance.protocols names "consumer" (and,
// from 3.9, group.version is finalized at 1; KafkaApis.isConsumerGroupProtocolEnabled). The doctor
// reads the broker's setting and fails a KIP-848 configuration that the broker does not serve.
func TestCheckConsumerProtocolNotEnabled(t *testing.T) {
	b := startKafka(t, kfake.BrokerConfigs(kip848Broker))
	// The first broker's configs the doctor asks for are its broker check's.
	b.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		q := req.(*kmsg.DescribeConfigsRequest)
		if len(q.Resources) != 1 || q.Resources[0].ResourceType != kmsg.ConfigResourceTypeBroker {
			return nil, nil, false
		}
		resp := q.ResponseKind().(*kmsg.DescribeConfigsResponse)
		resp.SetVersion(q.Version)
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = q.Resources[0].ResourceType, q.Resources[0].ResourceName
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Value, c.Source = "group.coordinator.rebalance.protocols", kmsg.StringPtr("classic"), kmsg.ConfigSourceStaticBrokerConfig
		rr.Configs = append(rr.Configs, c)
		resp.Resources = append(resp.Resources, rr)
		return resp, nil, true
	})
	r, err := Check(context.Background(), kip848Config(b, groupName(t), "doctor", newTestLog(t)))
	var failed *CheckFailedError
	if !errors.As(err, &failed) {
		t.Fatalf("Check: %v; want a failure of the broker check", err)
	}
	wantCheck(t, r, "broker", CheckFail, "group.coordinator.rebalance.protocols=classic")
}
