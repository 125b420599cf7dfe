package core

import "time"

// simConsumer is what librdkafka's consumer does the same under both group protocols: the
// assignment the application has taken (and a fetcher for each partition of it, from the offset
// the assign call names: driver.rebalanced's takeAt), the offsets stored, the auto-commit timer
// (rd_kafka_cgrp_offset_commit_tmr_cb: in the steady join state only, one OffsetCommit carrying
// every assigned partition whose stored offset is above its committed one, so again at every
// tick until a commit of it is answered; none for an assignment that was lost), the commit that an
// orderly unassign makes of the stored offsets of the partitions it removes
// (rd_kafka_assignment_serve_removals), and the count of commits under way that an unassign waits
// for. The protocol's client (simRdk, simRdk848) embeds it and decides the join state.
type simConsumer struct {
	m    *simMember
	w    *simWorld
	conn *simConn

	state rdkState
	taken simParts // the consumer's assignment, after the application's assign
	lost  bool     // rd_kafka_cgrp_assignment_is_lost
	fetch []*simFetch

	// stored and committed are each partition's stored and committed offsets, -1 for none;
	// storedTag is a stored offset's metadata.
	stored, committed []int64
	storedTag         []string
	tickArmed         bool
	waitCommits       int
	// afterUnassign is what follows once the application has served a revocation and the commits
	// it started are answered: a rejoin, the assignment that follows a cooperative revocation, or
	// the LeaveGroup of an unsubscribe.
	afterUnassign func()
	wake          time.Duration // the true time of the next scheduled serve, 0 for none
	// ids are the member id and the generation (classic) or member epoch (KIP-848) that a commit
	// carries.
	ids func() (member, gen int)
	// hbSent and hbAnswered are, on the member's clock, when the newest group heartbeat that the
	// coordinator answered was sent and when its answer came (0 before one): what a driver that
	// watches the group heartbeats would know (simLease.heartbeat).
	hbSent, hbAnswered time.Duration
}

// simOffset is one partition's offset in an OffsetCommit and its answer.
type simOffset struct {
	partition int32
	offset    int64
	tag       string
}

// heartbeatAnswered records the answer of the group heartbeat sent at sent.
func (c *simConsumer) heartbeatAnswered(sent time.Duration) {
	c.hbSent, c.hbAnswered = sent, c.now()
}

func (c *simConsumer) lastHeartbeat() (sent, answered time.Duration) { return c.hbSent, c.hbAnswered }

func newSimConsumer(m *simMember, conn *simConn, ids func() (int, int)) simConsumer {
	n := m.w.roles
	c := simConsumer{m: m, w: m.w, conn: conn, ids: ids, fetch: make([]*simFetch, n), stored: make([]int64, n),
		committed: make([]int64, n), storedTag: make([]string, n)}
	for p := range n {
		c.stored[p], c.committed[p] = -1, -1
	}
	return c
}

func (c *simConsumer) now() time.Duration { return c.m.clock.local(c.w.now) }

func (c *simConsumer) fetching() []*simFetch { return c.fetch }

// serveAt makes serve run when the member's clock reads local, unless it runs sooner anyway.
func (c *simConsumer) serveAt(local time.Duration, serve func()) {
	if local <= c.now() {
		return // serve is running now
	}
	t := c.m.clock.trueAt(local)
	if c.wake != 0 && c.wake <= t && c.wake > c.w.now {
		return
	}
	c.wake = t
	c.m.at(t, func() {
		if c.wake == t {
			c.wake = 0
		}
		serve()
	})
}

// take is the application's incremental assign: each partition is fetched from its offset.
func (c *simConsumer) take(offsets []OffsetRef) {
	c.lost = false
	for _, o := range offsets {
		p := o.Partition
		if c.taken.has(p) {
			continue // librdkafka refuses a partition assigned already
		}
		c.taken = c.taken.add(p)
		c.stored[p] = -1
		c.fetch[p] = c.w.topic.fetch(c.m, c.m.fetchLink, p, o.Offset)
	}
}

// giveBack is the application's incremental unassign of parts: their fetchers stop, and their
// stored offsets are committed once more, in one request, unless the assignment was lost.
func (c *simConsumer) giveBack(parts simParts) {
	var offs []simOffset
	for _, p := range (parts & c.taken).list() {
		c.taken = c.taken.del(p)
		if f := c.fetch[p]; f != nil {
			f.stopped = true
			c.fetch[p] = nil
		}
		if !c.lost && c.stored[p] > c.committed[p] {
			offs = append(offs, simOffset{p, c.stored[p], c.storedTag[p]})
		}
		if rs := &c.m.rs[p]; !c.lost && rs.handing != nil && !rs.released {
			rs.released, rs.releasedAt = true, c.w.now
		}
		c.stored[p] = -1
	}
	if len(offs) > 0 {
		c.sendCommit(offs, true)
	}
}

// store is StoreOffsets for one partition: it reports whether the offset was stored (the
// partition is assigned).
func (c *simConsumer) store(p int32, off int64, tag string) bool {
	if !c.taken.has(p) {
		return false
	}
	c.stored[p], c.storedTag[p] = off, tag
	c.armTick()
	return true
}

// withdraw stores the logical offset, which commits nothing (driver.withdraw).
func (c *simConsumer) withdraw(p int32) { c.stored[p] = -1 }

// due returns the offsets an auto-commit would send now.
func (c *simConsumer) due() []simOffset {
	var offs []simOffset
	for _, p := range c.taken.list() {
		if c.stored[p] > c.committed[p] {
			offs = append(offs, simOffset{p, c.stored[p], c.storedTag[p]})
		}
	}
	return offs
}

// armTick makes sure the next auto-commit tick runs while there is something to commit. The timer
// runs every auto.commit.interval.ms from the client's creation; ticks with nothing to do are
// skipped here, which changes nothing.
func (c *simConsumer) armTick() {
	if c.tickArmed {
		return
	}
	pending := false
	for p := range c.stored {
		if c.taken.has(int32(p)) && c.stored[p] > c.committed[p] {
			pending = true
			break
		}
	}
	if !pending {
		return
	}
	c.tickArmed = true
	iv := c.m.prof.commitInterval
	c.m.atLocal((c.now()/iv+1)*iv, c.tick)
}

func (c *simConsumer) tick() {
	c.tickArmed = false
	if c.state == rdkSteady && !c.lost {
		if offs := c.due(); len(offs) > 0 {
			c.sendCommit(offs, true)
		}
	}
	c.armTick()
}

// sendCommit sends an OffsetCommit of offs at the client's member id and generation, whatever its
// join state (an explicit commit goes out so too: rd_kafka_cgrp_offsets_commit).
func (c *simConsumer) sendCommit(offs []simOffset, auto bool) {
	c.waitCommits++
	member, gen := c.ids()
	c.conn.send(&simReq{kind: reqCommit, from: c.m, member: member, gen: gen, offsets: offs, auto: auto})
}

// commit is the explicit commit that goneli's committer makes (commit.go).
func (c *simConsumer) commit(offs []simOffset) { c.sendCommit(offs, false) }

// committedAnswer takes a commit's answer: the committed offsets move on, the result goes to the
// application (the OffsetsCommitted event, or the committer's answer), and an unassign waiting for
// the commits under way may go on. report says whether an automatic commit's result is reported
// (one that librdkafka sends again is not).
func (c *simConsumer) committedAnswer(q *simReq, report bool) {
	c.waitCommits--
	if q.err == errNone {
		// rd_kafka_cgrp_update_committed_offsets sets the committed position to what was
		// committed, lower or not: a log that restarted below it is committed from then on.
		for _, o := range q.offsets {
			c.committed[o.partition] = o.offset
		}
	}
	switch {
	case !q.auto:
		c.m.explicitAnswered(q.offsets, q.err)
	case report:
		c.m.push(simAppEvent{kind: appCommitted, offsets: q.offsets, err: q.err, accepted: q.acceptedAt})
	}
	c.armTick()
}
