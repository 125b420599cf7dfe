package core

import "time"

// simConsumer is what librdkafka's consumer does the same under both group protocols: the
// assignment the application has taken (and the fetcher it starts, at OffsetTail(releaseLookback)
// as driver.rebalanced asks), the stored offset, the auto-commit timer
// (rd_kafka_cgrp_offset_commit_tmr_cb: in the steady join state only, the stored offset whenever it
// is above the committed one, so again at every tick until a commit of it is answered; none for an
// assignment that was lost), the commit that an orderly unassign makes of the stored offset
// (rd_kafka_assignment_serve_removals), and the count of commits under way that an unassign waits
// for. The protocol's client (simRdk, simRdk848) embeds it and decides the join state.
type simConsumer struct {
	m    *simMember
	w    *simWorld
	conn *simConn

	state      rdkState
	assignedP0 bool // the consumer's assignment, after the application's assign
	lost       bool // rd_kafka_cgrp_assignment_is_lost
	fetch      *simFetch

	stored, committed int64  // -1 for none
	storedTag         string // the stored offset's metadata
	tickArmed         bool
	waitCommits       int
	// afterUnassign is what follows once the application has served a revocation and the commits
	// it started are answered: a rejoin, or the LeaveGroup of an unsubscribe.
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

// heartbeatAnswered records the answer of the group heartbeat sent at sent.
func (c *simConsumer) heartbeatAnswered(sent time.Duration) {
	c.hbSent, c.hbAnswered = sent, c.now()
}

func (c *simConsumer) lastHeartbeat() (sent, answered time.Duration) { return c.hbSent, c.hbAnswered }

func newSimConsumer(m *simMember, conn *simConn, ids func() (int, int)) simConsumer {
	return simConsumer{m: m, w: m.w, conn: conn, stored: -1, committed: -1, ids: ids}
}

func (c *simConsumer) now() time.Duration { return c.m.clock.local(c.w.now) }

func (c *simConsumer) fetcher() *simFetch { return c.fetch }

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

// take is the application's assign of partition 0.
func (c *simConsumer) take() {
	c.assignedP0, c.lost = true, false
	c.stored = -1
	c.fetch = c.w.topic.fetch(c.m, c.m.fetchLink, ReleaseLookback)
}

// giveBack is the application's unassign of partition 0: the fetcher stops, and the stored offset
// is committed once more unless the assignment was lost.
func (c *simConsumer) giveBack() {
	if !c.assignedP0 {
		return
	}
	c.assignedP0 = false
	if c.fetch != nil {
		c.fetch.stopped = true
		c.fetch = nil
	}
	if !c.lost && c.stored > c.committed {
		c.sendCommit(c.stored, c.storedTag, true)
	}
	c.stored = -1
}

// store is StoreOffsets: it reports whether the offset was stored (the partition is assigned).
func (c *simConsumer) store(off int64, tag string) bool {
	if !c.assignedP0 {
		return false
	}
	c.stored, c.storedTag = off, tag
	c.armTick()
	return true
}

// withdraw stores the logical offset, which commits nothing (driver.withdraw).
func (c *simConsumer) withdraw() { c.stored = -1 }

// armTick makes sure the next auto-commit tick runs while there is something to commit. The timer
// runs every auto.commit.interval.ms from the client's creation; ticks with nothing to do are
// skipped here, which changes nothing.
func (c *simConsumer) armTick() {
	if c.tickArmed || c.stored <= c.committed {
		return
	}
	c.tickArmed = true
	iv := c.m.prof.commitInterval
	c.m.atLocal((c.now()/iv+1)*iv, c.tick)
}

func (c *simConsumer) tick() {
	c.tickArmed = false
	if c.state == rdkSteady && c.assignedP0 && !c.lost && c.stored > c.committed {
		c.sendCommit(c.stored, c.storedTag, true)
	}
	c.armTick()
}

// sendCommit sends an OffsetCommit at the client's member id and generation, whatever its join
// state (an explicit commit goes out so too: rd_kafka_cgrp_offsets_commit).
func (c *simConsumer) sendCommit(off int64, tag string, auto bool) {
	c.waitCommits++
	member, gen := c.ids()
	c.conn.send(&simReq{kind: reqCommit, from: c.m, member: member, gen: gen, offset: off, tag: tag, auto: auto})
}

// commit is the explicit commit that goneli's committer makes (commit.go).
func (c *simConsumer) commit(off int64, tag string) { c.sendCommit(off, tag, false) }

// committedAnswer takes a commit's answer: the committed offset moves on, the result goes to the
// application (the OffsetsCommitted event, or the committer's answer), and an unassign waiting for
// the commits under way may go on. report says whether an automatic commit's result is reported
// (one that librdkafka sends again is not).
func (c *simConsumer) committedAnswer(q *simReq, report bool) {
	c.waitCommits--
	if q.err == errNone {
		// rd_kafka_cgrp_update_committed_offsets sets the committed position to what was
		// committed, lower or not: a log that restarted below it is committed from then on.
		c.committed = q.offset
	}
	switch {
	case !q.auto:
		c.m.explicitAnswered(q.offset, q.tag, q.err)
	case report:
		c.m.push(simAppEvent{kind: appCommitted, offset: q.offset, tag: q.tag, err: q.err, accepted: q.acceptedAt})
	}
	c.armTick()
}
