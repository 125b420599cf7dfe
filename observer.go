package goneli

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// observer follows the leader by reading the heartbeats on partition 0 with a consumer of its own
// that is assigned the partition directly, outside the group, so observing never competes for
// leadership.
type observer struct {
	consumer KafkaConsumer
	config   Config
	onChange func(LeaderInfo)
	start    time.Time
	throttle logThrottle

	mu       sync.Mutex // guards the fields below against current() from other goroutines
	last     LeaderInfo
	known    bool
	lastSeen time.Duration // on the observer's monotonic clock
	maxToken int64
}

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

func newObserver(config Config, conf kafka.ConfigMap, onChange func(LeaderInfo)) (*observer, error) {
	c, err := config.KafkaConsumerProvider(fromKafkaConfigMap(conf))
	if err != nil {
		return nil, fmt.Errorf("goneli: cannot create leader observer consumer: %w", err)
	}
	topic := config.LeaderTopic
	// Starting one record back shows the current leader at once instead of after its next heartbeat.
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.OffsetTail(1)}}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("goneli: cannot assign leader observer to %s/0: %w", topic, err)
	}
	o := &observer{consumer: c, config: config, onChange: onChange, start: time.Now()}
	o.throttle.every = 10 * time.Second
	return o, nil
}

// poll reads what has arrived and reports changes. Not safe for concurrent use with itself.
func (o *observer) poll() {
	for i := 0; i < maxEventsPerCycle; i++ {
		ev := o.consumer.Poll(0)
		if ev == nil {
			break
		}
		switch e := ev.(type) {
		case *kafka.Message:
			o.onMessage(e)
		case kafka.Error:
			o.throttle.log(o.config.Scribe.W(), e.Code().String(), "goneli %s: leader observer: %v", o.config.Name, e)
		}
	}
	o.mu.Lock()
	gone := o.known && time.Since(o.start)-o.lastSeen > *o.config.HeartbeatTimeout
	if gone {
		o.known = false
		o.last = LeaderInfo{}
	}
	o.mu.Unlock()
	if gone {
		o.onChange(LeaderInfo{})
	}
}

func (o *observer) onMessage(m *kafka.Message) {
	var h heartbeat
	if m.TopicPartition.Error != nil || m.TopicPartition.Partition != 0 || h.decode(m.Value) != nil || h.token == 0 {
		return
	}
	info := LeaderInfo{
		Name:          string(m.Key),
		Tenure:        strconv.FormatUint(h.tenure, 16),
		Token:         h.token,
		Since:         time.Unix(0, h.since),
		LastHeartbeat: time.Unix(0, h.sentWall),
	}
	o.mu.Lock()
	if h.token < o.maxToken && o.known {
		// A deposed leader's heartbeat that landed after its successor's, while the successor is
		// alive: tokens only grow within one log. Once the leader it knows has gone quiet for a
		// lease, the observer takes a lower token as it comes, because partition 0's log may have
		// restarted (lost broker data, an unclean leader election, a recreated topic), and tokens
		// with it.
		o.mu.Unlock()
		return
	}
	if time.Since(info.LastHeartbeat) > *o.config.HeartbeatTimeout {
		// Already older than a lease when read (the newest record of a topic whose leader has gone,
		// say): it names no current leader. This compares two hosts' wall clocks, which is good
		// enough for reporting and is never used for leadership itself.
		o.maxToken = max(o.maxToken, h.token)
		o.mu.Unlock()
		return
	}
	changed := !o.known || info.Token != o.last.Token
	o.last, o.known, o.maxToken = info, true, h.token
	o.lastSeen = time.Since(o.start)
	o.mu.Unlock()
	if changed {
		o.onChange(info)
	}
}

func (o *observer) current() (LeaderInfo, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last, o.known
}

func (o *observer) close() error {
	return o.consumer.Close()
}

// Watch reports every change of leader of config's group to onChange, without contending: it
// reads the leader topic's heartbeats and never joins the group. A LeaderInfo with an empty Name
// means the last leader's heartbeats have not been seen for HeartbeatTimeout. onChange runs on
// Watch's goroutine. Watch returns ctx.Err() when ctx ends, or an error if config is invalid or
// the consumer cannot be created.
func Watch(ctx context.Context, config Config, onChange func(LeaderInfo)) error {
	if onChange == nil {
		return fmt.Errorf("goneli: Watch needs an onChange function")
	}
	config, timing, err := config.prepare()
	if err != nil {
		return err
	}
	consumerConf, _, _ := config.clientConfigs(timing)
	oc := observerConfig(consumerConf)
	logs := startLogForwarder(config.Scribe, config.Name)
	logs.attach(oc)
	defer logs.close()
	o, err := newObserver(config, oc, onChange)
	if err != nil {
		return err
	}
	ticker := time.NewTicker(*config.MinPollInterval)
	defer ticker.Stop()
	for {
		o.poll()
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
