package driver

import (
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/core"
)

// Leader is goneli.Leader: a leader as its heartbeats show it (the same fields, so that one
// converts to the other).
type Leader struct {
	Role          string
	Partition     int32
	Name          string
	Address       string
	Tenure        string
	Token         int64
	Since         time.Time
	LastHeartbeat time.Time
}

// Observer follows the leaders by reading the heartbeats on the leader topic's partitions with a
// consumer of its own that is assigned them directly, outside the group, so observing never
// competes for leadership: an instance's (goneli's Config.ObserveLeader), which its cycle polls,
// and goneli.Watch's.
type Observer struct {
	consumer KafkaConsumer
	config   Config
	onChange func(Leader)
	start    time.Time
	throttle LogThrottle
	// denied is the first authorization failure seen, which Watch returns; an instance's own
	// observer (ObserveLeader) only logs it, as the instance's consumer needs the same ACLs.
	denied error

	mu    sync.Mutex // guards seen against current() from other goroutines
	roles []observed // by partition
}

// observed is what the observer knows of one partition's leader.
type observed struct {
	last     Leader
	known    bool
	lastSeen time.Duration // on the observer's monotonic clock
	maxToken int64
}

// ObserverConfig derives the observer's consumer settings from the group consumer's.
func ObserverConfig(consumer kafka.ConfigMap) kafka.ConfigMap {
	oc := maps.Clone(consumer)
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

// NewObserver follows partitions 0 to partitions-1 of the leader topic.
func NewObserver(config Config, conf kafka.ConfigMap, partitions int, onChange func(Leader)) (*Observer, error) {
	c, err := config.KafkaConsumerProvider(FromKafkaConfigMap(conf))
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
	o := &Observer{consumer: c, config: config, onChange: onChange, start: time.Now(), roles: make([]observed, partitions)}
	o.throttle.Every = 10 * time.Second
	return o, nil
}

// Poll reads what has arrived and reports changes. Not safe for concurrent use
// with itself.
func (o *Observer) Poll() {
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
				o.denied = o.config.Errors.Authorization("observer", e)
			}
			o.throttle.Log(o.config.Scribe.W(), e.Code().String(), "goneli %s: leader observer: %v", o.config.Name, e)
		}
	}
	var gone []Leader
	o.mu.Lock()
	for i := range o.roles {
		r := &o.roles[i]
		if r.known && time.Since(o.start)-r.lastSeen > *o.config.HeartbeatTimeout {
			gone = append(gone, Leader{Role: r.last.Role, Partition: int32(i)})
			r.known, r.last = false, Leader{}
		}
	}
	o.mu.Unlock()
	for _, info := range gone {
		o.onChange(info)
	}
}

func (o *Observer) onMessage(m *kafka.Message) {
	var h core.Heartbeat
	p := m.TopicPartition.Partition
	if m.TopicPartition.Error != nil || p < 0 || int(p) >= len(o.roles) || h.Decode(m.Value) != nil || h.Token == 0 {
		return
	}
	info := Leader{
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
			r.known, r.last = false, Leader{}
		}
		r.maxToken = max(r.maxToken, h.Token)
		o.mu.Unlock()
		if was {
			o.onChange(Leader{Role: info.Role, Partition: p})
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

// Current returns the leader of partition p as last seen.
func (o *Observer) Current(p int32) (Leader, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if p < 0 || int(p) >= len(o.roles) {
		return Leader{}, false
	}
	return o.roles[p].last, o.roles[p].known
}

// Close closes the observer's consumer.
func (o *Observer) Close() error {
	return o.consumer.Close()
}

// Denied is the first authorization failure the observer met, which Watch returns; nil if none.
func (o *Observer) Denied() error {
	return o.denied
}
