package core

import "time"

// A member can keep its group session and still be unable to renew: its path to the broker that
// leads the leader topic's partition is slow or lossy while the coordinator is another broker,
// its producer is stuck on stale metadata, or everything it sends is delayed by a few hundred
// milliseconds, which the group heartbeats survive and a produce, fetch and commit round trip
// does not. Its lease runs out, but the group, which only watches the session, leaves it the
// partition, and nobody leads for as long as the gray failure lasts. So an assignee that has not
// led for Config.HandOverAfter hands the partition over: it leaves the group as a Yield does, so
// that a healthy member is assigned the partition, and contends again after a back-off.
//
// What marks such a member is that its own heartbeats do not come back promptly. One whose
// heartbeats do come back but whose commits are not accepted is one that a rebalance holds up
// (under the classic protocol a rebalance holds every renewal until it completes, and one that
// waits for a member that died can last a session, or librdkafka's wait of up to a second to
// rejoin): handing over would move leadership for a stall that ends by itself, within the
// rebalance timeout, and that would stall a successor just as much. So such a member waits, and
// the wait does not count toward the bound: what counts is the time since a cycle last saw the
// heartbeats come back promptly (tenure.heardAt). Otherwise a stall of the member's own at the end
// of such a hold, the rebalance callback's wait of up to half a lease for the ends of the
// partitions it is given, which reads nothing back, makes the whole hold count at once: the last
// member of a group, assigned every role once the rebalance ends, hands over to nobody.
//
// Leaving the group waits for the consumer's commits in flight: librdkafka sends the LeaveGroup only
// once every one of them is answered, and on the slow path that makes a member hand over each
// takes most of a lease. So for the last lease before a hand-over is due (from the fence, at the
// default bound) a stuck tenure withdraws its stored offset and stores no other (quiet), and its
// commits have drained by the time it leaves.
//
// When every member is equally sick, each assignee would hand over in turn and the partition would
// circle the group, costing two rebalances per turn. The back-off therefore doubles with every
// hand-over that follows the last without a tenure that led for handOverSettle in between, up to
// handOverMaxBackoff, and cooperative-sticky assignment leaves the partition where it is when a
// member returns, so a returning member is not preferred over one that took over.
//
// A member alone in its group gains nothing from handing over, but cannot tell that it is alone:
// what it knows of the group is from its last group check. Such a member leaves and rejoins with
// the back-off as any other does; Config.HandOverAfter can put that off, or turn it off.
//
// The whole instance hands over, not one role: a role can be given up only by leaving the group,
// which takes every role of the instance with it. A member that cannot renew one role while it
// renews others therefore gives up the others too; they are revoked in order (LeaderRevoked) and
// go to other members, and the instance may be given some of them again when it returns. Leaving
// a role without a leader for as long as the fault lasts would be the worse trade.

// handOverBound is the default Config.HandOverAfter, how long a tenure may go without leading
// before its instance hands over: one HeartbeatTimeout. A leader that stops renewing is fenced one
// lease after the send time of the heartbeat behind its last renewal, and hands over one lease
// later. A tenure that has yet to lead is given twice the bound from its assignment (or from the
// group check that cleared it): it normally proves its first lease in a few round trips, but the
// proof waits for librdkafka's first automatic commit of the membership, whose interval the
// settings or a rebalance can stretch.
//
// A shorter bound would hand over on the rebalances that stop a healthy leader's renewals for most
// of a session (see the package doc, Liveness); a longer one would keep the role without a leader
// longer. The successor is elected after the rebalance that the departure starts.
func HandOverBound(lease time.Duration) time.Duration {
	return lease
}

// handOverBackoff is how long an instance stays out of the group after its first hand-over in a
// row; handOverMaxBackoff caps the doubling; handOverSettle is how long a tenure must lead without
// a break for the next hand-over to count as the first again.
func handOverBackoff(lease time.Duration) time.Duration    { return 2 * lease }
func handOverMaxBackoff(lease time.Duration) time.Duration { return 16 * lease }
func handOverSettle(lease time.Duration) time.Duration     { return 4 * lease }

// handover decides when an instance hands over and for how long it stays out. It is pure: the
// driver tells it, every cycle, the time and what each of its roles' leases shows (decide), and
// carries the decision out (driver.checkHandOver).
type handover struct {
	lease, bound, backoff, maxBackoff, settle time.Duration
	// strikes counts the hand-overs since a tenure last led for settle without a break.
	strikes int
}

// newHandover decides for a lease of HeartbeatTimeout and a Config.HandOverAfter of bound.
func newHandover(lease, bound time.Duration) handover {
	return handover{lease: lease, bound: bound, backoff: handOverBackoff(lease), maxBackoff: handOverMaxBackoff(lease),
		settle: handOverSettle(lease)}
}

// roleLease is what decide needs of one role's lease.
type roleLease struct {
	assigned, leading bool
	// fresh says that the tenure has yet to lead.
	fresh bool
	// since is, while leading, when the tenure last began to lead, and otherwise when it last
	// began not to lead while assigned, not counting the time it was excused (lease.excused) or
	// read back promptly (tenure.heardAt).
	since time.Duration
	// deferred says that something else deals with this role's trouble: the consumer is about
	// to be replaced because it reads back nothing that the producer delivers (checkReadBack),
	// which a hand-over on the same handle would not mend.
	deferred bool
	// readsBack says that the tenure's heartbeats come back promptly (lease.readsBack): what
	// keeps it from leading is not its path to the partition.
	readsBack bool
}

// stuck reports whether r, assigned and not leading, calls for a hand-over.
func (h *handover) stuck(now time.Duration, r roleLease) bool {
	return r.assigned && !r.leading && !r.deferred && !r.readsBack && now-r.since >= h.boundFor(r)
}

// quiet reports whether r is stuck on its way to a hand-over, and its lease should store no
// further offsets for commit and ask for no explicit commit (lease.quiesce): for the last lease
// before the hand-over is due, as long as its heartbeats do not come back promptly, which at the
// default bound is from its fence on (for a tenure yet to lead, from half its bound). librdkafka's
// commits of the tenure then drain before the hand-over, whose unassign has none to wait for: on
// a path slow enough to call for a hand-over a commit takes most of a lease to be answered. What is
// stored less only renews less often: a renewal needs an accepted commit of a stored heartbeat's
// offset. The tenure stores again as soon as one of its heartbeats comes back promptly, or it leads
// again from an offset stored before. A tenure whose trouble is left to the consumer's replacement
// (deferred) is quiet all the same: that too leaves the group, and reads nothing back meanwhile but
// the late heartbeat that ends the deferral.
func (h *handover) quiet(now time.Duration, r roleLease) bool {
	return r.assigned && !r.leading && !r.readsBack && now-r.since >= h.boundFor(r)-h.lease
}

// boundFor is how long r may go without leading (see handOverBound).
func (h *handover) boundFor(r roleLease) time.Duration {
	if r.fresh {
		return 2 * h.bound
	}
	return h.bound
}

// decide reports whether the instance hands over now, and for how long it then stays out.
func (h *handover) decide(now time.Duration, roles []roleLease) (time.Duration, bool) {
	stuck := false
	for _, r := range roles {
		switch {
		case !r.assigned:
		case r.leading:
			if now-r.since >= h.settle {
				h.strikes = 0
			}
		case h.stuck(now, r):
			stuck = true
		}
	}
	if !stuck {
		return 0, false
	}
	h.strikes++
	backoff := h.backoff
	for i := 1; i < h.strikes && backoff < h.maxBackoff; i++ {
		backoff *= 2
	}
	return min(backoff, h.maxBackoff), true
}
