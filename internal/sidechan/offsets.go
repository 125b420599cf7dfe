package sidechan

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EndOffsets returns the last stable offset of each of topic's partitions that its leader
// reported, in one ListOffsets request per leader broker (kgo splits the request by leader and
// retries a moved leader's partitions). A partition missing from the result had an error, which
// err names if no partition was answered.
//
// The offsets are read as a read_committed consumer sees them (isolation level 1): Apache Kafka
// answers a request for the latest offset (timestamp -1) with the last stable offset then, and with
// the high watermark for read_uncommitted (ListOffsetsRequest.json; Partition.fetchOffsetForTimestamp).
// The last stable offset lies at or before the high watermark, so a reader that starts a number of
// records before it starts at or before where it would from the high watermark.
func (c *Client) EndOffsets(ctx context.Context, topic string, partitions []int32) (map[int32]int64, error) {
	if len(partitions) == 0 {
		return map[int32]int64{}, nil
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 1
	t := kmsg.NewListOffsetsRequestTopic()
	t.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.CurrentLeaderEpoch = -1
		rp.Timestamp = -1 // the end of the log
		rp.MaxNumOffsets = 1
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	if err := c.Fallback(); err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(partitions))
	var first error
	// Bounded by ctx even while the answers are awaited (bounded): the caller waits for them in
	// the rebalance callback.
	var shards []kgo.ResponseShard
	if _, err := c.bounded(ctx, func() (kmsg.Response, error) {
		shards = c.cl.RequestSharded(ctx, req)
		return nil, nil
	}); err != nil {
		return nil, err
	}
	// Shard by shard, so that a broker that cannot be reached costs only its own partitions.
	for _, shard := range shards {
		if shard.Err != nil {
			if first == nil {
				first = shard.Err
			}
			continue
		}
		first = c.endsOf(shard.Resp.(*kmsg.ListOffsetsResponse), topic, out, first)
	}
	if len(out) == 0 {
		if fe := c.Fallback(); fe != nil {
			return nil, fe
		}
		if first == nil {
			first = fmt.Errorf("no offsets of %s in the answer", topic)
		}
		return nil, first
	}
	return out, nil
}

// endsOf adds the offsets of topic that resp carries to out, and returns the first error it saw
// (first, if that was set already).
func (c *Client) endsOf(resp *kmsg.ListOffsetsResponse, topic string, out map[int32]int64, first error) error {
	for _, rt := range resp.Topics {
		if rt.Topic != topic {
			continue
		}
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				if first == nil {
					first = fmt.Errorf("partition %d: %w", rp.Partition, err)
				}
				continue
			}
			offset := rp.Offset
			if len(rp.OldStyleOffsets) > 0 {
				// Version 0 answers with a list of offsets instead.
				offset = rp.OldStyleOffsets[0]
			}
			if offset >= 0 {
				out[rp.Partition] = offset
			}
		}
	}
	return first
}
