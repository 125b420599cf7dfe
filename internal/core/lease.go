package core

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// The lease of one partition of the leader topic, as a state machine. It is told what happened
// (the partition was assigned or revoked, time passed, an own heartbeat came back at an offset, the
// group coordinator accepted or refused a commit, the group check finished) and answers what
// follows: events for the barrier, a heartbeat to produce, an offset to store or commit, a group
// check to start. It does no I/O, starts no goroutine and logs nothing; the driver (internal/driver, driver.go)
// does all of that. Its methods are called with the driver's lock held. What other goroutines may
// read (IsLeader, Token, Stats) is published as an immutable leaseView after every change.
//
// This file follows the protocol in its order: a tenure begins on assignment (assign), produces
// heartbeats (due), takes its own ones back (readBack), is renewed when the coordinator accepts a
// heartbeat's commit (committed) once a group check has cleared it (checked), acquires leadership
// on its first renewal (renew), is fenced when its lease runs out or a commit is refused (expire,
// rejected), and ends on revocation (revoke). Each step's safety argument is written next to its
// code.
//
// Leadership is visible (IsLeader) only once the driver reports that the barrier has returned from
// the LeaderAcquired event, so that the application can set up leader state first.
type Lease struct {
	role     string        // the role's name, for events and heartbeats
	timeout  time.Duration // HeartbeatTimeout
	interval time.Duration // between heartbeats: RenewInterval
	poll     time.Duration // MinPollInterval: between heartbeats before the first acquisition, and the first retry delay of a failed group check
	// releaseWait is how long a new tenure waits for a predecessor that is releasing the
	// partition: the rebalance timeout, which bounds a revocation's wait for the barrier.
	releaseWait time.Duration
	// stall is how long a stored offset may wait for librdkafka's auto-commit before the lease
	// asks for an explicit commit of it, and window how long after the last automatic commit
	// accepted it may still ask (see stalled).
	stall, window time.Duration
	ticks         bool // renew on shared ticks (leaseConfig.ticks)
	recheck       bool // a fence asks for a new group check (leaseConfig.recheck)
	// answerBound, where set (KIP-848), is how long a stored offset's accepted commit may take to
	// be seen before the coordinator connection counts as having held its answers back
	// (heldAnswers); heldFrom and heldUntil bound the send times of the heartbeats that commits
	// seen after such a hold may not renew.
	answerBound         time.Duration
	HeldFrom, HeldUntil time.Duration
	// untimely says that the newest answer judged was late, or that no offset stored since it was
	// seen (lateSeen) has been answered in time yet: until one is, the hold goes on, however long.
	untimely bool
	lateSeen time.Duration
	// storeFrom and storeUntil bound the store times of the offsets whose automatic commits anchor
	// nothing, after an assignment taken late (holdRenewals, storedInHold).
	StoreFrom, StoreUntil time.Duration
	hbInterval            time.Duration
	clock                 Clock
	base                  time.Time // origin of the monotonic durations below
	random                func() uint64

	// lastCommitted outlives tenures: it is what librdkafka last committed for the partition, and
	// a heartbeat confirmed at or below it needs an explicit commit (a log restarted below it).
	lastCommitted int64
	// autoAt anchors the window for explicit commits (stalled, inWindow): when the lease stored the
	// newest offset that one of librdkafka's automatic commits had accepted. librdkafka sent that
	// commit after the offset was stored and the coordinator accepted it after that, so autoAt is
	// never later than the acceptance, however long the answer then waited to be processed (a
	// paused poll loop). hasAuto says whether there is an anchor yet. Both outlive tenures.
	AutoAt  time.Duration
	hasAuto bool

	t   tenure
	c   leaseCounts
	rtt time.Duration
	lag time.Duration

	// epoch numbers the LeaderAcquired events; delivered is the newest one whose barrier call has
	// returned. It is the only field written outside the driver's lock (by the event dispatcher).
	Epoch     uint64
	delivered atomic.Uint64

	view atomic.Pointer[LeaseView]
}

// tenure is one assignment of the partition.
type tenure struct {
	active       bool
	id           uint64
	seq          uint64 // last heartbeat produced
	confirmedSeq uint64 // newest heartbeat read back
	next         time.Duration
	pending      map[int64]confirmed // stored offset -> the heartbeat just before it
	nudged       time.Duration       // when the tenure last asked for an explicit commit of a stalled offset
	// quiet says that the tenure is stuck on its way to a hand-over (handover.quiet): it stores
	// no offset of a heartbeat that comes back late and asks for no explicit commit (quiesce).
	quiet bool

	leading     bool // acquired, and not fenced since
	acquired    bool // acquired at least once: since and token are fixed
	since       time.Time
	token       int64
	renewedSent time.Duration // send time of the heartbeat behind the lease

	verified   bool
	checking   bool
	checkAt    time.Duration
	checkDelay time.Duration
	held       *confirmed // newest renewal that waits for the group check or a predecessor
	conflict   *GroupConflictError

	assigned time.Duration // when the tenure began
	// idleFrom is, while the tenure does not lead, since when it has not: its assignment or its
	// fence, moved on while it is excused (handover.go). ledFrom is when it last began to lead.
	idleFrom, ledFrom time.Duration
	// heardAt is when a cycle last found the tenure, not leading, reading back promptly (readsBack):
	// a tenure whose commits a rebalance holds up counts toward a hand-over only from there
	// (handover.go), so that a stall of its own that outlasts half a lease, the rebalance
	// callback's wait for the partitions' ends say, does not turn the rebalance's hold into a
	// hand-over. Unlike idleFrom it leaves Stats.NotLeadingSince alone: the role is without a leader
	// all the same.
	heardAt time.Duration
	// relapsed says that the tenure leads again after a fence, and extended that a renewal has
	// extended its lease since it began to lead: a relapse that no renewal extended before it was
	// fenced again does not count as leading (fence).
	relapsed, extended bool
	// rtt is the send-to-read-back time of the newest own heartbeat read back; zero before one.
	rtt time.Duration
	// readAt is when the tenure last read back an own heartbeat, began, or waited for a
	// predecessor (sending nothing to read back): see unread.
	readAt time.Duration

	// releasing holds the tenures of predecessors seen releasing the partition and not yet
	// released; the tenure does not lead while one is left and releaseBy has not passed.
	releasing map[uint64]bool
	releaseBy time.Duration
}

// confirmed is an own heartbeat that came back, by its send time and offset, and when its
// offset was first handed to librdkafka (storedAt, handedAt): zero while the commit gate holds it
// back.
type confirmed struct {
	sent   time.Duration
	offset int64
	stored time.Duration
	// anchor is what an accepted automatic commit of the offset anchors the window at
	// (storedSince): stored, or the earlier store that began the commit gate's chain.
	anchor time.Duration
	// tag names the heartbeat, tenure and sequence number, in the commit's metadata, which
	// librdkafka hands back with the commit's result: a result for the same offset of another log
	// (one that restarted below it while that commit was under way) does not match (committed).
	tag string
}

type leaseCounts struct {
	Acquired, Fenced, Revoked    uint64
	Sent, Confirmed, Stale, Late uint64
	Rejected                     uint64
	// unwindowed counts explicit commits accepted outside the window, which renewed nothing; held
	// those that a hold of the coordinator connection's answers kept from renewing (heldAnswers).
	unwindowed, held uint64
	// mismatched counts commit results whose metadata named another heartbeat than the one stored
	// at their offset (committed).
	mismatched uint64
}

// leaseView is what a lease publishes for lock-free readers. It never changes once published.
type LeaseView struct {
	Assigned  bool
	Releasing bool // waits for a predecessor to release the partition
	// proveBy is set while a tenure that has not acquired yet proves its first lease: until one
	// HeartbeatTimeout after its assignment. The driver polls fast until then (neli.proving).
	ProveBy  time.Duration
	Leading  bool   // the protocol believes it leads
	Epoch    uint64 // the LeaderAcquired behind leading
	Tenure   uint64
	Token    int64
	Since    time.Time
	End      time.Duration // lease end, on the lease's clock; meaningful while leading
	RTT, Lag time.Duration
	Conflict *GroupConflictError
	Counts   leaseCounts
	// idle is, while assigned and not leading, since when the tenure has not led (tenure.idleFrom);
	// led is, while leading, since when it has; heard is tenure.heardAt. excused is lease.excused.
	Idle, Led, Heard time.Duration
	Excused          bool
}

// leaseOut is what the driver must do after a transition.
type LeaseOut struct {
	Events    []TenureEvent
	Heartbeat *Heartbeat // produce it
	Store     int64      // store this offset for librdkafka to commit; 0 for none
	commit    int64      // commit this offset explicitly; 0 for none
	// tag goes with store or commit as the offset's commit metadata (confirmed.tag).
	Tag       string
	restarted bool // commit is asked for because the log restarted below the last commit
	check     bool // start a group check for the current tenure
	// release is set when the tenure ended while its LeaderRevoked was still to be delivered: the
	// driver writes it (kind releasing) before it lets the partition go, and again, as kind
	// released, once the barrier has returned from the last of events.
	release *Heartbeat
}

// clock reads the time. Lease arithmetic uses the monotonic reading of what Now returns.
type Clock interface {
	Now() time.Time
}

type SystemClock struct{}

func (SystemClock) Now() time.Time { return time.Now() }

// randomTenure draws a tenure id.
func RandomTenure() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// leaseConfig configures a lease. Its instants are durations since base, which the leases of one
// instance share so that their deadlines compare.
type LeaseConfig struct {
	role                                 string
	Timeout, Interval, poll, ReleaseWait time.Duration
	// window bounds the explicit commits of stalled offsets: see lease.stalled and commitWindow.
	window time.Duration
	// ticks says that the lease renews on the ticks it shares with the instance's other leases
	// (renewalTick) rather than an interval after each renewal: set for roles.
	ticks bool
	// recheck says that a tenure fenced must pass a new group check before it leads again: set under
	// KIP-848, where the check reads the broker's session again (driver.checkSessionAgain).
	recheck bool
	// answerBound and hbInterval, set under KIP-848, configure heldAnswers: how long an accepted
	// commit of a stored offset may take to be seen, and the group heartbeat interval.
	answerBound, hbInterval time.Duration
	Clock                   Clock
	Base                    time.Time
}

// newLease makes the lease of one partition.
func NewLease(c LeaseConfig) *Lease {
	if c.poll <= 0 || c.poll > c.Interval {
		c.poll = c.Interval
	}
	l := &Lease{role: c.role, timeout: c.Timeout, interval: c.Interval, poll: c.poll, releaseWait: c.ReleaseWait,
		stall: commitStall(c.poll), window: c.window, ticks: c.ticks, recheck: c.recheck, answerBound: c.answerBound, hbInterval: c.hbInterval,
		clock: c.Clock, base: c.Base, random: RandomTenure}
	l.publish()
	return l
}

func (t *tenure) name() string {
	return strconv.FormatUint(t.id, 16)
}

// # 1. Assignment

// assign starts a tenure when the group assigns the partition: a random id, and heartbeats
// numbered from 1. Its first heartbeat is due at once, and so is its group check unless vouched
// says that this membership of the group passed one already and has held a partition of the
// leader topic ever since (membership in internal/driver, groupcheck.go): then any member that joined with another
// topic since was shown this one by its own check.
func (l *Lease) Assign(vouched bool) LeaseOut {
	if l.t.active {
		return LeaseOut{}
	}
	now := l.Now()
	l.t = tenure{active: true, id: l.random(), pending: map[int64]confirmed{}, releasing: map[uint64]bool{},
		releaseBy: now + l.releaseWait, assigned: now, readAt: now, idleFrom: now, verified: vouched}
	l.publish()
	return LeaseOut{}
}

// # 2. Heartbeats

// due produces what the passage of time calls for: a fence if the lease ran out, a heartbeat if
// one is due and beats allows it (every RenewInterval, or every MinPollInterval before the tenure
// first acquires: the tenure, a sequence number and the send time), and a group check if the
// tenure needs one. Called from every cycle. beats is false while the instance's previous
// heartbeats are still on their way to the broker (driver.mayProduce): a heartbeat that is due
// then waits, and goes out at the first cycle after they have arrived.
func (l *Lease) Due(beats bool) LeaseOut {
	out := l.Expire()
	if !l.t.active {
		return out
	}
	now := l.Now()
	if l.excused() {
		l.t.idleFrom = now
		l.publish()
	} else if !l.t.leading && l.readsBack() {
		l.t.heardAt = now
		l.publish()
	}
	// A tenure that waits for a predecessor sends one heartbeat, the one that shows when it has
	// read the partition up to its own records, and no more until the wait is over: every record
	// it writes meanwhile would push the predecessor's marker further from the end of the
	// partition, out of the reach of a successor of its own (releaseLookback).
	if beats && now >= l.t.next && !(l.waiting() && l.t.seq > 0) {
		l.t.seq++
		h := &Heartbeat{Tenure: l.t.id, Seq: l.t.seq, SentWall: l.clock.Now().UnixNano(), SentMono: now, Role: l.role}
		if l.t.acquired {
			h.Since, h.Token = l.t.since.UnixNano(), l.t.token
		}
		out.Heartbeat = h
		// Until the tenure acquires, a heartbeat whose proof failed (a commit refused while the
		// group still rebalances, say) is followed by the next one a poll later, not a renewal later.
		switch {
		case l.t.acquired && l.ticks:
			l.t.next = renewalTick(now, l.interval)
		case l.t.acquired:
			l.t.next = now + l.interval
		default:
			l.t.next = now + l.poll
		}
	}
	if !l.t.verified && !l.t.checking && now >= l.t.checkAt {
		l.t.checking = true
		out.check = true
	}
	if off, ok := l.stalled(now); ok {
		out.commit, out.Tag = off, l.t.pending[off].tag
		l.t.nudged = now
	}
	l.release(&out)
	return out
}

// renewalTick is when a lease of a role that renewed at now renews next: the first multiple of
// interval after now, on the scale that every lease of an instance shares (leaseConfig.base).
// Leases that renew on the same ticks produce their heartbeats in the same cycle, so that one
// instance's roles share one produce round, one fetch and one offset commit per interval instead
// of each taking its own. The next heartbeat is never more than one interval after this one, as
// the renewal bound (config.go) assumes; only the first after an acquisition, which is off the
// ticks, may be followed sooner. The single leader of New has nothing to share a tick with and
// renews an interval after each renewal, which a poll that comes late stretches a little: two
// tenths fewer heartbeats a second at the default settings.
func renewalTick(now, interval time.Duration) time.Duration {
	return (now/interval + 1) * interval
}

// commitStall is the lease's stall for a MinPollInterval of poll: librdkafka's auto-commit runs
// every quarter poll (config.go, groupTiming), so an offset stored two polls ago has had eight of
// its rounds, and one whose commit is answered normally has its answer by then.
func commitStall(poll time.Duration) time.Duration {
	return 2 * poll
}

// commitWindow is how long after the anchor (lease.autoAt: when the newest offset that an
// automatic commit got accepted was stored) explicit commits may still renew, for a coordinator
// that may remove a member expel after a rebalance began that the member did not rejoin, however
// long it went on committing (groupTiming.expelBound: the rebalance timeout under the classic
// protocol, whose coordinator renews a member's session with each commit it accepts), a group
// heartbeat interval hb, the bound answer on how late a commit's answer may be seen before it counts
// as held back (heldAnswers), and the renewal interval renew; zero where the settings leave no room.
//
// Let a rebalance begin at R, and the member fail to rejoin it (its JoinGroup refused, say), so
// that the coordinator may remove it at R + expel and hand its partitions on. librdkafka
// auto-commits only while it knows of no rebalance, and learns of one from the answer to its first
// group heartbeat after R, sent at h1 <= R + hb. An automatic commit is sent after the offset it
// carries was stored, and before librdkafka learns of the rebalance; if sent after h1, its answer
// comes after that heartbeat's, on the same connection. An offset anchors at the time storedSince
// records: before the store call, or, for a store the commit gate (commitgate.go) made after the
// stores since its last answer were all presumed unsent, the time of the first of those
// (commitGate.store), so that a chain of presumptions, each up to a quarter lease after its store,
// moves no anchor. A chain ends with an answer (any one, automatic or explicit), and the next store
// starts another. So the anchor A is at most h1, or else the time of the first store x of a
// chain that began after h1, one of whose offsets an automatic commit carried before librdkafka
// learnt of the rebalance. Nothing is under way once a chain has ended, so the gate stores x at the
// next cycle once the leader has asked for a store, which it does every renewal, unless an explicit
// commit goes first, whose answer ends the chain again. If the chain before x ended by h1, x is
// within renew of h1 (or the explicit commit under way at h1 is answered first, as below). If it
// ended after h1, the answer that ended it was to a commit sent after h1, which comes after the
// heartbeat's on the same connection, so that x and its chain come too late to anchor; or to a
// commit sent before h1 (the commit under way at h1, automatic or explicit, or one presumed unsent
// that went out after all), which comes within answer of that commit's time, before h1 (an
// explicit commit's offset counts as stored when it is sent, storedAt), or else late, and then
// heldAnswers keeps every later offset from renewing or anchoring for as long as answers come
// late (its lateness measured from its own store, before h1). So x is within S = max(renew, answer)
// of h1, and A <= R + hb + S; the bound the window keeps, A <= R + hb + answer + S, leaves an answer
// bound for the cycles between an answer or an ask and the store. An explicit
// commit renews only a heartbeat sent before A + window (inWindow), so the lease it gives ends
// before A + window + HeartbeatTimeout <= R + expel - hb: a group heartbeat interval before the
// member can be removed, the slack for clock rates over expel. The anchor is the offset's store
// time rather than when the commit's result was seen, because a poll loop that was paused sees a
// result late, and a window measured from that moment reached past R + expel (issue 38: two
// leaders for up to 693 ms). goneli's default rebalance timeout, twice the lease, leaves a window of
// 0.8 x HeartbeatTimeout less an answer bound and the longer of an answer bound and a renewal
// interval: 2.748 s at the default lease and 476 ms at 1 s with its default 50 ms MinPollInterval
// (348 ms with a 100 ms one; 2.875 s and 475 ms before the commit gate), which still rides out librdkafka's wait of up to a second to rejoin at 1 s (from leases of
// about 0.8 s up with the window before the gate; the bound has not been measured again since).
func commitWindow(rebalance, lease, hb, answer, renew time.Duration) time.Duration {
	return max(0, rebalance-lease-2*hb-answer-max(renew, answer))
}

// useCommitWindow replaces the window, before the first tenure, once New has read the broker's
// timing.
func (l *Lease) useCommitWindow(w time.Duration) {
	l.window = w
}

// useAnswerBound replaces heldAnswers' settings once the broker's KIP-848 group heartbeat interval
// has been read.
func (l *Lease) useAnswerBound(bound, hb time.Duration) {
	l.answerBound, l.hbInterval = bound, hb
}

// stalled returns the newest offset whose heartbeat was sent within the window after the anchor
// (inWindow), so that its commit could renew, if any stored offset has waited for its commit for the
// stall and no explicit commit was asked for within the last stall. (The stall is measured from the
// oldest offset: heartbeats may be stored more often than once a stall.) The newest in the window,
// not the newest of all: while the commit gate waits out an earlier commit (commitgate.go) a slow
// answer can keep it busy for longer than the window is left, and by the time it is idle the
// newest heartbeat was sent after the window closed, although older ones could still renew the
// lease up to their own send time.
//
// librdkafka's auto-commit sends nothing while the consumer rejoins the group, and a consumer
// rejoins at most once a second: a member that joined in one rebalance and sees the group start
// another waits out the rest of that second before its JoinGroup goes out (librdkafka 2.11.1,
// cooperative protocol), and commits nothing meanwhile. A lease shorter than that gap, or a
// renewal that was due early in it, ran out although the coordinator would have accepted a commit
// all along: it accepts a commit of the current generation until every member has rejoined, and
// refuses one (REBALANCE_IN_PROGRESS, which renews nothing) only while the new assignment is being
// handed out. An explicit commit goes out whatever librdkafka's join state, and proves exactly
// what an automatic one proves (committed).
func (l *Lease) stalled(now time.Duration) (int64, bool) {
	if l.t.quiet || now-l.t.nudged < l.stall || !l.hasAuto {
		return 0, false
	}
	var newest int64
	oldest := now
	for off, hb := range l.t.pending {
		if l.inWindow(hb.sent) {
			newest = max(newest, off)
		}
		if hb.stored != 0 {
			// Only an offset handed to librdkafka has waited for its auto-commit.
			oldest = min(oldest, hb.stored)
		}
	}
	if newest == 0 || now-oldest < l.stall {
		return 0, false
	}
	return newest, true
}

// storable reports whether the current tenure still waits for the commit of offset, asked for by
// readBack, so that the driver may store it for librdkafka's auto-commit; false tells the driver to
// drop it.
func (l *Lease) storable(offset int64) bool {
	if !l.t.active || l.t.quiet {
		return false
	}
	_, ok := l.t.pending[offset]
	return ok
}

// storedAt records that offset was handed to librdkafka at at: stored for its auto-commit by the
// commit gate (driver.startCommits), or sent in an explicit commit. at is read before the call that
// hands it over, and recorded only once the call succeeded; an offset handed over again keeps the
// first time.
//
// The store time is what the anchor of the window (autoAt) and the lateness of an answer
// (heldAnswers) are measured from, and the commit gate (commitgate.go) decides when a store
// happens: it holds an offset back while an earlier commit is under way, withdraws it before
// librdkafka's next auto-commit tick, and stores the newest offset again if its commit is presumed
// never sent. The time recorded is when librdkafka really had the offset, not when readBack asked
// for it, so that an offset held back by the gate for a commit round trip does not count that
// round trip as lateness, and so that neither use can go wrong:
//   - The anchor is never later than the coordinator's acceptance: at is read before the store
//     call, librdkafka can send a commit of the offset only after the call has begun, and the
//     coordinator accepts it after that. An offset stored again after a presumption keeps its
//     first time: a commit of the first store that went out after all (the presumption wrong) was
//     sent after that time, whereas the second store may come after its acceptance. A store that
//     is withdrawn before any tick read it is sent by nobody, so nothing accepted carries it and it
//     anchors nothing; a store that the call failed to make records nothing.
//   - An answer never looks more timely than it is: its lateness is measured from the earliest
//     time librdkafka had the offset, for the same reason. What the gate does change is how soon
//     after a rebalance's first group heartbeat an offset is stored: not within a renewal interval
//     of it, as when every renewal stored one, but once the commit under way then is answered, an
//     answer bound after that commit's offset was stored at most, or heldAnswers holds, or once it
//     is presumed unsent, up to a quarter lease later and again for each store presumed unsent in
//     turn. So a store made after presumptions anchors at the first store since the gate's last
//     answer (storedSince), and commitWindow subtracts the longer of an answer bound and a renewal
//     interval; heldAnswers holds from the send time of the heartbeats the gate held back, not from
//     their later store.
func (l *Lease) StoredAt(offset int64, at time.Duration) {
	l.storedSince(offset, at, at)
}

// storedSince is storedAt for a store that the commit gate made at at, in a chain that began at
// chain (commitGate.store): an accepted automatic commit of offset anchors the window at chain,
// which commitWindow's argument needs, as presumptions may follow one another with nothing
// answered. Lateness is still measured from at: a chain of stores that librdkafka did not send
// (it was rejoining, say) is no sign of answers held back, and counting it as one held back the
// renewals after every rebalance; the argument needs only the answers to commits sent before the
// rebalance's first group heartbeat measured from their stores.
func (l *Lease) storedSince(offset int64, at, chain time.Duration) {
	if !l.t.active {
		return
	}
	if hb, ok := l.t.pending[offset]; ok && hb.stored == 0 {
		hb.stored, hb.anchor = at, min(at, chain)
		l.t.pending[offset] = hb
	}
}

// newestPending is the newest offset of the current tenure that waits for its commit, to store
// again after a store of it was presumed never committed (commitgate.go).
func (l *Lease) newestPending() (commitAsk, bool) {
	var newest int64
	if !l.t.active || l.t.quiet {
		return commitAsk{}, false
	}
	for off := range l.t.pending {
		newest = max(newest, off)
	}
	return commitAsk{newest, l.t.pending[newest].tag}, newest != 0
}

// inWindow reports whether a heartbeat sent at sent may be renewed by an explicit commit: it was
// sent less than the window after the anchor (commitWindow gives the argument).
func (l *Lease) inWindow(sent time.Duration) bool {
	return l.hasAuto && sent-l.AutoAt < l.window
}

// sent records that a heartbeat was handed to the producer.
func (l *Lease) Sent() {
	l.c.Sent++
	l.publish()
}

// # 3. Reading them back

// readBack takes an own heartbeat (keyed with this instance's name) read back from the partition
// at offset. Only a heartbeat of the current tenure with a higher sequence number than any before
// it is stored for commit: an earlier tenure's, a retry that lost the race, or another instance's
// proves nothing about the present. What a renewal rests on is the send time the heartbeat
// carries, never the time it came back, so a heartbeat delayed in transit cannot pass for fresh.
func (l *Lease) ReadBack(h Heartbeat, offset int64) LeaseOut {
	var out LeaseOut
	if !l.t.active || h.Tenure != l.t.id || h.Seq <= l.t.confirmedSeq {
		// An earlier tenure's heartbeat, or a retry arriving after a newer one.
		l.c.Stale++
		l.publish()
		return out
	}
	l.t.confirmedSeq = h.Seq
	l.t.readAt = l.Now()
	l.c.Confirmed++
	l.rtt = l.Now() - h.SentMono
	l.t.rtt = l.rtt
	if l.t.quiet {
		if !l.readsBack() {
			// Stuck on its way to a hand-over: see quiesce.
			l.publish()
			return out
		}
		l.t.quiet = false
	}
	next := offset + 1
	tag := l.t.name() + "." + strconv.FormatUint(h.Seq, 10)
	// Stored once the driver's commit gate lets it (storedAt); until then it waits in pending,
	// where an explicit commit may still take it.
	l.t.pending[next] = confirmed{sent: h.SentMono, offset: offset, tag: tag}
	out.Store, out.Tag = next, tag
	if next <= l.lastCommitted {
		// The log restarted below what librdkafka last committed (lost broker data, an unclean
		// leader election): it auto-commits only offsets above that, so no heartbeat would be
		// confirmed until the new log grew past it. One explicit commit resets it. Like any
		// explicit commit it renews only within the window (committed, inWindow), and a quiet
		// tenure has returned above unless its heartbeats come back promptly again; outside the
		// window the commit still resets librdkafka's committed offset, and the automatic
		// commits that follow renew.
		out.commit, out.restarted = next, true
		l.t.nudged = l.Now()
	}
	l.publish()
	return out
}

// foreign takes a record read from the partition that is not one of this tenure's own: another
// instance's, or an earlier tenure's of this one. Only a predecessor's release markers matter.
//
// A tenure that is revoked while its LeaderRevoked is still with the barrier writes a releasing
// marker before the partition leaves it, and a released marker once the barrier has returned, so
// that the revocation does not have to hold up the group (and every other role) while the barrier
// finishes in-flight work. A successor reads the partition from a few records before its end on
// assignment, so it has read any such marker before its own first heartbeat comes back; while a
// predecessor is releasing it holds its renewals back, until the released marker comes or the
// rebalance timeout has passed since its assignment, which is as long as a revocation would have
// waited for the barrier.
func (l *Lease) Foreign(h Heartbeat) LeaseOut {
	var out LeaseOut
	if !l.t.active || h.Tenure == l.t.id || (h.Kind == KindReleasing && l.t.confirmedSeq > 0) {
		// A releasing marker that lands after this tenure's own first heartbeat was not written
		// in time, and its writer held its revocation back instead (internal/driver, driver.go, endTenures).
		return out
	}
	switch h.Kind {
	case KindReleasing:
		l.t.releasing[h.Tenure] = true
	case KindReleased:
		delete(l.t.releasing, h.Tenure)
		l.release(&out)
	}
	l.publish()
	return out
}

// excused reports whether the tenure does not lead for a reason that no hand-over would mend: it
// waits for a predecessor to release the partition, or for a group check to clear it (one that
// failed or found a conflict is as likely to fail or find one for any other member).
func (l *Lease) excused() bool {
	return l.t.active && !l.t.leading && (l.waiting() || !l.t.verified || l.t.conflict != nil)
}

// readsBack reports whether the tenure's own heartbeats come back promptly: the newest was read
// back within a quarter lease of its sending, and no more than half a lease ago. A tenure that
// reads back so but does not lead waits for its commits, which a rebalance holds back until it
// completes (the coordinator ends one within the rebalance timeout), rather than being unable to
// get its heartbeats through. A quarter, not half: a renewal takes a heartbeat's round trip and a
// commit's, and with one commit and one round of heartbeats in flight (commitgate.go,
// driver.mayProduce) the next renewal comes a commit's round trip later, so a path over which
// both take a third of a lease renews nothing while its heartbeats still come back within half.
func (l *Lease) readsBack() bool {
	return l.t.active && l.t.confirmedSeq > 0 && l.t.rtt <= l.timeout/4 && l.unread() <= l.timeout/2
}

// quiesce tells the tenure whether it is stuck on its way to a hand-over (handover.quiet), and
// reports whether it just began to be: the driver then withdraws the offset stored last
// (driver.withdraw). While it is, a heartbeat that comes back late is not stored for commit and no
// explicit commit is asked for. librdkafka commits a stored offset once more when the partition is
// revoked, and the unassign of a hand-over waits for that commit, and any other in flight, to be
// answered before its LeaveGroup goes out: a round trip on the very path that made the tenure hand
// over. The commit gate (commitgate.go) already keeps one commit in flight at a time; with the
// stored offset withdrawn at once and none stored after it, that one is answered within a round
// trip of the quiet's start, and the unassign has none to send.
//
// Storing less cannot make the tenure lead where it would not have: a renewal needs the
// coordinator to accept a commit of an offset stored here (committed). Commits of offsets stored
// before that are in flight still renew it as before, and one that would be sent again proves
// nothing that the one in flight does not. A heartbeat that comes back promptly (readsBack) is
// stored, and ends the quiet, as a renewal does.
func (l *Lease) quiesce(quiet bool) bool {
	quiet = quiet && l.t.active
	began := quiet && !l.t.quiet
	l.t.quiet = quiet
	return began
}

// waiting reports whether the tenure still waits for a predecessor to release the partition.
func (l *Lease) waiting() bool {
	return len(l.t.releasing) > 0 && l.Now() < l.t.releaseBy
}

// unread is how long the current tenure has gone without reading back an own heartbeat, not
// counting time spent waiting for a predecessor, when it sends none; zero without a tenure.
func (l *Lease) unread() time.Duration {
	if !l.t.active {
		return 0
	}
	if l.waiting() {
		l.t.readAt = l.Now()
	}
	return l.Now() - l.t.readAt
}

// release applies a renewal held back by a predecessor, once nothing holds it back any longer.
func (l *Lease) release(out *LeaseOut) {
	if hb := l.t.held; hb != nil && l.t.verified && !l.waiting() {
		l.t.held = nil
		l.renew(out, *hb)
	}
}

// # 4. Renewal

// committed takes a commit of offset that the coordinator accepted, which renews the lease from
// the heartbeat stored at that offset, if tag (the commit's metadata) names that heartbeat. explicit says that goneli sent it (stalled, readBack) rather
// than librdkafka's auto-commit; an automatic one moves the anchor of the window for explicit
// ones (commitWindow) to when its offset was stored, and an explicit one renews only a heartbeat
// sent within that window (inWindow).
//
// Why an accepted commit is proof: the commit reached the coordinator after the heartbeat was
// sent, and the coordinator checked the member id and generation, so it still counted this
// instance as a member at the heartbeat's send time. It cannot expel a member sooner than a session
// timeout after the last group heartbeat it had from it, which was at most one group heartbeat
// interval before that send time; goneli derives the session timeout (config.go, groupTiming) to
// exceed HeartbeatTimeout plus two such intervals. So a lease that ends HeartbeatTimeout after the
// send time ends before any successor can be assigned the partition.
func (l *Lease) Committed(offset int64, tag string, explicit bool) LeaseOut {
	var out LeaseOut
	if offset < 0 {
		// A commit's result lists every partition the consumer holds; those it did not commit,
		// having nothing new stored, come back with a logical offset, which commits nothing.
		return out
	}
	l.lastCommitted = offset
	if !l.t.active {
		// A commit of an offset no tenure of this lease holds (the one librdkafka sends when the
		// partition is revoked) says nothing about when it was stored: it anchors nothing.
		return out
	}
	hb, ok := l.t.pending[offset]
	if ok && hb.tag != tag {
		// The commit of the same offset of another log: one stored before the log restarted
		// below it, whose result was under way (confirmed.tag). It was accepted before this
		// heartbeat was even sent, and proves nothing about it.
		l.c.mismatched++
		l.publish()
		return out
	}
	for off := range l.t.pending {
		if off <= offset {
			delete(l.t.pending, off)
		}
	}
	switch {
	case !ok:
	case l.heldAnswers(hb):
		l.c.held++
	case !explicit:
		// An automatic commit carries only an offset the driver stored (storedAt), so stored is
		// set; were it not, the commit renews but anchors nothing. Nor does an offset stored
		// while renewals are held (storedInHold): its heartbeat may be old enough to renew, but
		// librdkafka may have sent its commit unaware of a rebalance.
		if hb.stored != 0 && (!l.hasAuto || hb.anchor > l.AutoAt) && !l.storedInHold(hb) {
			l.AutoAt, l.hasAuto = hb.anchor, true
		}
		l.renew(&out, hb)
	case l.inWindow(hb.sent):
		l.renew(&out, hb)
	default:
		l.c.unwindowed++
	}
	l.publish()
	return out
}

// oldestPending is when the oldest offset of the tenure that waits for its commit was stored. An
// offset that the commit gate has not let librdkafka have yet does not count: librdkafka has not
// been asked to commit it, and the gate holds it back only while an earlier one is under way, which
// does count.
func (l *Lease) oldestPending() (time.Duration, bool) {
	var oldest time.Duration
	found := false
	for _, hb := range l.t.pending {
		if hb.stored == 0 {
			continue
		}
		if !found || hb.stored < oldest {
			oldest, found = hb.stored, true
		}
	}
	return oldest, found
}

// holdRenewals holds back, as heldAnswers does, the renewals of heartbeats sent after from, until
// a renewal of one sent after until (Machine.heldAssignment).
func (l *Lease) holdRenewals(from, until time.Duration) {
	if l.HeldUntil <= from || from < l.HeldFrom {
		l.HeldFrom = from
	}
	l.HeldUntil = max(l.HeldUntil, until)
	if l.StoreUntil <= from || from < l.StoreFrom {
		l.StoreFrom = from
	}
	l.StoreUntil = max(l.StoreUntil, until)
}

// storedInHold reports whether hb's offset anchors inside a hold of renewals after an assignment
// taken late (holdRenewals). That hold is keyed on when heartbeats were sent, and the anchor on
// when their offsets were stored: a heartbeat sent before the hold began but read back late, as one
// delayed in transit is, is stored inside it, and librdkafka may have sent an automatic commit of
// it, and had it accepted, unaware of the rebalance the hold is there for (it ignored the news
// until the assignment was taken, and its next group heartbeat may come a heartbeat interval
// later). The commit still renews from the heartbeat's send time, which it proves; but an anchor
// at the store would lie past the bound commitWindow needs. An anchor before the hold (a chain of
// stores that began earlier, storedSince) is as early as the argument asks. A hold of heldAnswers
// is not one of these: there an answer that comes after the group heartbeat's, on the same
// connection, is one librdkafka has heard the heartbeat's news before, and commitWindow's argument
// counts such stores already.
func (l *Lease) storedInHold(hb confirmed) bool {
	return hb.anchor > l.StoreFrom && hb.anchor <= l.StoreUntil
}

// holding reports whether the lease counts the coordinator connection as holding its answers back
// (heldAnswers): commits seen now renew no heartbeat sent from the hold's start until now.
func (l *Lease) holding() bool {
	return l.answerBound > 0 && (l.Now() <= l.HeldUntil || l.untimely)
}

// resetCommitted takes a commit of offset that reset librdkafka's committed offset below a log that
// restarted while explicit commits were held (driver.startCommits): it renews nothing, and
// librdkafka auto-commits the offsets above it from now on.
func (l *Lease) resetCommitted(offset int64) {
	if offset >= 0 {
		l.lastCommitted = offset
	}
}

// heldAnswers reports whether an accepted commit of hb must not renew because the coordinator
// connection held its answers back around the time hb was sent (answerBound set; it is, under both
// protocols).
//
// The broker answers a connection's requests in order, on one TCP stream, and librdkafka sends its
// group heartbeats on the connection that carries the commits. Answers held back on their way (a
// lost segment that TCP retransmits after seconds, say) hold back the answer of a group heartbeat
// that goes before them, and with it two things the lease argument rests on, while the commits sent
// meanwhile still reach the coordinator and are accepted:
//   - the heartbeat's answer is how librdkafka learns of a rebalance, and it auto-commits until it
//     does, so an automatic commit accepted late in a rebalance could anchor the window for explicit
//     commits too late (commitWindow; the simulation found this at a 500 ms lease);
//   - librdkafka sends the next group heartbeat only once the last is answered, and under KIP-848
//     only heartbeats keep the member's session (Apache Kafka refreshes it on commits for classic
//     groups alone, OffsetMetadataManager.validateOffsetCommit), so the coordinator's session runs
//     from the last heartbeat it received, and a lease renewed from a heartbeat sent during the
//     hold can outlast it.
//
// goneli sees neither the heartbeats nor their answers, but it sees the answers to the commits of
// the offsets it stores, on the same connection, and a leader stores one every renewal: a hold of
// more than answerBound shows as the answer to the first offset stored in it coming that much late.
// From then on commits renew only heartbeats sent before that offset was stored, or more than a
// group heartbeat interval after the store of an offset, stored since the last late answer was
// seen, whose answer came in time: that answer came after the answers to everything sent before it
// on the connection, group heartbeats included, and librdkafka sends its next group heartbeat
// within an interval and learns what it says. Until such an answer comes the hold lasts, however long: a
// connection that has answered nothing since a late answer may still be holding the answers back
// (the simulation found two leaders at a 500 ms and at a 1 s lease when the hold ended a heartbeat
// interval after the last late answer was seen, while the answers of a slow link, delivered in
// order, were still on their way: issue 46). A hold too short to show this way moves the anchor by
// at most answerBound and a renewal interval, which commitWindow subtracts.
func (l *Lease) heldAnswers(hb confirmed) bool {
	if l.answerBound <= 0 {
		return false
	}
	now, late := l.Now(), l.Now()-hb.stored > l.answerBound
	held := hb.sent > l.HeldFrom && (hb.sent <= l.HeldUntil || l.untimely)
	switch {
	case late && held:
		l.HeldUntil, l.untimely, l.lateSeen = max(l.HeldUntil, now+l.hbInterval), true, now
	case late:
		// The first answer seen late: its own heartbeat was sent before its offset was stored, so
		// no later than the hold began, and renews. The hold also covers the heartbeats that came
		// back before that store and still wait for their commit (the commit gate stores only the
		// newest, once the commit under way is answered): each may have been sent before the
		// store, and later in the hold than its own store will be.
		from := hb.stored
		for _, p := range l.t.pending {
			from = min(from, p.sent-1)
		}
		l.HeldFrom, l.HeldUntil = max(from, hb.sent), now+l.hbInterval
		l.untimely, l.lateSeen = true, now
	case l.untimely && hb.stored >= l.lateSeen:
		// In time, and stored since the last late answer was seen: the connection answers
		// promptly again. The answers to what librdkafka sent before the offset's store came
		// before this one, and its next group heartbeat goes out within an interval of it.
		l.untimely, l.HeldUntil = false, max(l.HeldUntil, hb.stored+l.hbInterval)
	}
	return held
}

// # 5. The group check

// checked takes the result of the group check started for tenure.
//
// The commit of step 4 proves membership of the current generation, not ownership of the
// partition: the coordinator checks no ownership, and members of the group that subscribe to
// another topic are assigned "partition 0" of that topic, whose commits pass as well. So a tenure
// leads only once a check made after its assignment found no member holding partitions of another
// topic (internal/driver, groupcheck.go). Renewals that come first are held back until then.
func (l *Lease) Checked(tenure uint64, r GroupCheck) LeaseOut {
	var out LeaseOut
	if !l.t.active || tenure != l.t.id {
		return out
	}
	l.t.checking = false
	now := l.Now()
	switch {
	case r.err != nil:
		l.t.checkDelay = ClampDuration(2*l.t.checkDelay, l.poll, l.timeout)
		l.t.checkAt = now + l.t.checkDelay
	case r.Verdict.Conflict != nil:
		l.t.conflict = r.Verdict.Conflict
		l.t.checkAt = now + l.timeout
	case !r.Verdict.SawSelf:
		// The description predates the assignment, or hides assignments while the group
		// rebalances (kfake does); the group is about to settle, so look again soon.
		l.t.checkAt = now + inconclusiveCheckRetry
	default:
		l.t.verified, l.t.conflict = true, nil
		l.release(&out)
	}
	l.publish()
	return out
}

// cleared reports whether tenure is the current one and a group check has cleared it.
func (l *Lease) cleared(tenure uint64) bool {
	return l.t.active && l.t.id == tenure && l.t.verified
}

// inconclusiveCheckRetry is how soon a group check that could not see this instance's own
// assignment is made again: two small requests to the coordinator each time, while a rebalance
// settles.
const inconclusiveCheckRetry = 20 * time.Millisecond

// # 6. Acquisition

// renew extends the lease to the confirmed heartbeat's send time plus HeartbeatTimeout, unless that
// moment has passed already (a late heartbeat never revives a lease). The first renewal of a
// tenure acquires leadership and fixes its fencing token: the heartbeat's offset plus one. Offsets
// only grow within a log, and a tenure can confirm a heartbeat only after the previous holder's
// lease ended, so tokens grow from tenure to tenure. A fenced tenure that is renewed again acquires
// again, with the same token.
func (l *Lease) renew(out *LeaseOut, hb confirmed) {
	now := l.Now()
	if now >= hb.sent+l.timeout {
		l.c.Late++
		return
	}
	l.lag = now - hb.sent
	// A lease that ran out before anything fenced it (the watchdog waits for the lock that the
	// cycle delivering this renewal holds) is fenced now, so that its events still say so and the
	// renewal acquires afresh.
	l.lapse(out)
	if !l.t.verified || l.waiting() {
		if l.t.held == nil || hb.sent > l.t.held.sent {
			l.t.held = &hb
		}
		return
	}
	extends := hb.sent > l.t.renewedSent
	l.t.renewedSent = max(l.t.renewedSent, hb.sent)
	if l.t.leading {
		l.t.extended = l.t.extended || extends
		return
	}
	l.t.leading = true
	l.t.ledFrom = now
	l.t.relapsed, l.t.extended = l.t.acquired, false
	l.t.quiet = false
	if !l.t.acquired {
		l.t.acquired = true
		l.t.since = l.clock.Now().Round(0) // a wall time for events and heartbeats, not for leases
		l.t.token = hb.offset + 1
	}
	// Observers (Describe, Watch, neli status) take the leader from the newest heartbeat that
	// carries a token, and on a first acquisition none does yet: the next heartbeat is due at
	// once, so that they see the new leader as soon as it leads rather than one interval later.
	// After a fence it is as welcome: it renews the lease that much sooner.
	l.t.next = 0
	l.c.Acquired++
	l.Epoch++
	out.Events = append(out.Events, Acquired{Role: l.role, Tenure: l.t.name(), Token: l.t.token, Since: l.t.since})
}

// # 7. Fencing

// expire fences a lease that has run out: HeartbeatTimeout after the send time of the newest
// renewing heartbeat. The watchdog calls it at that instant, so that LeaderFenced arrives even when
// nobody pulses; IsLeader turns false at the instant itself (valid), whoever calls what.
func (l *Lease) Expire() LeaseOut {
	var out LeaseOut
	if l.lapse(&out) {
		l.publish()
	}
	return out
}

// lapse fences a lease that has run out, and reports whether it did.
func (l *Lease) lapse(out *LeaseOut) bool {
	if l.t.leading && l.Now() >= l.t.renewedSent+l.timeout {
		l.fence(out, l.lapsedReason())
		return true
	}
	return false
}

// deadline is when the current lease ends, and whether there is one to watch.
func (l *Lease) deadline() (time.Duration, bool) {
	return l.t.renewedSent + l.timeout, l.t.leading
}

func (l *Lease) lapsedReason() string {
	return fmt.Sprintf("no own heartbeat confirmed within HeartbeatTimeout (%v)", l.timeout)
}

// rejected takes a commit that the coordinator refused because the member or its generation is
// gone: the group no longer counts this instance as the owner.
func (l *Lease) rejected(reason string) LeaseOut {
	l.c.Rejected++
	return l.fail("group coordinator rejected the heartbeat commit: " + reason)
}

// fail fences for a reason found outside the protocol, such as a fatal client error.
func (l *Lease) fail(reason string) LeaseOut {
	var out LeaseOut
	if l.t.active {
		l.fence(&out, reason)
	}
	l.publish()
	return out
}

func (l *Lease) fence(out *LeaseOut, reason string) {
	if !l.t.leading {
		return
	}
	l.t.leading = false
	if !l.t.relapsed || l.t.extended {
		// A tenure that led again after a fence only on the renewal that re-acquired, one whose
		// heartbeat was nearly a lease old, say, has not shown that it can renew: it has not led
		// since its earlier fence, as far as a hand-over is concerned.
		l.t.idleFrom = l.Now()
	}
	l.c.Fenced++
	if l.recheck {
		l.t.verified, l.t.checkAt, l.t.checkDelay = false, l.Now(), 0
	}
	out.Events = append(out.Events, Fenced{Role: l.role, Tenure: l.t.name(), Token: l.t.token, Reason: reason, LeaseAge: l.Now() - l.t.renewedSent})
}

// # 8. Revocation

// revoke ends the tenure when the group takes the partition back: fenced first if the assignment
// was lost (the group moved on without this member, so a successor may already hold it) or the
// lease had lapsed unnoticed, then revoked if the tenure ever acquired.
func (l *Lease) Revoke(lost bool) LeaseOut {
	var out LeaseOut
	if !l.t.active {
		return out
	}
	switch {
	case lost:
		l.fence(&out, "partition assignment lost")
	case l.t.leading && l.Now() >= l.t.renewedSent+l.timeout:
		// The lease ran out before anything noticed (the pulsing goroutine was in the poll that
		// ended with this revocation): the events must still say so.
		l.fence(&out, l.lapsedReason())
	}
	l.t.leading, l.t.active = false, false
	if l.t.acquired {
		l.c.Revoked++
		out.Events = append(out.Events, Revoked{Role: l.role, Tenure: l.t.name(), Token: l.t.token})
		if !lost {
			// A lost assignment went to a successor already; an orderly one may wait for the
			// barrier, and says so to the successor (see foreign).
			out.release = &Heartbeat{Tenure: l.t.id, Seq: l.t.seq + 1, SentWall: l.clock.Now().UnixNano(), SentMono: l.Now(),
				Since: l.t.since.UnixNano(), Token: l.t.token, Kind: KindReleasing, Role: l.role}
		}
	}
	l.t.pending = nil
	l.publish()
	return out
}

// # What other goroutines read

func (l *Lease) publish() {
	v := &LeaseView{
		Assigned:  l.t.active,
		Releasing: l.t.active && l.waiting(),
		Leading:   l.t.leading,
		Epoch:     l.Epoch,
		Tenure:    l.t.id,
		Token:     l.t.token,
		Since:     l.t.since,
		End:       l.t.renewedSent + l.timeout,
		RTT:       l.rtt,
		Lag:       l.lag,
		Conflict:  l.t.conflict,
		Counts:    l.c,
		Idle:      l.t.idleFrom,
		Led:       l.t.ledFrom,
		Heard:     l.t.heardAt,
		Excused:   l.excused(),
	}
	if !l.t.acquired {
		v.Token, v.Since = 0, time.Time{}
		if l.t.active {
			v.ProveBy = l.t.assigned + l.timeout
		}
	}
	l.view.Store(v)
}

// load returns the published view.
func (l *Lease) Load() *LeaseView {
	return l.view.Load()
}

// now is the time on the lease's monotonic scale.
func (l *Lease) Now() time.Duration {
	return l.clock.Now().Sub(l.base)
}

// valid reports whether v grants leadership at instant now: the protocol leads, the barrier has
// seen the LeaderAcquired behind it, and the lease has not run out.
func (l *Lease) valid(v *LeaseView, now time.Duration) bool {
	return l.Announced(v) && now < v.End
}

// announced reports whether v leads and the barrier has returned from the LeaderAcquired behind it,
// whether or not the lease has run out since (Stats.Leading).
func (l *Lease) Announced(v *LeaseView) bool {
	return v.Leading && l.delivered.Load() >= v.Epoch
}

// isLeader is valid for the current view and time.
func (l *Lease) IsLeader() bool {
	return l.valid(l.Load(), l.Now())
}

// newestEpoch numbers the newest LeaderAcquired the lease has answered with, which the driver
// passes back to acquiredDelivered once the barrier has returned from it.
func (l *Lease) newestEpoch() uint64 {
	return l.Epoch
}

// active reports whether a tenure is under way: the partition is assigned and not revoked since.
func (l *Lease) active() bool {
	return l.t.active
}

// tenure names the current or last tenure, for the group check and the logs.
func (l *Lease) Tenure() (id uint64, name string) {
	return l.t.id, l.t.name()
}

// acquiredDelivered records that the barrier has returned from the LeaderAcquired numbered epoch.
func (l *Lease) AcquiredDelivered(epoch uint64) {
	for {
		old := l.delivered.Load()
		if old >= epoch || l.delivered.CompareAndSwap(old, epoch) {
			return
		}
	}
}
