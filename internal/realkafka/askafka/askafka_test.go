package askafka

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/realkafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What goneli's clients ask of a warm cluster, compared on Kafka and AsKafka.
func TestAsKafkaAgainstKafka(t *testing.T) {
	rk := realkafka.Shared(t, realkafka.Options{})
	p := newPair(t, rk, true, nil)
	t.Logf("%s against %s", p.real.name, p.as.name)
	for _, s := range []*side{p.real, p.as} {
		p.makeGroups(t, s)
	}
	compare(t, p, []kcase{
		apiVersionsCase(),
		metadataCase(),
		autoCreateCase(),
		createTopicsCase(),
		findCoordinatorCase(),
		describeGroupsCase(5),
		describeGroupsCase(6),
		consumerGroupDescribeCase(),
		offsetFetchCase(),
		brokerConfigsCase(),
		topicConfigsCase(),
		groupConfigsCase(),
		alterGroupConfigsCase(),
		produceCase(),
		transactionsCase(),
		listOffsetsCase(),
		offsetCommitRebalanceCase(),
		sidechanCase(),
		doctorCase(),
		kip848SessionCase(),
	})
}

// apiKeys are the requests goneli's clients send: librdkafka's consumer, producer and admin client,
// and goneli's own connection.
var apiKeys = []kmsg.Key{
	kmsg.Produce, kmsg.Fetch, kmsg.ListOffsets, kmsg.Metadata, kmsg.OffsetCommit, kmsg.OffsetFetch,
	kmsg.FindCoordinator, kmsg.JoinGroup, kmsg.Heartbeat, kmsg.LeaveGroup, kmsg.SyncGroup,
	kmsg.DescribeGroups, kmsg.ListGroups, kmsg.SASLHandshake, kmsg.ApiVersions, kmsg.CreateTopics,
	kmsg.InitProducerID, kmsg.OffsetForLeaderEpoch, kmsg.AddPartitionsToTxn, kmsg.AddOffsetsToTxn,
	kmsg.EndTxn, kmsg.TxnOffsetCommit, kmsg.DescribeConfigs, kmsg.SASLAuthenticate, kmsg.CreatePartitions,
	kmsg.IncrementalAlterConfigs, kmsg.DescribeCluster, kmsg.DescribeTransactions,
	kmsg.DescribeTopicPartitions, kmsg.ConsumerGroupHeartbeat, kmsg.ConsumerGroupDescribe,
}

// The request versions, and the features the doctor reads (group.version tells whether KIP-848 is
// enabled). Kafka after the release AsKafka models offers later versions; which one a client uses
// is the lower of its own highest and the broker's, and every field goneli reads is in both.
func apiVersionsCase() kcase {
	return kcase{
		name: "ApiVersions",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			req := kmsg.NewPtrApiVersionsRequest()
			req.ClientSoftwareName, req.ClientSoftwareVersion = "askafka-check", "1"
			r := s.dial(t).send(req, 3).(*kmsg.ApiVersionsResponse)
			o.set("error", "%s", code(r.ErrorCode))
			for _, key := range apiKeys {
				i := slices.IndexFunc(r.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == key.Int16() })
				if i < 0 {
					o.set(kmsg.NameForKey(key.Int16()), "absent")
					continue
				}
				o.set(kmsg.NameForKey(key.Int16()), "offered")
				o.set(kmsg.NameForKey(key.Int16())+" max", "%d", r.ApiKeys[i].MaxVersion)
				o.set(kmsg.NameForKey(key.Int16())+" min", "%d", r.ApiKeys[i].MinVersion)
			}
			// Below v4 Kafka leaves out the supported features whose least level is 0; the doctor
			// asks at the newest version both offer (kgo), v4 from Kafka 3.9 on.
			for _, v := range []int16{3, 4} {
				if v == 4 {
					req := kmsg.NewPtrApiVersionsRequest()
					req.ClientSoftwareName, req.ClientSoftwareVersion = "askafka-check", "1"
					r = s.dial(t).send(req, 4).(*kmsg.ApiVersionsResponse)
				}
				for _, f := range []string{"group.version", "transaction.version"} {
					supported, finalized := "absent", "0"
					for _, sf := range r.SupportedFeatures {
						if sf.Name == f {
							supported = itoa(int32(sf.MinVersion)) + "-" + itoa(int32(sf.MaxVersion))
						}
					}
					for _, ff := range r.FinalizedFeatures {
						if ff.Name == f {
							finalized = itoa(int32(ff.MaxVersionLevel))
						}
					}
					o.set("feature "+f+" at v"+itoa(int32(v)), "supported %s, finalized %s", supported, finalized)
				}
			}
			return o
		},
		argued: func(p *pair, d difference) string {
			field := d.field
			switch {
			case strings.HasSuffix(field, " min"):
				return "the oldest versions differ both ways (Kafka 4.0 dropped some that kfake serves, kfake lacks some of the " +
					"oldest): librdkafka 2.11.1 and kgo use the newest that both sides offer"
			case strings.HasSuffix(field, " max") || strings.HasPrefix(field, "feature "):
				return laterRelease(p, "versions and features added since")
			}
			return ""
		},
	}
}

// Metadata of a topic, with the authorized operations the doctor reads (no authorizer: every
// operation), and of one that does not exist, without creating it (the doctor's request).
func metadataCase() kcase {
	return kcase{
		name: "Metadata",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			topic, missing := p.name("md-topic"), p.name("md-missing")
			s.createTopic(t, topic, 3)
			w := s.dial(t)
			req := kmsg.NewPtrMetadataRequest()
			for _, name := range []string{topic, missing} {
				mt := kmsg.NewMetadataRequestTopic()
				mt.Topic = kmsg.StringPtr(name)
				req.Topics = append(req.Topics, mt)
			}
			req.AllowAutoTopicCreation = false
			req.IncludeTopicAuthorizedOperations, req.IncludeClusterAuthorizedOperations = true, true
			r := w.send(req, 10).(*kmsg.MetadataResponse)
			o.set("brokers", "%d", len(r.Brokers))
			o.set("controller", "%d", r.ControllerID)
			o.set("cluster operations", "%s", ops(r.AuthorizedOperations))
			for _, mt := range r.Topics {
				k := "topic " + p.strip(*mt.Topic)
				o.set(k+" error", "%s", code(mt.ErrorCode))
				o.set(k+" internal", "%v", mt.IsInternal)
				o.set(k+" partitions", "%d", len(mt.Partitions))
				if len(mt.Partitions) > 0 {
					p0 := mt.Partitions[0]
					o.set(k+" partition 0", "%s leader %d replicas %d isr %d", code(p0.ErrorCode), p0.Leader, len(p0.Replicas), len(p0.ISR))
				}
				o.set(k+" operations", "%s", ops(mt.AuthorizedOperations))
			}
			o.set("missing topic created", "%v", exists(t, w, missing))
			return o
		},
	}
}

// exists reports whether topic exists, asking without creating it.
func exists(t *testing.T, w *wire, topic string) bool {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, mt)
	req.AllowAutoTopicCreation = false
	r := w.send(req, 12).(*kmsg.MetadataResponse)
	return len(r.Topics) == 1 && r.Topics[0].ErrorCode == 0
}

// A metadata request that allows it creates a topic that does not exist (auto.create.topics.enable,
// Kafka's default), with num.partitions: librdkafka's producer and admin client ask so unless told
// otherwise, which goneli does (allow.auto.create.topics=false) since real Kafka showed it.
func autoCreateCase() kcase {
	return kcase{
		name: "Metadata creates a topic",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			topic := p.name("auto")
			w := s.dial(t)
			req := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(topic)
			req.Topics = append(req.Topics, mt)
			req.AllowAutoTopicCreation = true
			r := w.send(req, 12).(*kmsg.MetadataResponse)
			o.set("first answer", "%s", code(r.Topics[0].ErrorCode))
			limit := time.Now().Add(10 * time.Second)
			for !exists(t, w, topic) && time.Now().Before(limit) {
				time.Sleep(100 * time.Millisecond) // the controller creates it on its own schedule
			}
			o.set("created", "%v", exists(t, w, topic))
			return o
		},
	}
}

// The doctor's question whether the leader topic may be created: CreateTopics, validating only.
func createTopicsCase() kcase {
	return kcase{
		name: "CreateTopics validating",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			topic, existing := p.name("ct-new"), p.name("ct-existing")
			s.createTopic(t, existing, 1)
			w := s.dial(t)
			req := kmsg.NewPtrCreateTopicsRequest()
			for _, name := range []string{topic, existing} {
				rt := kmsg.NewCreateTopicsRequestTopic()
				rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 4, -1
				c := kmsg.NewCreateTopicsRequestTopicConfig()
				c.Name, c.Value = "retention.ms", kmsg.StringPtr("600000")
				rt.Configs = append(rt.Configs, c)
				req.Topics = append(req.Topics, rt)
			}
			req.ValidateOnly, req.TimeoutMillis = true, 5000
			r := w.send(req, 5).(*kmsg.CreateTopicsResponse)
			for _, rt := range r.Topics {
				k := p.strip(rt.Topic)
				o.set(k+" error", "%s", code(rt.ErrorCode))
				o.set(k+" partitions", "%d replication %d", rt.NumPartitions, rt.ReplicationFactor)
			}
			o.set("created", "%v", exists(t, w, topic))
			return o
		},
	}
}

// FindCoordinator for a group on a warm cluster, as librdkafka (v2: one key) and kgo (v4: several)
// ask.
func findCoordinatorCase() kcase {
	return kcase{
		name: "FindCoordinator",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			w := s.dial(t)
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorKey = p.name("fc")
			r := w.send(req, 2).(*kmsg.FindCoordinatorResponse)
			o.set("v2", "%s node %d at node 0's address %v", code(r.ErrorCode), r.NodeID, hostPort(r.Host, r.Port) == s.addr)
			req.CoordinatorKeys = []string{p.name("fc"), p.name("fc2")}
			r = w.send(req, 4).(*kmsg.FindCoordinatorResponse)
			for _, c := range r.Coordinators {
				o.set("v4 "+p.strip(c.Key), "%s node %d at node 0's address %v", code(c.ErrorCode), c.NodeID, hostPort(c.Host, c.Port) == s.addr)
			}
			return o
		},
	}
}

func hostPort(host string, port int32) string { return host + ":" + itoa(port) }

// groupTimingKeys are the broker settings goneli reads: the classic session bounds (New, the
// doctor), the KIP-848 session and heartbeat (New, each tenure) and the protocols (the doctor).
var groupTimingKeys = []string{
	"group.min.session.timeout.ms", "group.max.session.timeout.ms",
	"group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
	"group.coordinator.rebalance.protocols",
}

func brokerConfigsCase() kcase {
	return kcase{
		name: "DescribeConfigs broker",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			req := kmsg.NewPtrDescribeConfigsRequest()
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName, rr.ConfigNames = kmsg.ConfigResourceTypeBroker, "0", groupTimingKeys
			req.Resources = append(req.Resources, rr)
			r := s.dial(t).send(req, 4).(*kmsg.DescribeConfigsResponse)
			o.set("error", "%s", code(r.Resources[0].ErrorCode))
			describedConfigs(o, "", groupTimingKeys, r.Resources[0].Configs)
			return o
		},
		argued: func(p *pair, d difference) string {
			field := d.field
			if field == "group.coordinator.rebalance.protocols" {
				return laterRelease(p, "a release after 4.0 added the streams protocol (KIP-1071) to the default")
			}
			key, ok := strings.CutSuffix(field, " source")
			if _, set := fastConfigs[key]; ok && (set || key == "group.min.session.timeout.ms") {
				return "set in server.properties on Kafka (static) and with kfake.BrokerConfigs, which kfake describes as dynamic: " +
					"a source says how a setting was given; goneli reads the value"
			}
			return ""
		},
	}
}

// describedConfigs records each key's value and source, or that it is absent.
func describedConfigs(o *obs, prefix string, keys []string, cs []kmsg.DescribeConfigsResponseResourceConfig) {
	for _, k := range keys {
		i := slices.IndexFunc(cs, func(c kmsg.DescribeConfigsResponseResourceConfig) bool { return c.Name == k })
		if i < 0 {
			o.set(prefix+k, "absent")
			continue
		}
		o.set(prefix+k, "%s", str(cs[i].Value))
		o.set(prefix+k+" source", "%s", cs[i].Source)
	}
}

// The leader topic's settings that the doctor reads.
func topicConfigsCase() kcase {
	keys := []string{"min.insync.replicas", "cleanup.policy", "retention.ms", "retention.bytes"}
	return kcase{
		name: "DescribeConfigs topic",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			topic := p.name("cfg-topic")
			s.createTopic(t, topic, 1)
			req := kmsg.NewPtrDescribeConfigsRequest()
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName, rr.ConfigNames = kmsg.ConfigResourceTypeTopic, topic, keys
			req.Resources = append(req.Resources, rr)
			r := s.dial(t).send(req, 4).(*kmsg.DescribeConfigsResponse)
			o.set("error", "%s", code(r.Resources[0].ErrorCode))
			describedConfigs(o, "", keys, r.Resources[0].Configs)
			return o
		},
		argued: func(p *pair, d difference) string {
			field := d.field
			if strings.HasSuffix(field, " source") {
				return "the doctor reads the values, not where they come from"
			}
			return ""
		},
	}
}

// groupKeys are a group's KIP-848 timing settings, which New and each tenure read (Kafka 4.0).
var groupKeys = []string{"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"}

// A GROUP resource, alone and beside a broker's: Kafka 4.0 answers a group that sets nothing with
// the answering broker's defaults; 3.9 knows no GROUP resource and refuses the whole request.
func groupConfigsCase() kcase {
	return kcase{
		name: "DescribeConfigs group",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			group := p.name("cfg-group")
			w := s.dial(t)
			for _, withBroker := range []bool{false, true} {
				req := kmsg.NewPtrDescribeConfigsRequest()
				rr := kmsg.NewDescribeConfigsRequestResource()
				rr.ResourceType, rr.ResourceName, rr.ConfigNames = kmsg.ConfigResourceTypeGroupConfig, group, groupKeys
				req.Resources = append(req.Resources, rr)
				if withBroker {
					br := kmsg.NewDescribeConfigsRequestResource()
					br.ResourceType, br.ResourceName, br.ConfigNames = kmsg.ConfigResourceTypeBroker, "0", groupTimingKeys[:1]
					req.Resources = append(req.Resources, br)
				}
				r := w.send(req, 4).(*kmsg.DescribeConfigsResponse)
				for i, res := range r.Resources {
					k := map[bool]string{false: "alone ", true: "beside a broker "}[withBroker] + res.ResourceType.String() + " "
					o.set(k+"at", "%d", i)
					o.set(k+"error", "%s", code(res.ErrorCode))
					if res.ResourceType == kmsg.ConfigResourceTypeGroupConfig {
						describedConfigs(o, k, groupKeys, res.Configs)
					}
				}
			}
			return o
		},
		argued: groupSourceArgued,
	}
}

// groupSourceArgued argues the source of a group setting that the group does not set: Kafka 4.0
// gives DEFAULT_CONFIG (ConfigHelper.createGroupConfigEntry), as AsKafka does, and later releases
// the source of the broker setting behind it. goneli counts a group's value only from GROUP_CONFIG.
func groupSourceArgued(p *pair, d difference) string {
	field := d.field
	if strings.HasSuffix(field, " source") {
		return laterRelease(p, "a group setting's default takes its broker setting's source; goneli counts only GROUP_CONFIG")
	}
	return ""
}

// A group's own KIP-848 session, set and refused: Kafka 4.0 keeps a group's setting within the
// brokers' bounds (group.consumer.min/max.session.timeout.ms, GroupConfig.validate) and refuses one
// outside them; 3.9 knows no GROUP resource.
func alterGroupConfigsCase() kcase {
	return kcase{
		name: "IncrementalAlterConfigs group",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			group := p.name("alter-group")
			w := s.dial(t)
			for _, v := range []struct{ key, value string }{
				{"consumer.session.timeout.ms", "1500"},
				{"consumer.session.timeout.ms", "100"},
				{"consumer.session.timeout.ms", "3600000"},
				{"consumer.heartbeat.interval.ms", "10"},
				{"no.such.setting", "1"},
			} {
				req := kmsg.NewPtrIncrementalAlterConfigsRequest()
				rr := kmsg.NewIncrementalAlterConfigsRequestResource()
				rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
				c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
				c.Name, c.Op, c.Value = v.key, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(v.value)
				rr.Configs = append(rr.Configs, c)
				req.Resources = append(req.Resources, rr)
				r := w.send(req, 1).(*kmsg.IncrementalAlterConfigsResponse)
				o.set("set "+v.key+"="+v.value, "%s", code(r.Resources[0].ErrorCode))
			}
			req := kmsg.NewPtrDescribeConfigsRequest()
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName, rr.ConfigNames = kmsg.ConfigResourceTypeGroupConfig, group, groupKeys
			req.Resources = append(req.Resources, rr)
			r := w.send(req, 4).(*kmsg.DescribeConfigsResponse)
			o.set("described", "%s", code(r.Resources[0].ErrorCode))
			describedConfigs(o, "described ", groupKeys, r.Resources[0].Configs)
			return o
		},
		argued: groupSourceArgued,
	}
}

// goneli's own connection produces heartbeats at Produce v12 at most, acks=all, naming the topic.
func produceCase() kcase {
	return kcase{
		name: "Produce",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			topic := p.name("produce")
			s.createTopic(t, topic, 1)
			w := s.dial(t)
			for _, name := range []string{topic, p.name("produce-missing")} {
				r := w.send(produceRequest(name, -1, "v"), 9).(*kmsg.ProduceResponse)
				for _, rt := range r.Topics {
					for _, rp := range rt.Partitions {
						o.set("topic "+p.strip(rt.Topic), "%s base offset %d", code(rp.ErrorCode), rp.BaseOffset)
					}
				}
			}
			o.set("missing topic created", "%v", exists(t, w, p.name("produce-missing")))
			return o
		},
	}
}

// produceRequest is a request to append one record to partition 0 of topic.
func produceRequest(topic string, acks int16, value string) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = recordBatch(value)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// The doctor describes the transactional id a FencedProducer would use without creating
// __transaction_state (DescribeTransactions); a transaction coordinator's lookup creates it, and
// then answers once it is there. A read_committed reader's end of a partition stops at an open
// transaction (ListOffsets at isolation level 1, which goneli's own connection uses).
func transactionsCase() kcase {
	return kcase{
		name: "transactions",
		run: func(t *testing.T, p *pair, s *side) *obs {
			if s.real && slices.Contains(s.internalTopics(t), "__transaction_state") {
				t.Skip("the shared cluster has had a transaction already (an earlier -count run), and the case needs one that has not")
			}
			o := newObs()
			id := p.name("txn")
			w := s.dial(t)
			dt := kmsg.NewPtrDescribeTransactionsRequest()
			dt.TransactionalIDs = []string{id}
			for i, st := range w.send(dt, 0).(*kmsg.DescribeTransactionsResponse).TransactionStates {
				o.set("DescribeTransactions "+itoa(int32(i)), "%s", code(st.ErrorCode))
			}
			o.set("internal topics after DescribeTransactions", "%v", s.internalTopics(t))
			fc := kmsg.NewPtrFindCoordinatorRequest()
			fc.CoordinatorType, fc.CoordinatorKeys = 1, []string{id}
			first := w.send(fc, 4).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode
			o.set("FindCoordinator first", "%s", code(first))
			var seen []string
			limit := time.Now().Add(await)
			for {
				c := w.send(fc, 4).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode
				if c == 0 {
					break
				}
				if !slices.Contains(seen, code(c)) {
					seen = append(seen, code(c))
				}
				if time.Now().After(limit) {
					t.Fatalf("%s: the transaction coordinator still answers %s", s.name, code(c))
				}
				time.Sleep(100 * time.Millisecond) // the topic is created and loaded on the broker's schedule
			}
			o.set("FindCoordinator until answered", "%v", allowedWhileCreating(seen))
			// Kafka creates the topic a moment after it answers: what counts is that it does.
			o.set("internal topics once answered", "%v", s.internalTopics(t))
			// The coordinator serves the id once it has loaded its partition, a moment after
			// FindCoordinator names it (which reads the metadata): until then it answers
			// NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS.
			seen = nil
			for {
				c := w.send(dt, 0).(*kmsg.DescribeTransactionsResponse).TransactionStates[0].ErrorCode
				if c != kerr.NotCoordinator.Code && c != kerr.CoordinatorLoadInProgress.Code {
					o.set("DescribeTransactions once served", "%s", code(c))
					break
				}
				if !slices.Contains(seen, code(c)) {
					seen = append(seen, code(c))
				}
				if time.Now().After(limit) {
					t.Fatalf("%s: DescribeTransactions still answers %s", s.name, code(c))
				}
				time.Sleep(100 * time.Millisecond) // no event to await
			}
			return o
		},
	}
}

// allowedWhileCreating reports whether every error seen while an internal topic was created is
// one that tells a client to ask again: which of them a poll meets depends on timing.
func allowedWhileCreating(seen []string) bool {
	for _, c := range seen {
		switch c {
		case code(kerr.CoordinatorNotAvailable.Code), code(kerr.NotCoordinator.Code), code(kerr.CoordinatorLoadInProgress.Code):
		default:
			return false
		}
	}
	return true
}
