package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math"
	"math/big"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// 1. DescribeGroups describes only classic groups: a KIP-848 group is Dead, with no error before
// v6 and GROUP_ID_NOT_FOUND from v6. A classic group is described as it is.
func TestAsKafkaDescribeGroupsConsumerGroupIsDead(t *testing.T) {
	eachBroker(t, instant, []kfake.Opt{kfake.SeedTopics(1, "t"), kip848}, func(t *testing.T, b *Broker, asKafka bool) {
		v5 := kversion.V4_0_0()
		v5.SetMaxKeyVersion(int16(kmsg.DescribeGroups), 5)
		cl, cl5 := newClient(t, b), newClient(t, b, kgo.MaxVersions(v5))
		join848(t, b, cl, "g848", "t")
		// A group that only commits is a classic group (OffsetMetadataManager creates it so).
		if code := commit(t, cl, "simple", "", -1, "t"); code != 0 {
			t.Fatalf("simple commit: error %d", code)
		}

		for _, c := range []struct {
			cl      *kgo.Client
			version int16
		}{{cl5, 5}, {cl, 6}} {
			req := kmsg.NewPtrDescribeGroupsRequest()
			req.Groups = []string{"g848", "simple"}
			resp := routed[*kmsg.DescribeGroupsResponse](t, c.cl, req)
			if resp.Version != c.version {
				t.Fatalf("DescribeGroups went at v%d, want v%d", resp.Version, c.version)
			}
			g, simple := resp.Groups[0], resp.Groups[1]
			if simple.ErrorCode != 0 || simple.State != "Empty" {
				t.Errorf("v%d: the classic group is %q, error %d; want Empty, no error", c.version, simple.State, simple.ErrorCode)
			}
			switch {
			case !asKafka && (g.ErrorCode != 0 || g.State == "Dead"):
				t.Errorf("v%d: kfake describes the KIP-848 group as %q, error %d; want it alive", c.version, g.State, g.ErrorCode)
			case asKafka && c.version == 5 && (g.State != "Dead" || g.ErrorCode != 0 || len(g.Members) != 0):
				t.Errorf("v5: the KIP-848 group is %q, error %d, %d members; want Dead, no error, none", g.State, g.ErrorCode, len(g.Members))
			case asKafka && c.version == 6 && (g.State != "Dead" || g.ErrorCode != kerr.GroupIDNotFound.Code || g.ErrorMessage == nil):
				t.Errorf("v6: the KIP-848 group is %q, error %d; want Dead, GROUP_ID_NOT_FOUND with a message", g.State, g.ErrorCode)
			}
		}
	})
}

// 1a. A group's result that carries an error comes without the principal's operations on the group:
// KafkaApis fills them in only for results without one. DescribeGroups v6 answers a group that
// does not exist with GROUP_ID_NOT_FOUND (KIP-1043), as ConsumerGroupDescribe does; kfake fills
// them in for both.
func TestAsKafkaOperationsOnlyWithoutError(t *testing.T) {
	eachBroker(t, instant, []kfake.Opt{kfake.SeedTopics(1, "t"), kip848}, func(t *testing.T, b *Broker, asKafka bool) {
		cl := newClient(t, b)
		findCoordinator(t, cl, "nobody")
		dg := kmsg.NewPtrDescribeGroupsRequest()
		dg.Groups, dg.IncludeAuthorizedOperations = []string{"nobody"}, true
		g := routed[*kmsg.DescribeGroupsResponse](t, cl, dg).Groups[0]
		cgd := kmsg.NewPtrConsumerGroupDescribeRequest()
		cgd.Groups, cgd.IncludeAuthorizedOperations = []string{"nobody"}, true
		cg := routed[*kmsg.ConsumerGroupDescribeResponse](t, cl, cgd).Groups[0]
		if g.ErrorCode != kerr.GroupIDNotFound.Code || cg.ErrorCode != kerr.GroupIDNotFound.Code {
			t.Fatalf("a group that does not exist: DescribeGroups error %d, ConsumerGroupDescribe error %d; want GROUP_ID_NOT_FOUND from both",
				g.ErrorCode, cg.ErrorCode)
		}
		for what, ops := range map[string]int32{"DescribeGroups": g.AuthorizedOperations, "ConsumerGroupDescribe": cg.AuthorizedOperations} {
			if unset := ops == math.MinInt32; unset != asKafka {
				t.Errorf("%s: operations %d on a group that does not exist; want them unset: %v", what, ops, asKafka)
			}
		}
	})
}

// 1b. FindCoordinator for a transactional id creates __transaction_state on a cluster that lacks
// it, and answers COORDINATOR_NOT_AVAILABLE meanwhile, as one for a group creates
// __consumer_offsets (KafkaApis.getCoordinator, getOrCreateInternalTopic); only for a principal
// that may describe the key, which DescribeTransactions, sent to any broker, tells without
// creating anything.
func TestAsKafkaTransactionStateCreated(t *testing.T) {
	opts := aclBroker(allow(kmsg.ACLResourceTypeTransactionalId, "mine", kmsg.ACLOperationDescribe))
	eachBroker(t, []KafkaOpt{OffsetsTopicCreation(time.Hour)}, opts, func(t *testing.T, b *Broker, asKafka bool) {
		cl := newClient(t, b, user("alice", "alice-pw"))
		created := func() []string {
			if !asKafka {
				return nil
			}
			return b.Kafka.InternalTopics()
		}
		dt := kmsg.NewPtrDescribeTransactionsRequest()
		dt.TransactionalIDs = []string{"theirs", "mine"}
		states := direct[*kmsg.DescribeTransactionsResponse](t, cl, 0, dt).TransactionStates
		if len(states) != 2 || states[0].ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code || states[1].ErrorCode == kerr.TransactionalIDAuthorizationFailed.Code {
			t.Fatalf("DescribeTransactions: %+v; want theirs refused and mine not", states)
		}
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorType, fc.CoordinatorKeys = 1, []string{"theirs"}
		if c := direct[*kmsg.FindCoordinatorResponse](t, cl, 0, fc).Coordinators[0]; c.ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code {
			t.Errorf("FindCoordinator for a transactional id alice may not describe: error %d", c.ErrorCode)
		}
		if got := created(); len(got) != 0 {
			t.Fatalf("created %v before any lookup a principal was allowed", got)
		}
		fc.CoordinatorKeys = []string{"mine"}
		c := direct[*kmsg.FindCoordinatorResponse](t, cl, 0, fc).Coordinators[0]
		if want := map[bool]int16{true: kerr.CoordinatorNotAvailable.Code}[asKafka]; c.ErrorCode != want {
			t.Errorf("FindCoordinator for a transactional id: error %d, want %d", c.ErrorCode, want)
		}
		if asKafka && !slices.Equal(created(), []string{"__transaction_state"}) {
			t.Errorf("created %v, want __transaction_state", created())
		}
	})
}

// aclBroker is a broker with SASL PLAIN users: admin, a superuser, and alice, with acls.
func aclBroker(acls ...kfake.ACL) []kfake.Opt {
	return []kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "alice", "alice-pw", acls...)}
}

func allow(res kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
	return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
}

// 2. ConsumerGroupDescribe names the members' topics, and on 4.0 refuses a group whose topics the
// principal may not describe with TOPIC_AUTHORIZATION_FAILED; 3.9 does not check them.
func TestAsKafkaConsumerGroupDescribeTopics(t *testing.T) {
	opts := append(aclBroker(allow(kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationRead)), kfake.SeedTopics(1, "t"), kip848)
	describe := func(t *testing.T, cl *kgo.Client) kmsg.ConsumerGroupDescribeResponseGroup {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{"g"}
		return routed[*kmsg.ConsumerGroupDescribeResponse](t, cl, req).Groups[0]
	}
	for _, version := range []KafkaVersion{Kafka40, Kafka39} {
		t.Run(version.String(), func(t *testing.T) {
			// 3.9 serves the consumer protocol only where an operator enables it.
			eachBroker(t, append(instant, Version(version), ConsumerProtocol(true)), opts, func(t *testing.T, b *Broker, asKafka bool) {
				admin := newClient(t, b, user("admin", "admin-pw"))
				alice := newClient(t, b, user("alice", "alice-pw"))
				join848(t, b, admin, "g", "t")

				g := describe(t, admin)
				if g.ErrorCode != 0 || len(g.Members) != 1 || len(g.Members[0].Assignment.TopicPartitions) != 1 {
					t.Fatalf("admin's description: %+v", g)
				}
				if name := g.Members[0].Assignment.TopicPartitions[0].Topic; (name == "t") != asKafka {
					t.Errorf("the assigned topic is named %q", name)
				}

				g = describe(t, alice)
				refused := asKafka && version == Kafka40
				if want := map[bool]int16{true: kerr.TopicAuthorizationFailed.Code}[refused]; g.ErrorCode != want {
					t.Errorf("alice, who may not describe topic t, gets error %d; want %d", g.ErrorCode, want)
				}
				if refused && len(g.Members) != 0 {
					t.Errorf("a refused group still shows %d members", len(g.Members))
				}
			})
		})
	}
}

// 3. Coordinator errors inside per-group results: COORDINATOR_NOT_AVAILABLE from FindCoordinator
// and NOT_COORDINATOR elsewhere while __consumer_offsets is created, COORDINATOR_LOAD_IN_PROGRESS
// while a coordinator loads after a move.
func TestAsKafkaCoordinatorErrors(t *testing.T) {
	t.Run("fresh cluster", func(t *testing.T) {
		eachBroker(t, []KafkaOpt{OffsetsTopicCreation(time.Hour)}, nil, func(t *testing.T, b *Broker, asKafka bool) {
			cl := newClient(t, b)
			fc := kmsg.NewPtrFindCoordinatorRequest()
			fc.CoordinatorKeys = []string{"g"}
			c := direct[*kmsg.FindCoordinatorResponse](t, cl, 0, fc).Coordinators[0]
			if want := map[bool]int16{true: kerr.CoordinatorNotAvailable.Code}[asKafka]; c.ErrorCode != want {
				t.Errorf("FindCoordinator: error %d, want %d", c.ErrorCode, want)
			}
			dg := kmsg.NewPtrDescribeGroupsRequest()
			dg.Groups = []string{"g"}
			g := direct[*kmsg.DescribeGroupsResponse](t, cl, 0, dg).Groups[0]
			// kfake: a group that does not exist (v6).
			if want := map[bool]int16{false: kerr.GroupIDNotFound.Code, true: kerr.NotCoordinator.Code}[asKafka]; g.ErrorCode != want {
				t.Errorf("DescribeGroups: group error %d, want %d", g.ErrorCode, want)
			}
		})
	})

	// Kafka checks Describe on the group before it looks for the coordinator (KafkaApis.
	// getCoordinator): a principal refused the group is told so, not to try again, and creates
	// nothing.
	t.Run("unauthorized while creating", func(t *testing.T) {
		opts := aclBroker(allow(kmsg.ACLResourceTypeGroup, "mine", kmsg.ACLOperationDescribe))
		eachBroker(t, []KafkaOpt{OffsetsTopicCreation(time.Hour)}, opts, func(t *testing.T, b *Broker, asKafka bool) {
			// librdkafka asks at v2, one group a request; kgo at v4 and later, several.
			v3 := kversion.V4_0_0()
			v3.SetMaxKeyVersion(int16(kmsg.FindCoordinator), 3)
			for _, cl := range []*kgo.Client{newClient(t, b, user("alice", "alice-pw"), kgo.MaxVersions(v3)), newClient(t, b, user("alice", "alice-pw"))} {
				fc := kmsg.NewPtrFindCoordinatorRequest()
				fc.CoordinatorKey, fc.CoordinatorKeys = "theirs", []string{"theirs", "mine"}
				resp := direct[*kmsg.FindCoordinatorResponse](t, cl, 0, fc)
				version := resp.Version
				if version < 4 {
					if resp.ErrorCode != kerr.GroupAuthorizationFailed.Code {
						t.Errorf("v%d: error %d for a group alice may not describe, want GROUP_AUTHORIZATION_FAILED", version, resp.ErrorCode)
					}
					continue
				}
				want := map[string]int16{"theirs": kerr.GroupAuthorizationFailed.Code, "mine": map[bool]int16{true: kerr.CoordinatorNotAvailable.Code}[asKafka]}
				for _, c := range resp.Coordinators {
					if c.ErrorCode != want[c.Key] {
						t.Errorf("v%d: group %s: error %d, want %d", version, c.Key, c.ErrorCode, want[c.Key])
					}
				}
			}
		})
	})

	t.Run("after a move", func(t *testing.T) {
		eachBroker(t, instant, []kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(1, "t")}, func(t *testing.T, b *Broker, asKafka bool) {
			cl := newClient(t, b)
			findCoordinator(t, cl, "g")
			if code := commit(t, cl, "g", "", -1, "t"); code != 0 {
				t.Fatalf("creating the group: error %d", code)
			}
			describe := func(node int32) int16 {
				req := kmsg.NewPtrDescribeGroupsRequest()
				req.Groups = []string{"g"}
				return direct[*kmsg.DescribeGroupsResponse](t, cl, node, req).Groups[0].ErrorCode
			}
			old := b.CoordinatorFor("g")
			if code := describe(old); code != 0 {
				t.Fatalf("before the move: error %d", code)
			}
			if asKafka {
				b.Kafka.SetCoordinatorLoad(time.Hour)
			}
			// A rehash moves a group with two chances in three among three nodes.
			for b.CoordinatorFor("g") == old {
				b.RehashCoordinators()
			}
			now := b.CoordinatorFor("g")
			if code := describe(old); code != kerr.NotCoordinator.Code {
				t.Errorf("the old coordinator answers %d, want NOT_COORDINATOR", code)
			}
			want := map[bool]int16{true: kerr.CoordinatorLoadInProgress.Code}[asKafka]
			if code := describe(now); code != want {
				t.Errorf("DescribeGroups at the new coordinator: group error %d, want %d", code, want)
			}
			of := kmsg.NewPtrOffsetFetchRequest()
			og := kmsg.NewOffsetFetchRequestGroup()
			og.Group = "g"
			of.Groups = append(of.Groups, og)
			if code := direct[*kmsg.OffsetFetchResponse](t, cl, now, of).Groups[0].ErrorCode; code != want {
				t.Errorf("OffsetFetch at the new coordinator: group error %d, want %d", code, want)
			}
			hb := kmsg.NewPtrHeartbeatRequest()
			hb.Group, hb.MemberID = "g", "nobody"
			code := direct[*kmsg.HeartbeatResponse](t, cl, now, hb).ErrorCode
			if want := map[bool]int16{false: kerr.UnknownMemberID.Code, true: kerr.CoordinatorLoadInProgress.Code}[asKafka]; code != want {
				t.Errorf("Heartbeat at the new coordinator: error %d, want %d", code, want)
			}
			if !asKafka {
				return
			}
			// The load ends.
			b.Kafka.SetCoordinatorLoad(0)
			for b.CoordinatorFor("g") == now {
				b.RehashCoordinators()
			}
			if code := describe(b.CoordinatorFor("g")); code != 0 {
				t.Errorf("after a move with no load: group error %d", code)
			}
		})
	})
}

// 4. Cluster authorized operations are 0 unless the principal may describe the cluster.
func TestAsKafkaClusterAuthorizedOperations(t *testing.T) {
	opts := aclBroker(allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationIdempotentWrite))
	const describe = 1 << kmsg.ACLOperationDescribe
	eachBroker(t, instant, opts, func(t *testing.T, b *Broker, asKafka bool) {
		v10 := kversion.V4_0_0()
		v10.SetMaxKeyVersion(int16(kmsg.Metadata), 10)
		for _, c := range []struct {
			who  string
			cl   *kgo.Client
			want int32 // under AsKafka; kfake gives what the principal has
		}{
			{"alice", newClient(t, b, user("alice", "alice-pw"), kgo.MaxVersions(v10)), 0},
			{"admin", newClient(t, b, user("admin", "admin-pw"), kgo.MaxVersions(v10)), -1},
		} {
			md := kmsg.NewPtrMetadataRequest()
			md.IncludeClusterAuthorizedOperations = true
			mops := direct[*kmsg.MetadataResponse](t, c.cl, 0, md).AuthorizedOperations
			dc := kmsg.NewPtrDescribeClusterRequest()
			dc.IncludeClusterAuthorizedOperations = true
			dops := direct[*kmsg.DescribeClusterResponse](t, c.cl, 0, dc).ClusterAuthorizedOperations
			for what, ops := range map[string]int32{"Metadata v10": mops, "DescribeCluster": dops} {
				switch {
				case c.who == "admin" && ops&describe == 0:
					t.Errorf("%s: admin's operations %b lack Describe", what, ops)
				case c.who == "alice" && !asKafka && ops == 0:
					t.Errorf("%s: kfake gives alice no operations", what)
				case c.who == "alice" && asKafka && ops != c.want:
					t.Errorf("%s: alice, who may not describe the cluster, gets %b, want 0", what, ops)
				}
			}
			// Not asked for: Integer.MIN_VALUE in both.
			dc.IncludeClusterAuthorizedOperations = false
			if ops := direct[*kmsg.DescribeClusterResponse](t, c.cl, 0, dc).ClusterAuthorizedOperations; ops != math.MinInt32 {
				t.Errorf("DescribeCluster not asked for operations gives %d", ops)
			}
		}
	})
}

// CreateTopics tells a topic's partitions, replication factor and settings only to a principal
// that may describe the topic's configs, validating or not; to others -1, -1, none, and a config
// error of TOPIC_AUTHORIZATION_FAILED (seen on Apache Kafka 4.4: the doctor's validating
// CreateTopics, internal/realkafka/realtest's TestACLsOnKafka).
func TestAsKafkaCreateTopicsConfigs(t *testing.T) {
	opts := aclBroker(allow(kmsg.ACLResourceTypeTopic, "told", kmsg.ACLOperationCreate), allow(kmsg.ACLResourceTypeTopic, "told", kmsg.ACLOperationDescribeConfigs),
		allow(kmsg.ACLResourceTypeTopic, "untold", kmsg.ACLOperationCreate))
	eachBroker(t, instant, opts, func(t *testing.T, b *Broker, asKafka bool) {
		cl := newClient(t, b, user("alice", "alice-pw"))
		for _, validate := range []bool{true, false} {
			req := kmsg.NewPtrCreateTopicsRequest()
			req.ValidateOnly = validate
			for _, name := range []string{"told", "untold"} {
				rt := kmsg.NewCreateTopicsRequestTopic()
				rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 2, -1
				req.Topics = append(req.Topics, rt)
			}
			for _, rt := range routed[*kmsg.CreateTopicsResponse](t, cl, req).Topics {
				if rt.ErrorCode != 0 {
					t.Fatalf("validate %v: creating %s: error %d", validate, rt.Topic, rt.ErrorCode)
				}
				told := rt.Topic == "told" || !asKafka
				switch {
				case told && (rt.NumPartitions != 2 || rt.ReplicationFactor != 1 || rt.ConfigErrorCode != 0):
					t.Errorf("validate %v: %s: %d partitions, replication factor %d, config error %d; want 2, 1, none",
						validate, rt.Topic, rt.NumPartitions, rt.ReplicationFactor, rt.ConfigErrorCode)
				case !told && (rt.NumPartitions != -1 || rt.ReplicationFactor != -1 || len(rt.Configs) != 0 || rt.ConfigErrorCode != kerr.TopicAuthorizationFailed.Code):
					t.Errorf("validate %v: %s, which alice may not describe the configs of: %d partitions, replication factor %d, %d configs, "+
						"config error %d; want -1, -1, none, TOPIC_AUTHORIZATION_FAILED", validate, rt.Topic, rt.NumPartitions, rt.ReplicationFactor,
						len(rt.Configs), rt.ConfigErrorCode)
				}
			}
		}
	})
}

// 4a. A topic that Metadata refuses comes without authorized operations (Integer.MIN_VALUE); kfake
// gives it 0.
func TestAsKafkaRefusedTopicOperations(t *testing.T) {
	opts := append(aclBroker(), kfake.SeedTopics(1, "hidden"))
	eachBroker(t, instant, opts, func(t *testing.T, b *Broker, asKafka bool) {
		md := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr("hidden")
		md.Topics = append(md.Topics, mt)
		md.IncludeTopicAuthorizedOperations = true
		tp := direct[*kmsg.MetadataResponse](t, newClient(t, b, user("alice", "alice-pw")), 0, md).Topics[0]
		if tp.ErrorCode != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("alice's Metadata of a topic she may not describe: error %d, want TOPIC_AUTHORIZATION_FAILED", tp.ErrorCode)
		}
		if want := int32(math.MinInt32); asKafka && tp.AuthorizedOperations != want {
			t.Errorf("the refused topic's operations are %d, want %d (unset)", tp.AuthorizedOperations, want)
		}
	})
}

// 4b. ApiVersions below v4 lists no supported feature whose least level is 0; v4 lists them all.
func TestAsKafkaFeaturesBeforeV4(t *testing.T) {
	for _, v := range []int16{3, 4} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = v
		resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		for _, f := range []struct {
			name     string
			min, max int16
		}{{"group.version", 0, 1}, {"kraft.version", 1, 1}} {
			sf := kmsg.NewApiVersionsResponseSupportedFeature()
			sf.Name, sf.MinVersion, sf.MaxVersion = f.name, f.min, f.max
			resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
		}
		changed := featuresBeforeV4(req, resp)
		var names []string
		for _, f := range resp.SupportedFeatures {
			names = append(names, f.Name)
		}
		want := []string{"group.version", "kraft.version"}
		if v < 4 {
			want = want[1:]
		}
		if !slices.Equal(names, want) || changed != (v < 4) {
			t.Errorf("v%d: features %v, changed %v; want %v", v, names, changed, want)
		}
	}
}

// 5. DescribeConfigs: refused resources last; a GROUP setting the group does not override has the
// broker's value with source DEFAULT_CONFIG; 3.9 has no GROUP resource.
func TestAsKafkaDescribeConfigs(t *testing.T) {
	t.Run("order", func(t *testing.T) {
		opts := append(aclBroker(allow(kmsg.ACLResourceTypeTopic, "b", kmsg.ACLOperationDescribeConfigs)), kfake.SeedTopics(1, "a", "b"))
		eachBroker(t, instant, opts, func(t *testing.T, b *Broker, asKafka bool) {
			alice := newClient(t, b, user("alice", "alice-pw"))
			got := describeConfigs(t, alice, kmsg.ConfigResourceTypeTopic, "a", kmsg.ConfigResourceTypeTopic, "b")
			want := map[bool][]string{false: {"a:29", "b:0"}, true: {"b:0", "a:29"}}[asKafka]
			if !slices.Equal(got, want) {
				t.Errorf("answer order %v, want %v", got, want)
			}
		})
	})

	t.Run("group refused", func(t *testing.T) {
		opts := aclBroker(allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationDescribeConfigs))
		eachBroker(t, append(instant, GroupConfigsDeniedTo("alice")), opts, func(t *testing.T, b *Broker, asKafka bool) {
			alice := newClient(t, b, user("alice", "alice-pw"))
			got := describeConfigs(t, alice, kmsg.ConfigResourceTypeGroupConfig, "g", kmsg.ConfigResourceTypeBroker, "0")
			want := map[bool][]string{false: {"g:0", "0:0"}, true: {"0:0", "g:30"}}[asKafka]
			if !slices.Equal(got, want) {
				t.Errorf("answer %v, want %v", got, want)
			}
		})
	})

	t.Run("group defaults", func(t *testing.T) {
		opts := []kfake.Opt{kfake.BrokerConfigs(map[string]string{"group.consumer.session.timeout.ms": "7000"})}
		eachBroker(t, instant, opts, func(t *testing.T, b *Broker, asKafka bool) {
			cl := newClient(t, b)
			b.SetGroupConfigs("overridden", map[string]string{"consumer.session.timeout.ms": "9000"})
			for _, c := range []struct {
				group, value string
				source       kmsg.ConfigSource
			}{
				{"plain", map[bool]string{false: "<nil>", true: "7000"}[asKafka], kmsg.ConfigSourceDefaultConfig},
				{"overridden", "9000", kmsg.ConfigSourceGroupConfig},
			} {
				req := kmsg.NewPtrDescribeConfigsRequest()
				r := kmsg.NewDescribeConfigsRequestResource()
				r.ResourceType, r.ResourceName, r.ConfigNames = kmsg.ConfigResourceTypeGroupConfig, c.group, []string{"consumer.session.timeout.ms"}
				req.Resources = append(req.Resources, r)
				res := direct[*kmsg.DescribeConfigsResponse](t, cl, 0, req).Resources[0]
				if res.ErrorCode != 0 || len(res.Configs) != 1 {
					t.Fatalf("group %s: %+v", c.group, res)
				}
				value := "<nil>"
				if v := res.Configs[0].Value; v != nil {
					value = *v
				}
				if value != c.value || res.Configs[0].Source != c.source {
					t.Errorf("group %s: %s from source %v, want %s from %v", c.group, value, res.Configs[0].Source, c.value, c.source)
				}
			}
		})
	})

	t.Run("3.9", func(t *testing.T) {
		eachBroker(t, append(instant, Version(Kafka39)), nil, func(t *testing.T, b *Broker, asKafka bool) {
			got := describeConfigs(t, newClient(t, b), kmsg.ConfigResourceTypeGroupConfig, "g", kmsg.ConfigResourceTypeBroker, "0")
			want := map[bool][]string{false: {"g:0", "0:0"}, true: {"g:42", "0:42"}}[asKafka] // 42: INVALID_REQUEST
			if !slices.Equal(got, want) {
				t.Errorf("answer %v, want %v", got, want)
			}
		})
	})
}

// describeConfigs describes the resources given as type, name pairs at node 0, and returns
// "name:error code" for each result in the answer's order.
func describeConfigs(t *testing.T, cl *kgo.Client, resources ...any) []string {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	for i := 0; i < len(resources); i += 2 {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = resources[i].(kmsg.ConfigResourceType), resources[i+1].(string)
		req.Resources = append(req.Resources, r)
	}
	var got []string
	for _, r := range direct[*kmsg.DescribeConfigsResponse](t, cl, 0, req).Resources {
		got = append(got, r.ResourceName+":"+strconv.Itoa(int(r.ErrorCode)))
	}
	return got
}

// 6a. A connection whose SASL session has ended is closed at its next request other than a
// SaslHandshake; re-authentication renews it.
func TestAsKafkaReauthentication(t *testing.T) {
	const lifetime = 300 * time.Millisecond
	opts := []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("PLAIN", "svc", "pw"),
		kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": strconv.Itoa(int(lifetime.Milliseconds()))})}
	metadata := func(c *rawConn) error {
		_, err := c.do(kmsg.NewPtrMetadataRequest(), 7)
		return err
	}
	eachBroker(t, append(instant, ReauthAfter(lifetime)), opts, func(t *testing.T, b *Broker, asKafka bool) {
		c := dialRaw(t, b.Addr)
		if got := c.plainAuth(t, "svc", "pw"); got != lifetime.Milliseconds() {
			t.Fatalf("session lifetime %d ms, want %d", got, lifetime.Milliseconds())
		}
		if err := metadata(c); err != nil {
			t.Fatalf("within the session: %v", err)
		}
		time.Sleep(lifetime + 100*time.Millisecond) // the session ends
		err := metadata(c)
		if asKafka && !errors.Is(err, io.EOF) {
			t.Errorf("after the session: %v, want the connection closed", err)
		}
		if !asKafka && err != nil {
			t.Errorf("kfake after the session: %v", err)
		}

		// Re-authenticating after the end renews the session.
		c = dialRaw(t, b.Addr)
		c.plainAuth(t, "svc", "pw")
		time.Sleep(lifetime + 100*time.Millisecond)
		c.plainAuth(t, "svc", "pw")
		if err := metadata(c); err != nil {
			t.Errorf("after re-authenticating: %v", err)
		}

		// kgo re-authenticates by itself.
		cl := newClient(t, b, user("svc", "pw"))
		for range 3 {
			time.Sleep(lifetime)
			if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctxT(t), cl); err != nil {
				t.Fatalf("kgo across sessions: %v", err)
			}
		}
	})
}

// 6b. A connection idle for connections.max.idle.ms is closed.
func TestAsKafkaIdleConnection(t *testing.T) {
	const idle = 300 * time.Millisecond
	eachBroker(t, append(instant, IdleTimeout(idle)), nil, func(t *testing.T, b *Broker, asKafka bool) {
		c := dialRaw(t, b.Addr)
		if _, err := c.do(kmsg.NewPtrMetadataRequest(), 7); err != nil {
			t.Fatal(err)
		}
		// kfake keeps it: wait for three idle periods. The broker closes it after one.
		wait := await
		if !asKafka {
			wait = 3 * idle
		}
		if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
			t.Fatal(err)
		}
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		switch {
		case asKafka && !errors.Is(err, io.EOF):
			t.Errorf("idle connection: %v, want it closed", err)
		case !asKafka && !(errors.As(err, &ne) && ne.Timeout()):
			t.Errorf("kfake on an idle connection: %v, want it kept", err)
		}
	})
}

// 7. An acks=-1 produce waits for the node's ack delay, and past its timeout is answered
// REQUEST_TIMED_OUT; acks=1 does not wait.
func TestAsKafkaSlowAcks(t *testing.T) {
	eachBroker(t, instant, []kfake.Opt{kfake.SeedTopics(1, "t")}, func(t *testing.T, b *Broker, asKafka bool) {
		cl := newClient(t, b) // acks=-1
		leaderAck := newClient(t, b, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
		if asKafka {
			b.Kafka.SetAckDelay(0, time.Hour)
		}
		if code := produce(t, leaderAck, "t", time.Second); code != 0 {
			t.Errorf("acks=1: error %d", code)
		}
		want := map[bool]int16{true: kerr.RequestTimedOut.Code}[asKafka]
		if code := produce(t, cl, "t", 300*time.Millisecond); code != want {
			t.Errorf("acks=-1 past its timeout: error %d, want %d", code, want)
		}

		// Held until the node acknowledges: not visible meanwhile.
		hwm := func() int64 { return b.PartitionInfo("t", 0).HighWatermark }
		before := hwm()
		done := make(chan int16, 1)
		go func() { done <- produce(t, cl, "t", await) }()
		if asKafka {
			time.Sleep(200 * time.Millisecond) // the request reaches the broker
			select {
			case code := <-done:
				t.Fatalf("held produce answered with %d before the acknowledgement", code)
			default:
			}
			if got := hwm(); got != before {
				t.Errorf("high watermark moved from %d to %d before the acknowledgement", before, got)
			}
			b.Kafka.SetAckDelay(0, 0)
		}
		if code := <-done; code != 0 {
			t.Errorf("acknowledged produce: error %d", code)
		}
		if got := hwm(); got != before+1 {
			t.Errorf("high watermark %d after the produce, want %d", got, before+1)
		}
	})
}

// 8. An OffsetCommit does not keep a KIP-848 member's session alive; only heartbeats do.
func TestAsKafkaCommitsDoNotRefreshConsumerSessions(t *testing.T) {
	eachBroker(t, instant, []kfake.Opt{kfake.SeedTopics(1, "t"), kip848}, func(t *testing.T, b *Broker, asKafka bool) {
		cl := newClient(t, b)
		member, epoch := join848(t, b, cl, "g", "t")
		// Commit every 100 ms, no heartbeat, for three session timeouts (1 s), or until a commit is
		// refused.
		var code int16
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end) && code == 0; time.Sleep(100 * time.Millisecond) {
			code = commit(t, cl, "g", member, epoch, "t")
		}
		members := len(b.GroupInfo("g").Members)
		if asKafka && (code != kerr.UnknownMemberID.Code || members != 0) {
			t.Errorf("committing without heartbeats: commit error %d, %d members; want UNKNOWN_MEMBER_ID, none", code, members)
		}
		if !asKafka && (code != 0 || members != 1) {
			t.Errorf("kfake, committing without heartbeats for 3 session timeouts: commit error %d, %d members; want the member kept", code, members)
		}
		if !asKafka {
			return
		}
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Group, hb.MemberID, hb.MemberEpoch = "g", member, epoch
		if code := routed[*kmsg.ConsumerGroupHeartbeatResponse](t, cl, hb).ErrorCode; code != kerr.UnknownMemberID.Code {
			t.Errorf("the expired member's heartbeat: error %d, want UNKNOWN_MEMBER_ID", code)
		}
	})
}

func TestAsKafkaEnv(t *testing.T) {
	for _, c := range []struct {
		value string
		on    bool
		ver   KafkaVersion
		bad   bool
	}{{"", false, 0, false}, {"0", false, 0, false}, {"1", true, Kafka40, false}, {"4.0", true, Kafka40, false}, {"3.9", true, Kafka39, false}, {"yes", false, 0, true}} {
		t.Run(c.value, func(t *testing.T) {
			t.Setenv(AsKafkaEnv, c.value)
			cfg, rest, err := splitAsKafka([]kfake.Opt{kfake.NumBrokers(1)})
			switch {
			case c.bad:
				if err == nil {
					t.Fatalf("%s=%q accepted", AsKafkaEnv, c.value)
				}
				return
			case err != nil:
				t.Fatal(err)
			case (cfg != nil) != c.on || (cfg != nil && cfg.version != c.ver) || len(rest) != 1:
				t.Fatalf("%s=%q: %+v, %d options left", AsKafkaEnv, c.value, cfg, len(rest))
			}
		})
	}
	// An explicit AsKafka wins over the environment.
	t.Setenv(AsKafkaEnv, "3.9")
	if cfg, _, _ := splitAsKafka([]kfake.Opt{AsKafka()}); cfg == nil || cfg.version != Kafka40 {
		t.Errorf("AsKafka() under %s=3.9: %+v", AsKafkaEnv, cfg)
	}
}

// AsKafkaByDefault is AsKafka with its options while the environment says nothing, and gives way
// to the environment when it does: 0 for plain kfake.
func TestAsKafkaByDefault(t *testing.T) {
	for _, c := range []struct {
		value string
		on    bool
		ver   KafkaVersion
		load  time.Duration
	}{{"", true, Kafka39, time.Second}, {"0", false, 0, 0}, {"1", true, Kafka40, 500 * time.Millisecond}, {"3.9", true, Kafka39, 500 * time.Millisecond}} {
		t.Run(c.value, func(t *testing.T) {
			t.Setenv(AsKafkaEnv, c.value)
			cfg, rest, err := splitAsKafka([]kfake.Opt{kfake.NumBrokers(1), AsKafkaByDefault(Version(Kafka39), CoordinatorLoad(time.Second))})
			switch {
			case err != nil:
				t.Fatal(err)
			case (cfg != nil) != c.on || (cfg != nil && (cfg.version != c.ver || cfg.load != c.load)) || len(rest) != 1:
				t.Fatalf("%s=%q: %+v, %d options left", AsKafkaEnv, c.value, cfg, len(rest))
			}
		})
	}
	// A test's own AsKafka, with its knobs, wins whichever comes first.
	t.Setenv(AsKafkaEnv, "")
	for _, opts := range [][]kfake.Opt{{AsKafka(IdleTimeout(time.Second)), AsKafkaByDefault()}, {AsKafkaByDefault(), AsKafka(IdleTimeout(time.Second))}} {
		if cfg, rest, _ := splitAsKafka(opts); cfg == nil || cfg.idle != time.Second || len(rest) != 0 {
			t.Errorf("AsKafka(IdleTimeout(1s)) beside AsKafkaByDefault(): %+v, %d options left", cfg, len(rest))
		}
	}
}

func TestSASLUser(t *testing.T) {
	for _, c := range []struct {
		mechanism, msg, user string
		ok                   bool
	}{
		{"PLAIN", "\x00alice\x00pw", "alice", true},
		{"PLAIN", "alice\x00alice\x00pw", "alice", true},
		{"PLAIN", "garbage", "", false},
		{"SCRAM-SHA-256", "n,,n=al=2Cice=3D,r=nonce", "al,ice=", true},
		{"SCRAM-SHA-512", "c=biws,r=nonce,p=proof", "", false},
		{"OAUTHBEARER", "n,,\x01auth=Bearer x\x01\x01", "", false},
	} {
		if u, ok := saslUser(c.mechanism, []byte(c.msg)); u != c.user || ok != c.ok {
			t.Errorf("saslUser(%s, %q) = %q, %v; want %q, %v", c.mechanism, c.msg, u, ok, c.user, c.ok)
		}
	}
}

// Under kfake.TLS the bytes that reach AsKafka are encrypted: it relays them as they are.
func TestAsKafkaRelaysTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	b := StartT(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}), AsKafka(instant...))
	newClient(t, b, kgo.DialTLSConfig(&tls.Config{RootCAs: pool}))
}
