package core

import (
	"fmt"
	"time"
)

// simOracle checks, after every event, that at most one member's IsLeader holds (simMember.isLeader:
// Live, not yielding, the lease announced to the barrier and not run out on the member's own
// clock), all at one instant of true time. A lease becomes valid only at an event (a barrier call
// returning, a renewal published), and only stops being valid as time passes, so checking after
// every event finds every overlap at its start. It also checks liveness: after the adversary has
// crashed the leader and done nothing else, a healthy member must lead within the bound of the
// package doc's Liveness section (simProfile.liveness).
type simOracle struct {
	// liveness: set while a crash of the leader is being watched.
	watching   bool
	crashAt    time.Duration
	liveBy     time.Duration
	liveTok    int
	failovers  []time.Duration // crash-to-leader times seen
	overlapsAt []time.Duration
}

// simVerdict is a violation: the schedule's seed replays it.
type simVerdict struct {
	kind    string // "overlap" or "liveness"
	at      time.Duration
	who     []string
	detail  string
	overlap time.Duration // how long the two leases overlap, if neither is cut short
	// mechanism labels an overlap by what kept the earlier tenure's lease running (see mechanism).
	mechanism string
}

func (o *simOracle) check(w *simWorld) {
	var leaders []*simMember
	for _, m := range w.members {
		if w.tracing() && m.alive {
			if v := m.view(); v.Leading && v.End != m.tracedEnd {
				m.tracedEnd = v.End
				m.note("lease renewed to %s", m.leaseEndNote())
			}
		}
		l := m.isLeader()
		if l && !m.leading {
			w.adv.acquired(m)
		}
		if l && o.watching && w.now <= o.liveBy {
			o.watching = false
			o.failovers = append(o.failovers, w.now-o.crashAt)
		}
		m.leading = l
		if l {
			leaders = append(leaders, m)
		}
	}
	if len(leaders) < 2 {
		return
	}
	a, b := leaders[0], leaders[1]
	ea, eb := a.leaseEnd(), b.leaseEnd()
	w.verdict = &simVerdict{kind: "overlap", at: w.now, who: []string{a.name, b.name}, overlap: min(ea, eb) - w.now,
		detail: fmt.Sprintf("%s and %s both lead at %s: %s's lease runs to %s, %s's to %s (token %d and %d)",
			a.name, b.name, fmtDur(w.now), a.name, fmtDur(ea), b.name, fmtDur(eb), a.view().Token, b.view().Token)}
	// What the analysis of issue 38 needs: when each one's last automatic commit was accepted and
	// when the driver processed its result, against the last rebalance's start.
	for _, m := range leaders {
		w.verdict.detail += fmt.Sprintf("; %s's last auto-commit accepted at %s, its result queued at %s and processed at %s",
			m.name, fmtDur(m.autoAccepted), fmtDur(m.autoQueued), fmtDur(m.autoProcessed))
	}
	w.verdict.detail += fmt.Sprintf("; the last rebalance began at %s", fmtDur(w.rebalanceAt))
	stale := a
	if vb := b.view(); vb.Token < a.view().Token {
		stale = b
	}
	w.verdict.mechanism = mechanism(w, stale)
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
func mechanism(w *simWorld, stale *simMember) string {
	hb := w.prof.hbInterval
	cause := "other"
	switch {
	case stale.renewedRestarted:
		cause = "restarted log"
	case stale.autoProcessed-stale.autoQueued > hb:
		cause = "queued result"
	case stale.autoQueued-stale.autoAccepted > hb:
		cause = "delayed answer"
	case stale.autoAccepted > w.rebalanceAt+hb:
		cause = "late auto-commit"
	}
	renewal := "automatic"
	if stale.renewedExplicitly {
		renewal = "explicit"
	}
	return cause + ", " + renewal + " renewal"
}

// watchFailover starts the liveness check after the leader crashed.
func (o *simOracle) watchFailover(w *simWorld, leader *simMember) {
	o.watching = true
	o.crashAt = w.now
	o.liveBy = w.now + w.prof.liveness
	o.liveTok++
	tok := o.liveTok
	w.at(o.liveBy, func() {
		if o.watching && tok == o.liveTok && w.verdict == nil {
			o.watching = false
			w.verdict = &simVerdict{kind: "liveness", at: w.now, who: []string{leader.name},
				detail: fmt.Sprintf("no member led within %s of %s's crash at %s", fmtDur(w.prof.liveness), leader.name, fmtDur(o.crashAt))}
		}
	})
}

// unwatch gives the liveness check up: the adversary did something else meanwhile.
func (o *simOracle) unwatch() {
	o.watching = false
}

func (o *simOracle) finish(w *simWorld) {}
