package goneli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Check (the `neli doctor` command's library side) asks the cluster what New, NewRoles, Watch and
// Describe will need of it, before anything contends: a team learns of a broker that refuses the
// lease's session, a missing ACL or a leader topic with one replica at deployment, not at the first
// outage. It sends only requests that change nothing: ApiVersions, Metadata, DescribeConfigs,
// FindCoordinator for groups, DescribeGroups (or ConsumerGroupDescribe), DescribeTransactions and a
// CreateTopics that only validates. It looks up no transaction coordinator: Kafka creates
// __transaction_state at the first such lookup of a cluster that has none, which an application
// without a FencedProducer never needs. (A group's lookup creates __consumer_offsets on a cluster
// where no consumer group was ever looked up; the contenders' first lookup would.) It never joins
// the group, commits or writes a heartbeat, so it can run beside a live group. It speaks over goneli's own connection (internal/sidechan) rather than
// librdkafka's admin client, whose coordinator-bound requests can abort the process while a broker
// restarts (confluentinc/librdkafka#4605).

// CheckStatus is the outcome of one check of Check.
type CheckStatus int

// The outcomes of a check, from best to worst.
const (
	// CheckOK: nothing to do.
	CheckOK CheckStatus = iota
	// CheckWarn: goneli will work, but something is fragile or could not be checked.
	CheckWarn
	// CheckFail: goneli will refuse to start, or start and never lead (or never see a leader).
	CheckFail
)

// String returns "ok", "warn" or "FAIL".
func (s CheckStatus) String() string {
	switch s {
	case CheckOK:
		return "ok"
	case CheckWarn:
		return "warn"
	case CheckFail:
		return "FAIL"
	}
	return "status " + strconv.Itoa(int(s))
}

// MarshalText renders the status as String does, for encoding/json.
func (s CheckStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// CheckResult is one finding of Check.
type CheckResult struct {
	// Name is a short, stable identifier of the check: "config", "reach", "broker", "session",
	// "topic", "topic-config", "acl-topic", "acl-group", "acl-observer", "acl-cluster" or
	// "acl-transactional-id".
	Name   string
	Status CheckStatus
	// Detail says what was found.
	Detail string
	// Fix says what to do; empty when Status is CheckOK.
	Fix string
}

// CheckReport is what Check found, one result per check in the order they ran.
type CheckReport struct {
	Checks []CheckResult
}

// Worst is the worst status of the report's checks; CheckOK for an empty report.
func (r CheckReport) Worst() CheckStatus {
	w := CheckOK
	for _, c := range r.Checks {
		w = max(w, c.Status)
	}
	return w
}

// CheckFailedError is returned by Check when at least one check failed. Its message names every
// failure and what to do about it.
type CheckFailedError struct {
	Failed []CheckResult
}

func (e *CheckFailedError) Error() string {
	var b strings.Builder
	b.WriteString("goneli: the cluster check failed: ")
	for i, c := range e.Failed {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(&b, " (%s)", c.Fix)
		}
	}
	return b.String()
}

// CheckTimeout bounds Check when its context has no earlier deadline.
const CheckTimeout = 15 * time.Second

// checkDialTimeout bounds the connection to each bootstrap server and its first answer. A port of
// another service that accepts the connection and stays silent costs this much.
const checkDialTimeout = 5 * time.Second

// Check examines what config (and, for NewRoles, roles; none for New) needs of the cluster, without
// joining the group or writing to the leader topic, and reports one result per check: the settings
// that New would refuse; whether the bootstrap servers answer as Kafka; the broker's version and
// group protocols; the session timeout the broker allows or applies (KIP-848) against the lease;
// the leader topic (it exists with a partition per role, or may be created; its replication
// factor, min.insync.replicas, cleanup and retention); and the ACLs that the contender, an observer
// and Describe need, as the broker reports them for the configured principal (KIP-430's authorized
// operations) or as a validating CreateTopics shows them.
//
// Check returns within ctx's deadline or CheckTimeout, whichever is sooner. The error is a
// *CheckFailedError when at least one check failed, ctx's error if it ended first (the report
// then holds what was found so far), and nil otherwise; warnings do not make it non-nil, so a
// service can run Check at start-up and refuse to go on when it returns an error.
//
// Check connects with the TLS and SASL settings of KafkaConfig as goneli's own connection follows
// them (PLAINTEXT, SSL with PEM files, SASL PLAIN and SCRAM); with other settings (GSSAPI,
// OAUTHBEARER, a keystore), or a broker whose TLS handshake only librdkafka completes, it checks the
// configuration only, and says so in a warning that names what New logs for the same settings.
func Check(ctx context.Context, config Config, roles ...string) (CheckReport, error) {
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	d := &doctor{}
	if !d.run(ctx, config, roles) {
		return d.report, fmt.Errorf("goneli: the cluster check did not finish: %w", ctx.Err())
	}
	var failed []CheckResult
	for _, c := range d.report.Checks {
		if c.Status == CheckFail {
			failed = append(failed, c)
		}
	}
	if len(failed) > 0 {
		return d.report, &CheckFailedError{Failed: failed}
	}
	return d.report, nil
}

// doctor is one run of Check.
type doctor struct {
	report CheckReport

	config Config
	timing core.GroupTiming
	// timingOK: the configuration passed Validate, so timing is what New would derive.
	timingOK  bool
	need      int // partitions: one per role
	roles     []string
	principal string // empty when the configuration does not tell it
	side      *sidechan.Client
	// versions are the API versions of the broker that answered first, by key: lowest, highest;
	// groupVersion its finalized group.version feature, -1 if it supports none.
	versions     map[int16][2]int16
	groupVersion int16
	brokers      map[int32]string // id to host:port, from Metadata
	// clusterOps are the principal's operations on the cluster, from Metadata; noOps if unknown.
	clusterOps int32
	// brokerConfig is one broker's configuration, or why it could not be read (checkBroker).
	brokerConfig    map[string]kafka.ConfigEntryResult
	brokerConfigErr error
}

func (d *doctor) add(name string, s CheckStatus, fix string, format string, args ...any) {
	d.report.Checks = append(d.report.Checks, CheckResult{Name: name, Status: s, Detail: fmt.Sprintf(format, args...), Fix: fix})
}

// run runs the checks, and reports whether they finished before ctx ended.
func (d *doctor) run(ctx context.Context, config Config, roles []string) bool {
	defer d.close()
	if !d.checkConfig(config, roles) {
		return true
	}
	if !d.checkReach(ctx) {
		return ctx.Err() == nil
	}
	topic, ok := d.metadata(ctx)
	d.checkBroker(ctx)
	if ok {
		d.checkSession(ctx)
		d.checkTopic(ctx, topic)
		d.checkGroupACLs(ctx)
		d.checkTransactionalID(ctx)
	}
	return ctx.Err() == nil
}

// kip848 reports whether the configuration, as New would take it, asks for the KIP-848 group
// protocol.
func (d *doctor) kip848() bool { return d.timingOK && !d.timing.Classic }

// checkConfig reports every setting that New would refuse, and whether the rest can go on: they
// need bootstrap servers to ask.
func (d *doctor) checkConfig(config Config, roles []string) bool {
	if config.KafkaConfig != nil {
		config.KafkaConfig = maps.Clone(config.KafkaConfig)
	}
	noGroup := config.LeaderGroupID == ""
	config.SetDefaults()
	d.config = config
	d.need = max(len(roles), 1)
	d.roles = roles
	bad := 0
	var ce *ConfigError
	report := func(err error) {
		for _, e := range unjoin(err) {
			bad++
			fix := "fix the setting (see docs/configuration.md)"
			if errors.As(e, &ce) {
				fix = "fix " + ce.Field
			}
			d.add("config", CheckFail, fix, "%s", strings.TrimPrefix(e.Error(), "goneli: "))
		}
	}
	err := config.Validate()
	report(err)
	if len(roles) > 0 {
		report(validateRoles(roles))
	}
	if err == nil {
		// Validate has derived the timing too, so it cannot fail here.
		d.timing, _ = config.groupTiming()
		d.timingOK = true
	}
	if noGroup {
		d.add("config", CheckWarn, "set LeaderGroupID (neli: --group)",
			"no LeaderGroupID given, so the group is %q, the program's file name; every program of that name on the cluster would share it", config.LeaderGroupID)
	}
	if bad == 0 {
		protocol := "classic group protocol"
		if d.kip848() {
			protocol = "KIP-848 group protocol"
		}
		d.add("config", CheckOK, "", "group %s, topic %s, lease %v, %s", config.LeaderGroupID, config.LeaderTopic, *config.HeartbeatTimeout, protocol)
	}
	d.principal = principalOf(config)
	servers := config.KafkaConfig["bootstrap.servers"]
	return servers != nil && len(strings.TrimSpace(fmt.Sprint(servers))) > 0 && config.LeaderGroupID != "" && topicName.MatchString(config.LeaderTopic)
}

// unjoin lists the errors that errors.Join combined, or err alone.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// checkReach connects to each bootstrap server in turn as goneli's own connection does, until one
// answers as Kafka and lets the client in, and reports whether one did.
func (d *doctor) checkReach(ctx context.Context) bool {
	_, _, adminConf := d.config.clientConfigs(d.timing)
	adminConf["client.id"] = fmt.Sprint(adminConf["client.id"]) + "-doctor"
	// Each bootstrap server gets checkDialTimeout to answer, by the context of its request; the
	// client's own bound is the whole check's, so that a silent server's answer is awaited until
	// that context ends rather than given up on, and redialled, just before it.
	side, err := sidechan.New(adminConf, sidechan.Options{ConsumerProtocol: d.kip848(), Limit: CheckTimeout, Operations: true})
	if err != nil {
		d.add("reach", CheckWarn, "run the doctor where the cluster can be reached with PLAINTEXT, SSL (PEM) or SASL PLAIN/SCRAM, "+
			"or check the cluster by hand against the production notes of docs/operations.md",
			"cannot check the cluster: %s; only the configuration was checked", driver.ViaLibrdkafka(err))
		return false
	}
	d.side = side
	var problems []string
	for i, addr := range side.Settings().Seeds {
		if ctx.Err() != nil {
			break
		}
		dctx, cancel := context.WithTimeout(ctx, checkDialTimeout)
		req := kmsg.NewPtrApiVersionsRequest()
		req.ClientSoftwareName, req.ClientSoftwareVersion = "goneli-doctor", "1"
		resp, err := side.SeedRequest(dctx, i, req)
		cancel()
		if sidechan.IsFallback(err) {
			d.add("reach", CheckWarn, "check the cluster by hand against the production notes of docs/operations.md, or give the brokers "+
				"TLS that Go accepts as well (certificates that name them in a subject alternative name and that Go can parse, "+
				"cipher suites with an ECDHE key exchange)",
				"cannot check the cluster: %s; only the configuration was checked", driver.ViaLibrdkafka(err))
			return false
		}
		if err == nil {
			r := resp.(*kmsg.ApiVersionsResponse)
			if r.ErrorCode == 0 {
				d.learnVersions(r)
				d.add("reach", CheckOK, "", "%s answers as Kafka%s", addr, d.authNote())
				return true
			}
			err = sidechan.KafkaError(r.ErrorCode, nil)
		}
		problems = append(problems, addr+": "+d.whyNot(err))
	}
	d.add("reach", CheckFail, "check bootstrap.servers (neli: --kafka), that a broker runs there, and security.protocol and the SASL settings",
		"no bootstrap server could be used: %s", strings.Join(problems, "; "))
	return false
}

// learnVersions keeps what a broker's ApiVersions says: its API versions and the level of its
// group.version feature (KIP-848's, from Kafka 3.9; -1 where the broker supports no such feature).
func (d *doctor) learnVersions(r *kmsg.ApiVersionsResponse) {
	d.versions = map[int16][2]int16{}
	for _, k := range r.ApiKeys {
		d.versions[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	d.groupVersion = -1
	for _, f := range r.SupportedFeatures {
		if f.Name == "group.version" {
			d.groupVersion = 0
		}
	}
	for _, f := range r.FinalizedFeatures {
		if f.Name == "group.version" && d.groupVersion >= 0 {
			d.groupVersion = f.MaxVersionLevel
		}
	}
}

func (d *doctor) authNote() string {
	if m := d.side.Settings().Mechanism; m != "" {
		return fmt.Sprintf(" and authenticates %s with SASL %s", d.who(), m)
	}
	return ""
}

// whyNot says why a connection could not be used, in the terms of the bootstrap-server check.
func (d *doctor) whyNot(err error) string {
	var ne net.Error
	var oe *net.OpError
	switch {
	case d.side.AuthenticationFailed(err):
		return fmt.Sprintf("authentication failed: SASL %s as %s: %v", d.side.Settings().Mechanism, d.who(), err)
	case errors.As(err, &oe) && oe.Op == "dial":
		return "cannot connect: " + err.Error()
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("accepts connections but did not answer an ApiVersions request within %v: not a Kafka listener (or a TLS one, for which set security.protocol)", checkDialTimeout)
	}
	return "accepts connections but does not answer as Kafka: " + err.Error()
}

// checkBroker reports the broker's version, as far as the APIs it offers tell it, and whether it
// offers the group protocol the configuration asks for.
func (d *doctor) checkBroker(ctx context.Context) {
	v := d.versions
	has := func(k kmsg.Key, minMax int16) bool { r, ok := v[k.Int16()]; return ok && r[1] >= minMax }
	version := "before Kafka 2.4"
	switch {
	case has(kmsg.ConsumerGroupHeartbeat, 0) && has(kmsg.DescribeTopicPartitions, 0):
		version = "Kafka 3.8 or later"
	case has(kmsg.ConsumerGroupHeartbeat, 0):
		version = "Kafka 3.7 or later"
	case has(kmsg.JoinGroup, 6):
		version = "Kafka 2.4 or later"
	}
	protocols := []string{}
	if has(kmsg.JoinGroup, 0) {
		protocols = append(protocols, "classic")
	}
	consumer, known, why := d.consumerProtocol(ctx)
	switch {
	case consumer && known:
		protocols = append(protocols, "consumer (KIP-848)")
	case consumer:
		protocols = append(protocols, "consumer (KIP-848) offered, "+why)
	}
	detail := fmt.Sprintf("%s (by the APIs it offers); group protocols: %s", version, strings.Join(protocols, ", "))
	if !consumer && why != "" {
		detail += "; not the consumer protocol (KIP-848): " + why
	}
	switch {
	case d.kip848() && !consumer:
		d.add("broker", CheckFail, "drop group.protocol=consumer, or enable KIP-848 on the brokers (Kafka 4.0 or later)", "%s; group.protocol=consumer needs KIP-848", detail)
	case !has(kmsg.JoinGroup, 6):
		d.add("broker", CheckFail, "use Kafka 2.4 or later", "%s; goneli needs cooperative rebalancing (Kafka 2.4)", detail)
	case d.kip848() && !known:
		d.add("broker", CheckWarn, "grant DescribeConfigs on the cluster, or check the brokers' group.coordinator.rebalance.protocols by hand",
			"%s; group.protocol=consumer needs KIP-848 enabled", detail)
	default:
		d.add("broker", CheckOK, "", "%s", detail)
	}
}

// rebalanceProtocolsKey is the broker setting that lists the group protocols its coordinator
// serves (Kafka 3.7 or later).
const rebalanceProtocolsKey = "group.coordinator.rebalance.protocols"

// consumerProtocol reports whether the brokers serve the consumer group protocol (KIP-848),
// whether that is known, and why not or why unknown. Apache Kafka lists ConsumerGroupHeartbeat in
// ApiVersions from 3.7 whether or not the protocol is enabled; it serves it only when
// group.coordinator.rebalance.protocols names "consumer" and, from 3.9, its group.version feature
// is finalized at 1 or more (KafkaApis.isConsumerGroupProtocolEnabled).
func (d *doctor) consumerProtocol(ctx context.Context) (available, known bool, why string) {
	if r, ok := d.versions[kmsg.ConsumerGroupHeartbeat.Int16()]; !ok || r[1] < 0 {
		return false, true, ""
	}
	if d.groupVersion == 0 {
		return false, true, "its group.version feature is not finalized at 1 or more (kafka-features.sh upgrade --feature group.version=1)"
	}
	d.readBrokerConfig(ctx)
	if e, ok := d.brokerConfig[rebalanceProtocolsKey]; ok {
		if !slices.Contains(strings.Split(strings.ReplaceAll(e.Value, " ", ""), ","), "consumer") {
			return false, true, fmt.Sprintf("%s=%s", rebalanceProtocolsKey, e.Value)
		}
		return true, true, ""
	}
	if d.groupVersion > 0 {
		// A broker that lists no such setting (or would not say) and finalizes group.version.
		return true, true, ""
	}
	reason := "the broker does not list " + rebalanceProtocolsKey
	if d.brokerConfigErr != nil {
		reason = fmt.Sprintf("its %s could not be read (%v)", rebalanceProtocolsKey, d.brokerConfigErr)
	}
	return true, false, "whether it is enabled is not known: " + reason
}

// readBrokerConfig reads one broker's configuration, once.
func (d *doctor) readBrokerConfig(ctx context.Context) {
	if d.brokerConfig != nil || d.brokerConfigErr != nil {
		return
	}
	if len(d.brokers) == 0 {
		d.brokerConfigErr = errors.New("no broker is known")
		return
	}
	id := slices.Min(slices.Collect(maps.Keys(d.brokers)))
	res, err := d.side.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceBroker, Name: strconv.Itoa(int(id))}})
	switch {
	case err != nil:
		d.brokerConfigErr = err
	case res[0].Error.Code() != kafka.ErrNoError:
		d.brokerConfigErr = res[0].Error
	default:
		d.brokerConfig = res[0].Config
	}
}

// Operation bits of KIP-430's authorized operations.
func opBit(op kmsg.ACLOperation) int32 { return 1 << int32(op) }

// noOps is what a broker answers for authorized operations it was not asked for, or will not tell.
const noOps = math.MinInt32

// topicInfo is the leader topic as Metadata shows it.
type topicInfo struct {
	code       int16
	partitions int
	replicas   int
	ops        int32
}

// metadata reads the brokers and the leader topic, with the principal's authorized operations on
// the topic and the cluster.
func (d *doctor) metadata(ctx context.Context) (topicInfo, bool) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(d.config.LeaderTopic)
	req.Topics = []kmsg.MetadataRequestTopic{t}
	req.IncludeTopicAuthorizedOperations = true
	req.IncludeClusterAuthorizedOperations = true
	// The check changes nothing: a broker with auto.create.topics.enable would otherwise create
	// the topic it is asked about (the request's default allows it).
	req.AllowAutoTopicCreation = false
	// Version 10 is the last that reports the cluster's operations (the doctor's client goes no
	// higher); later ones leave them to DescribeCluster, which is not worth a request here.
	resp, err := d.side.Request(ctx, req)
	if err != nil {
		d.add("topic", CheckFail, "check that the broker is healthy", "cannot read the cluster's metadata: %v", err)
		return topicInfo{}, false
	}
	r := resp.(*kmsg.MetadataResponse)
	d.brokers = map[int32]string{}
	for _, b := range r.Brokers {
		d.brokers[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	info := topicInfo{code: 3, ops: noOps} // 3: UNKNOWN_TOPIC_OR_PARTITION
	d.clusterOps = noOps
	if r.Version >= 8 {
		d.clusterOps = r.AuthorizedOperations
	}
	for _, mt := range r.Topics {
		if mt.Topic == nil || *mt.Topic != d.config.LeaderTopic {
			continue
		}
		info.code = mt.ErrorCode
		if r.Version >= 8 {
			info.ops = mt.AuthorizedOperations
		}
		info.partitions = len(mt.Partitions)
		for _, p := range mt.Partitions {
			if p.Partition == 0 {
				info.replicas = len(p.Replicas)
			}
		}
	}
	return info, true
}

// checkSession compares the group session that the lease needs with what the broker allows
// (classic) or applies (KIP-848).
func (d *doctor) checkSession(ctx context.Context) {
	if !d.timingOK {
		d.add("session", CheckWarn, "fix the configuration first", "not checked: the configuration above is refused")
		return
	}
	ids := slices.Sorted(maps.Keys(d.brokers))
	cd := d.side
	ht := *d.config.HeartbeatTimeout
	if !d.timing.Classic {
		t := driver.ReadConsumerGroupTiming(ctx, cd, shellErrors{d.config}, d.config.LeaderGroupID, ids, ht)
		warning, err := t.Judge(d.config.LeaderGroupID, ht)
		var unknown *driver.SessionUnknownError
		var refused *AuthorizationError
		switch {
		case errors.As(err, &unknown) && errors.As(unknown.Refused, &refused):
			// New fails on it (internal/driver, session848.go, "Unknown means unknown").
			d.add("session", CheckFail, d.grant("DescribeConfigs", refused.Resource, refused.Name),
				"%s", strings.TrimPrefix(err.Error(), "goneli: "))
		case errors.As(err, &unknown):
			d.add("session", CheckWarn, "check that the brokers answer DescribeConfigs: no tenure leads while the session cannot be read",
				"%s", strings.TrimPrefix(err.Error(), "goneli: "))
		case err != nil:
			d.add("session", CheckFail, "lower the lease (--heartbeat-timeout) or raise the broker's group.consumer.session.timeout.ms",
				"%s", strings.TrimPrefix(err.Error(), "goneli: "))
		case warning != "":
			fix := "check that every broker answers DescribeConfigs, or compare its settings by hand"
			if !d.mayDescribeClusterConfigs(ctx) {
				fix = "to read them, " + d.grant("DescribeConfigs", "cluster", "kafka-cluster") + "; or compare the brokers' settings by hand"
			}
			d.add("session", CheckWarn, fix, "%s", warning)
		default:
			d.add("session", CheckOK, "", "the broker's KIP-848 session for group %s, %v (%s), covers the lease %v and its heartbeat interval %v",
				d.config.LeaderGroupID, t.Session.Value, t.Session.From, ht, t.Interval.Value)
		}
		return
	}
	lo, hi, problems := driver.BrokerSessionBounds(ctx, cd, ids)
	session := d.timing.Session
	switch {
	case lo.From != "" && session < lo.Value && d.timing.UserSession:
		d.add("session", CheckFail, fmt.Sprintf("raise session.timeout.ms to at least %d, or lower group.min.session.timeout.ms", lo.Value.Milliseconds()),
			"the group session, %v (session.timeout.ms), is below the broker's minimum, %v (%s): every join is refused", session, lo.Value, lo.From)
	case lo.From != "" && session < lo.Value:
		d.add("session", CheckWarn, fmt.Sprintf("lower group.min.session.timeout.ms to %d or less for failover in about a lease", session.Milliseconds()),
			"the group session that the lease %v implies, %v, is below the broker's minimum, %v (%s): New raises it to that, so a crashed leader is replaced after about %v",
			ht, session, lo.Value, lo.From, lo.Value)
	case hi.From != "" && session > hi.Value:
		d.add("session", CheckFail, "lower the lease (--heartbeat-timeout), or raise group.max.session.timeout.ms",
			"the group session, %v, is above the broker's maximum, %v (%s): every join is refused", session, hi.Value, hi.From)
	case lo.From == "" || hi.From == "":
		fix := "check that every broker answers DescribeConfigs, or compare by hand"
		if !d.mayDescribeClusterConfigs(ctx) {
			fix = "to check it, " + d.grant("DescribeConfigs", "cluster", "kafka-cluster") + "; or compare by hand"
		}
		d.add("session", CheckWarn, fix,
			"could not read the broker's group.min/max.session.timeout.ms (%s); the group session is %v", strings.Join(problems, "; "), session)
	default:
		d.add("session", CheckOK, "", "the group session, %v, lies within the broker's %v to %v", session, lo.Value, hi.Value)
	}
}

// checkTopic reports on the leader topic and the principal's operations on it.
func (d *doctor) checkTopic(ctx context.Context, t topicInfo) {
	topic := d.config.LeaderTopic
	switch kafka.ErrorCode(t.code) {
	case kafka.ErrTopicAuthorizationFailed:
		d.add("topic", CheckFail, d.grant("Describe, Read and Write", "topic", topic),
			"the broker does not let %s describe topic %s: TOPIC_AUTHORIZATION_FAILED", d.who(), topic)
		return
	case kafka.ErrUnknownTopicOrPart:
		d.checkCreatable(ctx)
		return
	case kafka.ErrNoError:
	default:
		d.add("topic", CheckFail, "check the broker's health", "topic %s: %v", topic, sidechan.KafkaError(t.code, nil))
		return
	}
	canAlter := t.ops == noOps || t.ops&opBit(kmsg.ACLOperationAlter) != 0
	switch {
	case t.partitions < d.need && canAlter:
		d.add("topic", CheckWarn, fmt.Sprintf("or add them now: kafka-topics.sh --alter --topic %s --partitions %d", topic, d.need),
			"topic %s has %d partition(s) and %d roles need %d: NewRoles will add them", topic, t.partitions, d.need, d.need)
	case t.partitions < d.need:
		d.add("topic", CheckFail, fmt.Sprintf("add them: kafka-topics.sh --alter --topic %s --partitions %d, or %s", topic, d.need, d.grant("Alter", "topic", topic)),
			"topic %s has %d partition(s) and %d roles need %d, and %s may not add partitions (no Alter)", topic, t.partitions, d.need, d.need, d.who())
	case t.replicas < 2:
		d.add("topic", CheckWarn, "recreate it with --replication-factor 3 (or let goneli create it with LeaderTopicReplicationFactor 3)",
			"topic %s exists with %d partition(s) and replication factor %d: losing that broker stops every leader of the group until it returns",
			topic, t.partitions, t.replicas)
	default:
		d.add("topic", CheckOK, "", "topic %s exists with %d partition(s), replication factor %d", topic, t.partitions, t.replicas)
	}
	d.checkTopicConfig(ctx, t)
	d.checkTopicOps(t)
}

// checkCreatable asks the controller whether it would create the leader topic as New would, without
// creating it.
func (d *doctor) checkCreatable(ctx context.Context) {
	topic := d.config.LeaderTopic
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions = int32(d.need)
	rt.ReplicationFactor = -1
	if rf := d.config.LeaderTopicReplicationFactor; rf > 0 {
		rt.ReplicationFactor = int16(rf)
	}
	for k, v := range driver.LeaderTopicConfig {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = []kmsg.CreateTopicsRequestTopic{rt}
	req.ValidateOnly = true
	req.TimeoutMillis = 5000
	// kgo sends it to the controller.
	resp, err := d.side.Request(ctx, req)
	if err != nil {
		d.add("topic", CheckWarn, "", "topic %s does not exist; could not ask whether it may be created: %v", topic, err)
		return
	}
	r := resp.(*kmsg.CreateTopicsResponse)
	if len(r.Topics) != 1 {
		d.add("topic", CheckWarn, "", "topic %s does not exist; the broker answered a validating CreateTopics with %d topics", topic, len(r.Topics))
		return
	}
	rt2 := r.Topics[0]
	switch code := kafka.ErrorCode(rt2.ErrorCode); code {
	case kafka.ErrNoError:
		rf := int(rt2.ReplicationFactor)
		if rf <= 0 {
			rf = d.config.LeaderTopicReplicationFactor
		}
		switch {
		case rf <= 0:
			// Apache Kafka tells the replication factor (and partitions and settings) of a topic it
			// would create only to a principal that may describe the topic's configs, and -1 to
			// others (ReplicationControlManager.createTopic). The broker's default is often 1.
			d.add("topic", CheckWarn, "set LeaderTopicReplicationFactor 3 (neli run --replication-factor 3), or, to see the broker's default, "+
				d.grant("DescribeConfigs", "topic", topic),
				"topic %s does not exist; the broker would let %s create it with %d partition(s), at its default replication factor, which it tells "+
					"only to a principal that may describe the topic's configs", topic, d.who(), d.need)
		case rf < 2:
			d.add("topic", CheckWarn, "set LeaderTopicReplicationFactor 3 (neli run --replication-factor 3), or create the topic yourself",
				"topic %s does not exist; the broker would let %s create it with %d partition(s), replication factor %d: with one replica, "+
					"losing that broker stops every leader of the group until it returns", topic, d.who(), d.need, rf)
		default:
			d.add("topic", CheckOK, "", "topic %s does not exist; the broker would let %s create it with %d partition(s), replication factor %d",
				topic, d.who(), d.need, rf)
		}
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed:
		d.add("topic", CheckFail, fmt.Sprintf("create it (kafka-topics.sh --create --topic %s --partitions %d --replication-factor 3), or %s",
			topic, d.need, d.grant("Create", "topic", topic)),
			"topic %s does not exist and %s may not create it: %v", topic, d.who(), sidechan.KafkaError(rt2.ErrorCode, rt2.ErrorMessage))
	default:
		d.add("topic", CheckFail, fmt.Sprintf("create it yourself: kafka-topics.sh --create --topic %s --partitions %d", topic, d.need),
			"topic %s does not exist and the broker would refuse to create it as goneli does: %v", topic, sidechan.KafkaError(rt2.ErrorCode, rt2.ErrorMessage))
	}
	// The topic's own operations cannot be learnt before it exists, except Create, which this was.
}

// checkTopicConfig reads the leader topic's settings.
func (d *doctor) checkTopicConfig(ctx context.Context, t topicInfo) {
	topic := d.config.LeaderTopic
	res, err := d.side.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic}})
	if err == nil && len(res) == 1 && res[0].Error.Code() != kafka.ErrNoError {
		err = res[0].Error
	}
	if err != nil {
		d.add("topic-config", CheckWarn, "to check them, "+d.grant("DescribeConfigs", "topic", topic),
			"could not read topic %s's settings (min.insync.replicas, cleanup, retention): %v", topic, err)
		return
	}
	get := func(k string) string { return strings.TrimSpace(res[0].Config[k].Value) }
	num := func(k string) (int64, bool) {
		n, err := strconv.ParseInt(get(k), 10, 64)
		return n, err == nil
	}
	var warns, fails, fixes []string
	isr, hasISR := num("min.insync.replicas")
	switch {
	case hasISR && t.replicas > 0 && isr > int64(t.replicas):
		fails = append(fails, fmt.Sprintf("min.insync.replicas %d exceeds the replication factor %d, so every heartbeat (acks=all) is refused", isr, t.replicas))
		fixes = append(fixes, fmt.Sprintf("set min.insync.replicas to at most %d", t.replicas))
	case hasISR && t.replicas >= 3 && isr < 2:
		warns = append(warns, fmt.Sprintf("min.insync.replicas %d lets a heartbeat count with one copy", isr))
		fixes = append(fixes, "set min.insync.replicas=2")
	}
	if cp := get("cleanup.policy"); cp != "" && !strings.Contains(cp, "delete") {
		warns = append(warns, fmt.Sprintf("cleanup.policy %s keeps every instance's last record for ever", cp))
		fixes = append(fixes, "set cleanup.policy=delete")
	}
	lease := *d.config.HeartbeatTimeout
	ms, hasMs := num("retention.ms")
	bytes, hasBytes := num("retention.bytes")
	switch {
	case hasMs && ms >= 0 && time.Duration(ms)*time.Millisecond < 10*lease:
		warns = append(warns, fmt.Sprintf("retention.ms %d is under ten leases: a release marker may go before a successor reads it", ms))
		fixes = append(fixes, "set retention.ms=600000")
	case hasMs && ms < 0 && (!hasBytes || bytes < 0):
		warns = append(warns, "retention is unlimited: the topic grows by some 1 KB per second per leader for ever")
		fixes = append(fixes, "set retention.ms=600000")
	}
	detail := fmt.Sprintf("topic %s: min.insync.replicas %s, cleanup.policy %s, retention.ms %s", topic, orNone(get("min.insync.replicas")),
		orNone(get("cleanup.policy")), orNone(get("retention.ms")))
	fix := ""
	if len(fixes) > 0 {
		fix = fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config %s", topic, strings.Join(fixes, ","))
	}
	switch {
	case len(fails) > 0:
		d.add("topic-config", CheckFail, fix, "%s; %s", detail, strings.Join(append(fails, warns...), "; "))
	case len(warns) > 0:
		d.add("topic-config", CheckWarn, fix, "%s; %s", detail, strings.Join(warns, "; "))
	default:
		d.add("topic-config", CheckOK, "", "%s", detail)
	}
}

func orNone(s string) string {
	if s == "" {
		return "(not given)"
	}
	return s
}

// checkTopicOps compares the principal's operations on the leader topic with what a contender,
// an observer and Describe need.
func (d *doctor) checkTopicOps(t topicInfo) {
	topic := d.config.LeaderTopic
	if t.ops == noOps {
		d.add("acl-topic", CheckWarn, "", "the broker did not say which operations %s may do on topic %s (it needs Metadata v8, Kafka 2.3)", d.who(), topic)
		return
	}
	var missing []string
	for _, op := range []struct {
		bit  kmsg.ACLOperation
		name string // as kafka-acls.sh spells it
	}{{kmsg.ACLOperationDescribe, "Describe"}, {kmsg.ACLOperationRead, "Read"}, {kmsg.ACLOperationWrite, "Write"}} {
		if t.ops&opBit(op.bit) == 0 {
			missing = append(missing, op.name)
		}
	}
	if len(missing) > 0 {
		d.add("acl-topic", CheckFail, d.grant(strings.Join(missing, ", "), "topic", topic),
			"%s lacks %s on topic %s: a contender needs Describe, Read and Write (to renew its lease), an observer and Describe need Describe and Read",
			d.who(), strings.Join(missing, ", "), topic)
		return
	}
	d.add("acl-topic", CheckOK, "", "%s may describe, read and write topic %s", d.who(), topic)
}

// checkGroupACLs finds the group's coordinator and asks it for the principal's operations on the
// group, and whether the observer's group (which librdkafka looks up for any consumer that has a
// group.id) may be described.
func (d *doctor) checkGroupACLs(ctx context.Context) {
	group := d.config.LeaderGroupID
	if _, err := d.side.FindCoordinator(ctx, sidechan.GroupCoordinator, group); err != nil {
		if driver.IsCode(err, kafka.ErrGroupAuthorizationFailed) {
			d.add("acl-group", CheckFail, d.grant("Read and Describe", "group", group),
				"%s may not describe group %s (FindCoordinator: GROUP_AUTHORIZATION_FAILED): a contender needs Read and Describe on it, and Describe needs Describe", d.who(), group)
		} else {
			d.add("acl-group", CheckWarn, "check the broker's health", "could not find group %s's coordinator: %v", group, err)
		}
	} else {
		d.groupOps(ctx)
	}
	observer := group + ".observer"
	if _, err := d.side.FindCoordinator(ctx, sidechan.GroupCoordinator, observer); err != nil {
		if driver.IsCode(err, kafka.ErrGroupAuthorizationFailed) {
			d.add("acl-observer", CheckFail, d.grantPrefixed("Describe", "group", observer),
				"%s may not describe group %s, which every observer (Watch, neli watch, ObserveLeader) and Describe (neli status) looks up", d.who(), observer)
			return
		}
		d.add("acl-observer", CheckWarn, "check the broker's health", "could not find group %s's coordinator: %v", observer, err)
		return
	}
	d.add("acl-observer", CheckOK, "", "%s may describe group %s, for observers and Describe", d.who(), observer)
	if d.kip848() && !d.mayDescribeClusterConfigs(ctx) {
		d.add("acl-cluster", CheckWarn, d.grant("DescribeConfigs", "cluster", "kafka-cluster"),
			"%s may not describe the cluster's configs, so New cannot read the brokers' KIP-848 session timeout: it refuses to start unless the group "+
				"sets its own consumer.session.timeout.ms and consumer.heartbeat.interval.ms", d.who())
	}
}

// mayDescribeClusterConfigs reports whether the principal may describe the brokers' configs. The
// cluster's authorized operations from Metadata say so only when the principal may describe the
// cluster: Apache Kafka answers 0 otherwise (KafkaApis.handleTopicMetadataRequest), and the grant
// docs/operations.md asks for is DescribeConfigs alone. So without a known, non-zero answer, a
// broker's configs are asked for.
func (d *doctor) mayDescribeClusterConfigs(ctx context.Context) bool {
	if d.clusterOps != noOps && d.clusterOps != 0 {
		return d.clusterOps&opBit(kmsg.ACLOperationDescribeConfigs) != 0
	}
	d.readBrokerConfig(ctx)
	return !driver.IsCode(d.brokerConfigErr, kafka.ErrClusterAuthorizationFailed)
}

// groupOps asks the group's coordinator for the principal's operations on the group.
func (d *doctor) groupOps(ctx context.Context) {
	group := d.config.LeaderGroupID
	var ops int32 = noOps
	var code int16
	if d.kip848() {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{group}
		req.IncludeAuthorizedOperations = true
		resp, err := d.side.Request(ctx, req)
		if err == nil && len(resp.(*kmsg.ConsumerGroupDescribeResponse).Groups) == 1 {
			g := resp.(*kmsg.ConsumerGroupDescribeResponse).Groups[0]
			ops, code = g.AuthorizedOperations, g.ErrorCode
		}
		if code == kerr.TopicAuthorizationFailed.Code {
			// KAFKA-18813 (Kafka 4.0): a member uses a topic the principal may not describe.
			d.add("acl-group", CheckWarn, "make every member of the group use topic "+d.config.LeaderTopic+", or grant Describe on the members' topics",
				"the broker refuses to describe group %s to %s because a member of it uses a topic %s may not describe: no instance leads while that member is in the group",
				group, d.who(), d.who())
			return
		}
	}
	if ops == noOps || code != 0 {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{group}
		req.IncludeAuthorizedOperations = true
		resp, err := d.side.Request(ctx, req)
		if err != nil {
			d.add("acl-group", CheckWarn, "check the broker's health", "could not describe group %s: %v", group, err)
			return
		}
		if r := resp.(*kmsg.DescribeGroupsResponse); len(r.Groups) == 1 {
			ops, code = r.Groups[0].AuthorizedOperations, r.Groups[0].ErrorCode
		}
	}
	switch kafka.ErrorCode(code) {
	case kafka.ErrGroupAuthorizationFailed:
		d.add("acl-group", CheckFail, d.grant("Read and Describe", "group", group),
			"%s may not describe group %s: a contender needs Read and Describe on it, and Describe (neli status) needs Describe", d.who(), group)
		return
	case kafka.ErrGroupIDNotFound:
		// Asked at DescribeGroups v5, Kafka answers a group that does not exist as Dead, with the
		// operations; a broker that answers GROUP_ID_NOT_FOUND tells none (KafkaApis fills them in
		// only for results without an error), but it checked Describe first.
		d.add("acl-group", CheckOK, "", "%s may describe group %s, which does not exist yet; the broker tells whether it may read it, "+
			"which a contender needs, only once it does", d.who(), group)
		return
	}
	if ops == noOps {
		d.add("acl-group", CheckWarn, "", "the broker did not say which operations %s may do on group %s (it needs DescribeGroups v3, Kafka 2.3)", d.who(), group)
		return
	}
	if ops&opBit(kmsg.ACLOperationRead) == 0 {
		d.add("acl-group", CheckFail, d.grant("Read", "group", group),
			"%s may describe group %s but not read it: a contender cannot join the group or commit its heartbeats' offsets", d.who(), group)
		return
	}
	d.add("acl-group", CheckOK, "", "%s may read and describe group %s", d.who(), group)
}

func (d *doctor) who() string {
	if d.principal != "" {
		return d.principal
	}
	return "this client"
}

// grant says how to grant ops on a resource to the principal.
// ops is prose ("Read and Describe", "Read, Write"), whose operations the command lists.
func (d *doctor) grant(ops, kind, name string) string {
	return fmt.Sprintf("grant %s on %s %s: %s%s", ops, kind, name, aclGrantCommand(grantee(d.principal), opList(ops), kind, name, false), managedNote(d.principal))
}

// grantPrefixed is grant on every resource of the kind whose name starts with name, as the
// AuthorizationError for the same refusal gives it: an observer's groups are name and name-status.
func (d *doctor) grantPrefixed(ops, kind, name string) string {
	return fmt.Sprintf("grant %s on the %ss prefixed %s: %s%s", ops, kind, name, aclGrantCommand(grantee(d.principal), opList(ops), kind, name, true), managedNote(d.principal))
}

// opList lists the operations of prose such as "Read and Describe".
func opList(ops string) []string {
	var list []string
	for _, op := range strings.FieldsFunc(ops, func(r rune) bool { return r == ',' || r == ' ' }) {
		if op != "and" {
			list = append(list, op)
		}
	}
	return list
}

// checkTransactionalID asks whether the principal may use the transactional id that a
// FencedProducer of the group would (goneli-fenced.<group>, or goneli-fenced.<group>.<role> for
// roles). A FencedProducer needs Write on it; what the doctor can see is Describe, which Write
// implies, and nothing short of initialising a producer, which would fence a live one, checks
// Write. Applications that use no FencedProducer need no grant, so a refusal is a warning.
//
// It asks with DescribeTransactions (KIP-664, Kafka 3.0), sent to one broker as it is: Kafka
// answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED for an id the principal may not describe, and
// otherwise whatever the transaction coordinator says (NOT_COORDINATOR from a broker that does
// not coordinate it, TRANSACTIONAL_ID_NOT_FOUND for an id never used), creating nothing
// (KafkaApis.handleDescribeTransactionsRequest, TransactionCoordinator.handleDescribeTransactions).
// A FindCoordinator for the id, which kgo would send first for a request it routes to the
// coordinator, creates __transaction_state on a cluster that has none
// (KafkaApis.getCoordinator): an application that uses no FencedProducer never needs that topic,
// and the doctor promises to change nothing.
func (d *doctor) checkTransactionalID(ctx context.Context) {
	id := fencedPrefix + d.config.LeaderGroupID
	prefixed := len(d.roles) > 0
	if prefixed {
		id += "." + d.roles[0]
	}
	grant := fmt.Sprintf("if the application uses a FencedProducer, grant Write on the transactional ids it uses: %s",
		aclGrantCommand(grantee(d.principal), []string{"Write"}, "transactional-id", fencedPrefix+d.config.LeaderGroupID, true))
	if r, ok := d.versions[kmsg.DescribeTransactions.Int16()]; !ok || r[1] < 0 {
		d.add("acl-transactional-id", CheckWarn, grant, "not checked: the broker offers no DescribeTransactions (Kafka 3.0 or later), "+
			"and looking up the coordinator of transactional id %s instead would create __transaction_state on a cluster that has none", id)
		return
	}
	err := d.describeTransactionalID(ctx, id)
	switch {
	case driver.IsCode(err, kafka.ErrTransactionalIDAuthorizationFailed):
		d.add("acl-transactional-id", CheckWarn, grant,
			"%s may not use transactional id %s (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), which a FencedProducer of the group needs Write on", d.who(), id)
	case err != nil:
		d.add("acl-transactional-id", CheckWarn, "check the broker's health", "could not describe transactional id %s: %v", id, err)
	default:
		d.add("acl-transactional-id", CheckOK, "", "%s may describe transactional id %s; a FencedProducer needs Write on it, which implies that "+
			"and which only a producer's initialisation could show", d.who(), id)
	}
}

// describeTransactionalID describes id with DescribeTransactions, sent to the known brokers in turn
// until one answers, and returns the id's error: nil, or a kafka.Error, of which only
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED says anything of the principal's rights.
func (d *doctor) describeTransactionalID(ctx context.Context, id string) error {
	var last error = errors.New("no broker is known")
	for _, node := range slices.Sorted(maps.Keys(d.brokers)) {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{id}
		resp, err := d.side.BrokerRequest(ctx, node, req)
		if err != nil {
			last = fmt.Errorf("broker %d: %w", node, err)
			continue
		}
		states := resp.(*kmsg.DescribeTransactionsResponse).TransactionStates
		if len(states) != 1 {
			last = fmt.Errorf("broker %d answered for %d transactional ids, asked for one", node, len(states))
			continue
		}
		if code := states[0].ErrorCode; code == kerr.TransactionalIDAuthorizationFailed.Code {
			return sidechan.KafkaError(code, nil)
		}
		return nil
	}
	return last
}

func (d *doctor) close() {
	if d.side != nil {
		d.side.Close()
	}
}
