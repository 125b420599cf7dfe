package core

import (
	"sync/atomic"
	"time"
)

// # One offset commit in flight
//
// librdkafka's auto-commit timer (auto.commit.interval.ms, a quarter poll here) commits, at every
// tick and only while the consumer is steady in its group, each stored offset that is above the
// offset it committed last, and it learns what it committed only from the commit's answer
// (librdkafka 2.11.1, rdkafka_cgrp.c rd_kafka_cgrp_offset_commit_tmr_cb and rdkafka_partition.c
// rd_kafka_topic_partition_list_set_offsets, which has no check for a commit in flight). So a
// stored offset goes out again at every tick until an answer comes back: with answers 400 ms late
// one leader had 56 commits queued on the coordinator connection, ahead of its group heartbeats,
// and the slower the broker answered the more it got (TestOneCommitInFlightOnASlowCoordinator,
// without the gate).
//
// The gate keeps one commit in flight per consumer, automatic or explicit, whatever the broker's
// latency, and keeps automatic commits as what they are for the window of explicit ones (the
// anchor, lease.committed): proof that librdkafka was steady in the group when it sent them.
//
//   - An offset is stored only while no commit is under way or may be: none stored and not yet
//     withdrawn, no automatic commit that may still be answered, no explicit commit unanswered.
//   - A stored offset is withdrawn (stored as OffsetInvalid, which the timer skips) a little less
//     than a tick after it was stored: less by a twenty-fifth of a tick, at least a millisecond.
//     The timer reads the stored offsets at moments at least a tick apart (it schedules its next
//     run a tick after the callback returns, rdkafka_timer.c rd_kafka_timer_schedule), so it
//     reads the offset at most once: one commit of it, or none if the tick fell after the
//     withdrawal or librdkafka was rejoining. The window is measured from before the store call
//     to after the withdrawal returned; one that came out a tick or longer (this process starved
//     of CPU: Stats.LateWithdrawals) may have carried more commits, one per tick, and the gate
//     then waits for as many answers. Until a consumer's first commit has been answered an
//     offset stays stored a little longer than a tick instead, so that a new tenure's first proof
//     does not wait for a presumption; a second commit of it goes out only if the first is not
//     answered within a tick.
//   - A store made after a presumption, if the store presumed was not itself one, is made half a
//     tick late (the store's time for the lease stays when it was asked for, which only shortens
//     what it proves): a store at a phase just after librdkafka's tick misses it, and cycles
//     commensurate with the tick would otherwise bring every later store to that phase.
//   - An automatic commit that may have been sent counts as in flight until its answer (any
//     OffsetsCommitted event: each answers one commit librdkafka made of a stored offset, as it
//     reports none of the ticks that found nothing to commit) or until it is presumed unsent: the
//     longest answer time seen lately has passed since the withdrawal, a quarter more and a tick
//     (patience). A presumed commit that is answered after all raises that time, and every
//     presumption since the last answer doubles it, up to a quarter lease, and it never exceeds
//     half a lease. A store made after the stores since the last answer were all presumed unsent
//     anchors the window for explicit commits where the first of them would have (store): a
//     presumption may come later than the answer bound that the lease measures an answer's lateness
//     against (lease.heldAnswers), and the window rests on the anchor coming within that bound or a
//     renewal interval of a rebalance's first group heartbeat, or on an answer showing the delay
//     (commitWindow).
//   - An explicit commit (commit.go) starts only while the gate is idle, and nothing is stored
//     while one is under way.
//
// Why this cannot renew a lease that would not have been renewed without it: a renewal needs a
// commit of an offset stored by the lease, answered by the coordinator (lease.committed). The gate
// only ever stores fewer offsets, for less time, and sends fewer explicit commits; every commit
// that still goes out is one librdkafka or the committer would have sent anyway, with the same
// generation and member id, so each proves what it proved before. The anchor of the window for
// explicit commits stays the store time of an offset that an automatic commit got accepted; an
// offset stored again after a presumed loss keeps its first store time, which is no later than any
// of its commits' sending, and a newer offset stored in its place anchors at that time too.
//
// What it costs: a renewal now waits for the previous commit's answer, so on a slow broker the
// leader renews once per commit round trip rather than once per RenewInterval (which it could not
// use anyway: the commits queued behind one another), and a lease outlasts only commit round trips
// well under half of it. A store misses its tick when the tick falls in the last twenty-fifth of it
// or comes late, one in twenty or so on a quiet machine (more on a busy one, where librdkafka's
// thread wakes late); its renewal then waits for the presumption and the next tick, a couple of
// poll intervals on a healthy broker, or an explicit commit takes over (lease.stalled). Failover is
// unchanged: it waits for the session or the LeaveGroup, not for commits; a close or a revocation
// withdraws what is stored first, so the unassign that precedes the LeaveGroup has nothing to
// commit.
type commitGate struct {
	// storer stores offsets for librdkafka's auto-commit (StoreOffsets) and returns those it
	// stored; an offset of OffsetInvalid (-1001) withdraws one. It returns at once: librdkafka
	// only records the offset for its timer.
	storer Storer
	// tick is auto.commit.interval.ms; hold how long an offset stays stored, a little less.
	tick, hold time.Duration
	// late is how long an answer may take before any has been seen: the group heartbeat interval,
	// beyond which an answer counts as late (machine.holdCommits).
	late time.Duration
	now  func() time.Duration

	closed bool
	armed  *gateStore // stored and not withdrawn yet
	// at is when the armed store's withdrawal, or its placement for a shifted one, is due (alarm).
	at time.Duration
	// stores are the recent stores, oldest first, that answers are matched with; an unsettled
	// one keeps the gate busy.
	stores []*gateStore
	// latencies are the times the latest commits took to be answered, automatic (from the store)
	// and explicit. doubt counts the stores presumed unsent since the last answer: each doubles
	// the patience of the next, up to most (a quarter lease). So a broker slower than the gate
	// guessed gets at most one more commit per doubling before an answer tells the gate how slow
	// it is, and a coordinator that cannot be reached for a while gets one deferred commit per
	// doubling, sent when it is back (librdkafka defers an automatic commit while it has no
	// coordinator: rd_kafka_cgrp_defer_offset_commit), rather than one per poll.
	latencies []time.Duration
	doubt     int
	most      time.Duration
	// chainAt is when the first store was made since the gate last settled with an answer
	// (chained): a store made after stores presumed unsent counts as made then (store).
	chainAt time.Duration
	chained bool
	// shift says that the next store after a presumption is shifted by half a tick: the store
	// presumed last was not (store).
	shift bool
	// counts are the instance's, kept across its consumers' gates (Stats).
	counts *gateCounts
}

// storer is librdkafka's StoreOffsets as the gate needs it: what was stored, among offsets.
type Storer func(offsets []OffsetRef) ([]OffsetRef, error)

// offsetRef is an offset of a partition of the leader topic, with the metadata a commit of it
// carries (lease.confirmed.tag).
type OffsetRef struct {
	Partition int32
	Offset    int64
	Tag       string
}

// offsetInvalid is librdkafka's logical offset for "none": stored, it withdraws an offset.
const OffsetInvalid = -1001

// gateCounts counts what the gates of an instance did.
type gateCounts struct {
	stores, withdrawals, answers atomic.Uint64
	Presumed                     atomic.Uint64 // stores presumed never sent
	strays                       atomic.Uint64 // answers that came after their store was presumed never sent
	Doubled                      atomic.Uint64 // stores whose window came out a tick or longer
}

// gateTally is a snapshot of gateCounts.
type gateTally struct {
	stores, withdrawals, answers, presumed, Strays, doubled uint64
}

// gateStore is one store of offsets and what became of it.
type gateStore struct {
	// stored is what was stored, live what of it is still stored.
	stored, live []OffsetRef
	at           time.Duration // before the store call
	// withdrawn is when the withdrawal returned; zero while stored. sends bounds the automatic
	// commits that may carry the offsets, answers counts those answered.
	withdrawn      time.Duration
	sends, answers int
	presumeBy      time.Duration
	hint           time.Duration // a latency known when it was stored (a heartbeat's round trip)
	long           bool          // stored for longer than a tick on purpose (store)
	presumed       bool
	// from is when the StoreOffsets call began, once placed: half a tick after at for a store
	// shifted after a presumption (store), at otherwise.
	from            time.Duration
	placed, shifted bool
}

// gateHistory is how many stores and answer times the gate keeps.
const gateHistory = 8

func newCommitGate(st Storer, tick, late, most time.Duration, now func() time.Duration, counts *gateCounts) *commitGate {
	return &commitGate{storer: st, tick: tick, hold: tick - max(time.Millisecond, tick/25), late: late, most: most, now: now, counts: counts}
}

// busy reports whether a store may not be made now, presuming unsent the commits whose time has
// passed, and returns the stores just presumed unsent, whose offsets may be stored again.
func (g *commitGate) busy(now time.Duration) (bool, []*gateStore) {
	var presumed []*gateStore
	busy := g.armed != nil
	for _, s := range g.stores {
		if s.withdrawn == 0 || s.answers >= s.sends {
			continue
		}
		if now >= s.presumeBy {
			s.presumed = true
			s.sends = s.answers
			g.shift = !s.shifted
			g.doubt++
			g.counts.Presumed.Add(1)
			presumed = append(presumed, s)
			continue
		}
		busy = true
	}
	return busy, presumed
}

// store stores offsets for commit and arms their withdrawal, unless the gate has been closed, and
// returns when it began (read before the StoreOffsets call), when its chain began, and what may now
// be stored (lease.storedSince). hint is a latency the caller knows of. The caller has made sure
// the gate is not busy.
//
// A store's chain began with it, or, if the stores since the last answer were all presumed unsent,
// with the first of them: nothing answered shows how late the connection is meanwhile, and a
// presumption can come up to a quarter lease after its store, more than the answer bound
// (lease.heldAnswers), and again after every store presumed unsent in turn. An offset of the chain
// anchors the window for explicit commits no later than its first store could have (commitWindow
// gives the argument). An answer settles the chain: the next store starts another.
func (g *commitGate) Store(offsets []OffsetRef, hint time.Duration) (at, chain time.Duration, stored []OffsetRef, err error) {
	if g.closed || len(offsets) == 0 {
		return 0, 0, nil, nil
	}
	s := &gateStore{at: g.now(), hint: hint}
	if g.doubt > 0 && g.shift {
		// The store presumed unsent last may have missed its tick because of its phase: withdrawn
		// just before the tick, as a store made just after one is. goneli's cycles and
		// librdkafka's timer run on periods that can be commensurate (a patience at its cap is a
		// whole number of polls, and those can be a whole number of ticks), and then every store
		// comes at that phase, each is presumed unsent, and a new tenure never leads (the
		// simulation found it so, seeds 7008093 and 7013515). Half a tick later, the store is at
		// a phase where its window holds a tick; shifting every other store after a presumption,
		// not each, keeps a phase that missed from being shifted onto one that would too.
		s.shifted = true
		s.stored = append([]OffsetRef(nil), offsets...)
	} else if err = g.place(s, offsets); !s.placed {
		return s.at, s.at, nil, err
	}
	s.live = append([]OffsetRef(nil), s.stored...)
	chain = s.at
	if g.chained {
		chain = min(chain, g.chainAt)
	} else {
		g.chainAt, g.chained = s.at, true
	}
	g.counts.stores.Add(1)
	g.armed = s
	g.remember(s)
	if s.shifted {
		g.at = s.at + g.tick/2
	} else {
		g.arm(s)
	}
	return s.at, chain, s.stored, err
}

// due is when the gate must act next (alarm): the armed store's withdrawal, or the placement of a
// store shifted by half a tick. The shell calls alarm then, whatever else the instance is doing
// (a poll in progress included): the withdrawal must come within a tick of the store.
func (g *commitGate) due() (time.Duration, bool) {
	if g.closed || g.armed == nil {
		return 0, false
	}
	return g.at, true
}

// alarm withdraws the armed store, or places a shifted one, if its time has come.
func (g *commitGate) alarm(now time.Duration) {
	s := g.armed
	if g.closed || s == nil || now < g.at {
		return
	}
	if s.shifted && !s.placed {
		g.placeShifted(s)
		return
	}
	g.withdrawArmed(s.live)
}

// place makes the StoreOffsets call of s and records what it stored.
func (g *commitGate) place(s *gateStore, offsets []OffsetRef) error {
	s.from = g.now()
	stored, err := g.storer(offsets)
	s.stored = nil
	for _, o := range stored {
		if o.Offset >= 0 {
			s.stored = append(s.stored, o)
		}
	}
	if err != nil && len(stored) == 0 {
		// Nothing is known to be stored; an offset that was is withdrawn with the rest.
		s.stored = offsets
	}
	s.placed = len(s.stored) > 0
	return err
}

// placeShifted makes the store s that was shifted by half a tick, at its time (alarm). A store that
// stored nothing (its partitions no longer assigned) ends with nothing in flight, and nothing is
// presumed of it: the lease's next renewal asks for a store again.
func (g *commitGate) placeShifted(s *gateStore) {
	if _ = g.place(s, append([]OffsetRef(nil), s.live...)); !s.placed {
		g.end(s)
		return
	}
	s.live = append([]OffsetRef(nil), s.stored...)
	g.arm(s)
}

// arm sets the withdrawal of the store s, just placed.
func (g *commitGate) arm(s *gateStore) {
	hold := g.hold
	if len(g.latencies) == 0 {
		// No commit answered yet (a new tenure's first proof, typically): the offset stays stored
		// a little longer than a tick, so that the proof does not wait out a presumption for a
		// tick that fell just after the withdrawal. A second commit of it goes out only if the
		// first is unanswered at the next tick, which a broker answering within a tick never
		// lets happen, and is accounted for (sends) like a late withdrawal.
		hold, s.long = g.tick+(g.tick-g.hold), true
	}
	g.at = s.from + hold
}

// settle ends the chain of stores (chainAt) once an answer has come and no store may still be
// answered.
func (g *commitGate) settle() {
	if g.armed != nil {
		return
	}
	for _, s := range g.stores {
		if s.withdrawn != 0 && s.answers < s.sends {
			return
		}
	}
	g.chained = false
}

// remember adds s to the stores that answers are matched with, forgetting the oldest settled one
// beyond gateHistory.
func (g *commitGate) remember(s *gateStore) {
	g.stores = append(g.stores, s)
	for len(g.stores) > gateHistory {
		old := g.stores[0]
		if old == g.armed || (old.withdrawn != 0 && old.answers < old.sends) {
			break
		}
		g.stores = g.stores[1:]
	}
}

// A withdrawal that its alarm makes late by a tick or more (a process starved of CPU: a margin of
// half a tick would not have stopped the spikes of tens of milliseconds seen on a machine loaded
// five times over, and it made every second store miss its tick) may let librdkafka send the offset
// twice; end counts it (Stats.LateWithdrawals), and the gate then waits for both answers.

// withdrawArmed withdraws offsets of the armed store, and ends the store when nothing of it is
// stored any longer.
func (g *commitGate) withdrawArmed(offsets []OffsetRef) {
	s := g.armed
	if s == nil || len(offsets) == 0 {
		return
	}
	gone := make([]OffsetRef, 0, len(offsets))
	for _, o := range offsets {
		gone = append(gone, OffsetRef{Partition: o.Partition, Offset: OffsetInvalid})
	}
	if s.placed {
		// An error leaves the offset stored: it is withdrawn again when the store ends, and a
		// partition that is no longer assigned has nothing to commit anyway.
		_, _ = g.storer(gone)
		g.counts.withdrawals.Add(1)
	}
	var kept []OffsetRef
	for _, o := range s.live {
		withdrawn := false
		for _, w := range offsets {
			withdrawn = withdrawn || w.Partition == o.Partition
		}
		if !withdrawn {
			kept = append(kept, o)
		}
	}
	s.live = kept
	if len(kept) > 0 {
		return
	}
	g.end(s)
}

// end finishes the armed store s: its window is over.
func (g *commitGate) end(s *gateStore) {
	g.armed = nil
	now := g.now()
	s.withdrawn = max(now, s.at+1, s.from+1)
	// The timer reads stored offsets at moments at least a tick apart, so a window shorter than a
	// tick holds at most one of them; a shifted store withdrawn before it was placed holds none.
	if s.placed {
		s.sends = int((s.withdrawn-s.from)/g.tick) + 1
	}
	if s.sends > 1 && !s.long {
		g.counts.Doubled.Add(1)
	}
	s.presumeBy = s.withdrawn + g.patience(s.hint)
}

// patience is how long after a withdrawal an unanswered commit is presumed never sent: the longest
// time a commit took to be answered lately (or hint, a heartbeat's round trip, if longer), a
// quarter more, and a tick; before any commit has been answered the gate guesses at least a group
// heartbeat interval, the time beyond which goneli counts an answer as late anyway
// (machine.holdCommits). Each store presumed unsent since the last answer doubles it, up to most.
// It never exceeds twice most, half a lease, as no answer that late renews the lease anyway: a
// poll loop that was paused sees an answer as late as the pause, and an answer time of seconds
// kept the gate from storing for longer still after a missed tick (the simulation found a leader
// that never renewed again so).
func (g *commitGate) patience(hint time.Duration) time.Duration {
	l := max(hint, g.tick)
	if len(g.latencies) == 0 {
		l = max(l, g.late)
	}
	for _, d := range g.latencies {
		l = max(l, d)
	}
	base := l + l/4 + g.tick
	return min(max(base, min(base<<min(g.doubt, 5), g.most)), 2*g.most)
}

// answered records how long an explicit commit took to be answered: it went to the same
// coordinator, on the same connection, as the automatic ones. (A group check's round trip would
// not do: a coordinator whose log appends are slow answers commits far later than descriptions.)
func (g *commitGate) answered(took time.Duration) {
	g.sample(took)
	g.doubt = 0
	g.settle()
}

// sample records a commit's answer time.
func (g *commitGate) sample(d time.Duration) {
	g.latencies = append(g.latencies, d)
	if len(g.latencies) > gateHistory {
		g.latencies = g.latencies[1:]
	}
}

// answer takes the answer to one of librdkafka's commits of stored offsets, naming offsets, seen in
// a poll after one that found the queue empty at since (machine.drainedAt).
//
// The answer came in somewhere after since. If the loop polled again promptly, now less the store
// time is its answer time; after a loop that paused (the process stopped or starved of CPU for more
// than a group heartbeat interval), most of that may be the pause, and the answer time is known only
// to be at least since less the store time, which is what is recorded, if anything. Recording the
// pause would stretch the patience of every presumption to come for as long as the gate remembers
// it, up to half a lease each: a leader that then misses a tick renews half a lease late, and a new
// tenure's first proof waits as long (the simulation found failovers past their bound so). Taking
// an answer time too short costs at most one more commit in flight, whose answer, coming after its
// store was presumed unsent, raises the time again.
func (g *commitGate) answer(offsets []OffsetRef, since time.Duration) {
	g.counts.answers.Add(1)
	if a := g.armed; a != nil && !a.placed && answers(a, offsets) {
		// A store shifted after a presumption waits to be placed, and the presumed commit of its
		// offset has just been answered after all: there is nothing left for it to do.
		g.withdrawArmed(a.live)
	}
	s := g.match(offsets)
	if s == nil {
		return
	}
	now := g.now()
	s.answers++
	if s.presumed {
		// Sent after all, and answered late: the broker is slower than the gate thought, which
		// the latency it now records says for the stores to come.
		g.counts.strays.Add(1)
		s.sends = s.answers
	} else {
		g.doubt = 0
	}
	if now-since <= g.late {
		g.sample(now - s.from)
	} else if since > s.from {
		g.sample(since - s.from)
	}
	if s.presumed {
		// The stores withdrawn since are waiting out a patience that this answer shows too short:
		// they wait as long as the answer time now learnt says, so that each is not presumed unsent
		// in turn while its commit is still on its way.
		for _, o := range g.stores {
			if o != s && o.withdrawn != 0 && o.answers < o.sends {
				o.presumeBy = max(o.presumeBy, o.withdrawn+g.patience(o.hint))
			}
		}
	}
	if s == g.armed {
		// Answered before its withdrawal: withdrawn now, as a failed commit leaves the offset
		// above the committed one, where the next tick would send it again.
		g.withdrawArmed(s.live)
	}
	if s.answers < s.sends {
		// A window that came out a tick or longer may have let a second commit go; if it did,
		// its answer follows the first within about a tick, as the coordinator answers a
		// connection's requests in order. (Answers are seen a poll late, which only adds.)
		s.presumeBy = min(s.presumeBy, now+2*g.tick)
	}
	g.settle()
}

// match finds the store that an answer naming offsets answers: of the stores that may still be answered, the oldest
// whose offset for a partition e names is e's; else the oldest presumed unsent with such an offset
// (answered late); else the oldest that may still be answered. An offset stored again after its
// first store was presumed unsent is ambiguous: the answer goes to the later store, which at worst
// lets one more commit start while the earlier is still under way, as the wrong presumption
// itself did.
func (g *commitGate) match(offsets []OffsetRef) *gateStore {
	pending := func(s *gateStore) bool { return (s.withdrawn == 0 && s.placed) || s.answers < s.sends }
	names := func(s *gateStore) bool { return answers(s, offsets) }
	for _, pick := range []func(*gateStore) bool{
		func(s *gateStore) bool { return pending(s) && names(s) },
		func(s *gateStore) bool { return s.presumed && names(s) },
		pending,
	} {
		for _, s := range g.stores {
			if pick(s) {
				return s
			}
		}
	}
	return nil
}

// answers reports whether offsets name an offset that s stored.
func answers(s *gateStore, offsets []OffsetRef) bool {
	for _, o := range s.stored {
		for _, a := range offsets {
			if a.Partition == o.Partition && a.Offset == o.Offset {
				return true
			}
		}
	}
	return false
}

// withdraw withdraws whatever of partitions is stored, at once: the partitions are being revoked,
// or their tenure stores nothing (lease.quiesce), or the instance is closing.
func (g *commitGate) withdraw(partitions ...int32) {
	if g.closed || g.armed == nil {
		return
	}
	var offsets []OffsetRef
	for _, o := range g.armed.live {
		for _, id := range partitions {
			if o.Partition == id {
				offsets = append(offsets, o)
			}
		}
	}
	g.withdrawArmed(offsets)
}

// withdrawAll withdraws every stored offset.
func (g *commitGate) withdrawAll() {
	if g.closed || g.armed == nil {
		return
	}
	g.withdrawArmed(g.armed.live)
}

// holds reports whether an offset of partition is stored.
func (g *commitGate) holds(partition int32) bool {
	if g.armed == nil || !g.armed.placed {
		return false
	}
	for _, o := range g.armed.live {
		if o.Partition == partition {
			return true
		}
	}
	return false
}

// close stops the gate before its consumer closes: it stores and withdraws nothing from then on.
func (g *commitGate) Close() {
	g.closed = true
}

// snapshot returns the counts of the gates of the gate's instance.
func (g *commitGate) Snapshot() gateTally {
	c := g.counts
	return gateTally{stores: c.stores.Load(), withdrawals: c.withdrawals.Load(), answers: c.answers.Load(),
		presumed: c.Presumed.Load(), Strays: c.strays.Load(), doubled: c.Doubled.Load()}
}
