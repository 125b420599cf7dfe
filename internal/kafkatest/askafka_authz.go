package kafkatest

import (
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// clusterOperations gives a cluster's authorized operations only to a principal that may describe
// the cluster, as Kafka does: KafkaApis.handleTopicMetadataRequest (Metadata v8-v10,
// core/src/main/scala/kafka/server/KafkaApis.scala) and AuthHelper.computeDescribeClusterResponse
// (DescribeCluster, core/src/main/scala/kafka/server/AuthHelper.scala) answer 0 unless DESCRIBE on
// the cluster is authorized, and Integer.MIN_VALUE when not asked. kfake answers every operation
// the principal has, with or without Describe. Its bitfield already counts an operation implied by
// another (Describe by Alter, as Kafka's authorizer does), so whether it has Describe is whether
// the principal may describe the cluster.
func (k *Kafka) clusterOperations(x *exchange) ([]byte, bool) {
	const describe = int32(1) << kmsg.ACLOperationDescribe
	return x.patched(func(req kmsg.Request, resp kmsg.Response) bool {
		var ops *int32
		refused := false
		switch r := resp.(type) {
		case *kmsg.MetadataResponse:
			q := req.(*kmsg.MetadataRequest)
			refused = refusedTopicOperations(r)
			if q.Version < 8 || q.Version > 10 || !q.IncludeClusterAuthorizedOperations {
				return refused
			}
			ops = &r.AuthorizedOperations
		case *kmsg.DescribeClusterResponse:
			if !req.(*kmsg.DescribeClusterRequest).IncludeClusterAuthorizedOperations {
				return false
			}
			ops = &r.ClusterAuthorizedOperations
		default:
			return false
		}
		was := *ops
		switch {
		case *ops == math.MinInt32:
		case *ops&describe == 0:
			*ops = 0
		default:
			*ops &= clusterSupported
		}
		return *ops != was || refused
	})
}

// refusedTopicOperations leaves a topic that Metadata refuses (TOPIC_AUTHORIZATION_FAILED) without
// authorized operations, Integer.MIN_VALUE, as Kafka does: KafkaApis.handleTopicMetadataRequest
// fills them in only for the topics it describes, and adds the refused ones after, at the field's
// default (MetadataResponse.json). kfake gives them 0.
func refusedTopicOperations(r *kmsg.MetadataResponse) bool {
	changed := false
	for i := range r.Topics {
		t := &r.Topics[i]
		if t.ErrorCode == kerr.TopicAuthorizationFailed.Code && t.AuthorizedOperations != math.MinInt32 {
			t.AuthorizedOperations, changed = math.MinInt32, true
		}
	}
	return changed
}

// clusterSupported are the operations that Kafka's authorizer knows on the cluster, the only ones it
// reports (AclEntry.supportedOperations(CLUSTER), server/src/main/java/org/apache/kafka/security/
// authorizer/AclEntry.java): kfake also reports Read, Write and Delete, which Kafka has no ACL for.
var clusterSupported = opBits(kmsg.ACLOperationCreate, kmsg.ACLOperationClusterAction, kmsg.ACLOperationDescribeConfigs,
	kmsg.ACLOperationAlterConfigs, kmsg.ACLOperationIdempotentWrite, kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe)

func opBits(ops ...kmsg.ACLOperation) int32 {
	var b int32
	for _, op := range ops {
		b |= 1 << op
	}
	return b
}
