package askafka

import (
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The principals of the authorising clusters: admin a super user, alice holding only the grants
// that authGrants lists.
var (
	adminUser = credentials{"admin", "admin-secret"}
	alice     = credentials{"alice", "alice-secret"}
)

// authNames are the resources the authorisation cases ask about: alice may describe (and read)
// the groups and topics and describe the transactional id named "ok", and nothing of the "hidden"
// ones; groupMissing is a group she may describe that does not exist.
type authNames struct {
	groupOK, groupHidden, groupMissing, group848, group848Hidden string
	topicOK, topicHidden, txnOK, txnHidden                       string
	// createTold and createUntold are topics alice may create and that do not exist; she may
	// describe the configs of the first only.
	createTold, createUntold string
}

func (p *pair) authNames() authNames {
	return authNames{
		groupOK: p.name("g-ok"), groupHidden: p.name("g-hidden"), groupMissing: p.name("g-missing"),
		group848: p.name("g848-ok"), group848Hidden: p.name("g848-hidden-topic"),
		topicOK: p.name("t-ok"), topicHidden: p.name("t-hidden"), txnOK: p.name("txn-ok"), txnHidden: p.name("txn-hidden"),
		createTold: p.name("c-told"), createUntold: p.name("c-untold"),
	}
}

// What AsKafka changes in the answers to a principal that an authorizer refuses, compared with a
// Kafka cluster that runs StandardAuthorizer with a SASL/PLAIN listener. The embedded broker gets
// the same users and, by CreateACLs on the wire, the same grants; GroupConfigsDeniedTo stands in
// for the DescribeConfigs grant on groups, which kfake does not check and alice lacks.
func TestAuthorizationAgainstKafka(t *testing.T) {
	jaas := "org.apache.kafka.common.security.plain.PlainLoginModule required " +
		"user_" + adminUser.user + `="` + adminUser.pass + `" user_` + alice.user + `="` + alice.pass + `";`
	rk := realkafka.Start(t, realkafka.Options{
		Listeners: []realkafka.Listener{{Name: "SASL", Protocol: "SASL_PLAINTEXT"}},
		Configs: map[string]string{
			"authorizer.class.name":                     "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
			"super.users":                               "User:ANONYMOUS;User:" + adminUser.user,
			"sasl.enabled.mechanisms":                   "PLAIN",
			"listener.name.sasl.plain.sasl.jaas.config": jaas,
		},
	})
	p := newPair(t, rk, false, []kafkatest.KafkaOpt{kafkatest.GroupConfigsDeniedTo(alice.user)},
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", adminUser.user, adminUser.pass),
		kfake.User("PLAIN", alice.user, alice.pass))
	p.real.saslAddr = rk.Listener(t, "SASL")
	p.as.saslAddr, p.as.admin = p.as.addr, &adminUser
	p.as.warm(t)
	t.Logf("%s against %s", p.real.name, p.as.name)
	for _, s := range []*side{p.real, p.as} {
		p.makeAuthResources(t, s)
	}
	compare(t, p, []kcase{
		{name: "FindCoordinator", run: authFindCoordinator},
		{name: "DescribeGroups v5", run: authDescribeGroups(5), argued: describeArgued},
		{name: "DescribeGroups v6", run: authDescribeGroups(6), argued: describeArgued},
		{name: "ConsumerGroupDescribe", skip: onlyKIP848, run: authConsumerGroupDescribe, argued: describeArgued},
		{name: "OffsetFetch", run: authOffsetFetch},
		{name: "Metadata and DescribeCluster", run: authClusterOperations},
		{name: "DescribeConfigs", run: authDescribeConfigs},
		{name: "DescribeTransactions", run: authDescribeTransactions},
		{name: "CreateTopics validating", run: authCreateTopics, argued: createTopicsArgued},
	})
}

// makeAuthResources makes the topics and groups of authNames on s and grants alice hers.
func (p *pair) makeAuthResources(t *testing.T, s *side) {
	t.Helper()
	n := p.authNames()
	s.awaitCoordinator(t, n.groupOK, n.groupHidden, n.groupMissing, n.group848, n.group848Hidden)
	s.createTopic(t, n.topicOK, 1)
	s.createTopic(t, n.topicHidden, 1)
	var acls []kmsg.CreateACLsRequestCreation
	for _, g := range []struct {
		typ  kmsg.ACLResourceType
		name string
		ops  []kmsg.ACLOperation
	}{
		{kmsg.ACLResourceTypeGroup, n.groupOK, []kmsg.ACLOperation{kmsg.ACLOperationDescribe, kmsg.ACLOperationRead}},
		{kmsg.ACLResourceTypeGroup, n.groupMissing, []kmsg.ACLOperation{kmsg.ACLOperationDescribe}},
		{kmsg.ACLResourceTypeGroup, n.group848, []kmsg.ACLOperation{kmsg.ACLOperationDescribe}},
		{kmsg.ACLResourceTypeGroup, n.group848Hidden, []kmsg.ACLOperation{kmsg.ACLOperationDescribe}},
		{kmsg.ACLResourceTypeTopic, n.topicOK, []kmsg.ACLOperation{kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs}},
		{kmsg.ACLResourceTypeTransactionalId, n.txnOK, []kmsg.ACLOperation{kmsg.ACLOperationDescribe}},
		{kmsg.ACLResourceTypeTopic, n.createTold, []kmsg.ACLOperation{kmsg.ACLOperationCreate, kmsg.ACLOperationDescribeConfigs}},
		{kmsg.ACLResourceTypeTopic, n.createUntold, []kmsg.ACLOperation{kmsg.ACLOperationCreate}},
	} {
		for _, op := range g.ops {
			c := kmsg.NewCreateACLsRequestCreation()
			c.ResourceType, c.ResourceName, c.ResourcePatternType = g.typ, g.name, kmsg.ACLResourcePatternTypeLiteral
			c.Principal, c.Host, c.Operation, c.PermissionType = "User:"+alice.user, "*", op, kmsg.ACLPermissionTypeAllow
			acls = append(acls, c)
		}
	}
	w := s.dial(t)
	req := kmsg.NewPtrCreateACLsRequest()
	req.Creations = acls
	for _, r := range w.send(req, 3).(*kmsg.CreateACLsResponse).Results {
		if r.ErrorCode != 0 {
			t.Fatalf("%s: CreateACLs: %s %s", s.name, code(r.ErrorCode), str(r.ErrorMessage))
		}
	}
	// Kafka's brokers apply an ACL once the controller's record of it reaches them: the same
	// authorizer answers DescribeACLs, so its answer is the event to await.
	limit := time.Now().Add(await)
	for {
		d := kmsg.NewPtrDescribeACLsRequest()
		d.ResourceType, d.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
		d.Principal, d.Operation, d.PermissionType = kmsg.StringPtr("User:"+alice.user), kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		r := w.send(d, 3).(*kmsg.DescribeACLsResponse)
		got := 0
		for _, res := range r.Resources {
			got += len(res.ACLs)
		}
		if r.ErrorCode == 0 && got >= len(acls) {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("%s: %d of alice's %d ACLs described after %v", s.name, got, len(acls), await)
		}
		time.Sleep(50 * time.Millisecond) // the metadata log reaches the broker on its own schedule
	}
	// The groups, made as the super user: a classic one holding topicOK, and where the protocol is
	// served, KIP-848 ones on either topic, heartbeating until the test ends.
	keepClassic(t, w, n.groupOK, n.topicOK)
	if !p.kip848 {
		return
	}
	keepConsumer(t, s, n.group848, n.topicOK)
	keepConsumer(t, s, n.group848Hidden, n.topicHidden)
}

// FindCoordinator checks Describe on the key before anything else, and so before a lookup of a
// transactional id creates __transaction_state (KafkaApis.getCoordinator,
// core/src/main/scala/kafka/server/KafkaApis.scala).
func authFindCoordinator(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	n := p.authNames()
	w := s.dialAs(t, alice)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKeys = []string{n.groupOK, n.groupHidden}
	for _, c := range w.send(fc, 4).(*kmsg.FindCoordinatorResponse).Coordinators {
		o.set("group "+p.strip(c.Key), "%s", code(c.ErrorCode))
	}
	fc.CoordinatorType, fc.CoordinatorKeys = 1, []string{n.txnHidden}
	for _, c := range w.send(fc, 4).(*kmsg.FindCoordinatorResponse).Coordinators {
		o.set("transactional id "+p.strip(c.Key), "%s", code(c.ErrorCode))
	}
	o.set("internal topics after the refused lookup", "%v", s.internalTopics(t))
	return o
}

// authDescribeGroups describes, as alice, a group she may describe, one she may not, and one she
// may that does not exist: the results with an error carry no authorized operations.
func authDescribeGroups(version int16) func(t *testing.T, p *pair, s *side) *obs {
	return func(t *testing.T, p *pair, s *side) *obs {
		o := newObs()
		if maxVersion(t, s, kmsg.DescribeGroups) < version {
			o.set("offered", "no")
			return o
		}
		n := p.authNames()
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups, req.IncludeAuthorizedOperations = []string{n.groupOK, n.groupHidden, n.groupMissing}, true
		r := s.dialAs(t, alice).send(req, version).(*kmsg.DescribeGroupsResponse)
		for _, g := range r.Groups {
			k := "group " + p.strip(g.Group)
			o.set(k+" error", "%s", code(g.ErrorCode))
			o.set(k+" state", "%s members %d", g.State, len(g.Members))
			groupOps(o, k, g.AuthorizedOperations)
		}
		return o
	}
}

// authConsumerGroupDescribe describes KIP-848 groups that alice may describe, one of whose member
// subscribes to a topic she may not describe: Kafka 4.0 refuses that group (KAFKA-18813,
// KafkaApis.handleConsumerGroupDescribe).
func authConsumerGroupDescribe(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	n := p.authNames()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups, req.IncludeAuthorizedOperations = []string{n.group848, n.group848Hidden, n.groupHidden}, true
	r := s.dialAs(t, alice).send(req, 0).(*kmsg.ConsumerGroupDescribeResponse)
	for _, g := range r.Groups {
		k := "group " + p.strip(g.Group)
		o.set(k+" error", "%s", code(g.ErrorCode))
		o.set(k+" state", "%s members %d", g.State, len(g.Members))
		for _, m := range g.Members {
			o.set(k+" member assignment", "%v", assignment(p, m.Assignment))
		}
		groupOps(o, k, g.AuthorizedOperations)
	}
	return o
}

// authOffsetFetch reads, as alice, the offsets of a group she may describe and of one she may not
// (librdkafka's v7, kgo's v8).
func authOffsetFetch(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	n := p.authNames()
	w := s.dialAs(t, alice)
	for _, group := range []string{n.groupOK, n.groupHidden} {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = group
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = n.topicOK, []int32{0}
		req.Topics = append(req.Topics, rt)
		r := w.send(req, 7).(*kmsg.OffsetFetchResponse)
		o.set("v7 "+p.strip(group), "%s topics %d", code(r.ErrorCode), len(r.Topics))
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	for _, group := range []string{n.groupOK, n.groupHidden} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = group
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.Partitions = n.topicOK, []int32{0}
		rg.Topics = append(rg.Topics, rt)
		req.Groups = append(req.Groups, rg)
	}
	for _, g := range w.send(req, 8).(*kmsg.OffsetFetchResponse).Groups {
		o.set("v8 "+p.strip(g.Group), "%s topics %d", code(g.ErrorCode), len(g.Topics))
	}
	return o
}

// authClusterOperations: alice may not describe the cluster, so Kafka reports no operations of hers
// on it (KafkaApis.handleTopicMetadataRequest, AuthHelper.computeDescribeClusterResponse), and a
// topic she may not describe is refused in Metadata.
func authClusterOperations(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	n := p.authNames()
	w := s.dialAs(t, alice)
	md := kmsg.NewPtrMetadataRequest()
	for _, topic := range []string{n.topicOK, n.topicHidden} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		md.Topics = append(md.Topics, mt)
	}
	md.IncludeClusterAuthorizedOperations, md.IncludeTopicAuthorizedOperations = true, true
	r := w.send(md, 10).(*kmsg.MetadataResponse)
	o.set("Metadata cluster operations", "%s", ops(r.AuthorizedOperations))
	for _, mt := range r.Topics {
		k := "Metadata topic " + p.strip(str(mt.Topic))
		o.set(k, "%s partitions %d", code(mt.ErrorCode), len(mt.Partitions))
		o.set(k+" operations", "%s", ops(mt.AuthorizedOperations))
	}
	dc := kmsg.NewPtrDescribeClusterRequest()
	dc.IncludeClusterAuthorizedOperations = true
	cr := w.send(dc, 0).(*kmsg.DescribeClusterResponse)
	o.set("DescribeCluster", "%s operations %s", code(cr.ErrorCode), ops(cr.ClusterAuthorizedOperations))
	return o
}

// authDescribeConfigs asks, as alice, for a group's, two topics' and a broker's settings in one
// request: Kafka answers the authorized resources first (ConfigHelper.handleDescribeConfigsRequest,
// core/src/main/scala/kafka/server/ConfigHelper.scala) and refuses each of the others with its own
// error.
func authDescribeConfigs(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	n := p.authNames()
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, r := range []struct {
		typ  kmsg.ConfigResourceType
		name string
		keys []string
	}{
		{kmsg.ConfigResourceTypeGroupConfig, n.groupOK, groupKeys},
		{kmsg.ConfigResourceTypeTopic, n.topicHidden, []string{"retention.ms"}},
		{kmsg.ConfigResourceTypeBroker, "0", groupTimingKeys[:1]},
		{kmsg.ConfigResourceTypeTopic, n.topicOK, []string{"retention.ms"}},
	} {
		if r.typ == kmsg.ConfigResourceTypeGroupConfig && !p.kip848 {
			continue // 3.9 refuses a GROUP resource with the whole request
		}
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName, rr.ConfigNames = r.typ, r.name, r.keys
		req.Resources = append(req.Resources, rr)
	}
	resp := s.dialAs(t, alice).send(req, 4).(*kmsg.DescribeConfigsResponse)
	for i, rr := range resp.Resources {
		k := rr.ResourceType.String() + " " + p.strip(rr.ResourceName)
		o.set(k+" at", "%d", i)
		o.set(k, "%s configs %d", code(rr.ErrorCode), len(rr.Configs))
	}
	return o
}

// authDescribeTransactions: the doctor's question about a transactional id, refused for one alice
// may not describe (KafkaApis.handleDescribeTransactionsRequest).
func authDescribeTransactions(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	n := p.authNames()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{n.txnOK, n.txnHidden}
	for _, st := range s.dialAs(t, alice).send(req, 0).(*kmsg.DescribeTransactionsResponse).TransactionStates {
		o.set(p.strip(st.TransactionalID), "%s", code(st.ErrorCode))
	}
	o.set("internal topics", "%v", s.internalTopics(t))
	return o
}

// authCreateTopics: the doctor's validating CreateTopics of a leader topic that does not exist, as
// alice, who may create both topics and describe the configs of one: Kafka tells the partitions,
// replication factor and settings of a topic only to a principal that may describe its configs
// (ControllerApis.handleCreateTopics, core/src/main/scala/kafka/server/ControllerApis.scala, and
// ReplicationControlManager.createTopic, metadata/src/main/java/org/apache/kafka/controller), and
// creates nothing.
func authCreateTopics(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	n := p.authNames()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.ValidateOnly = true
	for _, name := range []string{n.createTold, n.createUntold} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, -1
		req.Topics = append(req.Topics, rt)
	}
	for _, rt := range s.dialAs(t, alice).send(req, 7).(*kmsg.CreateTopicsResponse).Topics {
		o.set(p.strip(rt.Topic), "%s partitions %d replication factor %d config error %s",
			code(rt.ErrorCode), rt.NumPartitions, rt.ReplicationFactor, code(rt.ConfigErrorCode))
		o.set(p.strip(rt.Topic)+" configs told", "%v", len(rt.Configs) > 0)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.AllowAutoTopicCreation = false // a look that could create them would prove nothing
	for _, name := range []string{n.createTold, n.createUntold} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		md.Topics = append(md.Topics, mt)
	}
	for _, mt := range s.dial(t).send(md, 12).(*kmsg.MetadataResponse).Topics {
		o.set(p.strip(*mt.Topic)+" afterwards", "%s", code(mt.ErrorCode))
	}
	return o
}

// createTopicsArgued: kfake lists no settings in a validating CreateTopics' answer, where Kafka
// lists the topic's to a principal that may describe them. goneli reads only the replication
// factor there; the doctor reads an existing topic's settings with DescribeConfigs.
func createTopicsArgued(_ *pair, d difference) string {
	if strings.HasSuffix(d.field, " configs told") {
		return "goneli reads no settings from CreateTopics' answer"
	}
	return ""
}
