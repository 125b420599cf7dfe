package kafkatest

import (
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka is what AsKafka adds to a Broker: the state of the answers it changes, and knobs to
// change them while a test runs. A Broker started without AsKafka has none (its Kafka is nil).
type Kafka struct {
	cfg     kafkaConfig
	cluster *kfake.Cluster

	mu         sync.Mutex
	nodes      map[string]int32 // by listen address
	ackDelay   map[int32]time.Duration
	ackChanged chan struct{} // closed and replaced by SetAckDelay

	coord    *coordinators
	sessions *sessions
}

func newKafka(cfg kafkaConfig) *Kafka {
	k := &Kafka{cfg: cfg, nodes: map[string]int32{}, ackDelay: map[int32]time.Duration{}, ackChanged: make(chan struct{})}
	k.coord = newCoordinators(cfg.offsetsCreate, cfg.load)
	k.sessions = newSessions(k)
	return k
}

// listen wraps a kfake.ListenFn so that kfake gets kconns.
func (k *Kafka) listen(next func(network, address string) (net.Listener, error)) func(network, address string) (net.Listener, error) {
	return func(network, address string) (net.Listener, error) {
		ln, err := next(network, address)
		if err != nil {
			return nil, err
		}
		return &klistener{Listener: ln, k: k}, nil
	}
}

// started records the cluster and its first nodes, node i listening on addrs[i] (kfake numbers the
// nodes it starts in the order of their listeners).
func (k *Kafka) started(c *kfake.Cluster, addrs []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cluster = c
	for i, a := range addrs {
		k.nodes[a] = int32(i)
	}
}

// node is the ID of the node listening on addr, or -1 if it is not known yet.
func (k *Kafka) node(addr string) int32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n, ok := k.nodes[addr]; ok {
		return n
	}
	return -1
}

// SetAckDelay makes node hold every acks=-1 produce for d after it came before answering (0: at
// once), as a broker does whose followers are slow to fetch: Kafka answers such a produce only
// once the in-sync replicas have the records, or with REQUEST_TIMED_OUT at the request's timeout.
// It applies to the produce requests already held too.
func (k *Kafka) SetAckDelay(node int32, d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ackDelay[node] = d
	close(k.ackChanged)
	k.ackChanged = make(chan struct{})
}

// ackDelayOf is node's ack delay, and a channel closed when it may have changed.
func (k *Kafka) ackDelayOf(node int32) (time.Duration, <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if d, ok := k.ackDelay[node]; ok {
		return d, k.ackChanged
	}
	return k.cfg.ackDelay, k.ackChanged
}

// close stops what runs on its own: the KIP-848 session timers.
func (k *Kafka) close() { k.sessions.close() }

// exchange answers one request: each behaviour's file says what it follows in Kafka.
func (k *Kafka) exchange(x *exchange) ([]byte, bool) {
	k.mu.Lock()
	started := k.cluster != nil
	k.mu.Unlock()
	if !started {
		// A client that knew the port (kfake.Ports) came before StartNet had the cluster.
		raw, err := x.forwardRaw()
		return raw, err == nil
	}
	node := k.node(x.c.addr)
	switch kmsg.Key(x.key) {
	case kmsg.SASLHandshake, kmsg.SASLAuthenticate:
		return k.authenticate(x)
	}
	if x.c.sessionExpired() {
		return nil, false
	}
	switch kmsg.Key(x.key) {
	case kmsg.Produce:
		return k.produce(x, node)
	case kmsg.FindCoordinator:
		return k.findCoordinator(x)
	case kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.LeaveGroup, kmsg.OffsetCommit,
		kmsg.TxnOffsetCommit, kmsg.OffsetDelete:
		if resp := k.coordinatorRefuses(x, node); resp != nil {
			return x.answer(resp), true
		}
	case kmsg.ConsumerGroupHeartbeat:
		if resp := k.protocolOff(x); resp != nil {
			return x.answer(resp), true
		}
		if resp := k.coordinatorRefuses(x, node); resp != nil {
			return x.answer(resp), true
		}
		return k.consumerHeartbeat(x, node)
	case kmsg.ConsumerGroupDescribe:
		if resp := k.protocolOff(x); resp != nil {
			return x.answer(resp), true
		}
		return k.describeGroups(x, node)
	case kmsg.DescribeGroups, kmsg.OffsetFetch:
		return k.describeGroups(x, node)
	case kmsg.Metadata:
		return k.metadata(x)
	case kmsg.DescribeCluster:
		return k.clusterOperations(x)
	case kmsg.DescribeConfigs:
		return k.describeConfigs(x, node)
	case kmsg.CreateTopics:
		return k.createTopics(x)
	case kmsg.IncrementalAlterConfigs:
		return k.alterConfigs(x)
	case kmsg.DescribeTransactions:
		return k.describeTransactions(x)
	case kmsg.ApiVersions:
		return x.patched(featuresBeforeV4)
	}
	raw, err := x.forwardRaw()
	return raw, err == nil
}

// patched forwards the request and lets fix change kfake's answer; true from fix re-encodes it.
func (x *exchange) patched(fix func(req kmsg.Request, resp kmsg.Response) bool) ([]byte, bool) {
	req := x.request()
	raw, err := x.forwardRaw()
	if err != nil {
		return nil, false
	}
	if req == nil || raw == nil {
		return raw, true
	}
	resp, err := decodeResponse(req, raw)
	if err != nil || !fix(req, resp) {
		return raw, true
	}
	return x.answer(resp), true
}

// protocolOff is the answer of a broker that does not serve the consumer group protocol to a
// request of it, UNSUPPORTED_VERSION for the request or each group, and nil where it is served
// (KafkaApis.handleConsumerGroupHeartbeat and handleConsumerGroupDescribe, through
// isConsumerGroupProtocolEnabled).
func (k *Kafka) protocolOff(x *exchange) kmsg.Response {
	if k.cfg.consumerProtocolOn() {
		return nil
	}
	switch req := x.request().(type) {
	case *kmsg.ConsumerGroupHeartbeatRequest:
		resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp
	case *kmsg.ConsumerGroupDescribeRequest:
		resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewConsumerGroupDescribeResponseGroup()
			rg.Group, rg.ErrorCode = g, kerr.UnsupportedVersion.Code
			resp.Groups = append(resp.Groups, rg)
		}
		return resp
	}
	return nil
}

// featuresBeforeV4 leaves out of an answer to ApiVersions below v4 the supported features whose
// least level is 0 (group.version, transaction.version), as Kafka does since 3.9 because older
// clients cannot read such a range (KAFKA-17492; ApiVersionsResponse.maybeFilterSupportedFeatureKeys,
// clients/src/main/java/org/apache/kafka/common/requests/ApiVersionsResponse.java, which
// ApiVersionManager asks for below v4). kfake lists them at every version. The finalized levels
// stay in both.
func featuresBeforeV4(req kmsg.Request, resp kmsg.Response) bool {
	r := resp.(*kmsg.ApiVersionsResponse)
	if req.GetVersion() >= 4 {
		return false
	}
	kept := r.SupportedFeatures[:0]
	for _, f := range r.SupportedFeatures {
		if f.MinVersion != 0 {
			kept = append(kept, f)
		}
	}
	changed := len(kept) != len(r.SupportedFeatures)
	r.SupportedFeatures = kept
	return changed
}
