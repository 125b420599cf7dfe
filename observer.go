package goneli

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// observer follows the leaders by reading the heartbeats on the leader topic's partitions with a
// consumer of its own that is assigned them directly, outside the group, so observing never
// competes for leadership.
type observer struct {
	consumer KafkaConsumer
	config   Config
	onChange func(LeaderInfo)
	start    time.Time
	throttle driver.LogThrottle
	// denied is the first authorization failure seen, which Watch returns; an instance's own
	// observer (ObserveLeader) only logs it, as the instance's consumer needs the same ACLs.
	denied error

	mu    sync.Mutex // guards seen against current() from other goroutines
	roles []observed // by partition
}

// observed is what the observer knows of one partition's leader.
type observed struct {
	last     LeaderInfo
	known    bool
	lastSeen time.Duration // on the observer's monotonic clock
	maxToken int64
}

// Consumer is the observer's consumer, which Close closes beside the group's (driver.Observer).
func (o *observer) Consumer() driver.KafkaConsumer { return o.consumer }

// observerConfig derives the observer's consumer settings from the group consumer's.
func observerConfig(consumer kafka.ConfigMap) kafka.ConfigMap {
	oc := cloneConfig(consumer)
	for _, k := range []string{"session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
		"partition.assignment.strategy", "group.protocol", "group.remote.assignor", "auto.commit.interval.ms"} {
		delete(oc, k)
	}
	// librdkafka wants a group.id on every consumer, though this one never joins the group.
	oc["group.id"] = fmt.Sprint(consumer["group.id"]) + ".observer"
	oc["client.id"] = fmt.Sprint(consumer["client.id"]) + "-observer"
	oc["enable.auto.commit"] = false
	return oc
}

// newObserver follows partitions 0 to partitions-1 of the leader topic.
func newObserver(config Config, conf kafka.ConfigMap, partitions int, onChange func(LeaderInfo)) (*observer, error) {
	c, err := config.KafkaConsumerProvider(fromKafkaConfigMap(conf))
	if err != nil {
		return nil, fmt.Errorf("goneli: cannot create leader observer consumer: %w", err)
	}
	topic := config.LeaderTopic
	tps := make([]kafka.TopicPartition, partitions)
	for i := range tps {
		// Starting one record back shows the current leader at once instead of after its next
		// heartbeat.
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: int32(i), Offset: kafka.OffsetTail(1)}
	}
	if err := c.Assign(tps); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("goneli: cannot assign leader observer to %s: %w", topic, err)
	}
	o := &observer{consumer: c, config: config, onChange: onChange, start: time.Now(), roles: make([]observed, partitions)}
	o.throttle.Every = 10 * time.Second
	return o, nil
}

// Poll reads what has arrived and reports changes (driver.Observer). Not safe for concurrent use
// with itself.
func (o *observer) Poll() {
	for i := 0; i < core.MaxEventsPerCycle; i++ {
		ev := o.consumer.Poll(0)
		if ev == nil {
			break
		}
		switch e := ev.(type) {
		case *kafka.Message:
			o.onMessage(e)
		case kafka.Error:
			if o.denied == nil {
				o.denied = authorizationError(o.config, "observer", e)
			}
			o.throttle.Log(o.config.Scribe.W(), e.Code().String(), "goneli %s: leader observer: %v", o.config.Name, e)
		}
	}
	var gone []LeaderInfo
	o.mu.Lock()
	for i := range o.roles {
		r := &o.roles[i]
		if r.known && time.Since(o.start)-r.lastSeen > *o.config.HeartbeatTimeout {
			gone = append(gone, LeaderInfo{Role: r.last.Role, Partition: int32(i)})
			r.known, r.last = false, LeaderInfo{}
		}
	}
	o.mu.Unlock()
	for _, info := range gone {
		o.onChange(info)
	}
}

func (o *observer) onMessage(m *kafka.Message) {
	var h core.Heartbeat
	p := m.TopicPartition.Partition
	if m.TopicPartition.Error != nil || p < 0 || int(p) >= len(o.roles) || h.Decode(m.Value) != nil || h.Token == 0 {
		return
	}
	info := LeaderInfo{
		Role:          h.Role,
		Partition:     p,
		Name:          string(m.Key),
		Address:       h.Address,
		Tenure:        strconv.FormatUint(h.Tenure, 16),
		Token:         h.Token,
		Since:         time.Unix(0, h.Since),
		LastHeartbeat: time.Unix(0, h.SentWall),
	}
	o.mu.Lock()
	r := &o.roles[p]
	if h.Kind != core.KindHeartbeat {
		// The tenure gave the partition up: its leader is gone now, not a lease from now.
		was := r.known && r.last.Tenure == info.Tenure
		if was {
			r.known, r.last = false, LeaderInfo{}
		}
		r.maxToken = max(r.maxToken, h.Token)
		o.mu.Unlock()
		if was {
			o.onChange(LeaderInfo{Role: info.Role, Partition: p})
		}
		return
	}
	if h.Token < r.maxToken && r.known {
		// A deposed leader's heartbeat that landed after its successor's, while the successor is
		// alive: tokens only grow within one log. Once the leader it knows has gone quiet for a
		// lease, the observer takes a lower token as it comes, because the partition's log may have
		// restarted (lost broker data, an unclean leader election, a recreated topic), and tokens
		// with it.
		o.mu.Unlock()
		return
	}
	if time.Since(info.LastHeartbeat) > *o.config.HeartbeatTimeout {
		// Already older than a lease when read (the newest record of a topic whose leader has gone,
		// say): it names no current leader. This compares two hosts' wall clocks, which is good
		// enough for reporting and is never used for leadership itself.
		r.maxToken = max(r.maxToken, h.Token)
		o.mu.Unlock()
		return
	}
	changed := !r.known || info.Token != r.last.Token || info.Address != r.last.Address
	r.last, r.known, r.maxToken = info, true, h.Token
	r.lastSeen = time.Since(o.start)
	o.mu.Unlock()
	if changed {
		o.onChange(info)
	}
}

// current returns the leader of partition p as last seen.
func (o *observer) current(p int32) (LeaderInfo, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if p < 0 || int(p) >= len(o.roles) {
		return LeaderInfo{}, false
	}
	return o.roles[p].last, o.roles[p].known
}

func (o *observer) close() error {
	return o.consumer.Close()
}

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
	oc := observerConfig(consumerConf)
	logs := driver.StartLogForwarder(config.Scribe, config.Name, config.forwardsLogs())
	logs.Attach(oc)
	defer logs.Close()
	o, err := newObserver(config, oc, topicPartitions(config, adminConf), onChange)
	if err != nil {
		return err
	}
	ticker := time.NewTicker(*config.MinPollInterval)
	defer ticker.Stop()
	for {
		o.Poll()
		if o.denied != nil {
			_ = o.close()
			return o.denied
		}
		select {
		case <-ctx.Done():
			if err := o.close(); err != nil {
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
