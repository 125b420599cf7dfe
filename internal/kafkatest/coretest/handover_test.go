package coretest

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A leader whose heartbeats reach the broker 400 ms late, each after the one before it, keeps its
// group session (its consumer's requests go through) and cannot renew its lease: the path to the
// broker that leads the leader topic's partition is slow, and the coordinator is fine. The group
// would leave it the partition for as long as that lasts; instead it hands over, and a healthy
// member leads (issue 29). Netem's Slow delays every connection of the client, which costs the
// leader its session under librdkafka's own session timer before any hand-over: it is the produce
// path alone that is delayed here.
func TestSlowLeaderHandsOver(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	a := leaderAndFollower(t, b, group, log, r)
	contender(t, testConfig(b, group, "d", log), r)
	awaitStable(t, b, group, 3)

	from := len(r.snapshot())
	faulted := time.Now()
	var slow atomic.Bool
	slow.Store(true)
	t.Cleanup(func() { slow.Store(false) })
	b.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		if slow.Load() && producedBy(req.(*kmsg.ProduceRequest), "a") {
			b.SleepControl(func() { time.Sleep(400 * time.Millisecond) })
		}
		return nil, nil, false
	})
	events := r.await(t, "another member to lead", func(events []stamped) bool {
		_, e := acquiredByOther(events, "a", from)
		return e != nil
	})
	_, e := acquiredByOther(events, "a", from)
	_, fenced := first[LeaderFenced](events, "a", from)
	_, revoked := first[LeaderRevoked](events, "a", from)
	s := a.Stats()
	slow.Store(false)
	if fenced == nil || revoked == nil || s.HandOvers != 1 {
		t.Fatalf("a must be fenced and hand over once before %s leads; %d hand-overs, events: %s", e.who, s.HandOvers, describe(events))
	}
	t.Logf("a fenced %v after the fault, revoked (handed over) %v after, %s leads %v after; a stays out for %v",
		fenced.at.Sub(faulted).Round(time.Millisecond), revoked.at.Sub(faulted).Round(time.Millisecond), e.who,
		e.at.Sub(faulted).Round(time.Millisecond), s.YieldRemaining.Round(time.Millisecond))
	checkExclusive(t, events)
	checkGrammar(t, events)
}

// acquiredByOther returns the first LeaderAcquired after index from of an instance other than who.
func acquiredByOther(events []stamped, who string, from int) (int, *stamped) {
	for i := max(from, 0); i < len(events); i++ {
		if _, ok := events[i].what.(LeaderAcquired); ok && events[i].who != who {
			return i, &events[i]
		}
	}
	return -1, nil
}

// producedBy reports whether a record of req has the key name, as goneli's heartbeats do with their
// instance's. goneli's producers do not compress, so compressed batches are skipped.
func producedBy(req *kmsg.ProduceRequest, name string) bool {
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			for raw := p.Records; len(raw) > 0; {
				var batch kmsg.RecordBatch
				if batch.ReadFrom(raw) != nil {
					break
				}
				// Length counts the bytes after the offset and length fields.
				size := int(batch.Length) + 12
				if size <= 12 || size > len(raw) {
					break
				}
				raw = raw[size:]
				if batch.Attributes&0x07 != 0 {
					continue
				}
				recs := batch.Records
				for range batch.NumRecords {
					length, n := binary.Varint(recs)
					end := int(length) + n
					if n <= 0 || end > len(recs) {
						break
					}
					var r kmsg.Record
					if r.ReadFrom(recs[:end]) == nil && string(r.Key) == name {
						return true
					}
					recs = recs[end:]
				}
			}
		}
	}
	return false
}
