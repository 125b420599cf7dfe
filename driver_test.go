package goneli

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The driver's sequences (rebalance, revoke, commit, close) run here without a broker: the
// instance is assembled on a scripted consumer, producer and admin client, inside a synctest
// bubble whose clock is the instance's one clock, so that a lease runs out in no real time. What
// the scripted clients do is the least a broker does for the protocol: a produced heartbeat gets
// the partition's next offset and is read back by the consumer that holds the partition, a stored
// offset is committed as librdkafka's auto-commit timer commits it (scriptAuto), and the group
// description names this member as the partition's owner. The broker-backed tests (internal/kafkatest/coretest) check the same
// sequences against librdkafka and a real Kafka protocol; these check the driver's part of them,
// one transition at a time.

const (
	scriptTopic = "leader"
	scriptGroup = "group"
	scriptName  = "a"
	scriptLease = time.Second
)

// scriptLog is the partitions' log the scripted clients share.
type scriptLog struct {
	mu       sync.Mutex
	next     map[int32]int64
	consumer *scriptConsumer
	producer *scriptProducer
}

// scriptConsumer is a KafkaConsumer and groupSession whose group and broker are a script.
type scriptConsumer struct {
	log *scriptLog

	mu         sync.Mutex
	rebalance  kafka.RebalanceCb
	subscribed bool
	queue      []any // kafka.Event, or a rebalance event to hand the callback
	assigned   []int32
	taken      [][]kafka.TopicPartition // what each Take was given
	// auto is librdkafka's auto-commit timer.
	auto scriptAuto
	// commitErr, if set, is the answer to every commit of a stored offset.
	commitErr error
	// echo says whether heartbeats of assigned partitions are read back, and echoDelay how long
	// after they were produced; late holds those on their way until then.
	echo      bool
	echoDelay time.Duration
	late      []lateEvent
	lost      bool
	closed    bool
	commits   [][]kafka.TopicPartition // explicit commits
	unsubbed  int
	// stores counts the offsets stored, withdrawals those withdrawn (stored as OffsetInvalid).
	stores, withdrawals int
	// noAuto stops the auto-commit: stored offsets wait, as while librdkafka rejoins the group.
	// commitDelay is how long an explicit commit waits for its answer.
	noAuto      bool
	commitDelay time.Duration
	// explicitFlying counts explicit commits under way; owed counts the offsets that revocations
	// found stored, to commit.
	explicitFlying, owed int
	// wake ends the waits of commits under way, for a test that ends early: the close that waits
	// for them takes a mutex, which does not let the bubble's clock move on.
	wake chan struct{}
	// closeHold, if set, holds Close until it is closed, as confluent-kafka-go v2.11.1 holds the
	// Close of a consumer that raised a fatal error, for good.
	closeHold chan struct{}
}

type rebalanceEvent struct{ ev kafka.Event }

// scriptAuto models librdkafka 2.11.1's auto-commit timer (rdkafka_cgrp.c
// rd_kafka_cgrp_offset_commit_tmr_cb, rdkafka_partition.c rd_kafka_topic_partition_list_set_offsets):
// every tick it commits each stored offset that is above the committed one, whether or not a commit
// of it is under way, and the committed offset moves only when a commit's answer arrives, delay
// after the tick. It counts the commits in flight, automatic and explicit, and the commits of an
// offset that an unanswered commit already carries.
type scriptAuto struct {
	tick, delay time.Duration
	next        time.Time // the next tick; zero before the first
	// random draws the phase of the first tick and each tick's lateness: librdkafka schedules the
	// next tick a tick after its callback returned, and its thread wakes a little late.
	random *rand.Rand
	// stored is what is stored, by partition, with the metadata that comes back with the commit.
	stored    map[int32]kafka.TopicPartition
	committed map[int32]int64
	flying    []scriptFlight
	// sent counts the automatic commits, resent those of an offset an unanswered commit carried,
	// maxFlying the most commits in flight at once.
	sent, resent, maxFlying int
}

// scriptFlight is an automatic commit under way.
type scriptFlight struct {
	answerAt time.Time
	offsets  []kafka.TopicPartition
}

// advance runs the auto-commit timer and delivers the answers up to now. Called with c.mu held.
func (c *scriptConsumer) advance() {
	a := &c.auto
	if a.stored == nil {
		a.stored, a.committed = map[int32]kafka.TopicPartition{}, map[int32]int64{}
	}
	now := time.Now()
	if a.random == nil {
		a.random = rand.New(rand.NewPCG(1, 2))
	}
	if a.next.IsZero() {
		a.next = now.Add(time.Duration(a.random.Int64N(int64(a.tick))))
	}
	for {
		i := -1
		for j, f := range a.flying {
			if i < 0 || f.answerAt.Before(a.flying[i].answerAt) {
				i = j
			}
		}
		switch {
		case i >= 0 && !a.flying[i].answerAt.After(a.next) && !a.flying[i].answerAt.After(now):
			f := a.flying[i]
			a.flying = slices.Delete(a.flying, i, i+1)
			if c.commitErr == nil {
				for _, tp := range f.offsets {
					a.committed[tp.Partition] = int64(tp.Offset)
				}
			}
			c.queue = append(c.queue, kafka.OffsetsCommitted{Offsets: f.offsets, Error: c.commitErr})
		case !a.next.After(now):
			at := a.next
			a.next = at.Add(a.tick + time.Duration(a.random.Int64N(int64(300*time.Microsecond))))
			if c.noAuto || !c.subscribed {
				continue
			}
			var offsets []kafka.TopicPartition
			for _, id := range c.assigned {
				if tp, ok := a.stored[id]; ok && int64(tp.Offset) > a.committed[id] {
					offsets = append(offsets, tp)
				}
			}
			if len(offsets) == 0 {
				continue
			}
			for _, f := range a.flying {
				for _, o := range f.offsets {
					if slices.ContainsFunc(offsets, func(tp kafka.TopicPartition) bool { return tp.Partition == o.Partition && tp.Offset == o.Offset }) {
						a.resent++
					}
				}
			}
			a.sent++
			a.flying = append(a.flying, scriptFlight{answerAt: at.Add(a.delay), offsets: offsets})
			a.maxFlying = max(a.maxFlying, len(a.flying)+c.explicitFlying)
		default:
			return
		}
	}
}

// lateEvent is an event to hand out no sooner than at.
type lateEvent struct {
	at time.Time
	ev kafka.Event
}

func (c *scriptConsumer) Subscribe(topic string, cb kafka.RebalanceCb) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rebalance, c.subscribed = cb, true
	return nil
}

// Unsubscribe revokes what the member holds, and commits as librdkafka does on a revocation: the
// offsets stored since the last commit, or nothing, which it answers with NO_OFFSET.
func (c *scriptConsumer) Unsubscribe() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subscribed = false
	c.unsubbed++
	c.advance()
	if len(c.assigned) > 0 {
		c.queue = append(c.queue, rebalanceEvent{kafka.RevokedPartitions{Partitions: c.tps(c.assigned)}})
		var owed []kafka.TopicPartition
		for _, id := range c.assigned {
			if tp, ok := c.auto.stored[id]; ok && int64(tp.Offset) > c.auto.committed[id] {
				owed = append(owed, tp)
			}
		}
		c.owed += len(owed)
		answer := kafka.OffsetsCommitted{Offsets: owed}
		if len(owed) == 0 {
			answer.Error = kafka.NewError(kafka.ErrNoOffset, "no offset to commit", false)
		}
		c.queue = append(c.queue, answer)
		clear(c.auto.stored)
	}
	return nil
}

func (c *scriptConsumer) Subscription() ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subscribed {
		return []string{scriptTopic}, nil
	}
	return nil, nil
}

func (c *scriptConsumer) Assign([]kafka.TopicPartition) error { return errors.New("not used") }

// Poll hands out the next scripted item. With nothing queued it returns at once, where librdkafka
// would wait the timeout out: the driver polls with its lock held, and a goroutine waiting for a
// lock (the watchdog) is not durably blocked, so a wait here would keep the bubble's clock still.
func (c *scriptConsumer) Poll(int) kafka.Event {
	c.mu.Lock()
	for len(c.late) > 0 && !time.Now().Before(c.late[0].at) {
		c.queue = append(c.queue, c.late[0].ev)
		c.late = c.late[1:]
	}
	c.advance()
	if len(c.queue) == 0 {
		c.mu.Unlock()
		return nil
	}
	item := c.queue[0]
	c.queue = c.queue[1:]
	cb := c.rebalance
	c.mu.Unlock()
	if r, ok := item.(rebalanceEvent); ok {
		if err := cb(nil, r.ev); err != nil {
			return kafka.NewError(kafka.ErrFail, err.Error(), false)
		}
		return nil
	}
	return item.(kafka.Event)
}

func (c *scriptConsumer) StoreOffsets(tps []kafka.TopicPartition) ([]kafka.TopicPartition, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance()
	for _, tp := range tps {
		if tp.Offset == kafka.OffsetInvalid {
			// Nothing left to commit for the partition, as in librdkafka.
			c.withdrawals++
			delete(c.auto.stored, tp.Partition)
			continue
		}
		c.stores++
		c.auto.stored[tp.Partition] = tp
	}
	return tps, nil
}

func (c *scriptConsumer) CommitOffsets(tps []kafka.TopicPartition) ([]kafka.TopicPartition, error) {
	c.mu.Lock()
	c.advance()
	delay, wake := c.commitDelay, c.wake
	c.explicitFlying++
	c.auto.maxFlying = max(c.auto.maxFlying, len(c.auto.flying)+c.explicitFlying)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.explicitFlying--
		c.mu.Unlock()
	}()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-wake:
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits = append(c.commits, tps)
	if c.commitErr != nil {
		return nil, c.commitErr
	}
	for _, tp := range tps {
		c.auto.committed[tp.Partition] = int64(tp.Offset)
	}
	return tps, nil
}

func (c *scriptConsumer) Close() error {
	c.mu.Lock()
	hold := c.closeHold
	c.mu.Unlock()
	if hold != nil {
		<-hold
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *scriptConsumer) Cooperative() bool    { return false }
func (c *scriptConsumer) AssignmentLost() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.lost }
func (c *scriptConsumer) MemberID() string     { return "member-1" }

func (c *scriptConsumer) Take(tps []kafka.TopicPartition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.assigned = nil
	for _, tp := range tps {
		c.assigned = append(c.assigned, tp.Partition)
	}
	c.taken = append(c.taken, slices.Clone(tps))
	return nil
}

func (c *scriptConsumer) GiveBack([]kafka.TopicPartition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advance()
	c.assigned = nil
	clear(c.auto.stored)
	return nil
}

func (c *scriptConsumer) tps(parts []int32) []kafka.TopicPartition {
	topic := scriptTopic
	var out []kafka.TopicPartition
	for _, p := range parts {
		out = append(out, kafka.TopicPartition{Topic: &topic, Partition: p})
	}
	return out
}

// push queues items for the member's next polls.
func (c *scriptConsumer) push(items ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, items...)
}

// scriptProducer is a KafkaProducer that appends to the script's log. Its delivery reports come
// reportDelay after the record was produced; it counts the records produced and not reported yet.
type scriptProducer struct {
	log    *scriptLog
	events chan kafka.Event
	mu     sync.Mutex
	sent   []core.Heartbeat
	closed bool
	// reportDelay delays the reports that go to events; flying counts those on their way, and
	// maxFlying the most at once.
	reportDelay       time.Duration
	flying, maxFlying int
}

func (p *scriptProducer) Events() chan kafka.Event { return p.events }

func (p *scriptProducer) Produce(m *kafka.Message, reports chan kafka.Event) error {
	var h core.Heartbeat
	if err := h.Decode(m.Value); err != nil {
		return err
	}
	p.mu.Lock()
	p.sent = append(p.sent, h)
	p.mu.Unlock()
	l := p.log
	l.mu.Lock()
	off := l.next[m.TopicPartition.Partition]
	l.next[m.TopicPartition.Partition]++
	l.mu.Unlock()
	delivered := *m
	delivered.TopicPartition.Offset = kafka.Offset(off)
	p.mu.Lock()
	delay := p.reportDelay
	p.mu.Unlock()
	switch {
	case reports != nil:
		reports <- &delivered
	case delay > 0:
		p.mu.Lock()
		p.flying++
		p.maxFlying = max(p.maxFlying, p.flying)
		p.mu.Unlock()
		time.AfterFunc(delay, func() {
			p.mu.Lock()
			p.flying--
			p.mu.Unlock()
			p.events <- &delivered
		})
	default:
		p.events <- &delivered
	}
	c := l.consumer
	c.mu.Lock()
	switch {
	case !c.echo || !slices.Contains(c.assigned, m.TopicPartition.Partition):
	case c.echoDelay > 0:
		c.late = append(c.late, lateEvent{at: time.Now().Add(c.echoDelay), ev: &delivered})
	default:
		c.queue = append(c.queue, &delivered)
	}
	c.mu.Unlock()
	return nil
}

func (p *scriptProducer) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
}

// kinds lists the kinds of what the producer sent, in order.
func (p *scriptProducer) kinds() []core.RecordKind {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []core.RecordKind
	for _, h := range p.sent {
		out = append(out, h.Kind)
	}
	return out
}

// scriptAdmin finds the leader topic, and describes the group as this member owning what the
// consumer holds, while it is in the group (its LeaveGroup always succeeds).
type scriptAdmin struct {
	log        *scriptLog
	clientID   string
	partitions int // of the leader topic
}

func (a *scriptAdmin) GetMetadata(*string, bool, int) (*kafka.Metadata, error) {
	parts := make([]kafka.PartitionMetadata, a.partitions)
	for i := range parts {
		parts[i].ID = int32(i)
	}
	return &kafka.Metadata{
		Brokers: []kafka.BrokerMetadata{{ID: 1}},
		Topics:  map[string]kafka.TopicMetadata{scriptTopic: {Topic: scriptTopic, Partitions: parts}},
	}, nil
}

func (a *scriptAdmin) CreateTopics(context.Context, []kafka.TopicSpecification, ...kafka.CreateTopicsAdminOption) ([]kafka.TopicResult, error) {
	return nil, errors.New("not used")
}

func (a *scriptAdmin) DescribeConsumerGroups(context.Context, []string, ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error) {
	c := a.log.consumer
	c.mu.Lock()
	owned, in := c.tps(c.assigned), c.subscribed
	c.mu.Unlock()
	var members []kafka.MemberDescription
	if in {
		members = append(members, kafka.MemberDescription{ClientID: a.clientID, ConsumerID: c.MemberID(), Assignment: kafka.MemberAssignment{TopicPartitions: owned}})
	}
	return kafka.DescribeConsumerGroupsResult{ConsumerGroupDescriptions: []kafka.ConsumerGroupDescription{{GroupID: scriptGroup, Members: members}}}, nil
}

// DescribeConfigs describes the brokers as the embedded broker of the tests is set up
// (kafkatest.DefaultGroupMinSessionTimeout): a session as short as a 1 s lease derives is accepted.
func (a *scriptAdmin) DescribeConfigs(_ context.Context, rs []kafka.ConfigResource, _ ...kafka.DescribeConfigsAdminOption) ([]kafka.ConfigResourceResult, error) {
	out := make([]kafka.ConfigResourceResult, len(rs))
	for i, r := range rs {
		out[i] = kafka.ConfigResourceResult{Type: r.Type, Name: r.Name, Config: map[string]kafka.ConfigEntryResult{}}
		if r.Type == kafka.ResourceBroker {
			out[i].Config["group.min.session.timeout.ms"] = kafka.ConfigEntryResult{Name: "group.min.session.timeout.ms", Value: "500"}
		}
	}
	return out, nil
}

func (a *scriptAdmin) Close() {}

// scriptRig is an instance assembled on the scripted clients, with the events its barrier saw.
type scriptRig struct {
	t        *testing.T
	n        *neli
	consumer *scriptConsumer
	producer *scriptProducer
	mu       sync.Mutex
	events   []Event
	// hold, if set, is waited on by the barrier before it returns from a LeaderRevoked.
	hold chan struct{}
}

func newScriptRig(t *testing.T) *scriptRig {
	return newScriptRigFor(t, []string{""}, "", Config{})
}

// newScriptRigFor is newScriptRig for an instance contending for roles, whose list has digest,
// with the MinPollInterval and RenewInterval of tweak where set.
func newScriptRigFor(t *testing.T, roles []string, digest string, tweak Config) *scriptRig {
	r := &scriptRig{t: t}
	l := &scriptLog{next: map[int32]int64{}}
	l.consumer = &scriptConsumer{log: l, echo: true, wake: make(chan struct{})}
	l.producer = &scriptProducer{log: l, events: make(chan kafka.Event, 1000)}
	r.consumer, r.producer = l.consumer, l.producer
	admin := &scriptAdmin{log: l, partitions: len(roles)}
	config := Config{
		LeaderTopic:           scriptTopic,
		LeaderGroupID:         scriptGroup,
		Name:                  scriptName,
		HeartbeatTimeout:      Duration(scriptLease),
		Scribe:                newTestLog(t).Scribe(),
		KafkaConsumerProvider: func(*KafkaConfigMap) (KafkaConsumer, error) { return l.consumer, nil },
		KafkaProducerProvider: func(*KafkaConfigMap) (KafkaProducer, error) { return l.producer, nil },
		KafkaAdminProvider:    func(*KafkaConfigMap) (KafkaAdmin, error) { return admin, nil },
		MinPollInterval:       tweak.MinPollInterval,
		RenewInterval:         tweak.RenewInterval,
		KafkaConfig:           tweak.KafkaConfig,
	}
	n, err := assemble(config, digest, roles, []Barrier{r.barrier}, core.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	r.n = n
	l.consumer.auto.tick = time.Duration(n.d.Timing().Commit.Milliseconds()) * time.Millisecond
	// The group is described, and heartbeats written, through the scripted clients, not goneli's
	// own connections.
	r.n.d.UseWire(nil)
	admin.clientID = r.n.d.ClientID()
	if err := r.n.d.Join(); err != nil {
		t.Fatal(err)
	}
	r.n.startDispatchers()
	t.Cleanup(func() {
		// A test that failed early leaves the instance to close here, so that the bubble's
		// goroutines end; Close is idempotent for those that closed it already.
		if r.hold != nil {
			select {
			case <-r.hold:
			default:
				close(r.hold)
			}
		}
		close(r.consumer.wake)
		_ = r.n.Close()
		r.n.Await()
		<-r.n.life.clientsClosed
	})
	return r
}

func (r *scriptRig) barrier(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	hold := r.hold
	r.mu.Unlock()
	if _, ok := e.(LeaderRevoked); ok && hold != nil {
		<-hold
	}
}

// seen names the events the barrier has seen, in order.
func (r *scriptRig) seen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for _, e := range r.events {
		names = append(names, fmt.Sprintf("%T", e)[len("goneli."):])
	}
	return fmt.Sprint(names)
}

// pulse runs the pulse loop for d of the instance's clock, or until it leads if lead is set.
func (r *scriptRig) pulse(d time.Duration, lead bool) bool {
	r.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		leads, err := r.n.Pulse(time.Until(end))
		if err != nil {
			r.t.Fatalf("Pulse: %v", err)
		}
		if leads && lead {
			return true
		}
		if leads {
			time.Sleep(*r.n.config.MinPollInterval)
		}
	}
	return r.n.IsLeader()
}

// setEchoDelay makes the heartbeats produced from now on come back d after they were produced.
func (r *scriptRig) setEchoDelay(d time.Duration) {
	r.consumer.mu.Lock()
	defer r.consumer.mu.Unlock()
	r.consumer.echoDelay = d
}

// subscribed reports whether the member is in the group.
func (r *scriptRig) subscribed() bool {
	r.consumer.mu.Lock()
	defer r.consumer.mu.Unlock()
	return r.consumer.subscribed
}

func (r *scriptRig) assign() {
	r.consumer.push(rebalanceEvent{kafka.AssignedPartitions{Partitions: r.consumer.tps([]int32{0})}})
}

func (r *scriptRig) revoke(lost bool) {
	r.consumer.mu.Lock()
	r.consumer.lost = lost
	r.consumer.mu.Unlock()
	r.consumer.push(rebalanceEvent{kafka.RevokedPartitions{Partitions: r.consumer.tps([]int32{0})}})
}

func (r *scriptRig) close() {
	r.t.Helper()
	if err := r.n.Close(); err != nil {
		r.t.Errorf("Close: %v", err)
	}
	r.n.Await()
	<-r.n.life.clientsClosed
}

func TestDriverSequences(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, r *scriptRig)
	}{
		{"assignment leads after a committed heartbeat and a group check", func(t *testing.T, r *scriptRig) {
			r.assign()
			if !r.pulse(scriptLease, true) {
				t.Fatalf("no leadership within a lease; events %s", r.seen())
			}
			if got := r.n.d.Machine().Check.Count.Load(); got < 2 {
				t.Errorf("%d group checks, want New's and the tenure's", got)
			}
			r.close()
			if got, want := r.seen(), "[LeaderAcquired LeaderRevoked]"; got != want {
				t.Errorf("events %s, want %s", got, want)
			}
		}},
		{"no leadership while the group does not name the member", func(t *testing.T, r *scriptRig) {
			r.n.d.Inspect(func(c *driver.Config, m *core.Machine, _ []*core.Role) {
				c.KafkaAdminProvider = func(*driver.KafkaConfigMap) (driver.KafkaAdmin, error) { return nil, errors.New("no admin") }
				m.Check.Alone = true
			})
			r.assign()
			if r.pulse(3*scriptLease, true) {
				t.Fatal("led without a group check")
			}
			r.close()
			if got := r.seen(); got != "[]" {
				t.Errorf("events %s, want none", got)
			}
		}},
		{"revocation: LeaderRevoked, then releasing and released markers", func(t *testing.T, r *scriptRig) {
			r.assign()
			if !r.pulse(scriptLease, true) {
				t.Fatal("no leadership")
			}
			r.hold = make(chan struct{})
			r.revoke(false)
			r.pulse(scriptLease/2, false)
			if r.n.IsLeader() {
				t.Fatal("leads after the revocation")
			}
			kinds := r.producer.kinds()
			if kinds[len(kinds)-1] != core.KindReleasing {
				t.Fatalf("last record of kind %d, want a releasing marker while the barrier holds LeaderRevoked", kinds[len(kinds)-1])
			}
			close(r.hold)
			r.pulse(scriptLease/2, false)
			kinds = r.producer.kinds()
			if kinds[len(kinds)-1] != core.KindReleased {
				t.Fatalf("last record of kind %d, want a released marker once the barrier returned", kinds[len(kinds)-1])
			}
			r.close()
			if got, want := r.seen(), "[LeaderAcquired LeaderRevoked]"; got != want {
				t.Errorf("events %s, want %s", got, want)
			}
		}},
		{"lost assignment: fenced, and no release marker", func(t *testing.T, r *scriptRig) {
			r.assign()
			if !r.pulse(scriptLease, true) {
				t.Fatal("no leadership")
			}
			before := len(r.producer.kinds())
			r.revoke(true)
			r.pulse(scriptLease/2, false)
			for _, k := range r.producer.kinds()[before:] {
				if k == core.KindReleasing || k == core.KindReleased {
					t.Fatalf("marker of kind %d written for a lost assignment", k)
				}
			}
			r.close()
			if got, want := r.seen(), "[LeaderAcquired LeaderFenced LeaderRevoked]"; got != want {
				t.Errorf("events %s, want %s", got, want)
			}
		}},
		{"commit refused for a lost member: fenced at once", func(t *testing.T, r *scriptRig) {
			r.assign()
			if !r.pulse(scriptLease, true) {
				t.Fatal("no leadership")
			}
			r.consumer.mu.Lock()
			r.consumer.commitErr = kafka.NewError(kafka.ErrUnknownMemberID, "unknown member", false)
			r.consumer.mu.Unlock()
			r.pulse(scriptLease/2, false)
			if r.n.IsLeader() {
				t.Fatal("leads after the coordinator refused its commit")
			}
			r.close()
			if got, want := r.seen(), "[LeaderAcquired LeaderFenced LeaderRevoked]"; got != want {
				t.Errorf("events %s, want %s", got, want)
			}
		}},
		{"heartbeats not read back: the watchdog fences within the lease, nobody pulsing", func(t *testing.T, r *scriptRig) {
			r.assign()
			if !r.pulse(scriptLease, true) {
				t.Fatal("no leadership")
			}
			r.consumer.mu.Lock()
			r.consumer.echo = false
			r.consumer.mu.Unlock()
			time.Sleep(scriptLease)
			synctest.Wait()
			if r.n.IsLeader() {
				t.Fatal("leads a lease after its last renewal")
			}
			if got, want := r.seen(), "[LeaderAcquired LeaderFenced]"; got != want {
				t.Errorf("events %s, want %s", got, want)
			}
			r.close()
		}},
		{"fenced while assigned: hands over after the bound, rejoins after the back-off", func(t *testing.T, r *scriptRig) {
			r.assign()
			if !r.pulse(scriptLease, true) {
				t.Fatal("no leadership")
			}
			// The heartbeats come back a lease late, too late to renew anything, while the group
			// session holds.
			r.setEchoDelay(scriptLease)
			r.pulse(3*scriptLease/2, false)
			s := r.n.Stats()
			if s.Leader || s.NotLeadingSince.IsZero() || s.HandOvers != 0 || !r.subscribed() {
				t.Fatalf("fenced: leader %v, not leading since %v, %d hand-overs, subscribed %v; want false, set, 0, true",
					s.Leader, s.NotLeadingSince, s.HandOvers, r.subscribed())
			}
			// Stuck since the fence: the offset stored last is withdrawn, and the late heartbeats
			// are not stored, so that the hand-over's revocation has nothing to commit.
			r.consumer.mu.Lock()
			stores, left := r.consumer.stores, len(r.consumer.auto.stored)
			r.consumer.mu.Unlock()
			if left != 0 {
				t.Fatalf("fenced: %d offsets left stored, want none", left)
			}
			r.pulse(scriptLease, false)
			s = r.n.Stats()
			if s.HandOvers != 1 || r.subscribed() || s.Assigned || !s.NotLeadingSince.IsZero() || s.YieldRemaining <= 0 {
				t.Fatalf("after the bound: %d hand-overs, subscribed %v, assigned %v, not leading since %v, yield remaining %v; want 1, false, false, zero, some",
					s.HandOvers, r.subscribed(), s.Assigned, s.NotLeadingSince, s.YieldRemaining)
			}
			r.consumer.mu.Lock()
			stores = r.consumer.stores - stores
			r.consumer.mu.Unlock()
			if stores != 0 {
				t.Fatalf("stuck until the hand-over: %d offsets stored, want none", stores)
			}
			r.pulse(s.YieldRemaining+scriptLease/10, false)
			if !r.subscribed() {
				t.Fatal("not back in the group after the back-off")
			}
			r.setEchoDelay(0)
			r.assign()
			if !r.pulse(scriptLease, true) {
				t.Fatalf("no leadership after rejoining; events %s", r.seen())
			}
			r.close()
			if got, want := r.seen(), "[LeaderAcquired LeaderFenced LeaderRevoked LeaderAcquired LeaderRevoked]"; got != want {
				t.Errorf("events %s, want %s", got, want)
			}
		}},
		{"commits held by a rebalance, heartbeats read back: fenced, no hand-over", func(t *testing.T, r *scriptRig) {
			r.assign()
			if !r.pulse(scriptLease, true) {
				t.Fatal("no leadership")
			}
			r.consumer.mu.Lock()
			r.consumer.commitErr = kafka.NewError(kafka.ErrRebalanceInProgress, "rebalance in progress", false)
			r.consumer.mu.Unlock()
			r.pulse(3*scriptLease, false)
			if s := r.n.Stats(); s.Leader || s.NotLeadingSince.IsZero() || s.HandOvers != 0 || !r.subscribed() {
				t.Fatalf("leader %v, not leading since %v, %d hand-overs, subscribed %v; want false, set, 0, true",
					s.Leader, s.NotLeadingSince, s.HandOvers, r.subscribed())
			}
			r.consumer.mu.Lock()
			r.consumer.commitErr = nil
			r.consumer.mu.Unlock()
			if !r.pulse(scriptLease, true) {
				t.Fatalf("no leadership once the commits were accepted again; events %s", r.seen())
			}
			r.close()
			if got, want := r.seen(), "[LeaderAcquired LeaderFenced LeaderAcquired LeaderRevoked]"; got != want {
				t.Errorf("events %s, want %s", got, want)
			}
		}},
		{"close: LeaderRevoked, the stored offset withdrawn, then leave, then close the clients", func(t *testing.T, r *scriptRig) {
			r.assign()
			if !r.pulse(scriptLease, true) {
				t.Fatal("no leadership")
			}
			// An offset stored and not committed yet is withdrawn: the revocation commits nothing,
			// and the LeaveGroup waits for no commit's answer.
			stored := []core.OffsetRef{{Partition: 0, Offset: 1 << 40}} // above any committed offset
			var err error
			r.n.d.Inspect(func(_ *driver.Config, m *core.Machine, _ []*core.Role) { _, _, _, err = m.Gate.Store(stored, 0) })
			if err != nil {
				t.Fatal(err)
			}
			r.close()
			r.consumer.mu.Lock()
			owed := r.consumer.owed
			r.consumer.mu.Unlock()
			if owed != 0 {
				t.Errorf("the revocation found %d offsets stored to commit, want none", owed)
			}
			if r.n.State() != Closed {
				t.Errorf("state %v after Close", r.n.State())
			}
			r.consumer.mu.Lock()
			unsubbed, closed, queued := r.consumer.unsubbed, r.consumer.closed, len(r.consumer.queue)
			r.consumer.mu.Unlock()
			if unsubbed != 1 || !closed || queued != 0 {
				t.Errorf("unsubscribed %d times, closed %v, %d events left unserved; want 1, true, 0", unsubbed, closed, queued)
			}
			if !r.producer.closed {
				t.Error("producer not closed")
			}
			if got, want := r.seen(), "[LeaderAcquired LeaderRevoked]"; got != want {
				t.Errorf("events %s, want %s", got, want)
			}
			if err := r.n.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tc.run(t, newScriptRig(t))
			})
		})
	}
}

// Roles that acquired at different moments renew in one cycle from their first tick on: the
// driver hands their heartbeats over together, and each still comes back on its own partition.
func TestDriverRolesRenewTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		roles := Shards(3)
		// Renewals many polls apart, so that roles acquired a few polls apart would renew in
		// different cycles if each kept its own schedule.
		r := newScriptRigFor(t, roles, core.RolesDigest(roles), Config{MinPollInterval: Duration(10 * time.Millisecond), RenewInterval: Duration(300 * time.Millisecond)})
		interval := *r.n.config.RenewInterval
		var assigned []int32
		for i := range roles {
			// The eager assignor hands out the whole assignment each time.
			assigned = append(assigned, int32(i))
			r.consumer.push(rebalanceEvent{kafka.AssignedPartitions{Partitions: r.consumer.tps(assigned)}})
			for j := 0; len((&roleSet{n: r.n}).Leading()) <= i; j++ {
				if j == 100 {
					t.Fatalf("leading %v, want roles up to %d; events %s", (&roleSet{n: r.n}).Leading(), i, r.seen())
				}
				r.pulse(*r.n.config.MinPollInterval, false)
			}
			// The next role acquires a third of an interval later, off this one's renewals.
			r.pulse(interval/3, false)
		}
		from := r.n.d.Now()
		r.pulse(6*interval, false)
		sent := map[time.Duration][]string{}
		r.producer.mu.Lock()
		for _, h := range r.producer.sent {
			if h.SentMono > from+interval {
				sent[h.SentMono] = append(sent[h.SentMono], h.Role)
			}
		}
		r.producer.mu.Unlock()
		if len(sent) < 3 {
			t.Fatalf("heartbeats sent at %d instants, want one per renewal interval", len(sent))
		}
		for at, rs := range sent {
			slices.Sort(rs)
			if !slices.Equal(rs, roles) {
				t.Errorf("at %v the heartbeats of %v went out, want every role's", at, rs)
			}
		}
		for _, p := range r.n.parts {
			if s := r.n.statsOf(p); s.Token == 0 {
				t.Errorf("role %s: no token", p.Name)
			}
		}
		r.close()
	})
}

// An explicit commit that waits for its answer for longer than a group heartbeat interval stops
// explicit commits until librdkafka's own is accepted again: the group heartbeats that went before
// it on the coordinator's connection may have been answered as late, and the window for explicit
// commits leaves one interval for that answer (driver.holdCommits).
func TestDriverHoldsExplicitCommitsAfterASlowAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A session of twice the lease leaves a window of 0.8 leases for explicit commits.
		r := newScriptRigFor(t, []string{""}, "", Config{KafkaConfig: KafkaConfigMap{"session.timeout.ms": 2000}})
		hb := r.n.d.Timing().Heartbeat()
		r.assign()
		if !r.pulse(scriptLease, true) {
			t.Fatalf("no leadership within a lease; events %s", r.seen())
		}
		explicit := func() int {
			r.consumer.mu.Lock()
			defer r.consumer.mu.Unlock()
			return len(r.consumer.commits)
		}
		setAuto := func(on bool, delay time.Duration) {
			r.consumer.mu.Lock()
			defer r.consumer.mu.Unlock()
			r.consumer.noAuto, r.consumer.commitDelay = !on, delay
		}

		// librdkafka stops auto-committing, and the first explicit commit takes three intervals.
		setAuto(false, 3*hb)
		r.pulse(8*hb, false)
		if n := explicit(); n != 1 {
			t.Fatalf("%d explicit commits, want the slow one alone", n)
		}
		if !r.n.d.Machine().CommitsHeld {
			t.Fatal("explicit commits not held after one waited three group heartbeat intervals")
		}

		// An automatic commit accepted once the late answers are over ends the hold, and explicit
		// commits go out again. The first offset stored may wait for the stores before it to be
		// presumed unanswered (commitgate.go).
		setAuto(true, 0)
		resumed := r.n.d.Now()
		for end := time.Now().Add(scriptLease); r.n.d.Machine().CommitsHeld && time.Now().Before(end); {
			r.pulse(hb, false)
		}
		if r.n.d.Machine().CommitsHeld {
			t.Fatal("explicit commits still held a lease after librdkafka's commits came back")
		}
		// The first offset accepted after the slow answers may anchor the window at the first store
		// of the chain of presumptions before it (commitGate.store), which is older than the window;
		// the next accepted store anchors afresh, once a store is made after an answer settled the
		// chain.
		anchor := func() time.Duration {
			var at time.Duration
			r.n.d.Inspect(func(_ *driver.Config, _ *core.Machine, roles []*core.Role) { at = roles[0].Lease.AutoAt })
			return at
		}
		for end := time.Now().Add(scriptLease); anchor() < resumed && time.Now().Before(end); {
			r.pulse(hb, false)
		}
		if anchor() < resumed {
			t.Fatal("no offset stored after librdkafka's commits came back anchored the window within a lease")
		}
		// Once the automatic commits stop again, an explicit one goes out as soon as the gate
		// gives up on the last offset stored, which it times by the slow answers seen lately.
		setAuto(false, 0)
		before := explicit()
		for end := time.Now().Add(scriptLease); explicit() == before && time.Now().Before(end); {
			r.pulse(hb, false)
		}
		if explicit() == before {
			t.Fatal("no explicit commit within a lease after the hold ended")
		}
		r.close()
	})
}

// However slowly the coordinator answers, the consumer has one commit in flight at a time and never
// sends an offset again while a commit of it is unanswered, where librdkafka's auto-commit alone
// would send it at every tick until the answer came (scriptAuto models that timer): the commit gate
// (commitgate.go) stores an offset only while nothing is in flight and withdraws it before the
// timer's next tick. The leader keeps leading meanwhile, renewing once per answer; while librdkafka
// commits nothing (a rebalance), explicit commits take over where their answers come within a
// group heartbeat interval (100 ms at this lease).
//
// A coordinator slower than a group heartbeat interval can have two commits in flight once, before
// the first answer tells the gate how slow it is; and at a lease shorter than twice the commit
// round trip the leader renews too slowly to keep its lease (one commit at a time is the price).
func TestDriverOneCommitInFlight(t *testing.T) {
	for _, tc := range []struct {
		delay     time.Duration
		maxFlying int
		keeps     bool
	}{
		{0, 1, true},
		{30 * time.Millisecond, 1, true},
		{90 * time.Millisecond, 1, true},
		{300 * time.Millisecond, 2, false},
	} {
		t.Run(tc.delay.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newScriptRig(t)
				r.consumer.mu.Lock()
				r.consumer.auto.delay, r.consumer.commitDelay = tc.delay, tc.delay
				r.consumer.mu.Unlock()
				r.assign()
				if !r.pulse(2*scriptLease, true) {
					t.Fatalf("no leadership within two leases; events %s", r.seen())
				}
				r.pulse(3*scriptLease, false)
				if s := r.n.Stats(); tc.keeps && (!s.Leader || s.Fenced != 0) {
					t.Errorf("leader %v, fenced %d times; want a leader never fenced", s.Leader, s.Fenced)
				}
				// librdkafka stops committing for a while (a rebalance), twice, so that explicit
				// commits take over and then give way again.
				for _, noAuto := range []bool{true, false, true, false} {
					r.consumer.mu.Lock()
					r.consumer.noAuto = noAuto
					r.consumer.mu.Unlock()
					r.pulse(scriptLease/2, false)
				}
				r.consumer.mu.Lock()
				a, explicit := r.consumer.auto, len(r.consumer.commits)
				r.consumer.mu.Unlock()
				counts := r.n.d.Machine().Gate.Snapshot()
				t.Logf("%d automatic commits, %d explicit; at most %d in flight, %d sent again unanswered; gate %+v",
					a.sent, explicit, a.maxFlying, a.resent, counts)
				if a.maxFlying > tc.maxFlying || a.resent > 0 || counts.Strays > uint64(tc.maxFlying-1) {
					t.Errorf("%d commits in flight at once, %d offsets sent again while unanswered, %d answers after their store was given up; want at most %d, 0, %d",
						a.maxFlying, a.resent, counts.Strays, tc.maxFlying, tc.maxFlying-1)
				}
				if a.sent < 5 || (explicit == 0 && tc.delay < r.n.d.Timing().Heartbeat()) {
					t.Errorf("%d automatic and %d explicit commits, want several and some", a.sent, explicit)
				}
				r.close()
			})
		})
	}
}

// A log that restarts below librdkafka's committed offset while explicit commits are held (a commit
// waited through the broker's restart) still gets the explicit commit that resets that offset:
// librdkafka auto-commits only offsets above it, so no automatic commit could end the hold
// otherwise, and the instance would never lead again. The reset renews nothing by itself; the
// automatic commits after it do.
func TestDriverResetsCommittedOffsetWhileHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRigFor(t, []string{""}, "", Config{KafkaConfig: KafkaConfigMap{"session.timeout.ms": 2000}})
		hb := r.n.d.Timing().Heartbeat()
		// Far more records than the test's leases write, so that the restarted log does not grow
		// past the committed offset while it runs.
		r.consumer.log.mu.Lock()
		r.consumer.log.next[0] = 100000
		r.consumer.log.mu.Unlock()
		r.assign()
		if !r.pulse(scriptLease, true) {
			t.Fatalf("no leadership within a lease; events %s", r.seen())
		}
		r.consumer.mu.Lock()
		r.consumer.noAuto, r.consumer.commitDelay = true, 3*hb
		r.consumer.mu.Unlock()
		for end := time.Now().Add(scriptLease); !r.n.d.Machine().CommitsHeld && time.Now().Before(end); {
			r.pulse(hb, false)
		}
		if !r.n.d.Machine().CommitsHeld {
			t.Fatal("explicit commits not held after a slow one")
		}
		// The broker comes back with an empty log, and the heartbeats written to it come back;
		// then librdkafka is steady in the group again.
		r.consumer.log.mu.Lock()
		r.consumer.log.next[0] = 0
		r.consumer.log.mu.Unlock()
		r.pulse(scriptLease/2, false)
		r.consumer.mu.Lock()
		r.consumer.noAuto, r.consumer.commitDelay = false, 0
		r.consumer.mu.Unlock()
		for end := time.Now().Add(2 * scriptLease); (r.n.d.Machine().CommitsHeld || !r.n.IsLeader()) && time.Now().Before(end); {
			r.pulse(hb, false)
		}
		if r.n.d.Machine().CommitsHeld || !r.n.IsLeader() {
			t.Fatalf("held %v, leader %v two leases after the log restarted; want a leader renewing on automatic commits; events %s",
				r.n.d.Machine().CommitsHeld, r.n.IsLeader(), r.seen())
		}
		r.close()
	})
}

// However slowly the broker acknowledges heartbeats, the instance has one round of them in flight:
// a heartbeat that falls due while the one before has not been reported delivered waits for it
// (driver.mayProduce). The leader keeps leading on the heartbeats that do go out.
func TestDriverOneHeartbeatRoundInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t)
		r.assign()
		if !r.pulse(scriptLease, true) {
			t.Fatalf("no leadership within a lease; events %s", r.seen())
		}
		interval := *r.n.config.RenewInterval
		r.producer.mu.Lock()
		r.producer.reportDelay = 3 * interval
		before := len(r.producer.sent)
		r.producer.mu.Unlock()
		r.pulse(3*scriptLease, false)
		r.producer.mu.Lock()
		sent, most := len(r.producer.sent)-before, r.producer.maxFlying
		r.producer.mu.Unlock()
		if most != 1 {
			t.Errorf("%d heartbeats awaited their delivery reports at once, want 1", most)
		}
		if want := int(3 * scriptLease / (3*interval + *r.n.config.MinPollInterval)); sent < want {
			t.Errorf("%d heartbeats in three leases, want at least %d: one per report", sent, want)
		}
		if s := r.n.Stats(); !s.Leader || s.Fenced != 0 {
			t.Errorf("leader %v, fenced %d times; want a leader never fenced", s.Leader, s.Fenced)
		}
		r.close()
	})
}

// While nothing answers any commit (a coordinator out of reach, whose automatic commits librdkafka
// defers to send all at once when it is back), the gate stores ever less often: each store
// presumed never sent doubles the wait before the next, up to a quarter lease. (Explicit commits
// stop here once the window after the last automatic commit has passed.)
func TestDriverStoresBackOffWithoutAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t)
		r.assign()
		if !r.pulse(scriptLease, true) {
			t.Fatalf("no leadership within a lease; events %s", r.seen())
		}
		r.consumer.mu.Lock()
		r.consumer.noAuto = true
		r.consumer.mu.Unlock()
		r.pulse(2*scriptLease, false) // past the window, and the waits doubled up to the cap
		r.consumer.mu.Lock()
		before, explicit := r.consumer.stores, len(r.consumer.commits)
		r.consumer.mu.Unlock()
		r.pulse(4*scriptLease, false)
		r.consumer.mu.Lock()
		stores, explicit := r.consumer.stores-before, len(r.consumer.commits)-explicit
		r.consumer.mu.Unlock()
		if explicit != 0 {
			t.Fatalf("%d explicit commits long after the window, want none", explicit)
		}
		if most := 4*4 + 1; stores > most {
			t.Errorf("%d stores in four leases without an answer, want at most %d: one per quarter lease", stores, most)
		}
		if stores < 8 {
			t.Errorf("%d stores in four leases, want the gate to keep trying", stores)
		}
		r.close()
	})
}

// Under KIP-848 librdkafka raises a refused ConsumerGroupHeartbeat (GROUP_AUTHORIZATION_FAILED) as
// a fatal error (rdkafka_cgrp.c, rd_kafka_cgrp_handle_ConsumerGroupHeartbeat), where the classic
// protocol's JoinGroup gives a plain one: Pulse must return the *AuthorizationError naming Read on
// the group either way, not a bare fatal error (seen on Apache Kafka 4.4, TestACLsOnKafka).
func TestDriverFatalGroupAuthorization(t *testing.T) {
	for _, fatal := range []bool{false, true} {
		t.Run(fmt.Sprintf("fatal=%v", fatal), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newScriptRig(t)
				r.consumer.push(kafka.NewError(kafka.ErrGroupAuthorizationFailed, "ConsumerGroupHeartbeat fatal error: Broker: Group authorization failed", fatal))
				_, err := r.n.Pulse(scriptLease)
				var ae *AuthorizationError
				if !errors.As(err, &ae) || ae.Operation != "Read" || ae.Resource != "group" || ae.Name != scriptGroup || ae.Client != "consumer" {
					t.Fatalf("Pulse: %v; want an *AuthorizationError for Read on group %s", err, scriptGroup)
				}
			})
		})
	}
}

// A consumer that raised a fatal error never finishes closing under confluent-kafka-go v2.11.1
// (its Close drops librdkafka's refusal to close such a consumer and polls for a close that never
// comes: confluentinc/confluent-kafka-go#1588). Close must still return by its deadline, and say
// why the consumer stays behind rather than ask whether the broker is reachable (seen on Apache
// Kafka 4.4 under KIP-848 with Read on the group missing, TestACLsOnKafka).
func TestDriverCloseAfterAFatalErrorSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t)
		release := make(chan struct{})
		r.consumer.mu.Lock()
		r.consumer.closeHold = release
		r.consumer.mu.Unlock()
		r.consumer.push(kafka.NewError(kafka.ErrGroupAuthorizationFailed, "ConsumerGroupHeartbeat fatal error: Broker: Group authorization failed", true))
		if _, err := r.n.Pulse(scriptLease); err == nil {
			t.Fatal("Pulse after a fatal error: nil")
		}
		err := r.n.Close()
		close(release)
		if !errors.Is(err, ErrCloseTimeout) || !strings.Contains(err.Error(), "raised a fatal error") ||
			!strings.Contains(err.Error(), "confluentinc/confluent-kafka-go#1588") {
			t.Fatalf("Close: %v; want ErrCloseTimeout saying that the consumer raised a fatal error", err)
		}
	})
}
