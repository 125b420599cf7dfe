package goneli

import (
	"context"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// batchTailsFrom is the least number of partitions taken at once whose starts goneli reads itself.
// librdkafka resolves a logical offset such as OffsetTail with one ListOffsets request per
// partition, and a broker answers a connection's requests one at a time: an
// instance with a thousand roles that joins again sends a thousand of them, and on a broker that
// answers in a second they take it minutes. One partition costs librdkafka one request as it does
// goneli, and librdkafka's is not waited for in the rebalance callback, so a lone role keeps it.
const batchTailsFrom = 2

// tailsWait is the longest the rebalance callback waits for the ends of the partitions it takes:
// half a lease, 2.5 s by default, which covers a broker that answers a second late and the
// metadata request that may precede the ListOffsets on goneli's connection (a quarter of the lease
// did not, in the load benchmark). The poll loop does nothing else meanwhile, and the watchdog,
// which needs the loop's lock to deliver LeaderFenced, would wait with it: so the ends are read
// only while no role of this instance leads (endsOf), as after a rejoin, when every tenure ended
// with the previous membership. The alternative it spares is librdkafka's thousand requests for a
// thousand roles, which such a broker, serving a connection one request at a time, takes minutes
// to answer.
func (d *driver) tailsWait() time.Duration {
	return *d.config.HeartbeatTimeout / 2
}

// startFrom sets where each tenure of mine starts reading: releaseLookback records before the end
// of its partition, so that it sees a predecessor's release marker (lease.foreign). Several
// partitions are resolved with one request per broker over goneli's own connection and taken at
// absolute offsets; a partition it could not resolve, or any where there is no such connection,
// starts at OffsetTail and librdkafka resolves it.
//
// The end read here comes before the fetch starts, so the start lies at or before the one
// librdkafka would resolve: the tenure reads the same records or a few more, never fewer. A start
// before the log's first offset, or past the end of a log that restarted since, is out of range
// and reset (auto.offset.reset, earliest by default), as OffsetTail's would be.
func (d *driver) startFrom(mine []kafka.TopicPartition) {
	ends := d.endsOf(mine)
	for i := range mine {
		if end, ok := ends[mine[i].Partition]; ok {
			mine[i].Offset = kafka.Offset(max(end-releaseLookback, 0))
		} else {
			mine[i].Offset = kafka.OffsetTail(releaseLookback)
		}
	}
}

// endsOf reads the ends of mine's partitions over goneli's own connection, or returns nil.
func (d *driver) endsOf(mine []kafka.TopicPartition) map[int32]int64 {
	if len(mine) < batchTailsFrom || d.check.wire == nil || d.check.wire.Fallback() != nil {
		return nil
	}
	for _, p := range d.parts {
		if p.lease.load().leading {
			return nil
		}
	}
	ids := make([]int32, len(mine))
	for i, tp := range mine {
		ids[i] = tp.Partition
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.tailsWait())
	defer cancel()
	// Close waits for the loop: it need not wait for this too.
	go func() {
		select {
		case <-d.life.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	ends, err := d.check.wire.EndOffsets(ctx, d.topic, ids)
	if err != nil {
		d.throttle.log(d.log.I(), "tails", "goneli %s: cannot read where %d partitions end (%v); librdkafka resolves them one by one",
			d.config.Name, len(ids), err)
		return nil
	}
	return ends
}
