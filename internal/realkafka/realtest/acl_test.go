package realtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/goneli/goneli/internal/testkit"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The ACLs of docs/operations.md on Apache Kafka itself: a cluster that authorises every request
// with Kafka's StandardAuthorizer and serves its principals on a SASL_SSL listener with
// SCRAM-SHA-512. The principal "neli" holds exactly the list of the docs, then the list less one
// grant at a time, while the super user "root" leads the group; each time the doctor (Check, and
// `neli doctor`), Describe (and `neli status`), a contender and a FencedProducer run as neli, and
// whatever needs the missing grant must say so, naming it and the kafka-acls.sh command that
// grants it. The doctor must create nothing on the cluster.

const (
	// aclListener is the cluster's SASL_SSL listener.
	aclListener   = "SECURE"
	aclMechanism  = "SCRAM-SHA-512"
	rootUser      = "root"
	rootPassword  = "root-secret"
	neliPrincipal = "User:" + neliUser
)

// aclOptions is a one-node cluster at the fast profile that authorises requests. The harness's own
// PLAINTEXT listener, which the node's broker and controller use to talk to each other, is
// ANONYMOUS, so ANONYMOUS is a super user: the principals are told apart on the SASL_SSL listener
// only.
func aclOptions() realkafka.Options {
	configs := realkafka.SCRAMListenerConfigs(aclListener, aclMechanism)
	configs["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
	configs["super.users"] = "User:ANONYMOUS;User:" + rootUser
	return realkafka.Options{
		Listeners: []realkafka.Listener{{Name: aclListener, Protocol: "SASL_SSL"}},
		SCRAM: []realkafka.SCRAMUser{
			{Mechanism: aclMechanism, Name: rootUser, Password: rootPassword},
			{Mechanism: aclMechanism, Name: neliUser, Password: neliPassword},
		},
		Configs: configs,
	}
}

// docGrant is one grant of docs/operations.md's ACL table.
type docGrant struct {
	name     string // the subtest that removes it: without-<name>
	resource kmsg.ACLResourceType
	resName  string
	pattern  kmsg.ACLResourcePatternType
	op       kmsg.ACLOperation
}

// docGrants is the table of docs/operations.md (ACLs) for group and topic: a contender's, a
// FencedProducer's, an observer's, Describe's and the doctor's.
func docGrants(group, topic string) []docGrant {
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	t, g, c, x := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeCluster, kmsg.ACLResourceTypeTransactionalId
	return []docGrant{
		{"topic-describe", t, topic, lit, kmsg.ACLOperationDescribe},
		{"topic-read", t, topic, lit, kmsg.ACLOperationRead},
		{"topic-write", t, topic, lit, kmsg.ACLOperationWrite},
		{"topic-create", t, topic, lit, kmsg.ACLOperationCreate},
		{"topic-alter", t, topic, lit, kmsg.ACLOperationAlter},
		{"topic-describe-configs", t, topic, lit, kmsg.ACLOperationDescribeConfigs},
		{"group-read", g, group, lit, kmsg.ACLOperationRead},
		{"group-describe", g, group, lit, kmsg.ACLOperationDescribe},
		{"group-describe-configs", g, group, lit, kmsg.ACLOperationDescribeConfigs},
		{"cluster-describe-configs", c, "kafka-cluster", lit, kmsg.ACLOperationDescribeConfigs},
		{"observer-describe", g, group + ".observer", pre, kmsg.ACLOperationDescribe},
		{"fenced-write", x, "goneli-fenced." + group, pre, kmsg.ACLOperationWrite},
	}
}

// secureClient is a client of the root user over the SASL_SSL listener.
func secureClient(t *testing.T, c *realkafka.Cluster) *kgo.Client {
	t.Helper()
	pem, err := os.ReadFile(c.CAFile(t))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Listener(t, aclListener), ",")...),
		kgo.DialTLSConfig(&tls.Config{RootCAs: roots}),
		kgo.SASL(scram.Auth{User: rootUser, Pass: rootPassword}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// neliFilter matches every ACL of neli's.
func neliFilter() kmsg.DeleteACLsRequestFilter {
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	f.Principal = kmsg.StringPtr(neliPrincipal)
	f.Operation, f.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	return f
}

// setGrants replaces neli's ACLs with grants, and returns once the broker's authorizer holds
// exactly those: Kafka applies ACLs from its metadata log after the controller has answered
// CreateAcls, and DescribeAcls answers from the broker's authorizer (AclApis.handleDescribeAcls).
func setGrants(t *testing.T, cl *kgo.Client, grants []docGrant) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	del := kmsg.NewPtrDeleteACLsRequest()
	del.Filters = []kmsg.DeleteACLsRequestFilter{neliFilter()}
	dresp, err := del.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range dresp.Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("deleting neli's ACLs: %v", err)
		}
	}
	want := map[string]bool{}
	if len(grants) > 0 {
		create := kmsg.NewPtrCreateACLsRequest()
		for _, g := range grants {
			cr := kmsg.NewCreateACLsRequestCreation()
			cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = g.resource, g.resName, g.pattern
			cr.Principal, cr.Host, cr.Operation, cr.PermissionType = neliPrincipal, "*", g.op, kmsg.ACLPermissionTypeAllow
			create.Creations = append(create.Creations, cr)
			want[fmt.Sprint(g.resource, g.resName, g.pattern, g.op)] = true
		}
		cresp, err := create.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range cresp.Results {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				t.Fatalf("granting %+v: %v", grants[i], err)
			}
		}
	}
	f := neliFilter()
	for {
		desc := kmsg.NewPtrDescribeACLsRequest()
		desc.ResourceType, desc.ResourcePatternType = f.ResourceType, f.ResourcePatternType
		desc.Principal, desc.Operation, desc.PermissionType = f.Principal, f.Operation, f.PermissionType
		resp, err := desc.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, r := range resp.Resources {
			for _, a := range r.ACLs {
				got[fmt.Sprint(r.ResourceType, r.ResourceName, r.ResourcePatternType, a.Operation)] = true
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the broker's authorizer holds %v for neli, want %v", got, want)
		case <-time.After(50 * time.Millisecond): // nothing announces that the authorizer has caught up
		}
	}
}

// secureConfig is a contender's configuration as user on the SASL_SSL listener.
func secureConfig(t *testing.T, c *realkafka.Cluster, group, name, user, password string, p protocol, log *testkit.Log) goneli.Config {
	kc := goneli.KafkaConfigMap{
		"bootstrap.servers": c.Listener(t, aclListener), "security.protocol": "SASL_SSL",
		"sasl.mechanisms": aclMechanism, "sasl.username": user, "sasl.password": password,
		"ssl.ca.location": c.CAFile(t),
	}
	if p.name == consumer.name {
		kc["group.protocol"] = "consumer"
	}
	return goneli.Config{KafkaConfig: kc, LeaderGroupID: group, LeaderTopic: group + ".neli", Name: name,
		HeartbeatTimeout: goneli.Duration(lease), MinPollInterval: goneli.Duration(pollInterval), Scribe: log.Scribe()}
}

// checkWant is what one line of the doctor's report must say: its status, and strings its detail
// or fix must contain.
type checkWant struct {
	status goneli.CheckStatus
	says   []string
}

// grantWant is an *AuthorizationError that a missing grant must cause.
type grantWant struct {
	op, resource, name string
	prefixed           bool
}

// command is the kafka-acls.sh command that grants it to neli.
func (g grantWant) command() string {
	cmd := "kafka-acls.sh --add --allow-principal " + neliPrincipal + " --operation " + g.op
	if g.resource == "cluster" {
		return cmd + " --cluster"
	}
	cmd += " --" + g.resource + " " + g.name
	if g.prefixed {
		cmd += " --resource-pattern-type prefixed"
	}
	return cmd
}

// fail and warn are report lines that name a missing grant: detail and fix must say what is
// missing (says) and the command that grants it.
func fail(g grantWant, says ...string) checkWant {
	return checkWant{goneli.CheckFail, append(says, g.command())}
}

func warn(g grantWant, says ...string) checkWant {
	return checkWant{goneli.CheckWarn, append(says, g.command())}
}

// wantReport checks every line of r against want, where a line want does not name must be ok.
func wantReport(t *testing.T, what string, r goneli.CheckReport, want map[string]checkWant) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range r.Checks {
		seen[c.Name] = true
		if c.Status != goneli.CheckOK {
			t.Logf("%s: %v %s: %s -> %s", what, c.Status, c.Name, c.Detail, c.Fix)
		}
		w, ok := want[c.Name]
		if !ok {
			w = checkWant{status: goneli.CheckOK}
		}
		text := c.Detail + " -> " + c.Fix
		if c.Status != w.status {
			t.Errorf("%s: %s is %v, want %v: %s", what, c.Name, c.Status, w.status, text)
			continue
		}
		for _, s := range w.says {
			if !strings.Contains(text, s) {
				t.Errorf("%s: %s %v does not say %q: %s", what, c.Name, c.Status, s, text)
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s: no %s line in %+v", what, name, r.Checks)
		}
	}
}

// wantLine checks r's line called name against want.
func wantLine(t *testing.T, what string, r goneli.CheckReport, name string, want checkWant) {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			wantReport(t, what, goneli.CheckReport{Checks: []goneli.CheckResult{c}}, map[string]checkWant{name: want})
			return
		}
	}
	t.Errorf("%s: no %s line in %+v", what, name, r.Checks)
}

// wantGrant checks that err is nil for a nil want, and otherwise an *AuthorizationError for want
// whose message gives the command that grants it.
func wantGrant(t *testing.T, what string, err error, want *grantWant) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("%s: %v; want it to work", what, err)
		}
		return
	}
	var ae *goneli.AuthorizationError
	switch {
	case !errors.As(err, &ae):
		t.Errorf("%s: %v; want an *AuthorizationError for %s on %s %s", what, err, want.op, want.resource, want.name)
	case ae.Operation != want.op || ae.Resource != want.resource || ae.Name != want.name || ae.Prefixed != want.prefixed || ae.Principal != neliPrincipal:
		t.Errorf("%s: an *AuthorizationError for %s %s on %s %s (prefixed %v), want %s on %s %s (prefixed %v) for %s: %v",
			what, ae.Principal, ae.Operation, ae.Resource, ae.Name, ae.Prefixed, want.op, want.resource, want.name, want.prefixed, neliPrincipal, err)
	case !strings.Contains(err.Error(), want.command()):
		t.Errorf("%s: %v; want it to say %q", what, err, want.command())
	default:
		t.Logf("%s: %v", what, err)
	}
}

// pulsing is what New and NewRoles return, as contendOrFail uses it.
type pulsing interface {
	PulseCtx(ctx context.Context) (bool, error)
	Close() error
	Await()
}

// leading makes an instance of config that has acquired, closed when the test ends.
func leading(t *testing.T, config goneli.Config) goneli.Neli {
	t.Helper()
	acquired := make(chan struct{}, 1)
	n, err := goneli.New(config, func(e goneli.Event) {
		if _, ok := e.(goneli.LeaderAcquired); ok {
			select {
			case acquired <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatalf("New as %s: %v", config.KafkaConfig["sasl.username"], err)
	}
	p, err := n.Background(func() {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = p.Await()
		n.Await()
	})
	select {
	case <-acquired:
	case <-time.After(awaitLimit):
		t.Fatalf("%s did not lead within %v (%v)", config.Name, awaitLimit, p.Error())
	}
	return n
}

// contendOrFail runs what open makes until it leads or New (open) or Pulse fails, and returns that
// error (nil: it led). Once it leads, it calls then, if given, pulsing on meanwhile so that the
// lease stays renewed, and returns then's error second.
func contendOrFail(t *testing.T, name string, open func() (pulsing, error), then func(ctx context.Context, p pulsing) error) (error, error) {
	t.Helper()
	n, err := open()
	if err != nil {
		return err, nil
	}
	defer func() {
		_ = n.Close()
		n.Await()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	for {
		leader, err := n.PulseCtx(ctx)
		switch {
		case ctx.Err() != nil:
			t.Fatalf("%s neither led nor failed within %v: a silent retry", name, awaitLimit)
		case err != nil:
			return err, nil
		case !leader:
			continue
		case then == nil:
			return nil, nil
		}
		done := make(chan error, 1)
		go func() { done <- then(ctx, n) }()
		for {
			select {
			case err := <-done:
				return nil, err
			default:
			}
			if _, err := n.PulseCtx(ctx); err != nil {
				t.Fatalf("%s: Pulse while it led: %v", name, err)
			}
		}
	}
}

// sendFenced sends a record to topic through a FencedProducer of n's.
func sendFenced(topic string) func(ctx context.Context, n pulsing) error {
	return func(ctx context.Context, n pulsing) error {
		f, err := goneli.NewFencedProducer(n.(goneli.Curator), goneli.FencedConfig{})
		if err != nil {
			return err
		}
		err = f.Send(ctx, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte("x")})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
}

// clusterState is what the doctor must not change: the topics, internal ones too, and the groups.
// The topics are asked for with a Metadata request of the test's own: kadm answers ListTopics
// from kgo's cache of metadata, up to 5 s old.
func clusterState(t *testing.T, cl *kgo.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for _, mt := range resp.Topics {
		if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
			t.Fatalf("listing the topics: %s: %v", *mt.Topic, err)
		}
		topics = append(topics, *mt.Topic)
	}
	groups, err := kadm.NewClient(cl).ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("topics %v, groups %v", slices.Sorted(slices.Values(topics)), slices.Sorted(slices.Values(groups.Groups())))
}

// aclCase is one run as neli: the grants less removed, and what each part must do.
type aclCase struct {
	removed string // the docGrant's name; empty for all of them
	// live is the doctor on the group root leads, fresh on a group and a topic that do not
	// exist, roles on the live group for two roles (its topic has one partition).
	live, fresh, roles map[string]checkWant
	describe           *grantWant // Describe of the live group
	contender          *grantWant // a contender of a group of its own
	fenced             *grantWant // its FencedProducer's write, once it leads
	// rolesContender: a contender for two roles on a topic of one partition, which it must add,
	// runs too, and must fail with rolesWant (nil: lead).
	rolesContender bool
	rolesWant      *grantWant
	// sessionLog is what a contender that leads must have logged.
	sessionLog string
	// groupSets: under KIP-848, the case's group then sets its own session and heartbeat
	// interval, and a contender must lead, and the doctor's session line be ok.
	groupSets bool
	// status runs `neli status` too.
	status bool
	// outOfProcess: the contender must run as a `neli run` process: its consumer raises
	// a fatal error, and confluent-kafka-go v2.11.1 never finishes closing such a consumer
	// (confluentinc/confluent-kafka-go#1588), which would stay behind in the test binary.
	outOfProcess bool
}

func (c aclCase) name() string {
	if c.removed == "" {
		return "all"
	}
	return "without-" + c.removed
}

// own is the case's own group, for its contender and the doctor on a new group, beside the live
// group: no prefixed grant on the live group's names covers it.
func (c aclCase) own(live string) string { return "own-" + live + "-" + c.name() }

// rolesGroup is the case's group for a contender of two roles.
func (c aclCase) rolesGroup(live string) string { return c.own(live) + "-roles" }

// TestACLsOnKafka: each grant of docs/operations.md removed in turn, on Apache Kafka.
func TestACLsOnKafka(t *testing.T) {
	// Built while the cluster starts.
	bin := filepath.Join(t.TempDir(), "neli")
	built := make(chan error, 1)
	go func() { built <- buildNeli(bin) }()
	// Its own cluster, closed when the test ends: no other test of the package authorises over
	// SASL_SSL, so a shared one would idle until the package ends.
	c := realkafka.Start(t, aclOptions())
	t.Logf("Kafka %s: %s", c.Version(), c.Timing())
	cl := secureClient(t, c)
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	eachProtocolOn(t, c, func(t *testing.T, c *realkafka.Cluster, p protocol) { aclCases(t, c, cl, p, bin) })
}

func aclCases(t *testing.T, c *realkafka.Cluster, cl *kgo.Client, p protocol, bin string) {
	adm := kadm.NewClient(cl)
	group := groupName(t)
	topic := group + ".neli"
	root := secureConfig(t, c, group, "root", rootUser, rootPassword, p, testkit.NewLog(t))
	leading(t, root)

	kip848 := p.name == consumer.name
	for _, tc := range aclCasesFor(group, topic, kip848) {
		t.Run(tc.name(), func(t *testing.T) {
			log := testkit.NewLog(t)
			own, ownRoles := tc.own(group), tc.rolesGroup(group)
			var grants []docGrant
			for _, g := range slices.Concat(docGrants(group, topic), docGrants(own, own+".neli"), docGrants(ownRoles, ownRoles+".neli")) {
				if g.name != tc.removed {
					grants = append(grants, g)
				}
			}
			setGrants(t, cl, grants)
			as := func(group, name string) goneli.Config {
				return secureConfig(t, c, group, name, neliUser, neliPassword, p, log)
			}
			ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
			defer cancel()

			before := clusterState(t, cl)
			// The doctor on a new group looks at a topic that does not exist; before the first
			// FencedProducer runs (the first case's contender) no transactional id has been looked
			// up: the doctor must create neither (a FindCoordinator for a transactional id creates
			// __transaction_state, KafkaApis.getCoordinator).
			if strings.Contains(before, own+".neli") {
				t.Fatalf("topic %s.neli exists before the doctor looks at it: %s", own, before)
			}
			if p.name == classic.name && tc.removed == "" && strings.Contains(before, "__transaction_state") {
				t.Fatalf("__transaction_state exists before the first transaction: %s", before)
			}
			r, _ := goneli.Check(ctx, as(group, "doctor"))
			wantReport(t, "the doctor on the live group", r, tc.live)
			r, _ = goneli.Check(ctx, as(group, "doctor"), "a", "b")
			wantReport(t, "the doctor on the live group, two roles", r, tc.roles)
			r, _ = goneli.Check(ctx, as(own, "doctor"))
			wantReport(t, "the doctor on a new group and topic", r, tc.fresh)
			wantReport(t, "neli doctor on the live group", neliDoctor(t, bin, as(group, "doctor")), tc.live)
			if after := clusterState(t, cl); after != before {
				t.Errorf("the doctor changed the cluster: before, %s; after, %s", before, after)
			}

			st, err := goneli.Describe(ctx, as(group, "status"))
			wantGrant(t, "Describe", err, tc.describe)
			if err == nil && (len(st.Roles) != 1 || st.Roles[0].Leader.Name != "root") {
				t.Errorf("Describe: %+v, want root leading", st)
			}
			if tc.status {
				neliStatus(t, bin, as(group, "status"), tc.describe)
			}

			config := as(own, "neli")
			if tc.outOfProcess {
				neliRun(t, bin, config, tc.contender)
				return
			}
			err, ferr := contendOrFail(t, "a contender", func() (pulsing, error) { return goneli.New(config) }, sendFenced(config.LeaderTopic))
			wantGrant(t, "a contender", err, tc.contender)
			if err == nil {
				wantGrant(t, "its FencedProducer", ferr, tc.fenced)
				if tc.sessionLog != "" && !log.Contains(tc.sessionLog) {
					t.Errorf("the contender did not log %q", tc.sessionLog)
				}
			}
			if tc.groupSets {
				setGroupSession(t, cl, own)
				// What it could not read did not matter, which the doctor says in a warning.
				r, _ = goneli.Check(ctx, as(own, "doctor"))
				wantLine(t, "the doctor on a group that sets its own session", r, "session",
					warn(*tc.contender, "could not read everything of the KIP-848 session", "checked against what was read"))
				err, _ := contendOrFail(t, "a contender of a group that sets its own session", func() (pulsing, error) { return goneli.New(config) }, nil)
				wantGrant(t, "a contender of a group that sets its own session", err, nil)
			}
			if tc.rolesContender {
				if _, err := adm.CreateTopic(ctx, 1, -1, nil, ownRoles+".neli"); err != nil {
					t.Fatal(err)
				}
				config := as(ownRoles, "neli-roles")
				err, _ := contendOrFail(t, "a contender of two roles", func() (pulsing, error) { return goneli.NewRoles(config, []string{"a", "b"}) }, nil)
				wantGrant(t, "a contender of two roles", err, tc.rolesWant)
			}
		})
	}
}

// setGroupSession sets group's own KIP-848 session and heartbeat interval (Kafka 4.0's group
// configs), as root, with IncrementalAlterConfigs on the GROUP resource.
func setGroupSession(t *testing.T, cl *kgo.Client, group string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for k, v := range map[string]string{"consumer.session.timeout.ms": "3000", "consumer.heartbeat.interval.ms": "200"} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value, c.Op = k, kmsg.StringPtr(v), kmsg.IncrementalAlterConfigOpSet
		res.Configs = append(res.Configs, c)
	}
	req.Resources = []kmsg.IncrementalAlterConfigsRequestResource{res}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("setting group %s's session: %v", group, err)
		}
	}
}

// buildNeli builds the neli command as bin.
func buildNeli(bin string) error {
	out, err := exec.Command("go", "build", "-o", bin, "github.com/goneli/goneli/cmd/neli").CombinedOutput()
	if err != nil {
		return fmt.Errorf("building neli: %v\n%s", err, out)
	}
	return nil
}

// neliArgs are the flags and environment that give neli config's settings: the password in
// NELI_X_SASL_PASSWORD, as docs/operations.md advises.
func neliArgs(config goneli.Config) ([]string, []string) {
	args := []string{"--kafka", fmt.Sprint(config.KafkaConfig["bootstrap.servers"]), "--group", config.LeaderGroupID,
		"--topic", config.LeaderTopic, "--heartbeat-timeout", lease.String(), "--log-level", "off"}
	for _, k := range slices.Sorted(maps.Keys(config.KafkaConfig)) {
		if k != "bootstrap.servers" && k != "sasl.password" {
			args = append(args, "-X", fmt.Sprintf("%s=%v", k, config.KafkaConfig[k]))
		}
	}
	return args, []string{"NELI_X_SASL_PASSWORD=" + fmt.Sprint(config.KafkaConfig["sasl.password"])}
}

// runNeli runs bin with args and env, and returns its exit status, stdout and stderr.
func runNeli(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ctx.Err() == nil:
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatalf("neli %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return 0, stdout.String(), stderr.String()
}

// neliDoctor runs `neli doctor` with config's settings and reads its lines ("FAIL  acl-topic
// DETAIL -> FIX") back into a report.
func neliDoctor(t *testing.T, bin string, config goneli.Config) goneli.CheckReport {
	t.Helper()
	args, env := neliArgs(config)
	status, stdout, stderr := runNeli(t, bin, env, append([]string{"doctor"}, args...)...)
	var r goneli.CheckReport
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			t.Fatalf("neli doctor printed %q; want STATUS NAME DETAIL", l)
		}
		c := goneli.CheckResult{Name: f[1]}
		switch f[0] {
		case "ok":
			c.Status = goneli.CheckOK
		case "warn":
			c.Status = goneli.CheckWarn
		case "FAIL":
			c.Status = goneli.CheckFail
		default:
			t.Fatalf("neli doctor printed %q; want ok, warn or FAIL first", l)
		}
		rest := strings.TrimSpace(strings.SplitN(strings.TrimSpace(l[len(f[0]):]), f[1], 2)[1])
		c.Detail, c.Fix, _ = strings.Cut(rest, " -> ")
		r.Checks = append(r.Checks, c)
	}
	if want := map[bool]int{false: 0, true: 1}[r.Worst() == goneli.CheckFail]; status != want {
		t.Errorf("neli doctor exited %d, want %d for a report whose worst line is %v; stderr: %s", status, want, r.Worst(), stderr)
	}
	return r
}

// neliStatus runs `neli status` with config's settings: it must show root leading, or exit 1
// naming the grant that want names.
func neliStatus(t *testing.T, bin string, config goneli.Config, want *grantWant) {
	t.Helper()
	args, env := neliArgs(config)
	status, stdout, stderr := runNeli(t, bin, env, append([]string{"status", "--format", "json"}, args...)...)
	switch {
	case want == nil && (status != 0 || !strings.Contains(stdout, `"name": "root"`)):
		t.Errorf("neli status: exit %d, stdout %s, stderr %s; want root leading", status, stdout, stderr)
	case want != nil && (status != 1 || !strings.Contains(stderr, want.command())):
		t.Errorf("neli status: exit %d, stderr %s; want exit 1 naming %q", status, stderr, want.command())
	}
}

// neliRun runs `neli run` with config's settings, which must exit 1 naming the grant want names.
func neliRun(t *testing.T, bin string, config goneli.Config, want *grantWant) {
	t.Helper()
	args, env := neliArgs(config)
	status, _, stderr := runNeli(t, bin, env, append(append([]string{"run", "--name", config.Name}, args...), "--", "true")...)
	if status != 1 || !strings.Contains(stderr, fmt.Sprintf("refuses %s %s on %s %s", neliPrincipal, want.op, want.resource, want.name)) ||
		!strings.Contains(stderr, want.command()) {
		t.Errorf("neli run: exit %d, stderr %s; want exit 1 naming %q", status, stderr, want.command())
	}
}

// aclCasesFor is what each grant's absence does, on the live group and topic and on new ones of
// the case's own.
func aclCasesFor(group, topic string, kip848 bool) []aclCase {
	// The cluster's one node makes every topic's replication factor 1, which the doctor warns of.
	with := func(m map[string]checkWant, extra map[string]checkWant) map[string]checkWant {
		m = maps.Clone(m)
		maps.Copy(m, extra)
		return m
	}
	base := map[string]checkWant{"topic": {goneli.CheckWarn, []string{"replication factor 1"}}}
	roles := map[string]checkWant{"topic": {goneli.CheckWarn, []string{"NewRoles will add them"}}}
	fresh := map[string]checkWant{"topic": {goneli.CheckWarn, []string{"does not exist; the broker would let User:neli create it", "replication factor 1"}}}
	ok := func(removed string) aclCase {
		return aclCase{removed: removed, live: base, roles: roles, fresh: fresh}
	}
	topicRead := grantWant{op: "Read", resource: "topic", name: topic}
	topicWrite := grantWant{op: "Write", resource: "topic", name: topic}
	topicAlter := grantWant{op: "Alter", resource: "topic", name: topic}
	topicConfigs := grantWant{op: "DescribeConfigs", resource: "topic", name: topic}
	groupRead := grantWant{op: "Read", resource: "group", name: group}
	observer := grantWant{op: "Describe", resource: "group", name: group + ".observer", prefixed: true}
	txn := grantWant{op: "Write", resource: "transactional-id", name: "goneli-fenced." + group, prefixed: true}
	clusterConfigs := grantWant{op: "DescribeConfigs", resource: "cluster", name: "kafka-cluster"}
	groupConfigs := grantWant{op: "DescribeConfigs", resource: "group", name: group}

	all := ok("")
	all.rolesContender, all.status = true, true
	cases := []aclCase{all, ok("topic-describe"), ok("group-describe")}

	c := ok("topic-read")
	c.live = with(base, map[string]checkWant{"acl-topic": fail(topicRead, "lacks Read on topic "+topic)})
	c.roles = with(roles, map[string]checkWant{"acl-topic": c.live["acl-topic"]})
	c.describe, c.status = &topicRead, true
	c.contender = &grantWant{op: "Read", resource: "topic", name: c.own(group) + ".neli"}
	cases = append(cases, c)

	c = ok("topic-write")
	c.live = with(base, map[string]checkWant{"acl-topic": fail(topicWrite, "lacks Write on topic "+topic)})
	c.roles = with(roles, map[string]checkWant{"acl-topic": c.live["acl-topic"]})
	c.contender = &grantWant{op: "Write", resource: "topic", name: c.own(group) + ".neli"}
	cases = append(cases, c)

	c = ok("topic-create")
	create := grantWant{op: "Create", resource: "topic", name: c.own(group) + ".neli"}
	c.fresh = map[string]checkWant{"topic": fail(create, "may not create it")}
	c.contender = &create
	cases = append(cases, c)

	c = ok("topic-alter")
	c.roles = map[string]checkWant{"topic": fail(topicAlter, "may not add partitions")}
	c.rolesContender = true
	c.rolesWant = &grantWant{op: "Alter", resource: "topic", name: c.rolesGroup(group) + ".neli"}
	cases = append(cases, c)

	// Only the doctor reads the topic's settings, and, before the topic exists, the replication
	// factor that the broker would give it, which Kafka tells only to a principal that may
	// describe the topic's configs.
	c = ok("topic-describe-configs")
	c.live = with(base, map[string]checkWant{"topic-config": warn(topicConfigs, "could not read topic "+topic+"'s settings")})
	c.roles = with(roles, map[string]checkWant{"topic-config": c.live["topic-config"]})
	c.fresh = map[string]checkWant{"topic": warn(grantWant{op: "DescribeConfigs", resource: "topic", name: c.own(group) + ".neli"},
		"at its default replication factor", "LeaderTopicReplicationFactor 3")}
	cases = append(cases, c)

	c = ok("group-read")
	c.live = with(base, map[string]checkWant{"acl-group": fail(groupRead, "may describe group "+group+" but not read it")})
	c.roles = with(roles, map[string]checkWant{"acl-group": c.live["acl-group"]})
	// DescribeGroups v5, which the doctor sends, gives the operations on a group that does not
	// exist too (v6 does not).
	c.fresh = with(fresh, map[string]checkWant{"acl-group": fail(grantWant{op: "Read", resource: "group", name: c.own(group)}, "but not read it")})
	c.contender = &grantWant{op: "Read", resource: "group", name: c.own(group)}
	// Under KIP-848 librdkafka raises the refusal as a fatal error (the classic protocol's is a
	// plain one); TestDriverFatalGroupAuthorization checks its *AuthorizationError.
	c.outOfProcess = kip848
	cases = append(cases, c)

	c = ok("observer-describe")
	c.live = with(base, map[string]checkWant{"acl-observer": fail(observer, "may not describe group "+group+".observer")})
	c.roles = with(roles, map[string]checkWant{"acl-observer": c.live["acl-observer"]})
	c.fresh = with(fresh, map[string]checkWant{"acl-observer": fail(grantWant{op: "Describe", resource: "group", name: c.own(group) + ".observer", prefixed: true})})
	c.describe, c.status = &observer, true
	cases = append(cases, c)

	c = ok("fenced-write")
	c.live = with(base, map[string]checkWant{"acl-transactional-id": warn(txn, "may not use transactional id goneli-fenced."+group)})
	c.roles = with(roles, map[string]checkWant{"acl-transactional-id": warn(txn, "may not use transactional id goneli-fenced."+group+".a")})
	ownTxn := grantWant{op: "Write", resource: "transactional-id", name: "goneli-fenced." + c.own(group), prefixed: true}
	c.fresh = with(fresh, map[string]checkWant{"acl-transactional-id": warn(ownTxn)})
	c.fenced = &ownTxn
	cases = append(cases, c)

	c = ok("cluster-describe-configs")
	if kip848 {
		// The brokers' session is unknown, and the group sets none of its own: New fails, and the
		// doctor with it. Once the group sets its own, neither needs the grant.
		lines := map[string]checkWant{"session": fail(clusterConfigs), "acl-cluster": warn(clusterConfigs)}
		c.live, c.roles, c.fresh = with(base, lines), with(roles, lines), with(fresh, lines)
		c.contender = &clusterConfigs
		c.groupSets = true
	} else {
		// New cannot read the brokers' least session, and raises the 1.25 s it derives to Kafka's
		// default, 6 s, which this broker (least 500 ms) accepts.
		lines := map[string]checkWant{"session": warn(clusterConfigs, "could not read the broker's group.min/max.session.timeout.ms")}
		c.live, c.roles, c.fresh = with(base, lines), with(roles, lines), with(fresh, lines)
		c.sessionLog = "to Apache Kafka's default minimum, 6s"
	}
	cases = append(cases, c)

	c = ok("group-describe-configs")
	if kip848 {
		c.live = with(base, map[string]checkWant{"session": fail(groupConfigs)})
		c.roles = with(roles, map[string]checkWant{"session": fail(groupConfigs)})
		ownConfigs := grantWant{op: "DescribeConfigs", resource: "group", name: c.own(group)}
		c.fresh = with(fresh, map[string]checkWant{"session": fail(ownConfigs)})
		c.contender = &ownConfigs
	}
	cases = append(cases, c)
	return cases
}
