package goneli

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// # Heartbeats of several roles in one request
//
// Roles renew on shared ticks (renewalTick), so an instance that leads many produces all their
// heartbeats in one cycle. librdkafka 2.11.1 would still send each in a ProduceRequest of its own,
// since its producer puts one partition in a request (confluentinc/librdkafka#1700): an instance
// leading 64 roles sent some 120 produce requests a second, nine in ten of what it cost the
// broker. So when a cycle has heartbeats for two partitions or more, wireHeartbeats writes them
// over a connection of goneli's own (wireconn.go), one ProduceRequest per broker that leads any of
// them. A single role's heartbeat, the release markers and everything that cannot go this way
// (client settings goneli cannot speak, a producer of the application's) stay with librdkafka.
//
// Nothing of the lease's argument changes: every heartbeat is a record on its own role's
// partition, read back by the consumer and committed as before; only the connection that carries
// it differs. A heartbeat that this path fails to write is handed to librdkafka at once, with the
// send time it was made with; librdkafka carries every cycle's heartbeats for a lease after a
// round failed, and whenever heartbeats have waited behind a round under way for longer than a
// poll interval, so that a broker this path cannot reach costs no more than a late renewal.

// wireHeartbeats writes heartbeats over connections of its own, from a goroutine of its own: the
// poll loop must not wait for a broker with the driver's lock held, so the results come back
// through collect, on a later cycle. Heartbeats handed over while a round is under way wait for
// it and then go out together in the next round, as librdkafka's linger would gather them.
type wireHeartbeats struct {
	servers []string
	dialer  wireDialer
	topic   string
	// limit bounds a round: looking up the partitions' leaders, connecting, producing. queueFor
	// is how long heartbeats may wait behind a round under way before a cycle's heartbeats go
	// to librdkafka instead.
	limit, queueFor time.Duration
	// running counts the goroutine of the rounds (driver.closers).
	running *sync.WaitGroup

	// failedAt and failed are guarded by the driver's lock.
	failedAt time.Duration
	failed   bool

	// mu guards what the driver and the rounds' goroutine share. active says that the goroutine
	// runs; idle is closed when it stops. queued waits for the next round, results for collect.
	// A round opens connections, close closes them, and a round that finds the heartbeats
	// closed opens none.
	mu      sync.Mutex
	active  bool
	idle    chan struct{}
	queued  []wireBeat
	results []wireBeatResult
	closed  bool
	conns   map[string]*wireConn // by broker address
	// leaders is where each partition's leader listens, as last learned; the rounds' goroutine
	// alone uses it.
	leaders map[int32]string
}

// wireBeat is one heartbeat of a round: the part it renews and the record to write.
type wireBeat struct {
	p     *part
	h     *heartbeat
	key   []byte
	value []byte
}

// wireBeatResult is what became of one heartbeat of a round.
type wireBeatResult struct {
	beat   wireBeat
	offset int64
	err    error
}

func newWireHeartbeats(w *wireDescriber, topic string, limit, queueFor time.Duration, running *sync.WaitGroup) *wireHeartbeats {
	return &wireHeartbeats{servers: w.servers, dialer: w.dialer, topic: topic, limit: limit, queueFor: queueFor, running: running,
		conns: map[string]*wireConn{}, leaders: map[int32]string{}}
}

// usable reports whether a cycle's heartbeats may go this way at now: no round failed within the
// last lease, during which librdkafka renews every role as it would without this path, and no
// heartbeat has waited behind a round under way for longer than queueFor. Called with the
// driver's lock held.
func (w *wireHeartbeats) usable(now, lease time.Duration) bool {
	if w.failed && now-w.failedAt < lease {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.closed && (len(w.queued) == 0 || now-w.queued[0].h.sentMono < w.queueFor)
}

// start hands beats to the next round, starting the goroutine that runs rounds unless it runs,
// and reports whether it took them: not once the heartbeats are closed.
func (w *wireHeartbeats) start(beats []wireBeat) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(beats) == 0 {
		return false
	}
	w.queued = append(w.queued, beats...)
	if !w.active {
		w.active, w.idle = true, make(chan struct{})
		w.running.Add(1)
		go w.rounds()
	}
	return true
}

// rounds runs rounds until nothing waits for one.
func (w *wireHeartbeats) rounds() {
	defer w.running.Done()
	for {
		w.mu.Lock()
		beats := w.queued
		if len(beats) == 0 || w.closed {
			w.active = false
			close(w.idle)
			w.mu.Unlock()
			return
		}
		w.queued = nil
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), w.limit)
		res := w.round(ctx, beats)
		cancel()
		w.mu.Lock()
		w.results = append(w.results, res...)
		w.mu.Unlock()
	}
}

// collect returns the results of the rounds that ended since it was last called.
func (w *wireHeartbeats) collect() ([]wireBeatResult, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res := w.results
	w.results = nil
	return res, len(res) > 0
}

// await waits up to limit for the rounds under way or waiting, if any, to end, leaving their
// results for collect.
func (w *wireHeartbeats) await(limit time.Duration) {
	w.mu.Lock()
	active, idle := w.active, w.idle
	w.mu.Unlock()
	if !active {
		return
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-idle:
	case <-timer.C:
	}
}

// fail notes a round with a failed heartbeat. Called with the driver's lock held.
func (w *wireHeartbeats) fail(now time.Duration) {
	w.failed, w.failedAt = true, now
}

// close closes the connections and keeps rounds from opening others; a round under way fails.
func (w *wireHeartbeats) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for addr, c := range w.conns {
		c.close()
		delete(w.conns, addr)
	}
}

// round writes beats, one ProduceRequest per leader broker, and returns what became of each.
func (w *wireHeartbeats) round(ctx context.Context, beats []wireBeat) []wireBeatResult {
	out := make([]wireBeatResult, 0, len(beats))
	if err := w.learnLeaders(ctx, beats); err != nil {
		for _, b := range beats {
			out = append(out, wireBeatResult{beat: b, err: err})
		}
		return out
	}
	byLeader := map[string][]wireBeat{}
	for _, b := range beats {
		addr, ok := w.leaders[b.p.id]
		if !ok {
			out = append(out, wireBeatResult{beat: b, err: fmt.Errorf("no leader known for partition %d of %s", b.p.id, w.topic)})
			continue
		}
		byLeader[addr] = append(byLeader[addr], b)
	}
	for addr, group := range byLeader {
		out = append(out, w.produceAt(ctx, addr, group)...)
	}
	return out
}

// learnLeaders looks up the leaders of the partitions of beats unless every one is known.
func (w *wireHeartbeats) learnLeaders(ctx context.Context, beats []wireBeat) error {
	known := true
	for _, b := range beats {
		if _, ok := w.leaders[b.p.id]; !ok {
			known = false
		}
	}
	if known {
		return nil
	}
	var c *wireConn
	var err error
	// Any broker answers Metadata: one already connected, else a bootstrap server.
	w.mu.Lock()
	for _, open := range w.conns {
		c = open
		break
	}
	w.mu.Unlock()
	if c == nil {
		first := rand.IntN(len(w.servers))
		for i := range w.servers {
			if c, err = w.conn(ctx, w.servers[(first+i)%len(w.servers)]); err == nil {
				break
			}
		}
		if c == nil {
			return err
		}
	}
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = &w.topic
	req.Topics = []kmsg.MetadataRequestTopic{t}
	// A leader topic that is gone is New's to create, with its own settings, not the broker's.
	req.AllowAutoTopicCreation = false
	resp, err := c.request(ctx, req, 12)
	if err != nil {
		w.drop(c)
		return err
	}
	r := resp.(*kmsg.MetadataResponse)
	brokers := map[int32]string{}
	for _, b := range r.Brokers {
		brokers[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	clear(w.leaders)
	for _, t := range r.Topics {
		if t.Topic == nil || *t.Topic != w.topic {
			continue
		}
		if t.ErrorCode != 0 {
			return kafkaCode(t.ErrorCode, nil)
		}
		for _, p := range t.Partitions {
			if addr, ok := brokers[p.Leader]; ok && p.ErrorCode == 0 {
				w.leaders[p.Partition] = addr
			}
		}
	}
	return nil
}

// produceAt writes beats, whose partitions addr leads, in one ProduceRequest.
func (w *wireHeartbeats) produceAt(ctx context.Context, addr string, beats []wireBeat) []wireBeatResult {
	out := make([]wireBeatResult, 0, len(beats))
	failAll := func(err error) []wireBeatResult {
		for _, b := range beats {
			delete(w.leaders, b.p.id)
			out = append(out, wireBeatResult{beat: b, err: err})
		}
		return out
	}
	c, err := w.conn(ctx, addr)
	if err != nil {
		return failAll(err)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = int32(w.limit.Milliseconds())
	topic := kmsg.NewProduceRequestTopic()
	topic.Topic = w.topic
	now := time.Now().UnixMilli()
	// A round that gathered two heartbeats of one partition writes them in one batch, in order:
	// a request names each partition once.
	byPart := map[int32][]wireBeat{}
	var order []int32
	for _, b := range beats {
		if _, ok := byPart[b.p.id]; !ok {
			order = append(order, b.p.id)
		}
		byPart[b.p.id] = append(byPart[b.p.id], b)
	}
	for _, id := range order {
		values := make([][]byte, 0, len(byPart[id]))
		for _, b := range byPart[id] {
			values = append(values, b.value)
		}
		p := kmsg.NewProduceRequestTopicPartition()
		p.Partition = id
		p.Records = recordBatch(byPart[id][0].key, values, now)
		topic.Partitions = append(topic.Partitions, p)
	}
	req.Topics = []kmsg.ProduceRequestTopic{topic}
	// Version 13 names topics by id only; record batches need version 3.
	if v, ok := c.version(req, 12); !ok || v < 3 {
		return failAll(fmt.Errorf("broker %s does not take record batches", addr))
	}
	resp, err := c.request(ctx, req, 12)
	if err != nil {
		w.drop(c)
		return failAll(err)
	}
	answered := map[int32]kmsg.ProduceResponseTopicPartition{}
	for _, t := range resp.(*kmsg.ProduceResponse).Topics {
		if t.Topic == w.topic {
			for _, p := range t.Partitions {
				answered[p.Partition] = p
			}
		}
	}
	for _, id := range order {
		p, ok := answered[id]
		for i, b := range byPart[id] {
			switch {
			case !ok:
				out = append(out, wireBeatResult{beat: b, err: fmt.Errorf("broker %s did not answer for partition %d", addr, id)})
			case p.ErrorCode != 0:
				// A leader that moved, a partition not there yet: the next round looks them up again.
				delete(w.leaders, id)
				out = append(out, wireBeatResult{beat: b, err: kafkaCode(p.ErrorCode, p.ErrorMessage)})
			default:
				out = append(out, wireBeatResult{beat: b, offset: p.BaseOffset + int64(i)})
			}
		}
	}
	return out
}

// conn returns the open connection to addr, or opens one.
func (w *wireHeartbeats) conn(ctx context.Context, addr string) (*wireConn, error) {
	w.mu.Lock()
	c, ok := w.conns[addr]
	closed := w.closed
	w.mu.Unlock()
	if ok {
		return c, nil
	}
	if closed {
		return nil, errors.New("closed")
	}
	c, err := w.dialer.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		c.close()
		return nil, errors.New("closed")
	}
	w.conns[addr] = c
	return c, nil
}

// drop closes a connection that failed, so that the next round opens another.
func (w *wireHeartbeats) drop(c *wireConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns[c.addr] == c {
		delete(w.conns, c.addr)
	}
	c.close()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordBatch encodes values, with key, as one record batch (magic 2, uncompressed, no producer
// id), as a ProduceRequest carries it.
func recordBatch(key []byte, values [][]byte, timestampMs int64) []byte {
	var records []byte
	for i, v := range values {
		rec := kmsg.Record{Key: key, Value: v, OffsetDelta: int32(i)}
		// A record starts with its length as a varint; encoded with length 0, that is one byte.
		body := rec.AppendTo(nil)[1:]
		records = binary.AppendVarint(records, int64(len(body)))
		records = append(records, body...)
	}
	b := kmsg.RecordBatch{
		Length:               int32(recordBatchOverhead + len(records)),
		PartitionLeaderEpoch: -1,
		Magic:                2,
		LastOffsetDelta:      int32(len(values) - 1),
		FirstTimestamp:       timestampMs,
		MaxTimestamp:         timestampMs,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(values)),
		Records:              records,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[batchCRCAt:], crc32.Checksum(out[batchCRCAt+4:], castagnoli))
	return out
}

const (
	// recordBatchOverhead is the length of a batch's fields after its Length field and before its
	// records; batchCRCAt is where its CRC lies, which covers everything after it.
	recordBatchOverhead = 49
	batchCRCAt          = 17
)
