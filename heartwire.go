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
// send time it was made with, and librdkafka carries every cycle's heartbeats while a round is
// under way or for a lease after one failed, so that a broker this path cannot reach costs no more
// than a late renewal.

// wireHeartbeats writes heartbeats over connections of its own, one round at a time, from a
// goroutine of its own: the poll loop must not wait for a broker with the driver's lock held, so
// a round's results come back through collect, on a later cycle.
type wireHeartbeats struct {
	servers []string
	dialer  wireDialer
	topic   string
	// limit bounds a round: looking up the partitions' leaders, connecting, producing.
	limit time.Duration
	// running counts the goroutine of a round under way (driver.closers).
	running *sync.WaitGroup

	// busy, done and failedAt are guarded by the driver's lock. done is closed when the round
	// under way has put its results on answer.
	busy     bool
	done     chan struct{}
	failedAt time.Duration
	failed   bool
	answer   chan []wireBeatResult

	// mu guards conns and closed: a round opens connections, close closes them, and a round that
	// finds the heartbeats closed opens none.
	mu     sync.Mutex
	closed bool
	conns  map[string]*wireConn // by broker address
	// leaders is where each partition's leader listens, as last learned; the round's goroutine
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

func newWireHeartbeats(w *wireDescriber, topic string, limit time.Duration, running *sync.WaitGroup) *wireHeartbeats {
	return &wireHeartbeats{servers: w.servers, dialer: w.dialer, topic: topic, limit: limit, running: running,
		answer: make(chan []wireBeatResult, 1), conns: map[string]*wireConn{}, leaders: map[int32]string{}}
}

// usable reports whether a cycle's heartbeats may go this way at now: no round is under way, and
// none failed within the last lease, during which librdkafka renews every role as it would without
// this path. Called with the driver's lock held.
func (w *wireHeartbeats) usable(now, lease time.Duration) bool {
	return !w.busy && !(w.failed && now-w.failedAt < lease)
}

// start begins a round that writes beats, unless one is under way or the heartbeats are closed,
// and reports whether it began one. Called with the driver's lock held.
func (w *wireHeartbeats) start(beats []wireBeat) bool {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if w.busy || closed || len(beats) == 0 {
		return false
	}
	w.busy = true
	done := make(chan struct{})
	w.done = done
	w.running.Add(1)
	go func() {
		defer w.running.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), w.limit)
		defer cancel()
		// The channel holds one answer and only one round is ever under way, so this never waits.
		w.answer <- w.round(ctx, beats)
	}()
	return true
}

// collect returns the results of the round under way once they have come. Called with the
// driver's lock held.
func (w *wireHeartbeats) collect() ([]wireBeatResult, bool) {
	select {
	case res := <-w.answer:
		w.busy = false
		return res, true
	default:
		return nil, false
	}
}

// await waits up to limit for the round under way, if any, to finish, leaving its results for
// collect. Called with the driver's lock held.
func (w *wireHeartbeats) await(limit time.Duration) {
	if !w.busy {
		return
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-w.done:
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
	for _, b := range beats {
		p := kmsg.NewProduceRequestTopicPartition()
		p.Partition = b.p.id
		p.Records = recordBatch(b.key, b.value, now)
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
	for _, b := range beats {
		p, ok := answered[b.p.id]
		switch {
		case !ok:
			out = append(out, wireBeatResult{beat: b, err: fmt.Errorf("broker %s did not answer for partition %d", addr, b.p.id)})
		case p.ErrorCode != 0:
			// A leader that moved, a partition not there yet: the next round looks them up again.
			delete(w.leaders, b.p.id)
			out = append(out, wireBeatResult{beat: b, err: kafkaCode(p.ErrorCode, p.ErrorMessage)})
		default:
			out = append(out, wireBeatResult{beat: b, offset: p.BaseOffset})
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

// recordBatch encodes one record as a record batch (magic 2, uncompressed, no producer id), as
// a ProduceRequest carries it.
func recordBatch(key, value []byte, timestampMs int64) []byte {
	rec := kmsg.Record{Key: key, Value: value}
	// A record starts with its length as a varint; encoded with length 0, that is one byte.
	body := rec.AppendTo(nil)[1:]
	records := binary.AppendVarint(make([]byte, 0, len(body)+binary.MaxVarintLen32), int64(len(body)))
	records = append(records, body...)
	b := kmsg.RecordBatch{
		Length:               int32(recordBatchOverhead + len(records)),
		PartitionLeaderEpoch: -1,
		Magic:                2,
		FirstTimestamp:       timestampMs,
		MaxTimestamp:         timestampMs,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           1,
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
