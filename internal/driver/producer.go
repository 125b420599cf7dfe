package driver

import (
	"errors"
	"fmt"
	"time"

	"github.com/goneli/goneli/internal/core"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
)

// wireBeat is a heartbeat that a lease produced in a cycle, for sendHeartbeats at its end.
type wireBeat struct {
	p *core.Role
	h *core.Heartbeat
}

// heartbeatProducer is the producer that writes a tenure's heartbeats and release markers, opened
// on first use and replaced when it delivers nothing (recycleProducer).
type heartbeatProducer struct {
	p KafkaProducer // nil until the first heartbeat or group check, and after a replacement
	// ok is when the producer was opened or last delivered a record, delivered when it or goneli's
	// own connection (internal/sidechan) last delivered one, and recycled counts the producers replaced
	// for delivering nothing.
	ok, delivered time.Duration
	recycled      int
	// unreported counts the records handed to p whose delivery reports have not come back yet
	// (drainProducer), the latest handed over at produced: while there are any, no heartbeat is
	// produced (mayProduce).
	unreported int
	produced   time.Duration
}

// mayProduce reports whether the leases may produce heartbeats in this cycle: none produced before
// is still on its way to the broker, through librdkafka or over goneli's own connection. So an
// instance has one round of heartbeats in flight at most, whatever the broker's latency, where
// librdkafka would send a ProduceRequest per heartbeat whether or not the one before was answered,
// and a broker that answers a connection's requests one at a time, as Kafka does, would fall
// further behind with every one: at 1 s per answer and a heartbeat every 500 ms, each heartbeat
// would come back later than the one before, until none renewed anything. A heartbeat that waits
// goes out at the first cycle after the round before it has been answered; it renews no later
// than it would have from the back of that queue. librdkafka reports every record within
// message.timeout.ms, which is HeartbeatTimeout (clientConfigs), and a replaced producer
// (recycleProducer) starts again from none. Called with mu held.
func (d *Driver) mayProduce() bool {
	if d.heart.unreported > 0 && d.now()-d.heart.produced > *d.config.HeartbeatTimeout+*d.config.MinPollInterval {
		// A producer of the application's that reports nothing, say: not worth a lease without
		// heartbeats.
		d.throttle.Log(d.log.W(), "unreported", "goneli %s: %d heartbeats without a delivery report for longer than HeartbeatTimeout; producing again",
			d.config.Name, d.heart.unreported)
		d.heart.unreported = 0
	}
	if d.heart.unreported > 0 {
		return false
	}
	return d.wire == nil || !d.wire.Busy()
}

// ensureProducer opens the heartbeat producer on the first heartbeat or group check; it is kept from
// then on.
func (d *Driver) ensureProducer() bool {
	if d.heart.p == nil {
		p, err := d.config.KafkaProducerProvider(d.confs.producer)
		if err != nil {
			d.throttle.Log(d.log.E(), "producer", "goneli %s: cannot create heartbeat producer: %v", d.config.Name, err)
			return false
		}
		d.heart.p = p
		d.heart.ok = d.now()
	}
	return true
}

// A producer that delivers nothing for a whole lease while it is being used is replaced. librdkafka
// keeps, for a handle's life, the highest leader epoch it has seen for each partition, and ignores
// metadata that names an older one: when the leader topic is deleted and recreated (by an
// operator, or by brokers that lost their data), its partitions start again at epoch 0, perhaps on
// another broker, and the old handle keeps sending heartbeats to a broker that no longer leads
// them, each timing out, for as long as it lives. A new handle learns the topic afresh. Renewals
// that fail for a lease have fenced the leader already, so the new handle costs it nothing it has.

// noteDelivery records a heartbeat or marker's delivery report, and replaces the producer when
// nothing has been delivered for longer than a lease (recycleProducer).
func (d *Driver) noteDelivery(err error) {
	now := d.now()
	if err == nil {
		d.heart.ok, d.heart.delivered = now, now
		return
	}
	if now-d.heart.ok < *d.config.HeartbeatTimeout || len(d.m.Releases) > 0 || (d.check.checker.busy() && !d.viaSide() && !d.m.Check.Alone) {
		// A release marker still on its way, or a group check through the producer's own
		// admin handle, needs this handle; the next failed heartbeat tries again.
		return
	}
	d.recycleProducer(fmt.Sprintf("nothing delivered for %v (%v)", (now - d.heart.ok).Round(time.Millisecond), err))
}

// recycleProducer closes the producer, in the background, and lets the next heartbeat open another.
func (d *Driver) recycleProducer(reason string) {
	old := d.heart.p
	if old == nil {
		return
	}
	d.heart.p = nil
	d.heart.unreported = 0
	d.heart.recycled++
	d.log.W()("goneli %s: replacing the heartbeat producer: %s", d.config.Name, reason)
	d.closers.Add(1)
	go func() {
		defer d.closers.Done()
		old.Close()
	}()
}

// sendHeartbeats writes the heartbeats the leases produced in this cycle: those of several roles
// in one request per broker where it can (sidechan.Beats), and otherwise each through librdkafka.
func (d *Driver) sendHeartbeats() {
	beats := d.beats
	d.beats = d.beats[:0]
	defer clear(beats)
	if len(beats) == 0 {
		return
	}
	if len(beats) > 1 && d.wire != nil && d.wire.Usable(d.now(), *d.config.HeartbeatTimeout) && d.ensureProducer() {
		// Only with librdkafka's own producer: one of the application's (a test's, say) is meant
		// to see every record.
		if _, ok := d.heart.p.(*kafka.Producer); ok {
			batch := make([]sidechan.Beat[wireBeat], len(beats))
			for i, b := range beats {
				rec := *b.h
				rec.Address = d.config.Address
				batch[i] = sidechan.Beat[wireBeat]{Record: sidechan.Record{Partition: b.p.ID, Key: d.key, Value: rec.AppendTo(make([]byte, 0, rec.Size()))},
					Made: b.h.SentMono, Of: b}
			}
			if d.wire.Start(batch) {
				d.machine(func(*core.Machine) {
					for _, b := range beats {
						b.p.Lease.Sent()
					}
				})
				return
			}
		}
	}
	for _, b := range beats {
		d.sendOne(b.p, b.h)
	}
}

// collectHeartbeats takes the results of a round of heartbeats written over goneli's own
// connection. A heartbeat it failed to write goes to librdkafka now, with its own send time, and
// the heartbeats of the next lease (or longer: sidechan.Beats.Fail) go there too.
func (d *Driver) collectHeartbeats() {
	if d.wire == nil {
		return
	}
	res, ok := d.wire.Collect()
	if !ok {
		return
	}
	var failed error
	answered := false
	for _, r := range res {
		var ke kafka.Error
		answered = answered || r.Err == nil || errors.As(r.Err, &ke) && ke.Code() > 0
		if r.Err == nil {
			// The heartbeats are delivered, which is what the consumer's read-back check asks
			// (mayRenewConsumer); whether librdkafka's handle delivers stays its own deliveries'
			// say (noteDelivery).
			d.reachable("producer", "a heartbeat delivered")
			d.heart.delivered = d.now()
			continue
		}
		if failed == nil {
			failed = r.Err
		}
		if err := d.produceRecord(r.Beat.Of.p, r.Beat.Of.h); err != nil {
			d.throttle.Log(d.log.W(), "produce", "goneli %s: cannot send heartbeat: %v", d.config.Name, err)
		}
	}
	if failed == nil {
		d.wire.Worked()
		return
	}
	// A broker that answered, if only to refuse, shows the connection working: the pause is a
	// lease. Rounds that none answered pause it for longer each time (sidechan.Beats.Fail), but
	// never make it give way: librdkafka writes what fails here.
	d.wire.Fail(d.now(), answered)
	d.throttle.Log(d.log.W(), "wire heartbeats", "goneli %s: heartbeats not written over goneli's own connection (%v); librdkafka writes them for the next %v",
		d.config.Name, failed, d.wire.Pause(*d.config.HeartbeatTimeout))
}

// awaitHeartbeats waits for the rounds of heartbeats on goneli's own connection to end, within
// the bound of a release marker's write, and returns what is left of that bound for the markers:
// the two waits together take no longer than the markers' alone did.
func (d *Driver) awaitHeartbeats() time.Duration {
	limit := d.releaseFlush()
	if d.wire == nil {
		return limit
	}
	start := d.now()
	d.wire.Await(limit)
	return max(limit-(d.now()-start), 0)
}

func (d *Driver) sendOne(p *core.Role, h *core.Heartbeat) {
	if err := d.produceRecord(p, h); err != nil {
		d.throttle.Log(d.log.W(), "produce", "goneli %s: cannot send heartbeat: %v", d.config.Name, err)
		return
	}
	d.machine(func(*core.Machine) { p.Lease.Sent() })
}

// produceRecord hands a heartbeat or marker for p's partition to the producer; its delivery report
// comes through the producer's events.
func (d *Driver) produceRecord(p *core.Role, h *core.Heartbeat) error {
	return d.produceRecordTo(p, h, nil)
}

// produceRecordTo is produceRecord with the delivery report sent to reports, if not nil.
func (d *Driver) produceRecordTo(p *core.Role, h *core.Heartbeat, reports chan kafka.Event) error {
	if !d.ensureProducer() {
		return errors.New("no producer")
	}
	rec := *h
	rec.Address = d.config.Address
	err := d.heart.p.Produce(&kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &d.topic, Partition: p.ID},
		Key:            d.key,
		Value:          rec.AppendTo(make([]byte, 0, rec.Size())),
	}, reports)
	if err == nil && reports == nil {
		d.heart.unreported++
		d.heart.produced = d.now()
	}
	return err
}

// drainProducer takes the producer's delivery reports and errors, and returns the first
// authorization failure among the reports, which no retry can mend (authz.go in the root package).
func (d *Driver) drainProducer() (denied error) {
	if d.heart.p == nil {
		return nil
	}
	for i := 0; i < core.MaxEventsPerCycle; i++ {
		select {
		case ev := <-d.heart.p.Events():
			switch e := ev.(type) {
			case *kafka.Message:
				d.heart.unreported = max(d.heart.unreported-1, 0)
				if e.TopicPartition.Error != nil {
					if denied == nil {
						denied = d.config.Errors.Authorization("producer", e.TopicPartition.Error)
					}
					d.throttle.Log(d.log.W(), "delivery", "goneli %s: heartbeat not delivered: %v", d.config.Name, e.TopicPartition.Error)
				} else {
					d.reachable("producer", "a heartbeat delivered")
				}
				d.noteDelivery(e.TopicPartition.Error)
				if d.heart.p == nil {
					return denied
				}
			case kafka.Error:
				if e.Code() == kafka.ErrAllBrokersDown {
					d.unreachable("producer", e.Error())
				}
				d.noteTrouble(e)
				d.logKafkaError("producer", e)
			}
		default:
			return denied
		}
	}
	return denied
}

// writeMarkers produces the release markers and waits up to limit for the broker to have them
// all, reporting whether it did. Their delivery reports come on a channel of their own, which the
// producer's own goroutine serves, so the wait needs no poll of ours.
func (d *Driver) writeMarkers(rs []core.Release, limit time.Duration) bool {
	if limit <= 0 || !d.ensureProducer() {
		return false
	}
	reports := make(chan kafka.Event, len(rs))
	for _, r := range rs {
		if d.produceRecordTo(r.Role, &r.Marker, reports) != nil {
			return false
		}
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for range rs {
		select {
		case ev := <-reports:
			if m, ok := ev.(*kafka.Message); !ok || m.TopicPartition.Error != nil {
				return false
			}
		case <-timer.C:
			return false
		}
	}
	return true
}

// releaseFlush bounds the wait for release markers to reach the broker.
func (d *Driver) releaseFlush() time.Duration {
	return *d.config.HeartbeatTimeout / 2
}
