package goneli

import "time"

// simLease is the one place where the simulation calls the lease, as driver.go does. Every call
// mirrors a line of the driver (named in its comment); when the driver changes how it calls the
// lease (a new argument to committed, a new input such as when a group heartbeat was last
// answered), change the mirror here and nowhere else. The member model (sim_member_test.go) only
// tells the adapter what happened and carries out what comes back through apply.
type simLease struct {
	l *lease
	m *simMember
}

// newSimLease makes the lease as assemble (neli.go) does, with the commit window that join
// (topic.go) sets once New has read the broker's timing, on the member's clock, and tenure ids
// drawn from the schedule's random source rather than crypto/rand.
func newSimLease(m *simMember) simLease {
	p := m.prof
	l := newLease(leaseConfig{
		role: "", timeout: p.ht, interval: p.renew, poll: p.minPoll, releaseWait: p.timing.maxPoll,
		window: p.timing.commitWindow(p.config), ticks: false, recheck: !p.timing.classic,
		answerBound: p.timing.answerBound(p.config), hbInterval: p.timing.heartbeat(), clock: m.clock, base: m.clock.Now(),
	})
	l.useCommitWindow(p.timing.commitWindow(p.config))
	l.random = m.w.rng.Uint64
	return simLease{l: l, m: m}
}

// apply is driver.apply: heartbeats to produce, an offset to store, an explicit commit to ask for,
// a group check to start, events for the barrier.
func (a simLease) apply(out leaseOut) *simDelivery {
	m := a.m
	if out.heartbeat != nil {
		m.produce(*out.heartbeat)
		a.l.sent() // driver.produce, once the producer took the record
	}
	if out.store != 0 {
		m.storeAsk, m.storeAsked = commitAsk{out.store, out.tag}, true // driver.apply: storeAsks
	}
	if out.commit != 0 {
		m.commitAsk, m.commitTag = out.commit, out.tag
		if out.restarted {
			m.restartedAsk = out.commit
		}
	}
	if out.check {
		m.wantCheck = true
	}
	m.unwatched = true
	dl := m.deliver(out.events)
	// IsLeader reads the published view without the driver's lock, so every state between two
	// transitions of one cycle is visible: the oracle looks at each.
	m.w.oracle.check(m.w)
	return dl
}

// assign is driver.beginTenure.
func (a simLease) assign(vouched bool) { a.apply(a.l.assign(vouched)) }

// due is the cycle's apply(p, p.lease.due(beats)), beats being driver.mayProduce.
func (a simLease) due(beats bool) { a.apply(a.l.due(beats)) }

// storable, storedAt, storedSince and newestPending are the lease's part of driver.startCommits.
func (a simLease) storable(off int64) bool              { return a.l.storable(off) }
func (a simLease) storedAt(off int64, at time.Duration) { a.l.storedAt(off, at) }
func (a simLease) storedSince(off int64, at, chain time.Duration) {
	a.l.storedSince(off, at, chain)
}
func (a simLease) newestPending() (commitAsk, bool) { return a.l.newestPending() }

// onMessage is driver.onMessage for a record of partition 0: own heartbeats are read back, anything
// else is foreign.
func (a simLease) onMessage(r simRecord) {
	if r.hb.kind == kindHeartbeat && r.writer.name == a.m.name {
		a.apply(a.l.readBack(r.hb, r.offset))
		return
	}
	a.apply(a.l.foreign(r.hb))
}

// onCommit is driver.onCommit and onCommitError for partition 0's result of a commit: accepted
// (renews), refused because the member or its generation is gone (fences), or anything else
// (renews nothing). explicit says that goneli sent it (collectCommits) rather than librdkafka's
// auto-commit (the OffsetsCommitted event).
func (a simLease) onCommit(offset int64, tag string, err simErr, explicit bool) {
	if explicit && err == errIllegalGeneration {
		return // driver.collectCommits: an explicit commit overtaken by a rebalance
	}
	switch err {
	case errNone:
		before := a.l.load().end
		a.apply(a.l.committed(offset, tag, explicit))
		if v := a.l.load(); v.leading && v.end != before {
			a.m.renewedExplicitly = explicit
			a.m.renewedRestarted = explicit && offset == a.m.restartedAsk
		}
	case errUnknownMemberID, errIllegalGeneration, errFencedMemberEpoch:
		a.apply(a.l.rejected(err.String()))
	}
}

// checked is driver.collectGroupCheck for one tenure.
func (a simLease) checked(tenure uint64, sawSelf, failed bool) {
	c := groupCheck{verdict: groupVerdict{sawSelf: sawSelf}}
	if failed {
		c = groupCheck{err: errSimCheck}
	}
	a.apply(a.l.checked(tenure, c))
}

// revoke is driver.endTenures for the part: what it returns is the release to finish once the
// barrier has returned, if any.
func (a simLease) revoke(lost bool) (*heartbeat, *simDelivery) {
	out := a.l.revoke(lost)
	dl := a.apply(out)
	return out.release, dl
}

// expire is driver.expireLeases, the watchdog's call.
func (a simLease) expire() { a.m.deliver(a.l.expire().events) }

// quiesce is the lease's part of driver.checkHandOver; it reports whether the stored offset must
// be withdrawn (driver.withdraw).
func (a simLease) quiesce(quiet bool) bool { return a.l.quiesce(quiet) }

// heartbeat is when the newest group heartbeat that the coordinator answered was sent, and when
// its answer came, on the lease's scale (ok false before the first): not an input of today's
// lease, kept here for a driver that watches the group heartbeats (issue 38).
func (a simLease) heartbeat() (sent, answered time.Duration, ok bool) {
	s, r := a.m.rdk.lastHeartbeat()
	if r == 0 {
		return 0, 0, false
	}
	return s - a.m.leaseBase, r - a.m.leaseBase, true
}

// The reads the driver makes.

func (a simLease) active() bool                    { return a.l.active() }
func (a simLease) tenure() uint64                  { id, _ := a.l.tenure(); return id }
func (a simLease) cleared(t uint64) bool           { return a.l.cleared(t) }
func (a simLease) deadline() (time.Duration, bool) { return a.l.deadline() }
func (a simLease) view() *leaseView                { return a.l.load() }
func (a simLease) readsBack() bool                 { return a.l.readsBack() }
func (a simLease) newestEpoch() uint64             { return a.l.newestEpoch() }

// delivered is neli.deliver's call once the barrier has returned from a LeaderAcquired.
func (a simLease) delivered(epoch uint64) { a.l.acquiredDelivered(epoch) }

// announced is what IsLeader needs besides the clock: lease.valid is announced and now < end.
func (a simLease) announced(v *leaseView) bool { return a.l.announced(v) }

// holdRenewals is the lease's part of driver.heldAssignment.
func (a simLease) holdRenewals(from, until time.Duration) {
	a.l.holdRenewals(from, until) // both on the lease's scale (dnow)
}

// oldestPending is the lease's part of driver.heldAssignment.
func (a simLease) oldestPending() (time.Duration, bool) { return a.l.oldestPending() }

// holding is the lease's part of driver.autoCommitted.
func (a simLease) holding() bool { return a.l.holding() }

// errSimCheck is a group check that failed.
var errSimCheck = simError("group description failed")

type simError string

func (e simError) Error() string { return string(e) }
