package core

import "time"

// simLink is one direction of a TCP connection: messages arrive in the order they were sent, after
// a latency that the adversary can raise for a while (slow) or hold up entirely (down: what is
// sent meanwhile arrives once the outage is over, as TCP retransmits it). Messages are never
// reordered within a link; across links (the coordinator's connection, the fetcher's, the
// producer's, goneli's own for the group check) they are, as they are across real connections.
type simLink struct {
	w      *simWorld
	base   time.Duration // the least one-way latency
	jitter time.Duration // up to this much more
	last   time.Duration // arrival of the last message sent: nothing overtakes it
	spikes []simSpike
}

// simSpike is a window of true time during which messages sent on a link take extra longer, or,
// with down set, do not get through until the window ends.
type simSpike struct {
	from, to time.Duration
	extra    time.Duration
	down     bool
}

func newSimLink(w *simWorld, base, jitter time.Duration) *simLink {
	return &simLink{w: w, base: base, jitter: jitter}
}

// arrival is when a message sent now arrives.
func (l *simLink) arrival() time.Duration {
	now := l.w.now
	d := l.base
	if l.jitter > 0 {
		d += time.Duration(l.w.rng.Int64N(int64(l.jitter) + 1))
	}
	t := now + d
	for _, s := range l.spikes {
		if now < s.from || now >= s.to {
			continue
		}
		if s.down {
			t = max(t, s.to+d)
		} else {
			t += s.extra
		}
	}
	t = max(t, l.last)
	l.last = t
	return t
}

// spike adds a window of delay (or of outage) from now on.
func (l *simLink) spike(dur, extra time.Duration, down bool) {
	now := l.w.now
	kept := l.spikes[:0]
	for _, s := range l.spikes {
		if s.to > now {
			kept = append(kept, s)
		}
	}
	l.spikes = append(kept, simSpike{from: now, to: now + dur, extra: extra, down: down})
}

// simConn is a client's connection to a broker for requests with answers (the group
// coordinator's, or the heartbeat producer's). The broker reads one request at a time from a
// connection and the next only once it has answered the last (Kafka mutes a connection while a
// request of it is being processed): a JoinGroup that the coordinator holds until the rebalance
// completes holds back every later request on the connection, commits included. A reset (the
// adversary's, or a broker restart) fails every request in flight with a transport error; those
// the broker has already taken are still carried out, and their answers are lost.
type simConn struct {
	w        *simWorld
	up, down *simLink
	epoch    int       // bumped by a reset: answers of older epochs are dropped
	queue    []*simReq // taken by the broker and not yet answered, in order; the first is being processed
	inflight []*simReq // sent by the client and not yet answered
	// serve processes a request at the broker, after the broker's own delay; the handler answers
	// it with conn.answer, at once or later.
	serve func(*simReq)
	// procDelay is the broker's processing time for a request, which the adversary may raise.
	procDelay func() time.Duration
	// deliver hands an answer to the client (through its member, which may be stopped).
	deliver func(*simReq)
	dead    bool // the client process is gone: answers are dropped
}

// simReq is one request and, once answered, its answer.
type simReq struct {
	kind    simReqKind
	conn    *simConn
	epoch   int
	sentAt  time.Duration
	from    *simMember
	member  int         // member id, 0 for none
	gen     int         // generation (classic) or member epoch (KIP-848); -1 for none
	offsets []simOffset // OffsetCommit: each partition's offset and metadata
	auto    bool        // OffsetCommit: librdkafka's auto-commit rather than goneli's explicit one
	// owned is what JoinGroup's cooperative metadata and ConsumerGroupHeartbeat say the member
	// owns; ownedGen is JoinGroup's generation of that assignment.
	owned    simParts
	ownedGen int
	leaving  bool     // ConsumerGroupHeartbeat: epoch -1, leaving
	full     bool     // ConsumerGroupHeartbeat: a full request, answered with the assignment
	parts    simParts // ListOffsets: the partitions whose ends are asked for
	// SyncGroup from the group leader: the members as its JoinGroup answer listed them, and each
	// one's assignment.
	assignment []simParts
	rec        *simRecord // Produce

	// The answer.
	err       simErr
	ansMember int
	ansGen    int
	leader    bool              // JoinGroup: this member leads the group and assigns
	members   []simJoinedMember // JoinGroup, to the group leader (and its SyncGroup, from it)
	// assigned is the member's assignment in a SyncGroup or ConsumerGroupHeartbeat answer.
	assigned simParts
	assigns  bool          // ConsumerGroupHeartbeat: the answer carries an assignment
	ends     []int64       // ListOffsets: each partition's end, by partition (-1 where not asked)
	desc     GroupDesc     // DescribeGroups for the group check
	interval time.Duration // ConsumerGroupHeartbeat: the heartbeat interval
	answered bool
	// acceptedAt is when the coordinator accepted an OffsetCommit (true time), for the timeline's
	// analysis of an overlap.
	acceptedAt time.Duration
}

type simReqKind uint8

const (
	reqJoin simReqKind = iota
	reqSync
	reqHeartbeat
	reqCommit
	reqLeave
	reqCGHeartbeat // KIP-848 ConsumerGroupHeartbeat
	reqDescribe    // the group check
	reqProduce
	reqListOffsets // the ends of the partitions an assignment takes (tails.go)
)

func (k simReqKind) String() string {
	return [...]string{"JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "LeaveGroup", "ConsumerGroupHeartbeat", "DescribeGroups", "Produce", "ListOffsets"}[k]
}

// simJoinedMember is what a JoinGroup answer tells the group leader of one member: its id and the
// cooperative-sticky metadata (the partitions it owns, and the generation that assigned them).
type simJoinedMember struct {
	id       int
	owned    simParts
	ownedGen int
}

// simErr is a Kafka error code, as far as the simulation distinguishes them.
type simErr uint8

const (
	errNone simErr = iota
	errUnknownMemberID
	errIllegalGeneration
	errRebalanceInProgress
	errMemberIDRequired
	errUnknownServerError
	errCoordinatorLoadInProgress
	errNotCoordinator
	errTransport
	errStaleMemberEpoch
	errFencedMemberEpoch
)

// Error makes a simErr the error of a commit's answer (machine.commitAnswer).
func (e simErr) Error() string { return e.String() }

func (e simErr) String() string {
	return [...]string{"NONE", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS", "MEMBER_ID_REQUIRED",
		"UNKNOWN_SERVER_ERROR", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR", "_TRANSPORT", "STALE_MEMBER_EPOCH",
		"FENCED_MEMBER_EPOCH"}[e]
}

// send puts r on the connection.
func (c *simConn) send(r *simReq) {
	r.conn, r.epoch, r.sentAt = c, c.epoch, c.w.now
	c.inflight = append(c.inflight, r)
	c.w.at(c.up.arrival(), func() { c.arrive(r) })
}

func (c *simConn) arrive(r *simReq) {
	if r.epoch != c.epoch {
		return // sent before a reset; the reset answered it
	}
	c.queue = append(c.queue, r)
	if len(c.queue) == 1 {
		c.process()
	}
}

// process starts on the request at the head of the broker's queue.
func (c *simConn) process() {
	r := c.queue[0]
	d := time.Duration(0)
	if c.procDelay != nil {
		d = c.procDelay()
	}
	c.w.after(d, func() {
		if r.epoch != c.epoch {
			return
		}
		c.serve(r)
	})
}

// answer sends r's answer back; the broker then takes the next request of the connection.
func (c *simConn) answer(r *simReq) {
	if r.answered {
		return
	}
	r.answered = true
	if r.epoch != c.epoch {
		return // the connection this came on was reset: nobody reads the answer
	}
	if len(c.queue) > 0 && c.queue[0] == r {
		c.queue = c.queue[1:]
		if len(c.queue) > 0 {
			c.process()
		}
	}
	c.w.at(c.down.arrival(), func() {
		if r.epoch != c.epoch || c.dead {
			return
		}
		c.forget(r)
		c.deliver(r)
	})
}

func (c *simConn) forget(r *simReq) {
	for i, x := range c.inflight {
		if x == r {
			c.inflight = append(c.inflight[:i], c.inflight[i+1:]...)
			return
		}
	}
}

// reset drops the connection: every request in flight fails with a transport error.
func (c *simConn) reset() {
	c.epoch++
	c.queue = nil
	failed := c.inflight
	c.inflight = nil
	for _, r := range failed {
		r.err, r.answered = errTransport, true
		if !c.dead {
			c.deliver(r)
		}
	}
}
