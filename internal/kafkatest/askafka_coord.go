package kafkatest

import (
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coordinators is when Kafka's group coordinators cannot serve a group yet, which kfake never
// says. In Kafka:
//   - FindCoordinator for a group creates __consumer_offsets if it does not exist and answers
//     COORDINATOR_NOT_AVAILABLE meanwhile (core/src/main/scala/kafka/server/KafkaApis.scala,
//     getCoordinator);
//   - a broker holding no coordinator for the group's partition answers NOT_COORDINATOR, one
//     still loading it COORDINATOR_LOAD_IN_PROGRESS (coordinator-common/.../CoordinatorRuntime.java,
//     contextOrThrow and withActiveContextOrThrow), after the partition is created and whenever
//     its leadership moves;
//   - the group coordinator puts these errors in each group's result where a request names several
//     groups, not in the request's (group-coordinator/.../GroupCoordinatorService.java,
//     describeGroups and the other multi-group operations, through
//     CoordinatorOperationExceptionHelper.handleOperationException).
type coordinators struct {
	create, load time.Duration

	mu        sync.Mutex
	offsetsAt time.Time            // when the first FindCoordinator for a group came; zero before
	txnAt     time.Time            // when the first FindCoordinator for a transactional id came; zero before
	ready     time.Time            // when the coordinators have loaded the new partitions
	loading   map[string]time.Time // group -> end of its load on the coordinator it moved to
	known     map[string]struct{}  // every group a request named, to tell which ones a move moved
}

func newCoordinators(create, load time.Duration) *coordinators {
	return &coordinators{create: create, load: load, loading: map[string]time.Time{}, known: map[string]struct{}{}}
}

// creating reports whether __consumer_offsets is being created, starting its creation on the
// first call.
func (co *coordinators) creating(now time.Time) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.offsetsAt.IsZero() {
		co.offsetsAt, co.ready = now, now.Add(co.create+co.load)
	}
	return now.Before(co.offsetsAt.Add(co.create))
}

// creatingTxn reports whether __transaction_state is being created, starting its creation on the
// first call.
func (co *coordinators) creatingTxn(now time.Time) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.txnAt.IsZero() {
		co.txnAt = now
	}
	return now.Before(co.txnAt.Add(co.create))
}

// InternalTopics names the internal topics that the cluster would have created by now, in the
// order Kafka would have: __consumer_offsets after the first FindCoordinator for a group,
// __transaction_state after the first for a transactional id, each only for a principal allowed to
// describe the key (KafkaApis.getCoordinator, getOrCreateInternalTopic). kfake creates neither, so
// a test that must change nothing on a cluster (the doctor) asks this instead.
func (k *Kafka) InternalTopics() []string {
	k.coord.mu.Lock()
	defer k.coord.mu.Unlock()
	var out []string
	if !k.coord.offsetsAt.IsZero() {
		out = append(out, "__consumer_offsets")
	}
	if !k.coord.txnAt.IsZero() {
		out = append(out, "__transaction_state")
	}
	return out
}

// status is the coordinator error that node gives for group now, or 0 to let kfake answer.
// coordinator tells whether node coordinates the group in kfake; kfake itself answers
// NOT_COORDINATOR where it does not.
func (co *coordinators) status(group string, coordinator func(string) bool, now time.Time) int16 {
	co.mu.Lock()
	defer co.mu.Unlock()
	co.known[group] = struct{}{}
	switch created := co.offsetsAt.Add(co.create); {
	case co.offsetsAt.IsZero() || now.Before(created):
		return kerr.NotCoordinator.Code // no broker holds the group's partition yet
	case !coordinator(group):
		return 0
	case now.Before(co.ready):
		return kerr.CoordinatorLoadInProgress.Code
	case now.Before(co.loading[group]):
		return kerr.CoordinatorLoadInProgress.Code
	}
	return 0
}

// moved runs move (a change of the cluster's nodes or coordinators) and makes every known group
// whose coordinator it changed load on its new one. Requests wait meanwhile, so that none sees
// the new coordinator before its load starts.
func (co *coordinators) moved(coordinatorOf func(string) int32, move func()) {
	co.mu.Lock()
	defer co.mu.Unlock()
	before := make(map[string]int32, len(co.known))
	for g := range co.known {
		before[g] = coordinatorOf(g)
	}
	move()
	until := time.Now().Add(co.load)
	for g, n := range before {
		if coordinatorOf(g) != n {
			co.loading[g] = until
		}
	}
}

// SetCoordinatorLoad sets how long a coordinator loads the groups that a later move gives it
// (CoordinatorLoad sets the first value).
func (k *Kafka) SetCoordinatorLoad(d time.Duration) {
	k.coord.mu.Lock()
	defer k.coord.mu.Unlock()
	k.coord.load = d
}

// isCoordinator tells whether node coordinates group in kfake.
func (k *Kafka) isCoordinator(node int32) func(string) bool {
	return func(group string) bool { return node >= 0 && k.cluster.CoordinatorFor(group) == node }
}

// findCoordinator answers COORDINATOR_NOT_AVAILABLE for groups while __consumer_offsets is
// created, and for transactional ids while __transaction_state is: KafkaApis.getCoordinator
// creates the internal topic of the key's type on the first lookup of a cluster that lacks it
// (getOrCreateInternalTopic) and answers so meanwhile. Kafka checks Describe on the group or the
// transactional id first: a key that the principal may not describe is refused with
// GROUP_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as kfake refuses it, and
// creates nothing.
func (k *Kafka) findCoordinator(x *exchange) ([]byte, bool) {
	return x.patched(func(req kmsg.Request, resp kmsg.Response) bool {
		q, r := req.(*kmsg.FindCoordinatorRequest), resp.(*kmsg.FindCoordinatorResponse)
		creating := k.coord.creating
		switch q.CoordinatorType {
		case 0:
		case 1:
			creating = k.coord.creatingTxn
		default:
			return false
		}
		code := kerr.CoordinatorNotAvailable.Code
		if q.Version < 4 {
			if r.ErrorCode != 0 || !creating(time.Now()) {
				return false
			}
			r.ErrorCode, r.NodeID, r.Host, r.Port = code, -1, "", -1
			return true
		}
		patched := false
		for i := range r.Coordinators {
			c := &r.Coordinators[i]
			if c.ErrorCode != 0 || !creating(time.Now()) {
				continue
			}
			c.ErrorCode, c.NodeID, c.Host, c.Port = code, -1, "", -1
			patched = true
		}
		return patched
	})
}

// coordinatorRefuses is the error answer to a request for one group, without kfake seeing it, if
// the group's coordinator cannot serve it yet; nil otherwise.
func (k *Kafka) coordinatorRefuses(x *exchange, node int32) kmsg.Response {
	req := x.request()
	if req == nil {
		return nil
	}
	var group string
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		group = r.Group
	case *kmsg.SyncGroupRequest:
		group = r.Group
	case *kmsg.HeartbeatRequest:
		group = r.Group
	case *kmsg.LeaveGroupRequest:
		group = r.Group
	case *kmsg.OffsetCommitRequest:
		group = r.Group
	case *kmsg.TxnOffsetCommitRequest:
		group = r.Group
	case *kmsg.OffsetDeleteRequest:
		group = r.Group
	case *kmsg.ConsumerGroupHeartbeatRequest:
		group = r.Group
	default:
		return nil
	}
	code := k.coord.status(group, k.isCoordinator(node), time.Now())
	if code == 0 {
		return nil
	}
	resp := req.ResponseKind()
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		r.ErrorCode, r.Generation, r.MemberID = code, -1, ""
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = code
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = code
	case *kmsg.OffsetDeleteResponse:
		r.ErrorCode = code
	case *kmsg.ConsumerGroupHeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.OffsetCommitResponse:
		for _, t := range req.(*kmsg.OffsetCommitRequest).Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
	case *kmsg.TxnOffsetCommitResponse:
		for _, t := range req.(*kmsg.TxnOffsetCommitRequest).Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
	}
	return resp
}

// refuseGroups puts the coordinator's error in the result of every group it cannot serve yet, in
// an answer that names several (DescribeGroups, ConsumerGroupDescribe, OffsetFetch). Each result
// becomes what Kafka's error result for the request is (DescribeGroupsRequest.
// getErrorDescribedGroupList and the like): the group and the error, nothing else.
func (k *Kafka) refuseGroups(node int32, req kmsg.Request, resp kmsg.Response) (refused map[string]bool) {
	refused = map[string]bool{}
	now := time.Now()
	coordinator := k.isCoordinator(node)
	status := func(group string) int16 {
		code := k.coord.status(group, coordinator, now)
		if code != 0 {
			refused[group] = true
		}
		return code
	}
	switch r := resp.(type) {
	case *kmsg.DescribeGroupsResponse:
		for i, g := range r.Groups {
			if code := status(g.Group); code != 0 {
				e := kmsg.NewDescribeGroupsResponseGroup()
				e.Group, e.ErrorCode = g.Group, code
				r.Groups[i] = e
			}
		}
	case *kmsg.ConsumerGroupDescribeResponse:
		for i, g := range r.Groups {
			if code := status(g.Group); code != 0 {
				e := kmsg.NewConsumerGroupDescribeResponseGroup()
				e.Group, e.ErrorCode = g.Group, code
				r.Groups[i] = e
			}
		}
	case *kmsg.OffsetFetchResponse:
		if r.Version >= 8 {
			for i, g := range r.Groups {
				if code := status(g.Group); code != 0 {
					e := kmsg.NewOffsetFetchResponseGroup()
					e.Group, e.ErrorCode = g.Group, code
					r.Groups[i] = e
				}
			}
			break
		}
		// Before v8 a request names one group, and the error is the request's (v2+) or each
		// partition's (v0-v1).
		code := status(req.(*kmsg.OffsetFetchRequest).Group)
		if code == 0 {
			break
		}
		if r.Version >= 2 {
			r.ErrorCode, r.Topics = code, nil
			break
		}
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				p := &r.Topics[i].Partitions[j]
				p.Offset, p.Metadata, p.ErrorCode = -1, nil, code
			}
		}
	}
	return refused
}

// moveCoordinators runs move through the coordinators' bookkeeping when the broker answers as
// Kafka does.
func (b *Broker) moveCoordinators(move func()) {
	if b.Kafka == nil {
		move()
		return
	}
	b.Kafka.coord.moved(b.Cluster.CoordinatorFor, move)
}

// RehashCoordinators is kfake's RehashCoordinators; under AsKafka each group that it moves is
// loaded for a while by its new coordinator, which answers COORDINATOR_LOAD_IN_PROGRESS meanwhile.
func (b *Broker) RehashCoordinators() { b.moveCoordinators(b.Cluster.RehashCoordinators) }

// AddNode is kfake's AddNode; under AsKafka the groups it moves load as after RehashCoordinators.
func (b *Broker) AddNode(nodeID int32, port int) (id int32, p int, err error) {
	b.moveCoordinators(func() { id, p, err = b.Cluster.AddNode(nodeID, port) })
	if err == nil && b.Kafka != nil {
		b.Kafka.mu.Lock()
		b.Kafka.nodes[net.JoinHostPort("127.0.0.1", strconv.Itoa(p))] = id
		b.Kafka.mu.Unlock()
	}
	return id, p, err
}

// RemoveNode is kfake's RemoveNode; under AsKafka the groups it moves load as after
// RehashCoordinators.
func (b *Broker) RemoveNode(nodeID int32) (err error) {
	b.moveCoordinators(func() { err = b.Cluster.RemoveNode(nodeID) })
	return err
}

// describeTransactions answers NOT_COORDINATOR for every transactional id the principal may
// describe while __transaction_state does not exist or is being created: the transaction
// coordinator owns no partition of it then, and TransactionStateManager.getTransactionState answers
// so (core/src/main/scala/kafka/coordinator/transaction/TransactionCoordinator.scala,
// handleDescribeTransactions). kfake answers from its own state at once. The doctor's check of the
// transactional id asks so (DescribeTransactions), on a cluster that may never have had a
// transaction.
func (k *Kafka) describeTransactions(x *exchange) ([]byte, bool) {
	return x.patched(func(_ kmsg.Request, resp kmsg.Response) bool {
		k.coord.mu.Lock()
		ready := !k.coord.txnAt.IsZero() && !time.Now().Before(k.coord.txnAt.Add(k.coord.create))
		k.coord.mu.Unlock()
		if ready {
			return false
		}
		changed := false
		for i := range resp.(*kmsg.DescribeTransactionsResponse).TransactionStates {
			st := &resp.(*kmsg.DescribeTransactionsResponse).TransactionStates[i]
			if st.ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code && st.ErrorCode != kerr.NotCoordinator.Code {
				d := kmsg.NewDescribeTransactionsResponseTransactionState()
				d.TransactionalID, d.ErrorCode = st.TransactionalID, kerr.NotCoordinator.Code
				*st, changed = d, true
			}
		}
		return changed
	})
}
