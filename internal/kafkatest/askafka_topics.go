package kafkatest

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// createTopics answers CreateTopics as Kafka's controller does for a topic whose configs the
// principal may not describe: ControllerApis.handleCreateTopics
// (core/src/main/scala/kafka/server/ControllerApis.scala) hands ReplicationControlManager the topics
// the principal may DESCRIBE_CONFIGS, and createTopic
// (metadata/src/main/java/org/apache/kafka/controller/ReplicationControlManager.java) fills a
// result's partitions, replication factor and configs only for those; the others keep -1, -1 and
// no configs, with TOPIC_AUTHORIZATION_FAILED as their config error (v5 and later, KIP-525). A
// validating request answers the same. kfake fills them for every topic it creates or would. Whether
// the principal may describe a topic's configs is asked of kfake on the same connection: its
// DescribeConfigs checks the ACL before whether the topic exists.
func (k *Kafka) createTopics(x *exchange) ([]byte, bool) {
	return x.patched(func(req kmsg.Request, resp kmsg.Response) bool {
		r := resp.(*kmsg.CreateTopicsResponse)
		if req.GetVersion() < 5 {
			return false
		}
		ask := kmsg.NewPtrDescribeConfigsRequest()
		ask.Version = 1
		for _, t := range r.Topics {
			if t.ErrorCode == 0 {
				res := kmsg.NewDescribeConfigsRequestResource()
				res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeTopic, t.Topic, []string{"cleanup.policy"}
				ask.Resources = append(ask.Resources, res)
			}
		}
		if len(ask.Resources) == 0 {
			return false
		}
		answer, err := x.c.ask(ask)
		if err != nil {
			return false
		}
		denied := map[string]bool{}
		for _, rr := range answer.(*kmsg.DescribeConfigsResponse).Resources {
			denied[rr.ResourceName] = rr.ErrorCode == kerr.TopicAuthorizationFailed.Code
		}
		changed := false
		for i := range r.Topics {
			t := &r.Topics[i]
			if t.ErrorCode != 0 || !denied[t.Topic] {
				continue
			}
			t.NumPartitions, t.ReplicationFactor, t.Configs = -1, -1, nil
			t.ConfigErrorCode = kerr.TopicAuthorizationFailed.Code
			changed = true
		}
		return changed
	})
}
