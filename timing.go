package goneli

import (
	"fmt"
	"time"
)

// The group timing: what the lease argument rests on, derived once from the lease and what the
// configuration sets (deriveTiming), and read by the machine, the leases and the shell.

// groupTiming is the group timing that the lease argument rests on: a leader whose heartbeats
// stop coming back fences itself HeartbeatTimeout after the last good one, while the coordinator
// cannot expel it sooner than one session timeout after the group heartbeat that preceded that
// heartbeat's commit, which is at most one heartbeat interval earlier.
type groupTiming struct {
	session      time.Duration // session.timeout.ms
	interval     time.Duration // heartbeat.interval.ms
	maxPoll      time.Duration // max.poll.interval.ms, also the classic protocol's rebalance timeout
	commit       time.Duration // auto.commit.interval.ms
	classic      bool          // false under group.protocol=consumer (KIP-848)
	userSession  bool
	userInterval bool

	// brokerSession and brokerInterval are the broker's KIP-848 session timeout and group
	// heartbeat interval for the group, as New read them (session848.go); zero if not read.
	brokerSession, brokerInterval time.Duration
}

// timingOverrides are the settings of the group timing that a configuration may make (under the
// classic protocol): session.timeout.ms, heartbeat.interval.ms and max.poll.interval.ms, zero where
// not set; consumerProtocol is group.protocol=consumer (KIP-848).
type timingOverrides struct {
	consumerProtocol           bool
	session, interval, maxPoll time.Duration
}

// timingError is a setting deriveTiming refuses: key and its value, and why.
type timingError struct {
	key    string
	value  time.Duration
	reason string
}

func (e *timingError) Error() string {
	return fmt.Sprintf("%s=%d: %s", e.key, e.value.Milliseconds(), e.reason)
}

// deriveTiming is the group timing for a lease of ht, a MinPollInterval of minPoll and what the
// configuration sets (o): the session and the group heartbeat interval derived from the lease
// unless set (SessionTimeout, groupHeartbeatInterval), the auto-commit interval from the poll
// (autoCommitInterval), and the rebalance timeout.
func deriveTiming(ht, minPoll time.Duration, o timingOverrides) (groupTiming, *timingError) {
	t := groupTiming{classic: !o.consumerProtocol}
	t.interval = groupHeartbeatInterval(ht)
	t.session = sessionTimeout(ht)
	// About a quarter poll: a new tenure's first proof waits for a tick (13 ms on average at the
	// defaults), and a stored offset is withdrawn a millisecond before the next tick could send it
	// again (commitgate.go), which misses a tick in about one store in twenty.
	t.commit = autoCommitInterval(minPoll)
	if t.classic {
		if o.interval > 0 {
			t.interval, t.userInterval = o.interval, true
		}
		if o.session > 0 {
			t.session, t.userSession = o.session, true
		}
		if floor := ht + 2*t.interval; t.session < floor {
			key, value := "session.timeout.ms", t.session
			if t.userInterval && !t.userSession {
				key, value = "heartbeat.interval.ms", t.interval
			}
			return t, &timingError{key: key, value: value,
				reason: fmt.Sprintf("unsafe with HeartbeatTimeout=%v: session.timeout.ms (%d) must be at least "+
					"HeartbeatTimeout + 2 x heartbeat.interval.ms (%d), so that a leader cut off from Kafka "+
					"fences itself before the coordinator can expel it",
					ht, t.session.Milliseconds(), floor.Milliseconds())}
		}
	}
	// The rebalance timeout bounds how long a revoked leader's barrier may hold its successor back
	// and how long Close waits; it is kept at twice the lease, whatever the session, so that a
	// barrier gets as long as it did when the session was derived as twice the lease. It must be at
	// least the session timeout (the package doc's fourth assumption).
	floor := t.session
	if !t.classic {
		floor = 2 * ht
	}
	t.maxPoll = max(floor, 2*ht)
	if o.maxPoll > 0 {
		if o.maxPoll < floor {
			return t, &timingError{key: "max.poll.interval.ms", value: o.maxPoll,
				reason: fmt.Sprintf("must be at least %d (the session timeout): it is also the rebalance timeout, "+
					"after which a leader that has not released partition 0 is expelled", floor.Milliseconds())}
		}
		t.maxPoll = o.maxPoll
	}
	return t, nil
}

// sessionTimeout is SessionTimeout.
func sessionTimeout(ht time.Duration) time.Duration {
	return max(ht+2*groupHeartbeatInterval(ht)+sessionMargin(ht), time.Second)
}

// groupHeartbeatInterval is the heartbeat.interval.ms goneli derives for a lease.
func groupHeartbeatInterval(ht time.Duration) time.Duration {
	return clampDuration(ht/10, 100*time.Millisecond, 3*time.Second)
}

// sessionMargin is what a derived session keeps beyond the lease and two group heartbeat
// intervals: a twentieth of the lease, 4 to 5% of the session, against clocks whose rates differ by a few hundred
// parts per million at worst when disciplined by NTP, which slews by at most 500.
func sessionMargin(ht time.Duration) time.Duration {
	return max(ht/20, 50*time.Millisecond)
}

func clampDuration(d, lo, hi time.Duration) time.Duration {
	return max(lo, min(d, hi))
}

// autoCommitInterval is auto.commit.interval.ms for a MinPollInterval of poll: a quarter of it in
// whole milliseconds, within 10 ms to 1 s, and a millisecond longer where that would divide the poll
// interval. goneli's cycles come on periods of the poll interval, and librdkafka's commit timer on
// periods of this one: were they commensurate, a store made just after a tick, which the commit
// gate withdraws before the next (commitgate.go), would be made just after one again at every
// cycle, presumed unsent and stored anew at the same phase for as long as the two clocks hold it
// (the simulation found a new tenure that never led so). With the poll interval not a multiple of
// the tick, each cycle falls at another phase of the timer.
func autoCommitInterval(poll time.Duration) time.Duration {
	tick := clampDuration((poll / 4).Truncate(time.Millisecond), 10*time.Millisecond, time.Second)
	if poll%tick == 0 {
		tick += time.Millisecond
	}
	return tick
}

// defaultRenewInterval is the RenewInterval that SetDefaults derives.
func defaultRenewInterval(lease, poll time.Duration) time.Duration {
	return max(poll, lease/renewalsPerLease)
}

// The loop's bounds (neli.go, driver.go), which the simulation's loop keeps too.
const (
	// maxEventsPerCycle bounds the work one Pulse does when a backlog has built up in the
	// consumer.
	maxEventsPerCycle = 1000
	// proofPoll is the poll interval of an instance with a tenure that proves its first lease. The
	// proof is a chain of round trips (the heartbeat produced, fetched back, its offset committed,
	// the group described), each of which would otherwise wait for the next MinPollInterval to be
	// seen.
	proofPoll = 2 * time.Millisecond
)

// The defaults of the Config's intervals (config.go names them for the API).
const (
	// defaultPollDuration is Config.PollDuration's default.
	defaultPollDuration = time.Millisecond
	// minPollCap is the longest default MinPollInterval, at leases of 2 s and more.
	minPollCap = 100 * time.Millisecond
	// renewalsPerLease sets the default RenewInterval: the lease divided by it.
	renewalsPerLease = 10
)

// defaultMinPollInterval is the MinPollInterval that SetDefaults derives for a lease of ht.
func defaultMinPollInterval(ht time.Duration) time.Duration {
	return min(minPollCap, max(ht/20, time.Millisecond))
}

// closeBound is how long Close may take with this timing and a lease of ht: the rebalance timeout,
// for which a revocation may wait for the barrier or a close may wait for a rebalance under way,
// plus one lease for leaving the group and closing the clients.
func (t groupTiming) closeBound(ht time.Duration) time.Duration {
	return t.maxPoll + ht
}

// expelBound is how long after a rebalance began that it did not rejoin the coordinator may still
// keep a member that goes on committing, the bound the window for explicit commits rests on
// (commitWindow in lease.go). Under the classic protocol that is the rebalance timeout: Apache
// Kafka's coordinator renews a classic member's session with every commit it accepts while the
// group is Stable or PreparingRebalance (OffsetMetadataManager.validateOffsetCommit, "offset commits
// maintain the session"; kfake's group.handleOffsetCommit alike), so a member whose explicit commits
// are accepted is removed only when the join phase it did not rejoin ends, the rebalance timeout
// after it began. Under KIP-848 commits renew no session (only ConsumerGroupHeartbeat does), so the
// session counts as well, the broker's once New has read it.
func (t groupTiming) expelBound() time.Duration {
	switch {
	case t.classic:
		return t.maxPoll
	case t.brokerSession > 0:
		return min(t.brokerSession, t.maxPoll)
	}
	return t.maxPoll
}

// commitWindow is the lease's window for explicit commits (commitWindow in lease.go) under this
// timing: what the coordinator's bound on keeping a member that did not rejoin a rebalance
// (expelBound) leaves beyond a lease of ht and two group heartbeat intervals.
func (t groupTiming) commitWindow(s settings) time.Duration {
	return commitWindow(t.expelBound(), s.lease, t.heartbeat(), t.answerBound(s), s.renew)
}

// answerBound is how long after an offset was stored for commit the leader may see the commit's
// answer before the coordinator connection counts as having held its answers back
// (lease.heldAnswers): an auto-commit interval until the commit goes out, a poll interval until the
// answer is seen, and a group heartbeat interval for the round trip, which the package doc assumes
// the group heartbeats' answers take at most.
func (t groupTiming) answerBound(s settings) time.Duration {
	return t.commit + s.minPoll + t.heartbeat()
}

// heartbeat is the group heartbeat interval in force: the broker's under KIP-848 once New has read
// it, else heartbeat.interval.ms.
func (t groupTiming) heartbeat() time.Duration {
	if !t.classic && t.brokerInterval > 0 {
		return t.brokerInterval
	}
	return t.interval
}

// describe renders the group timing for New's log line.
func (t groupTiming) describe() string {
	if t.classic {
		return fmt.Sprintf("session %v, group heartbeat %v", t.session, t.interval)
	}
	what := func(d time.Duration) string {
		if d == 0 {
			return "not read"
		}
		return d.String()
	}
	return fmt.Sprintf("KIP-848, the broker's session %s, group heartbeat %s", what(t.brokerSession), what(t.brokerInterval))
}
