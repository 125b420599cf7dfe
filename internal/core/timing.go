package core

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
type GroupTiming struct {
	Session      time.Duration // session.timeout.ms
	Interval     time.Duration // heartbeat.interval.ms
	MaxPoll      time.Duration // max.poll.interval.ms, also the classic protocol's rebalance timeout
	Commit       time.Duration // auto.commit.interval.ms
	Classic      bool          // false under group.protocol=consumer (KIP-848)
	UserSession  bool
	userInterval bool

	// brokerSession and brokerInterval are the broker's KIP-848 session timeout and group
	// heartbeat interval for the group, as New read them (internal/driver, session848.go); zero if not read.
	BrokerSession, BrokerInterval time.Duration

	// windowRebalance, if not zero, is the rebalance timeout that the window for explicit commits
	// rests on (expelBound) when MaxPoll was raised to ClassicRebalanceFloor: the raise is for
	// librdkafka's join interval, not for renewals, and a window narrower than the rebalance timeout
	// allows is safe (lease.go, commitWindow), so the lease renews at short leases as before.
	windowRebalance time.Duration
}

// ClassicRebalanceFloor is the shortest rebalance timeout (max.poll.interval.ms) goneli derives
// under the classic protocol. librdkafka sends a member's JoinGroups at least a second apart
// (rd_kafka_cgrp_join_state_serve, rkcg_join_intvl), so a member that joined just before another
// rebalance began rejoins it up to a second later, by its own clock: with a rebalance timeout of a
// second (twice a 500 ms lease) the coordinator can end the join phase first and expel it, and
// librdkafka then backs its next JoinGroup off by another second (rd_kafka_cgrp_handle_JoinGroup,
// rd_interval_backoff), which left a role without a leader for 2.7 s after the leader's crash in
// the simulation (seed 81032329, ht500ms, clocks 2.5% apart). Half a second more covers the
// clocks' rates (the package doc allows 5%) and the JoinGroup's round trip.
const ClassicRebalanceFloor = 1500 * time.Millisecond

// timingOverrides are the settings of the group timing that a configuration may make (under the
// classic protocol): session.timeout.ms, heartbeat.interval.ms and max.poll.interval.ms, zero where
// not set; consumerProtocol is group.protocol=consumer (KIP-848).
type TimingOverrides struct {
	ConsumerProtocol           bool
	Session, Interval, MaxPoll time.Duration
}

// timingError is a setting deriveTiming refuses: key and its value, and why.
type timingError struct {
	Key    string
	Value  time.Duration
	Reason string
}

func (e *timingError) Error() string {
	return fmt.Sprintf("%s=%d: %s", e.Key, e.Value.Milliseconds(), e.Reason)
}

// deriveTiming is the group timing for a lease of ht, a MinPollInterval of minPoll and what the
// configuration sets (o): the session and the group heartbeat interval derived from the lease
// unless set (SessionTimeout, groupHeartbeatInterval), the auto-commit interval from the poll
// (autoCommitInterval), and the rebalance timeout.
func DeriveTiming(ht, minPoll time.Duration, o TimingOverrides) (GroupTiming, *timingError) {
	t := GroupTiming{Classic: !o.ConsumerProtocol}
	t.Interval = groupHeartbeatInterval(ht)
	t.Session = SessionTimeout(ht)
	// About a quarter poll: a new tenure's first proof waits for a tick (13 ms on average at the
	// defaults), and a stored offset is withdrawn a millisecond before the next tick could send it
	// again (commitgate.go), which misses a tick in about one store in twenty.
	t.Commit = AutoCommitInterval(minPoll)
	if t.Classic {
		if o.Interval > 0 {
			t.Interval, t.userInterval = o.Interval, true
		}
		if o.Session > 0 {
			t.Session, t.UserSession = o.Session, true
		}
		if floor := ht + 2*t.Interval; t.Session < floor {
			key, value := "session.timeout.ms", t.Session
			if t.userInterval && !t.UserSession {
				key, value = "heartbeat.interval.ms", t.Interval
			}
			return t, &timingError{Key: key, Value: value,
				Reason: fmt.Sprintf("unsafe with HeartbeatTimeout=%v: session.timeout.ms (%d) must be at least "+
					"HeartbeatTimeout + 2 x heartbeat.interval.ms (%d), so that a leader cut off from Kafka "+
					"fences itself before the coordinator can expel it",
					ht, t.Session.Milliseconds(), floor.Milliseconds())}
		}
	}
	// The rebalance timeout bounds how long a revoked leader's barrier may hold its successor back
	// and how long Close waits; it is kept at twice the lease, whatever the session, so that a
	// barrier gets as long as it did when the session was derived as twice the lease, and under the
	// classic protocol at least ClassicRebalanceFloor. It must be at least the session timeout (the
	// package doc's fourth assumption).
	floor := t.Session
	if !t.Classic {
		floor = 2 * ht
	}
	t.MaxPoll = max(floor, 2*ht)
	if t.Classic && o.MaxPoll == 0 && t.MaxPoll < ClassicRebalanceFloor {
		t.windowRebalance, t.MaxPoll = t.MaxPoll, ClassicRebalanceFloor
	}
	if o.MaxPoll > 0 {
		if o.MaxPoll < floor {
			return t, &timingError{Key: "max.poll.interval.ms", Value: o.MaxPoll,
				Reason: fmt.Sprintf("must be at least %d (the session timeout): it is also the rebalance timeout, "+
					"after which a leader that has not released partition 0 is expelled", floor.Milliseconds())}
		}
		t.MaxPoll = o.MaxPoll
	}
	return t, nil
}

// sessionTimeout is SessionTimeout.
func SessionTimeout(ht time.Duration) time.Duration {
	return max(ht+2*groupHeartbeatInterval(ht)+SessionMargin(ht), time.Second)
}

// groupHeartbeatInterval is the heartbeat.interval.ms goneli derives for a lease.
func groupHeartbeatInterval(ht time.Duration) time.Duration {
	return ClampDuration(ht/10, 100*time.Millisecond, 3*time.Second)
}

// sessionMargin is what a derived session keeps beyond the lease and two group heartbeat
// intervals: a twentieth of the lease, 4 to 5% of the session, against clocks whose rates differ by a few hundred
// parts per million at worst when disciplined by NTP, which slews by at most 500.
func SessionMargin(ht time.Duration) time.Duration {
	return max(ht/20, 50*time.Millisecond)
}

func ClampDuration(d, lo, hi time.Duration) time.Duration {
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
func AutoCommitInterval(poll time.Duration) time.Duration {
	tick := ClampDuration((poll / 4).Truncate(time.Millisecond), 10*time.Millisecond, time.Second)
	if poll%tick == 0 {
		tick += time.Millisecond
	}
	return tick
}

// defaultRenewInterval is the RenewInterval that SetDefaults derives.
func DefaultRenewInterval(lease, poll time.Duration) time.Duration {
	return max(poll, lease/RenewalsPerLease)
}

// The loop's bounds (the root package's neli.go; internal/driver, driver.go), which the simulation's loop keeps too.
const (
	// maxEventsPerCycle bounds the work one Pulse does when a backlog has built up in the
	// consumer.
	MaxEventsPerCycle = 1000
	// proofPoll is the poll interval of an instance with a tenure that proves its first lease. The
	// proof is a chain of round trips (the heartbeat produced, fetched back, its offset committed,
	// the group described), each of which would otherwise wait for the next MinPollInterval to be
	// seen.
	ProofPoll = 2 * time.Millisecond
)

// The defaults of the Config's intervals (config.go names them for the API).
const (
	// defaultPollDuration is Config.PollDuration's default.
	DefaultPollDuration = time.Millisecond
	// minPollCap is the longest default MinPollInterval, at leases of 2 s and more.
	MinPollCap = 100 * time.Millisecond
	// renewalsPerLease sets the default RenewInterval: the lease divided by it.
	RenewalsPerLease = 10
	// MinHeartbeatTimeout is Config.MinHeartbeatTimeout, the shortest lease Validate accepts.
	MinHeartbeatTimeout = 500 * time.Millisecond
)

// defaultMinPollInterval is the MinPollInterval that SetDefaults derives for a lease of ht.
func DefaultMinPollInterval(ht time.Duration) time.Duration {
	return min(MinPollCap, max(ht/20, time.Millisecond))
}

// closeBound is how long Close may take with this timing and a lease of ht: the rebalance timeout,
// for which a revocation may wait for the barrier or a close may wait for a rebalance under way,
// plus one lease for leaving the group and closing the clients.
func (t GroupTiming) CloseBound(ht time.Duration) time.Duration {
	return t.MaxPoll + ht
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
func (t GroupTiming) expelBound() time.Duration {
	switch {
	case t.Classic && t.windowRebalance > 0:
		return min(t.windowRebalance, t.MaxPoll)
	case t.Classic:
		return t.MaxPoll
	case t.BrokerSession > 0:
		return min(t.BrokerSession, t.MaxPoll)
	}
	return t.MaxPoll
}

// commitWindow is the lease's window for explicit commits (commitWindow in lease.go) under this
// timing: what the coordinator's bound on keeping a member that did not rejoin a rebalance
// (expelBound) leaves beyond a lease of ht and two group heartbeat intervals.
func (t GroupTiming) CommitWindow(s Settings) time.Duration {
	return commitWindow(t.expelBound(), s.Lease, t.Heartbeat(), t.AnswerBound(s), s.Renew)
}

// answerBound is how long after an offset was stored for commit the leader may see the commit's
// answer before the coordinator connection counts as having held its answers back
// (lease.heldAnswers): an auto-commit interval until the commit goes out, a poll interval until the
// answer is seen, and a group heartbeat interval for the round trip, which the package doc assumes
// the group heartbeats' answers take at most.
func (t GroupTiming) AnswerBound(s Settings) time.Duration {
	return t.Commit + s.MinPoll + t.Heartbeat()
}

// heartbeat is the group heartbeat interval in force: the broker's under KIP-848 once New has read
// it, else heartbeat.interval.ms.
func (t GroupTiming) Heartbeat() time.Duration {
	if !t.Classic && t.BrokerInterval > 0 {
		return t.BrokerInterval
	}
	return t.Interval
}

// describe renders the group timing for New's log line.
func (t GroupTiming) Describe() string {
	if t.Classic {
		return fmt.Sprintf("session %v, group heartbeat %v", t.Session, t.Interval)
	}
	what := func(d time.Duration) string {
		if d == 0 {
			return "not read"
		}
		return d.String()
	}
	return fmt.Sprintf("KIP-848, the broker's session %s, group heartbeat %s", what(t.BrokerSession), what(t.BrokerInterval))
}
