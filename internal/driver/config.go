package driver

import (
	"context"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// Config is what the shell needs of a goneli.Config, which New derives once (Config.derive in the
// root package): the same fields under the same names, defaults applied and validated, and what
// makes the API's errors. The durations stay pointers, as in goneli.Config, and are never nil
// here.
type Config struct {
	Name                         string
	Address                      string
	LeaderTopic                  string
	LeaderGroupID                string
	Priority                     int
	LeaderTopicReplicationFactor int

	HeartbeatTimeout *time.Duration
	MinPollInterval  *time.Duration
	PollDuration     *time.Duration
	RenewInterval    *time.Duration

	Scribe scribe.Scribe
	// Errors makes the errors the shell returns.
	Errors Errors

	KafkaConsumerProvider ConsumerProvider
	KafkaProducerProvider ProducerProvider
	KafkaAdminProvider    AdminProvider
}

// KafkaConfigMap is a librdkafka configuration as the client providers take it; its underlying type
// is goneli.KafkaConfigMap's, so that a pointer to one converts to the other.
type KafkaConfigMap map[string]interface{}

// The clients the shell drives: the method sets of goneli.KafkaConsumer, KafkaProducer and
// KafkaAdmin, which every value of those satisfies as it is.
type (
	KafkaConsumer interface {
		Subscribe(topic string, rebalanceCb kafka.RebalanceCb) error
		Unsubscribe() error
		Assign(partitions []kafka.TopicPartition) error
		Poll(timeoutMs int) kafka.Event
		StoreOffsets(offsets []kafka.TopicPartition) ([]kafka.TopicPartition, error)
		CommitOffsets(offsets []kafka.TopicPartition) ([]kafka.TopicPartition, error)
		Close() error
	}
	KafkaProducer interface {
		Events() chan kafka.Event
		Produce(msg *kafka.Message, deliveryChan chan kafka.Event) error
		Close()
	}
	KafkaAdmin interface {
		GetMetadata(topic *string, allTopics bool, timeoutMs int) (*kafka.Metadata, error)
		CreateTopics(ctx context.Context, topics []kafka.TopicSpecification, options ...kafka.CreateTopicsAdminOption) ([]kafka.TopicResult, error)
		DescribeConsumerGroups(ctx context.Context, groups []string, options ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error)
		Close()
	}
)

// The providers make the clients from a configuration (goneli's KafkaConsumerProvider and the
// others, adapted by New).
type (
	ConsumerProvider func(conf *KafkaConfigMap) (KafkaConsumer, error)
	ProducerProvider func(conf *KafkaConfigMap) (KafkaProducer, error)
	AdminProvider    func(conf *KafkaConfigMap) (KafkaAdmin, error)
)

// ToKafkaConfigMap copies conf into the map confluent-kafka-go takes.
func ToKafkaConfigMap(conf map[string]interface{}) kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range conf {
		cm[k] = v
	}
	return cm
}

// FromKafkaConfigMap copies a confluent-kafka-go configuration into one the providers take.
func FromKafkaConfigMap(cm kafka.ConfigMap) *KafkaConfigMap {
	m := KafkaConfigMap{}
	for k, v := range cm {
		m[k] = v
	}
	return &m
}
