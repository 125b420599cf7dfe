package goneli

import (
	"context"
	"fmt"
	"time"

	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Watch reports every change of leader of config's group to onChange, without contending: it
// reads the leader topic's heartbeats and never joins the group. With roles (NewRoles) it follows
// every partition the topic had when Watch began, and each LeaderInfo names its role. A LeaderInfo
// with an empty Name means that the role's last leader released it, or that its heartbeats have
// not been seen for HeartbeatTimeout. onChange runs on
// Watch's goroutine. Watch returns ctx.Err() when ctx ends, an *AuthorizationError if the broker
// refuses what it needs (see docs/operations.md, "ACLs"), or an error if config is invalid or the consumer
// cannot be created.
func Watch(ctx context.Context, config Config, onChange func(LeaderInfo)) error {
	if onChange == nil {
		return fmt.Errorf("goneli: Watch needs an onChange function")
	}
	config, timing, err := config.prepare()
	if err != nil {
		return err
	}
	consumerConf, _, adminConf := config.clientConfigs(timing)
	oc := driver.ObserverConfig(consumerConf)
	logs := driver.StartLogForwarder(config.Scribe, config.Name, config.forwardsLogs())
	logs.Attach(oc)
	defer logs.Close()
	o, err := driver.NewObserver(config.shellConfig(), oc, topicPartitions(config, adminConf), func(l driver.Leader) { onChange(LeaderInfo(l)) })
	if err != nil {
		return err
	}
	ticker := time.NewTicker(*config.MinPollInterval)
	defer ticker.Stop()
	for {
		o.Poll()
		if denied := o.Denied(); denied != nil {
			_ = o.Close()
			return denied
		}
		select {
		case <-ctx.Done():
			if err := o.Close(); err != nil {
				return fmt.Errorf("goneli: closing leader observer: %w", err)
			}
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// topicPartitions is how many partitions the leader topic has, or 1 if that cannot be learnt
// within a HeartbeatTimeout.
func topicPartitions(config Config, adminConf kafka.ConfigMap) int {
	adminConf["log_level"] = 0
	admin, err := config.KafkaAdminProvider(fromKafkaConfigMap(adminConf))
	if err != nil {
		return 1
	}
	defer admin.Close()
	md, err := admin.GetMetadata(&config.LeaderTopic, false, int(config.HeartbeatTimeout.Milliseconds()))
	if err != nil {
		return 1
	}
	if tm, ok := md.Topics[config.LeaderTopic]; ok && len(tm.Partitions) > 0 {
		return len(tm.Partitions)
	}
	return 1
}
