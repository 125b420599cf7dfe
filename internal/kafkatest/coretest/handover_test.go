package coretest

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A leader whose heartbeats reach the broker 600 ms late keeps its group session (its consumer's
// requests go through) and cannot renew its lease: the path to the broker that leads the leader
// topic's partition is slow, and the coordinator is fine. (At 400 ms, as before one round of
// heartbeats was kept in flight, the heartbeats no longer queue behind one another: they come back
// within half a lease, the leader renews through most of it, and it does not hand over.) The group
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
	// A join can cost the leader a renewal (see the package doc, Liveness); the fault is to find
	// it leading.
	r.await(t, "a to lead once the group is stable", func(events []stamped) bool {
		for i := len(events) - 1; i >= 0; i-- {
			if events[i].who == "a" {
				_, ok := events[i].what.(LeaderAcquired)
				return ok
			}
		}
		return false
	})

	from := len(r.snapshot())
	faulted := time.Now()
	var slow atomic.Bool
	slow.Store(true)
	t.Cleanup(func() { slow.Store(false) })
	b.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		if slow.Load() && producedBy(req.(*kmsg.ProduceRequest), "a") {
			b.SleepControl(func() { time.Sleep(600 * time.Millisecond) })
		}
		return nil, nil, false
	})
	events := r.await(t, "another member to lead", func(events []stamped) bool {
		_, e := acquiredByOther(events, "a", from)
		return e != nil
	})
	_, e := acquiredByOther(events, "a", from)
	iRevoked, revoked := first[LeaderRevoked](events, "a", from)
	var fenced *stamped
	for i := from; i < iRevoked; i++ {
		if _, ok := events[i].what.(LeaderFenced); ok && events[i].who == "a" {
			fenced = &events[i] // the last fence before the hand-over
		}
	}
	s := a.Stats()
	slow.Store(false)
	if fenced == nil || revoked == nil || s.HandOvers != 1 {
		t.Fatalf("a must be fenced and hand over once before %s leads; %d hand-overs, events: %s", e.who, s.HandOvers, describe(events))
	}
	t.Logf("a last fenced %v after the fault, revoked (handed over) %v after, %s leads %v after; a stays out for %v",
		fenced.at.Sub(faulted).Round(time.Millisecond), revoked.at.Sub(faulted).Round(time.Millisecond), e.who,
		e.at.Sub(faulted).Round(time.Millisecond), s.YieldRemaining.Round(time.Millisecond))
	checkExclusive(t, events)
	checkGrammar(t, events)
}

// When every member's heartbeats are as slow, handing over helps nobody, and the back-off keeps the
// partition from circling the group: the k-th hand-over of a member comes at least the bound
// (a lease) after it was assigned, and it stays out for two leases, then four, so in eight
// seconds at a 1 s lease no member hands over more than twice (1 s, then 1+2+1 s; a third would
// take 4+4+1 s).
func TestEverySlowMemberHandsOverRarely(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	members := map[string]Curator{"a": contender(t, testConfig(b, group, "a", log), r).(Curator)}
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	for _, name := range []string{"c", "d"} {
		members[name] = contender(t, testConfig(b, group, name, log), r).(Curator)
	}
	awaitStable(t, b, group, 3)

	var slow atomic.Bool
	slow.Store(true)
	t.Cleanup(func() { slow.Store(false) })
	b.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		if slow.Load() {
			b.SleepControl(func() { time.Sleep(600 * time.Millisecond) })
		}
		return nil, nil, false
	})
	from := len(r.snapshot())
	time.Sleep(8 * time.Second)
	slow.Store(false)
	events := r.snapshot()
	acquired := map[string]int{}
	for _, e := range events[from:] {
		if _, ok := e.what.(LeaderAcquired); ok {
			acquired[e.who]++
		}
	}
	handOvers := map[string]uint64{}
	for who, m := range members {
		if handOvers[who] = m.Stats().HandOvers; handOvers[who] > 2 {
			t.Errorf("%s handed over %d times in 8 s; the back-off allows 2", who, handOvers[who])
		}
	}
	t.Logf("in 8 s with every member slow: hand-overs %v, acquisitions %v", handOvers, acquired)
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
