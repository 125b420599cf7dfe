package core

import (
	"fmt"
	"time"
)

// simOracle checks, after every event, that at most one member's IsLeader holds for each role
// (simMember.isLeader: Live, not yielding, the role's lease announced to the barrier and not run
// out on the member's own clock), all at one instant of true time. A lease becomes valid only at
// an event (a barrier call returning, a renewal published), and only stops being valid as time
// passes, so checking after every event finds every overlap at its start. It also checks
// liveness: after the adversary has crashed a leader and done nothing else, each role that
// member led must be led by a healthy member within the bound of the package doc's Liveness
// section (simProfile.liveness).
type simOracle struct {
	// liveness: the roles of a crashed leader still waiting for a successor, while it is watched.
	watching   simParts
	crashAt    time.Duration
	liveBy     time.Duration
	liveTok    int
	failovers  []time.Duration // crash-to-leader times seen, one per role
	overlapsAt []time.Duration
}

// simVerdict is a violation: the schedule's seed replays it.
type simVerdict struct {
	kind    string // "overlap", "hand-over" (simOracle.handOver) or "liveness"
	at      time.Duration
	who     []string
	role    int32 // the role (partition) of an overlap
	detail  string
	overlap time.Duration // how long the two leases overlap, if neither is cut short
	// mechanism labels an overlap by what kept the earlier tenure's lease running (see mechanism).
	mechanism string
}

func (o *simOracle) check(w *simWorld) {
	for p := int32(0); p < int32(w.roles); p++ {
		var a, b *simMember
		for _, m := range w.members {
			rs := &m.rs[p]
			if w.tracing() && m.alive {
				if v := m.view(p); v.Leading && v.End != rs.tracedEnd {
					rs.tracedEnd = v.End
					m.roleNote(p, "lease renewed to %s", m.leaseEndNote(p))
				}
			}
			l := m.isLeader(p)
			if l && !rs.leading {
				w.adv.acquired(m)
			}
			if l && o.watching.has(p) && w.now <= o.liveBy {
				o.watching = o.watching.del(p)
				o.failovers = append(o.failovers, w.now-o.crashAt)
			}
			rs.leading = l
			switch {
			case !l:
			case a == nil:
				a = m
			case b == nil:
				b = m
			}
		}
		if b != nil {
			o.overlap(w, p, a, b)
			return
		}
		if a != nil && o.handOver(w, p, a) {
			return
		}
	}
}

// handOver checks the guarantee of a voluntary hand-over (docs/safety.md, "What it does not
// guarantee"): once a predecessor has given the partition back while its barrier still had the
// tenure's LeaderRevoked, a successor leads only once the barrier has returned, or once the
// rebalance timeout has passed since (the successor's tenure waits for the predecessor's released
// marker that long at most, from its assignment: lease.foreign; a predecessor that could not write
// its releasing marker held the partition back as long instead: endTenures). A predecessor that
// crashed, or whose tenure was fenced first (a lapsed lease, a lost assignment), or whose
// partition the group moved on without its giving it back (a session or rebalance timeout while
// it was stopped) is owed nothing but the rest of its lease, which the overlap check holds it to.
// The rebalance timeout is counted on the clocks' worst rates. It reports whether it found a
// violation.
func (o *simOracle) handOver(w *simWorld, p int32, leader *simMember) bool {
	bound := w.prof.maxPoll - 2*time.Duration(int64(w.prof.maxPoll)/1_000_000*w.prof.rateBound) - time.Millisecond
	for _, m := range w.members {
		rs := &m.rs[p]
		if m == leader || !m.alive || rs.handing == nil || !rs.released || rs.handing.delivered() || w.now-rs.releasedAt >= bound {
			continue
		}
		role := ""
		if w.roles > 1 {
			role = fmt.Sprintf(" role %d (of %d)", p, w.roles)
		}
		w.verdict = &simVerdict{kind: "hand-over", at: w.now, who: []string{m.name, leader.name}, role: p, mechanism: "hand-over",
			detail: fmt.Sprintf("%s leads%s at %s while the barrier of %s has had its LeaderRevoked since %s; %s gave the partition back at %s (the rebalance timeout is %s)",
				leader.name, role, fmtDur(w.now), m.name, fmtDur(rs.handedAt), m.name, fmtDur(rs.releasedAt), fmtDur(w.prof.maxPoll))}
		return true
	}
	return false
}

// overlap records the verdict of a and b both leading role p.
func (o *simOracle) overlap(w *simWorld, p int32, a, b *simMember) {
	ea, eb := a.leaseEnd(p), b.leaseEnd(p)
	role := ""
	if w.roles > 1 {
		role = fmt.Sprintf(" role %d (of %d)", p, w.roles)
	}
	w.verdict = &simVerdict{kind: "overlap", at: w.now, who: []string{a.name, b.name}, role: p, overlap: min(ea, eb) - w.now,
		detail: fmt.Sprintf("%s and %s both lead%s at %s: %s's lease runs to %s, %s's to %s (token %d and %d)",
			a.name, b.name, role, fmtDur(w.now), a.name, fmtDur(ea), b.name, fmtDur(eb), a.view(p).Token, b.view(p).Token)}
	// What the analysis of issue 38 needs: when each one's last automatic commit was accepted and
	// when the driver processed its result, against the last rebalance's start.
	for _, m := range []*simMember{a, b} {
		w.verdict.detail += fmt.Sprintf("; %s's last auto-commit accepted at %s, its result queued at %s and processed at %s",
			m.name, fmtDur(m.autoAccepted), fmtDur(m.autoQueued), fmtDur(m.autoProcessed))
	}
	w.verdict.detail += fmt.Sprintf("; the last rebalance began at %s", fmtDur(w.rebalanceAt))
	stale := a
	if b.view(p).Token < a.view(p).Token {
		stale = b
	}
	w.verdict.mechanism = mechanism(w, stale, p)
}

// mechanism labels an overlap by the earlier tenure (stale): how the result of its last automatic
// commit, which opens the commit window (lease.stalled), came late, and which kind of commit
// renewed it last:
//
//   - queued result: the result waited in the consumer's queue for more than a group heartbeat
//     interval before the driver processed it (goneli's loop was paused): the window opened at
//     processing time, issue 38's timeline;
//   - delayed answer: the answer took more than a group heartbeat interval to come back from the
//     coordinator (the connection was slow; the group heartbeats' answers, behind or before it on
//     the same connection, were as late);
//   - late auto-commit: the coordinator accepted the commit more than a group heartbeat interval
//     after the rebalance began (librdkafka was stopped, or its requests held up, as the rebalance
//     began), which the window's argument rules out;
//   - restarted log: the last renewal came from the explicit commit that a log restarted below
//     the committed offset asks for, which no window bounds (lease.readBack);
//   - other: none of these.
func mechanism(w *simWorld, stale *simMember, p int32) string {
	hb := w.prof.hbInterval
	cause := "other"
	switch {
	case stale.rs[p].renewedRestarted:
		cause = "restarted log"
	case stale.autoProcessed-stale.autoQueued > hb:
		cause = "queued result"
	case stale.autoQueued-stale.autoAccepted > hb:
		cause = "delayed answer"
	case stale.autoAccepted > w.rebalanceAt+hb:
		cause = "late auto-commit"
	}
	renewal := "automatic"
	if stale.rs[p].renewedExplicitly {
		renewal = "explicit"
	}
	return cause + ", " + renewal + " renewal"
}

// watchFailover starts the liveness check after leader, which led the roles led, crashed.
func (o *simOracle) watchFailover(w *simWorld, leader *simMember, led simParts) {
	o.watching = led
	o.crashAt = w.now
	o.liveBy = w.now + w.prof.liveness
	o.liveTok++
	tok := o.liveTok
	w.at(o.liveBy, func() {
		if o.watching != 0 && tok == o.liveTok && w.verdict == nil {
			w.verdict = &simVerdict{kind: "liveness", at: w.now, who: []string{leader.name}, role: o.watching.nth(0),
				detail: fmt.Sprintf("no member led roles %s within %s of %s's crash at %s", o.watching, fmtDur(w.prof.liveness),
					leader.name, fmtDur(o.crashAt))}
			o.watching = 0
		}
	})
}

// unwatch gives the liveness check up: the adversary did something else meanwhile.
func (o *simOracle) unwatch() {
	o.watching = 0
}

func (o *simOracle) finish(w *simWorld) {}
