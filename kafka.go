package goneli

import (
	"context"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/driver"
)

// KafkaConsumer is the part of *kafka.Consumer that goneli uses. Poll replaces goneli v0.5.0's
// ReadMessage because the coordinator's answers to offset commits arrive as Poll events;
// Unsubscribe serves Curator.Yield, Assign the group-less leader observer, and CommitOffsets
// the recovery from a partition log that restarted below the committed offset.
type KafkaConsumer interface {
	Subscribe(topic string, rebalanceCb kafka.RebalanceCb) error
	Unsubscribe() error
	Assign(partitions []kafka.TopicPartition) error
	Poll(timeoutMs int) kafka.Event
	StoreOffsets(offsets []kafka.TopicPartition) ([]kafka.TopicPartition, error)
	CommitOffsets(offsets []kafka.TopicPartition) ([]kafka.TopicPartition, error)
	Close() error
}

// KafkaConsumerProvider creates a KafkaConsumer from a librdkafka configuration.
type KafkaConsumerProvider func(conf *KafkaConfigMap) (KafkaConsumer, error)

// StandardKafkaConsumerProvider returns a provider of real *kafka.Consumer instances.
func StandardKafkaConsumerProvider() KafkaConsumerProvider {
	return func(conf *KafkaConfigMap) (KafkaConsumer, error) {
		cm := toKafkaConfigMap(conf)
		return kafka.NewConsumer(&cm)
	}
}

// KafkaProducer is the part of *kafka.Producer that goneli uses.
type KafkaProducer interface {
	Events() chan kafka.Event
	Produce(msg *kafka.Message, deliveryChan chan kafka.Event) error
	Close()
}

// KafkaProducerProvider creates a KafkaProducer from a librdkafka configuration.
type KafkaProducerProvider func(conf *KafkaConfigMap) (KafkaProducer, error)

// StandardKafkaProducerProvider returns a provider of real *kafka.Producer instances.
func StandardKafkaProducerProvider() KafkaProducerProvider {
	return func(conf *KafkaConfigMap) (KafkaProducer, error) {
		cm := toKafkaConfigMap(conf)
		return kafka.NewProducer(&cm)
	}
}

// KafkaAdmin is the part of *kafka.AdminClient that goneli uses to find or create the leader
// topic and to check that every member of the group uses it (see GroupConflictError).
type KafkaAdmin interface {
	GetMetadata(topic *string, allTopics bool, timeoutMs int) (*kafka.Metadata, error)
	CreateTopics(ctx context.Context, topics []kafka.TopicSpecification, options ...kafka.CreateTopicsAdminOption) ([]kafka.TopicResult, error)
	DescribeConsumerGroups(ctx context.Context, groups []string, options ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error)
	Close()
}

// KafkaAdminProvider creates a KafkaAdmin from a librdkafka configuration.
type KafkaAdminProvider func(conf *KafkaConfigMap) (KafkaAdmin, error)

// StandardKafkaAdminProvider returns a provider of real *kafka.AdminClient instances.
func StandardKafkaAdminProvider() KafkaAdminProvider {
	return func(conf *KafkaConfigMap) (KafkaAdmin, error) {
		cm := toKafkaConfigMap(conf)
		return kafka.NewAdminClient(&cm)
	}
}

func toKafkaConfigMap(conf *KafkaConfigMap) kafka.ConfigMap {
	return driver.ToKafkaConfigMap(*conf)
}

func fromKafkaConfigMap(cm kafka.ConfigMap) *KafkaConfigMap {
	return (*KafkaConfigMap)(driver.FromKafkaConfigMap(cm))
}
