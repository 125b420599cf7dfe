package sidechan

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record is one record to append to a partition.
type Record struct {
	Partition  int32
	Key, Value []byte
}

// Produced is what became of a Record: its offset, or why it was not written.
type Produced struct {
	Offset int64
	Err    error
}

// topicLeaders is where a topic's partitions are led, as last learned.
type topicLeaders struct {
	brokers map[int32]int32 // partition to the node that leads it
}

// Produce writes records, each partition's in one record batch, in one ProduceRequest per broker
// that leads any of them, to all those brokers at once: a broker slow to acknowledge (acks=all
// waits for its in-sync replicas) holds back only its own partitions. The results are in the
// order of records.
func (c *Client) Produce(ctx context.Context, topic string, records []Record) []Produced {
	out := make([]Produced, len(records))
	failAll := func(idx []int, err error) {
		for _, i := range idx {
			out[i].Err = err
		}
	}
	all := make([]int, len(records))
	for i := range all {
		all[i] = i
	}
	if err := c.Fallback(); err != nil {
		failAll(all, err)
		return out
	}
	leaders, err := c.leadersOf(ctx, topic, records)
	if err != nil {
		failAll(all, err)
		return out
	}
	byBroker := map[int32][]int{}
	for i, r := range records {
		node, ok := leaders.brokers[r.Partition]
		if !ok {
			out[i].Err = fmt.Errorf("no leader known for partition %d of %s", r.Partition, topic)
			continue
		}
		byBroker[node] = append(byBroker[node], i)
	}
	var wg sync.WaitGroup
	for node, idx := range byBroker {
		wg.Go(func() { c.produceAt(ctx, node, topic, records, idx, out) })
	}
	wg.Wait()
	return out
}

// leadersOf returns where topic's partitions are led, asking the cluster unless every partition of
// records is known.
func (c *Client) leadersOf(ctx context.Context, topic string, records []Record) (topicLeaders, error) {
	c.mu.Lock()
	known, ok := c.leaders[topic]
	c.mu.Unlock()
	if ok {
		all := true
		for _, r := range records {
			if _, ok := known.brokers[r.Partition]; !ok {
				all = false
				break
			}
		}
		if all {
			return known, nil
		}
	}
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = &topic
	req.Topics = []kmsg.MetadataRequestTopic{t}
	// A leader topic that is gone is New's to create, with its own settings, not the broker's.
	req.AllowAutoTopicCreation = false
	resp, err := c.Request(ctx, req)
	if err != nil {
		return topicLeaders{}, err
	}
	l := topicLeaders{brokers: map[int32]int32{}}
	for _, mt := range resp.(*kmsg.MetadataResponse).Topics {
		if mt.Topic == nil || *mt.Topic != topic {
			continue
		}
		if mt.ErrorCode != 0 {
			return topicLeaders{}, KafkaError(mt.ErrorCode, nil)
		}
		for _, p := range mt.Partitions {
			if p.ErrorCode == 0 && p.Leader >= 0 {
				l.brokers[p.Partition] = p.Leader
			}
		}
	}
	c.mu.Lock()
	c.leaders[topic] = l
	c.mu.Unlock()
	return l, nil
}

// forget drops what is known of a partition's leader, so that the next Produce asks again.
func (c *Client) forget(topic string, partition int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaders[topic]; ok {
		delete(l.brokers, partition)
	}
}

// produceAt writes the records at idx, whose partitions node leads, in one ProduceRequest.
func (c *Client) produceAt(ctx context.Context, node int32, topic string, records []Record, idx []int, out []Produced) {
	byPart := map[int32][]int{}
	var order []int32
	for _, i := range idx {
		p := records[i].Partition
		if _, ok := byPart[p]; !ok {
			order = append(order, p)
		}
		byPart[p] = append(byPart[p], i)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	if deadline, ok := ctx.Deadline(); ok {
		req.TimeoutMillis = int32(max(time.Until(deadline), time.Millisecond).Milliseconds())
	}
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	now := time.Now().UnixMilli()
	for _, p := range order {
		values := make([][]byte, 0, len(byPart[p]))
		for _, i := range byPart[p] {
			values = append(values, records[i].Value)
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = recordBatch(records[byPart[p][0]].Key, values, now)
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	// Bounded by ctx even while the answer is awaited (bounded): a round is the caller's to bound.
	resp, err := c.bounded(ctx, func() (kmsg.Response, error) { return c.cl.Broker(int(node)).Request(ctx, req) })
	if err != nil {
		if fe := c.Fallback(); fe != nil {
			err = fe
		}
		for _, p := range order {
			c.forget(topic, p)
			for _, i := range byPart[p] {
				out[i].Err = err
			}
		}
		return
	}
	answered := map[int32]kmsg.ProduceResponseTopicPartition{}
	for _, t := range resp.(*kmsg.ProduceResponse).Topics {
		if t.Topic == topic {
			for _, p := range t.Partitions {
				answered[p.Partition] = p
			}
		}
	}
	for _, p := range order {
		a, ok := answered[p]
		for n, i := range byPart[p] {
			switch {
			case !ok:
				out[i].Err = fmt.Errorf("broker %d did not answer for partition %d", node, p)
			case a.ErrorCode != 0:
				// A leader that moved, a partition not there yet: the next Produce looks it up.
				c.forget(topic, p)
				out[i].Err = KafkaError(a.ErrorCode, a.ErrorMessage)
			default:
				out[i].Offset = a.BaseOffset + int64(n)
			}
		}
	}
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
