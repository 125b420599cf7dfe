package driver

import (
	"context"
	"time"
)

// tailsWait is the longest the rebalance callback waits for the ends of the partitions it takes:
// half a lease, 2.5 s by default, which covers a broker that answers a second late and the
// metadata request that may precede the ListOffsets on goneli's connection (a quarter of the lease
// did not, in the load benchmark). The poll loop does nothing else meanwhile, and the watchdog,
// which needs the loop's lock to deliver LeaderFenced, would wait with it: so the ends are read
// only while no role of this instance leads (endsOf), as after a rejoin, when every tenure ended
// with the previous membership. The alternative it spares is librdkafka's thousand requests for a
// thousand roles, which such a broker, serving a connection one request at a time, takes minutes
// to answer.
func (d *Driver) tailsWait() time.Duration {
	return *d.config.HeartbeatTimeout / 2
}

// endsOf reads the ends of partitions over goneli's own connection (the machine asks for them only
// where there is one: machine.assign), or returns nil. Called in the rebalance callback, without mm:
// the alarm goes on meanwhile.
func (d *Driver) endsOf(partitions []int32) map[int32]int64 {
	if len(partitions) == 0 || d.check.wire == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.tailsWait())
	defer cancel()
	// Close waits for the loop: it need not wait for this too.
	go func() {
		select {
		case <-d.life.Closing():
			cancel()
		case <-ctx.Done():
		}
	}()
	ends, err := d.check.wire.EndOffsets(ctx, d.topic, partitions)
	if err != nil {
		d.throttle.Log(d.log.I(), "tails", "goneli %s: cannot read where %d partitions end (%v); librdkafka resolves them one by one",
			d.config.Name, len(partitions), err)
		return nil
	}
	return ends
}
