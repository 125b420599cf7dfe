package core

import "time"

// simTopic is the leader topic: a log per partition, one partition per role, to which the
// heartbeats and release markers are appended, and the fetchers that read them. A fetcher gets
// each record over its member's fetch link, in order, after the record was appended: librdkafka's
// fetch waits at the broker until data arrives (fetch.min.bytes 1), so a record reaches a fetcher
// about one link latency after its append; the round trip of the next fetch request is folded into
// the link's latency and jitter. One broker leads every partition: a member's fetchers share its
// one fetch connection, so records of different partitions reach it in the order they were
// appended.
type simTopic struct {
	w     *simWorld
	parts []*simPartition
	// appendDelay is the broker's time to append a record, which the adversary may raise.
	appendDelay func() time.Duration
}

// simPartition is one partition's log and its fetchers.
type simPartition struct {
	recs     []simRecord
	fetchers []*simFetch
}

func newSimTopic(w *simWorld, partitions int, appendDelay func() time.Duration) *simTopic {
	t := &simTopic{w: w, appendDelay: appendDelay}
	for range partitions {
		t.parts = append(t.parts, &simPartition{})
	}
	return t
}

// simRecord is one record of a partition: a heartbeat or marker and the instance that wrote it
// (the record's key, Config.Name).
type simRecord struct {
	writer    *simMember
	hb        Heartbeat
	partition int32
	offset    int64
	at        time.Duration
}

// simFetch is a consumer's fetch position on a partition while it is assigned; stopped once the
// partition is unassigned.
type simFetch struct {
	m         *simMember
	link      *simLink
	partition int32
	next      int64 // the next offset to deliver
	stopped   bool
}

// append writes r to its partition's log and sends it to every fetcher of the partition.
func (t *simTopic) append(r simRecord) int64 {
	p := t.parts[r.partition]
	r.offset = int64(len(p.recs))
	r.at = t.w.now
	p.recs = append(p.recs, r)
	for _, f := range p.fetchers {
		t.push(f)
	}
	return r.offset
}

// end is a partition's end offset, as ListOffsets answers it (the high watermark: every append is
// acknowledged once written, acks=all on one replica).
func (t *simTopic) end(partition int32) int64 {
	return int64(len(t.parts[partition].recs))
}

// fetch starts a fetcher of partition at offset from, as the assignment's offset says (takeAt): an
// absolute offset, or OffsetTail(n), which librdkafka resolves to n records before the end. A
// position past the end of the log (a log that restarted since the end was read) is out of range
// and reset to the beginning (auto.offset.reset=earliest, clientConfigs).
func (t *simTopic) fetch(m *simMember, link *simLink, partition int32, from int64) *simFetch {
	p := t.parts[partition]
	kept := p.fetchers[:0]
	for _, f := range p.fetchers {
		if !f.stopped {
			kept = append(kept, f)
		}
	}
	clear(p.fetchers[len(kept):])
	p.fetchers = kept
	end := int64(len(p.recs))
	switch {
	case from <= offsetTail(0):
		from = max(0, end-(offsetTail(0)-from))
	case from > end:
		from = 0
	}
	f := &simFetch{m: m, link: link, partition: partition, next: from}
	p.fetchers = append(p.fetchers, f)
	t.push(f)
	return f
}

// push sends f what it has not been sent yet.
func (t *simTopic) push(f *simFetch) {
	p := t.parts[f.partition]
	for !f.stopped && f.next < int64(len(p.recs)) {
		r := p.recs[f.next]
		f.next++
		t.w.at(f.link.arrival(), func() {
			if !f.stopped {
				f.m.fetched(f, r)
			}
		})
	}
}

// restart loses a partition's log (a broker that lost its data, an unclean leader election):
// offsets start over from 0, and every fetcher, whose position is now out of range, starts again
// from the beginning (auto.offset.reset=earliest, clientConfigs). Records already on their way to a
// fetcher still arrive.
func (t *simTopic) restart(partition int32) {
	p := t.parts[partition]
	p.recs = p.recs[:0]
	for _, f := range p.fetchers {
		f.next = 0
	}
}
