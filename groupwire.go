package goneli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/kprobe"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// # The group check on a connection of goneli's own
//
// librdkafka 2.11.1 aborts the process when a coordinator-bound admin request cannot be sent
// because the coordinator's connection has just dropped (confluentinc/librdkafka#4605; "How often
// the group is described", groupcheck.go). Checking less often, and not right after a failed
// connection, made the abort rarer, but three-broker chaos runs still lost about one member process
// in 200 broker faults to it. So the check does not go through librdkafka at all where it can be
// helped: wireDescriber finds the coordinator and describes the group over a connection it opens
// itself, with the Kafka protocol's own messages (franz-go's kmsg, a module without dependencies),
// and closes it afterwards. A connection that drops then fails the check, which is retried like any
// failed check, and takes nothing else with it.
//
// It speaks what the instance's clients are configured with when goneli can do it itself:
// PLAINTEXT, SSL (PEM certificates and keys, unencrypted), and SASL PLAIN or SCRAM-SHA-256/512 over
// either. For anything else (GSSAPI, OAUTHBEARER, a PKCS#12 keystore, an encrypted key, an OpenSSL
// engine), New logs that the check goes through librdkafka's admin client as before.

// wireDescriber describes the group over connections of its own. It satisfies groupDescriber.
type wireDescriber struct {
	servers []string
	dialer  wireDialer
	// consumerFirst: the instance's group speaks KIP-848, so its description is a
	// ConsumerGroupDescribe, and DescribeGroups only if the broker knows no such group.
	consumerFirst bool
}

// errWireUnsupported marks a client configuration that the wire describer cannot speak.
var errWireUnsupported = errors.New("not supported by goneli's own connection")

// wireUnsupported is an error wrapping errWireUnsupported that names what cannot be followed.
func wireUnsupported(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errWireUnsupported)
}

// newWireDescriber reads the connection settings of a librdkafka configuration, or returns an
// error wrapping errWireUnsupported that names the setting it cannot follow.
func newWireDescriber(conf kafka.ConfigMap, consumerProtocol bool) (*wireDescriber, error) {
	get := func(key string) (string, bool) {
		v, ok := conf[key]
		if !ok || v == nil {
			return "", false
		}
		return fmt.Sprint(v), true
	}
	w := &wireDescriber{consumerFirst: consumerProtocol, dialer: wireDialer{network: "tcp"}}
	servers, _ := get("bootstrap.servers")
	w.servers = kprobe.Servers(servers)
	if len(w.servers) == 0 {
		return nil, wireUnsupported("no bootstrap.servers")
	}
	w.dialer.clientID, _ = get("client.id")
	switch fam, _ := get("broker.address.family"); fam {
	case "v4":
		w.dialer.network = "tcp4"
	case "v6":
		w.dialer.network = "tcp6"
	}

	protocol, _ := get("security.protocol")
	protocol = strings.ToLower(protocol)
	switch protocol {
	case "", "plaintext", "sasl_plaintext":
	case "ssl", "sasl_ssl":
		cfg, err := wireTLS(get)
		if err != nil {
			return nil, err
		}
		w.dialer.tls = cfg
	default:
		return nil, wireUnsupported("security.protocol=%s", protocol)
	}
	if strings.HasPrefix(protocol, "sasl_") {
		mech, ok := get("sasl.mechanisms")
		if m, ok2 := get("sasl.mechanism"); ok2 {
			mech, ok = m, true
		}
		if !ok {
			mech = "GSSAPI" // librdkafka's default
		}
		mech = strings.ToUpper(strings.TrimSpace(mech))
		switch mech {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return nil, wireUnsupported("sasl.mechanism=%s", mech)
		}
		user, _ := get("sasl.username")
		password, _ := get("sasl.password")
		w.dialer.sasl = &wireSASL{mechanism: mech, user: user, password: password}
	}
	return w, nil
}

// wireTLS builds a TLS configuration from librdkafka's ssl.* settings.
func wireTLS(get func(string) (string, bool)) (*tls.Config, error) {
	for _, key := range []string{"ssl.keystore.location", "ssl.key.password", "ssl.engine.location", "ssl.engine.id",
		"ssl.providers", "ssl.crl.location", "ssl_engine_callback_data", "ssl.certificate.verify_cb"} {
		if v, ok := get(key); ok && v != "" {
			return nil, wireUnsupported("%s", key)
		}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	// "probe" asks librdkafka to find the system's CAs, which Go's default roots are.
	ca, _ := get("ssl.ca.location")
	hasCA := ca != "" && ca != "probe"
	caPEM, hasCAPEM := get("ssl.ca.pem")
	if hasCA || hasCAPEM {
		pool := x509.NewCertPool()
		if hasCAPEM && !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, wireUnsupported("ssl.ca.pem: no certificate found")
		}
		if hasCA {
			if err := appendCAs(pool, ca); err != nil {
				return nil, err
			}
		}
		cfg.RootCAs = pool
	}
	certFile, hasCertFile := get("ssl.certificate.location")
	keyFile, hasKeyFile := get("ssl.key.location")
	certPEM, hasCertPEM := get("ssl.certificate.pem")
	keyPEM, hasKeyPEM := get("ssl.key.pem")
	switch {
	case hasCertFile && hasKeyFile:
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, wireUnsupported("ssl.certificate.location, ssl.key.location: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case hasCertPEM && hasKeyPEM:
		pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			return nil, wireUnsupported("ssl.certificate.pem, ssl.key.pem: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case hasCertFile || hasKeyFile || hasCertPEM || hasKeyPEM:
		return nil, wireUnsupported("a client certificate without its key")
	}
	verify, _ := get("enable.ssl.certificate.verification")
	identify, hasIdentify := get("ssl.endpoint.identification.algorithm")
	switch {
	case verify == "false":
		cfg.InsecureSkipVerify = true
	case hasIdentify && strings.ToLower(identify) == "none":
		// The chain is still verified, only not the name in it, as librdkafka does.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyChain(raw, roots)
		}
	}
	return cfg, nil
}

// appendCAs adds the certificates of a PEM file, or of every file in a directory, to pool.
func appendCAs(pool *x509.CertPool, location string) error {
	files := []string{location}
	if st, err := os.Stat(location); err == nil && st.IsDir() {
		entries, err := os.ReadDir(location)
		if err != nil {
			return wireUnsupported("ssl.ca.location: %v", err)
		}
		files = files[:0]
		for _, e := range entries {
			if !e.IsDir() {
				files = append(files, filepath.Join(location, e.Name()))
			}
		}
	}
	found := false
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			return wireUnsupported("ssl.ca.location: %v", err)
		}
		found = pool.AppendCertsFromPEM(pem) || found
	}
	if !found {
		return wireUnsupported("ssl.ca.location: no PEM certificate in %s", location)
	}
	return nil
}

func verifyChain(raw [][]byte, roots *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("the broker sent no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return err
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	return err
}

// wireRetry is the pause between attempts while the coordinator is unknown, moving or loading.
const wireRetry = 200 * time.Millisecond

// DescribeConsumerGroups describes the one group asked for, retrying within ctx while the broker
// says the coordinator is not ready and after any failure that is not the broker's answer (a
// connection that fails, a response that cannot be read); options are ignored (ctx bounds it). A group-level error of the description is returned in its Error, as librdkafka does.
func (w *wireDescriber) DescribeConsumerGroups(ctx context.Context, groups []string, _ ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error) {
	if len(groups) != 1 {
		return kafka.DescribeConsumerGroupsResult{}, fmt.Errorf("goneli describes one group at a time, not %d", len(groups))
	}
	for {
		desc, err := w.describeOnce(ctx, groups[0])
		if err == nil {
			return kafka.DescribeConsumerGroupsResult{ConsumerGroupDescriptions: []kafka.ConsumerGroupDescription{desc}}, nil
		}
		var ke kafka.Error
		retriable := !errors.As(err, &ke) || coordinatorNotReady(ke.Code())
		if !retriable {
			return kafka.DescribeConsumerGroupsResult{}, err
		}
		t := time.NewTimer(wireRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return kafka.DescribeConsumerGroupsResult{}, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// coordinatorNotReady reports whether code says to ask again shortly.
func coordinatorNotReady(code kafka.ErrorCode) bool {
	switch code {
	case kafka.ErrCoordinatorNotAvailable, kafka.ErrNotCoordinator, kafka.ErrCoordinatorLoadInProgress, kafka.ErrNetworkException:
		return true
	}
	return false
}

// describeOnce finds the coordinator through a bootstrap server and describes the group there.
func (w *wireDescriber) describeOnce(ctx context.Context, group string) (kafka.ConsumerGroupDescription, error) {
	first := rand.IntN(len(w.servers))
	var boot *wireConn
	var err error
	for i := range w.servers {
		addr := w.servers[(first+i)%len(w.servers)]
		if boot, err = w.dialer.dial(ctx, addr); err == nil {
			break
		}
		if ctx.Err() != nil {
			return kafka.ConsumerGroupDescription{}, err
		}
	}
	if boot == nil {
		return kafka.ConsumerGroupDescription{}, err
	}
	defer boot.close()
	node, addr, err := findCoordinator(ctx, boot, group)
	if err != nil {
		return kafka.ConsumerGroupDescription{}, err
	}
	coord := boot
	if addr != boot.addr {
		if coord, err = w.dialer.dial(ctx, addr); err != nil {
			return kafka.ConsumerGroupDescription{}, err
		}
		defer coord.close()
	}
	desc, err := w.describeAt(ctx, coord, group)
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	desc.Coordinator = kafka.Node{ID: int(node), Host: host, Port: p}
	return desc, err
}

// findCoordinator asks which broker coordinates group.
func findCoordinator(ctx context.Context, c *wireConn, group string) (int32, string, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = group
	req.CoordinatorKeys = []string{group}
	resp, err := c.request(ctx, req, 6)
	if err != nil {
		return 0, "", err
	}
	r := resp.(*kmsg.FindCoordinatorResponse)
	code, msg, node, host, port := r.ErrorCode, r.ErrorMessage, r.NodeID, r.Host, r.Port
	if r.Version >= 4 {
		if len(r.Coordinators) != 1 {
			return 0, "", fmt.Errorf("FindCoordinator for one group answered with %d coordinators", len(r.Coordinators))
		}
		k := r.Coordinators[0]
		code, msg, node, host, port = k.ErrorCode, k.ErrorMessage, k.NodeID, k.Host, k.Port
	}
	if code != 0 {
		return 0, "", kafkaCode(code, msg)
	}
	return node, net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// describeAt describes group at its coordinator, with ConsumerGroupDescribe for a KIP-848 group
// and DescribeGroups for a classic one, trying the other when the first does not know the group.
func (w *wireDescriber) describeAt(ctx context.Context, c *wireConn, group string) (kafka.ConsumerGroupDescription, error) {
	canConsumer := c.supports(kmsg.NewPtrConsumerGroupDescribeRequest(), 1)
	describe, other := describeClassic, describeConsumer
	if w.consumerFirst && canConsumer {
		describe, other = describeConsumer, describeClassic
	} else if !canConsumer {
		other = nil
	}
	desc, err := describe(ctx, c, group)
	if err != nil || desc.Error.Code() != kafka.ErrGroupIDNotFound || other == nil {
		return desc, err
	}
	// The group may be of the other kind: Apache Kafka answers GROUP_ID_NOT_FOUND when asked for
	// a group by the other kind's request, and for a group that does not exist.
	if o, err := other(ctx, c, group); err == nil && o.Error.Code() != kafka.ErrGroupIDNotFound {
		return o, nil
	}
	return desc, nil
}

// newDescription is a description of group without an error, which describeConsumer and
// describeClassic fill in.
func newDescription(group string) kafka.ConsumerGroupDescription {
	return kafka.ConsumerGroupDescription{GroupID: group, Error: kafka.NewError(kafka.ErrNoError, "", false)}
}

// newMember describes a member as both protocols' descriptions name it.
func newMember(clientID, memberID, host string, instanceID *string) kafka.MemberDescription {
	md := kafka.MemberDescription{ClientID: clientID, ConsumerID: memberID, Host: host}
	if instanceID != nil {
		md.GroupInstanceID = *instanceID
	}
	return md
}

// describeConsumer describes a KIP-848 group, in librdkafka's form.
func describeConsumer(ctx context.Context, c *wireConn, group string) (kafka.ConsumerGroupDescription, error) {
	desc := newDescription(group)
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp, err := c.request(ctx, req, 1)
	if err != nil {
		return desc, err
	}
	r := resp.(*kmsg.ConsumerGroupDescribeResponse)
	if len(r.Groups) != 1 {
		return desc, fmt.Errorf("ConsumerGroupDescribe for one group answered with %d", len(r.Groups))
	}
	g := r.Groups[0]
	if g.ErrorCode != 0 {
		desc.Error = kafkaCode(g.ErrorCode, g.ErrorMessage)
		return desc, nil
	}
	desc.Type = kafka.ConsumerGroupTypeConsumer
	// librdkafka maps a state it does not know to Unknown, and returns no error.
	desc.State, _ = kafka.ConsumerGroupStateFromString(g.State)
	desc.PartitionAssignor = g.AssignorName
	names := topicNames(ctx, c, g.Members)
	for _, m := range g.Members {
		md := newMember(m.ClientID, m.MemberID, m.ClientHost, m.InstanceID)
		md.Assignment = kafka.MemberAssignment{TopicPartitions: assigned(m.Assignment, names)}
		md.TargetAssignment = &kafka.MemberAssignment{TopicPartitions: assigned(m.TargetAssignment, names)}
		desc.Members = append(desc.Members, md)
	}
	return desc, nil
}

// describeClassic describes a classic group, in librdkafka's form.
func describeClassic(ctx context.Context, c *wireConn, group string) (kafka.ConsumerGroupDescription, error) {
	desc := newDescription(group)
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	// Version 6 reports a missing group as GROUP_ID_NOT_FOUND; up to 5 it is a Dead group without
	// an error, as librdkafka's own description has it.
	resp, err := c.request(ctx, req, 5)
	if err != nil {
		return desc, err
	}
	r := resp.(*kmsg.DescribeGroupsResponse)
	if len(r.Groups) != 1 {
		return desc, fmt.Errorf("DescribeGroups for one group answered with %d", len(r.Groups))
	}
	g := r.Groups[0]
	if g.ErrorCode != 0 {
		desc.Error = kafkaCode(g.ErrorCode, g.ErrorMessage)
		return desc, nil
	}
	desc.Type = kafka.ConsumerGroupTypeClassic
	desc.State, _ = kafka.ConsumerGroupStateFromString(g.State)
	desc.PartitionAssignor = g.Protocol
	desc.IsSimpleConsumerGroup = g.ProtocolType == "" && len(g.Members) == 0 && g.State == "Empty"
	for _, m := range g.Members {
		md := newMember(m.ClientID, m.MemberID, m.ClientHost, m.InstanceID)
		if g.ProtocolType == "consumer" && len(m.MemberAssignment) > 0 {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				return desc, fmt.Errorf("member %s's assignment cannot be read: %w", m.MemberID, err)
			}
			for _, t := range a.Topics {
				for _, p := range t.Partitions {
					md.Assignment.TopicPartitions = append(md.Assignment.TopicPartitions, kafka.TopicPartition{Topic: &t.Topic, Partition: p})
				}
			}
		}
		desc.Members = append(desc.Members, md)
	}
	return desc, nil
}

// topicNames maps the topic IDs that a KIP-848 description gives without names to names, from
// the cluster's metadata. Apache Kafka names them itself; kfake does not. A map that misses an ID
// leaves the partition nameless, which the check counts against leading.
func topicNames(ctx context.Context, c *wireConn, members []kmsg.ConsumerGroupDescribeResponseGroupMember) map[[16]byte]string {
	unnamed := func(tp kmsg.AssignmentTopicPartition) bool { return tp.Topic == "" }
	if !slices.ContainsFunc(members, func(m kmsg.ConsumerGroupDescribeResponseGroupMember) bool {
		return slices.ContainsFunc(m.Assignment.TopicPartitions, unnamed) || slices.ContainsFunc(m.TargetAssignment.TopicPartitions, unnamed)
	}) {
		return nil
	}
	req := kmsg.NewPtrMetadataRequest() // Topics nil: every topic
	// Metadata gives topic IDs from version 10 on.
	if v, ok := c.version(req, 12); !ok || v < 10 {
		return nil
	}
	resp, err := c.request(ctx, req, 12)
	if err != nil {
		return nil
	}
	names := map[[16]byte]string{}
	for _, t := range resp.(*kmsg.MetadataResponse).Topics {
		if t.Topic != nil && t.TopicID != [16]byte{} {
			names[t.TopicID] = *t.Topic
		}
	}
	return names
}

// assigned lists an assignment's partitions, named where the description or names can.
func assigned(a kmsg.Assignment, names map[[16]byte]string) []kafka.TopicPartition {
	var out []kafka.TopicPartition
	for _, tp := range a.TopicPartitions {
		name := tp.Topic
		if name == "" {
			name = names[tp.TopicID]
		}
		var topic *string
		if name != "" {
			topic = &name
		}
		for _, p := range tp.Partitions {
			out = append(out, kafka.TopicPartition{Topic: topic, Partition: p})
		}
	}
	return out
}
