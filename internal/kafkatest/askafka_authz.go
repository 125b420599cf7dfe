package kafkatest

import (
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
		switch r := resp.(type) {
		case *kmsg.MetadataResponse:
			q := req.(*kmsg.MetadataRequest)
			if q.Version < 8 || q.Version > 10 || !q.IncludeClusterAuthorizedOperations || r.AuthorizedOperations&describe != 0 || r.AuthorizedOperations == 0 {
				return false
			}
			r.AuthorizedOperations = 0
		case *kmsg.DescribeClusterResponse:
			q := req.(*kmsg.DescribeClusterRequest)
			if !q.IncludeClusterAuthorizedOperations || r.ClusterAuthorizedOperations&describe != 0 || r.ClusterAuthorizedOperations == 0 {
				return false
			}
			r.ClusterAuthorizedOperations = 0
		default:
			return false
		}
		return true
	})
}
