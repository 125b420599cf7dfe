package kafkatest

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metadata answers a Metadata request that creates topics as Kafka does: a KRaft broker asks the
// controller to create each missing topic the request allows it to and answers it, in that answer,
// UNKNOWN_TOPIC_OR_PARTITION without partitions (AutoTopicCreationManager.sendCreateTopicRequest,
// core/src/main/scala/kafka/server/AutoTopicCreationManager.scala); kfake creates it at once and
// describes it. The topic exists from the next request on in both. Cluster operations follow
// clusterOperations.
func (k *Kafka) metadata(x *exchange) ([]byte, bool) {
	req, ok := x.request().(*kmsg.MetadataRequest)
	if !ok || !req.AllowAutoTopicCreation || len(req.Topics) == 0 {
		return k.clusterOperations(x)
	}
	// Which of the topics exist, asked without creating any.
	ask := *req
	ask.AllowAutoTopicCreation = false
	ask.IncludeClusterAuthorizedOperations, ask.IncludeTopicAuthorizedOperations = false, false
	missing := map[string]bool{}
	if resp, err := x.c.ask(&ask); err == nil {
		for _, t := range resp.(*kmsg.MetadataResponse).Topics {
			if t.Topic != nil && t.ErrorCode == kerr.UnknownTopicOrPartition.Code {
				missing[*t.Topic] = true
			}
		}
	}
	if len(missing) == 0 {
		return k.clusterOperations(x)
	}
	raw, keep := k.clusterOperations(x)
	if !keep || raw == nil {
		return raw, keep
	}
	resp, err := decodeResponse(req, raw)
	if err != nil {
		return raw, true
	}
	r := resp.(*kmsg.MetadataResponse)
	for i := range r.Topics {
		t := &r.Topics[i]
		if t.Topic == nil || !missing[*t.Topic] || t.ErrorCode != 0 {
			continue
		}
		created := kmsg.NewMetadataResponseTopic()
		created.Topic, created.ErrorCode, created.IsInternal = t.Topic, kerr.UnknownTopicOrPartition.Code, t.IsInternal
		*t = created
	}
	return x.answer(r), true
}
