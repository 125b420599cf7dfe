package core

import "time"

// simTopic is partition 0 of the leader topic: the log the heartbeats and release markers are
// appended to, and the fetchers that read it. A fetcher gets each record over its own link, in
// order, after the record was appended: librdkafka's fetch waits at the broker until data arrives
// (fetch.min.bytes 1), so a record reaches a fetcher about one link latency after its append; the
// round trip of the next fetch request is folded into the link's latency and jitter.
type simTopic struct {
	w        *simWorld
	recs     []simRecord
	fetchers []*simFetch
	// appendDelay is the broker's time to append a record, which the adversary may raise.
	appendDelay func() time.Duration
}

// simRecord is one record of the partition: a heartbeat or marker and the instance that wrote it
// (the record's key, Config.Name).
type simRecord struct {
	writer *simMember
	hb     Heartbeat
	offset int64
	at     time.Duration
}

// simFetch is a consumer's fetch position on the partition while it is assigned; stopped once the
// partition is unassigned.
type simFetch struct {
	m       *simMember
	link    *simLink
	next    int64 // the next offset to deliver
	stopped bool
}

// append writes r to the log and sends it to every fetcher.
func (t *simTopic) append(r simRecord) int64 {
	r.offset = int64(len(t.recs))
	r.at = t.w.now
	t.recs = append(t.recs, r)
	for _, f := range t.fetchers {
		t.push(f)
	}
	return r.offset
}

// fetch starts a fetcher at the partition's end less lookback records (OffsetTail(releaseLookback),
// driver.rebalanced).
func (t *simTopic) fetch(m *simMember, link *simLink, lookback int64) *simFetch {
	kept := t.fetchers[:0]
	for _, f := range t.fetchers {
		if !f.stopped {
			kept = append(kept, f)
		}
	}
	t.fetchers = kept
	f := &simFetch{m: m, link: link, next: max(0, int64(len(t.recs))-lookback)}
	t.fetchers = append(t.fetchers, f)
	t.push(f)
	return f
}

// push sends f what it has not been sent yet.
func (t *simTopic) push(f *simFetch) {
	for !f.stopped && f.next < int64(len(t.recs)) {
		r := t.recs[f.next]
		f.next++
		t.w.at(f.link.arrival(), func() {
			if !f.stopped {
				f.m.fetched(f, r)
			}
		})
	}
}

// restart loses the partition's log (a broker that lost its data, an unclean leader election):
// offsets start over from 0, and every fetcher, whose position is now out of range, starts again
// from the beginning (auto.offset.reset=earliest, clientConfigs). Records already on their way to a
// fetcher still arrive.
func (t *simTopic) restart() {
	t.recs = t.recs[:0]
	for _, f := range t.fetchers {
		f.next = 0
	}
}
