package core

import (
	"sync/atomic"
	"time"
)

// machine is every decision an instance makes about its roles' tenures: what an assignment, a
// revocation, a record read back, a commit's answer, a group check's answer, a poll, a yield or a
// hand-over means for each role, and when to produce, store, commit, describe the group, read the
// ends of partitions or call the barrier. It holds the leases (lease.go), the commit gate
// (commitgate.go) and the bookkeeping between them, and it is the same code under the driver
// (internal/driver, driver.go), which carries librdkafka's and kgo's events in and its Effects out, and under the
// simulation (sim_*_test.go), whose models of librdkafka, the coordinator and the network do.
//
// It starts no goroutine, takes no lock and reads the time only through the clock it is given:
// its caller serialises every call (the driver holds its lock). What it asks of the world goes
// through Effects: quick calls into librdkafka that return at once (storing an offset, taking or
// giving back an assignment, subscribing), and work the shell starts and answers later with
// another call (an explicit commit, a group check, a heartbeat's produce). Whatever waits on the
// network or on the application in the middle of a decision (the rebalance callback's read of the
// partitions' ends, its wait for release markers or the barrier) is split at the wait: the machine
// returns what to wait for, and the caller calls it again when the wait is over.
//
// Other goroutines read only what the leases publish (leaseView) and the atomic fields below.
type Machine struct {
	name   string // Config.Name, for notes
	topic  string
	timing GroupTiming
	config Settings // what the decisions need of the Config
	fx     Effects
	Clock  Clock
	Base   time.Time

	// roles are the roles, by partition number.
	roles []*Role

	// gate keeps one of the consumer's commits in flight (commitgate.go); storeAsks gathers the
	// offsets the leases asked to store, by partition, until the gate lets them be stored.
	Gate       *commitGate
	GateCounts gateCounts
	storeAsks  map[int32]commitAsk
	// commitAsks gathers the explicit commits the leases asked for during a cycle, by partition,
	// for one request at its end; explicit is that request while it waits for its answer.
	commitAsks map[int32]commitAsk
	explicit   struct {
		busy   bool
		sentAt time.Duration
	}
	// resets are the partitions whose explicit commit asked for in this cycle is to reset
	// librdkafka's committed offset below a log that restarted (leaseOut.restarted); resetting
	// says that the commit under way is only such a reset, sent while explicit commits are held.
	resets    map[int32]bool
	resetting bool
	// commitsHeld stops explicit commits (holdCommits) until librdkafka's auto-commit is accepted
	// again.
	CommitsHeld bool
	// unwatched says that a lease changed since the deadline was last read (watchPending).
	unwatched bool
	Group     groupState
	// drainedAt is when a Poll last found the consumer's queue empty (heldAssignment): whatever a
	// later Poll returns was queued after it.
	drainedAt time.Duration
	Releases  []Release // tenures whose released marker waits for the barrier
	Check     checkBook
	Yield     yieldState
	handover  handover      // when to hand the roles over (handover.go)
	HandOvers atomic.Uint64 // hand-overs so far (Stats.HandOvers)
	renewals  consumerRenewals
	// tagging is the member a hand-over of the single leader goes to (internal/driver, transfer.go): its release
	// markers name it.
	Tagging string
	// assignment is the assignment the rebalance callback is taking (assign, takeAt, taken).
	assignment []int32
	// clientID is the consumer's client.id, by which the group check finds this instance.
	ClientID string
}

// role is one role of the instance as the machine sees it: a partition of the leader topic that the
// instance contends for, its lease, and what the machine keeps beside it.
type Role struct {
	ID   int32
	Name string // the role's name; empty for the single leader of New
	// lease is the role's lease (lease.go).
	Lease *Lease
	// wantCheck says that the lease asked for a group check that has not been started yet.
	wantCheck bool
	// member is the member id under which the current tenure was assigned, if known.
	member string
}

// Effects are what the machine asks of the world. The driver carries them out on Kafka's clients,
// the simulation on its models; each returns before the machine goes on.
type Effects interface {
	// storeOffsets is librdkafka's StoreOffsets: it returns the offsets it stored.
	StoreOffsets(offsets []OffsetRef) ([]OffsetRef, error)
	// produce hands a heartbeat of p to the producer (sent once the cycle ends:
	// driver.sendHeartbeats), which reports p.lease.sent once it has it; writeMarker writes a
	// released marker of p.
	Produce(p *Role, h *Heartbeat)
	WriteMarker(p *Role, h *Heartbeat)
	// commit starts an explicit commit of offsets; its answer comes back as explicitAnswered.
	Commit(offsets []OffsetRef)
	// describe starts a check of the group for tenures, by partition; its answer comes back as
	// checked. An error says that it could not start.
	Describe(tenures map[int32]uint64) error
	// deliver posts events of p to the barrier; dl is done once the barrier has returned from the
	// last of them.
	Deliver(p *Role, events []TenureEvent, dl *Delivery)
	// note logs a line; key, if not empty, throttles lines of one kind.
	Note(level LogLevel, key, format string, args ...any)
	// unsubscribe leaves the group, subscribe joins it again.
	Unsubscribe() error
	Subscribe() error
	// left says that this instance left the group as member (internal/driver, groupwatch.go checks it is gone).
	Left(member string)
	// live reports whether Close has yet to begin.
	Live() bool
}

// logLevel is a note's severity.
type LogLevel uint8

const (
	levelDebug LogLevel = iota
	LevelInfo
	LevelWarn
	LevelError
)

// checkBook is what the machine keeps of group checks: the one under way, and the troubles of the
// brokers' connections that defer the next.
type checkBook struct {
	busy bool
	// alone is set after a group check failed: the next one goes through an admin client of its
	// own rather than the producer's (driver.describer).
	Alone bool
	Count atomic.Uint64 // descriptions of the group asked for (Stats.GroupChecks)
	// troubled says that a client has seen a broker connection fail, last at troubleAt; deferSince
	// is since when a group check has waited for the connections to settle (startGroupCheck).
	Troubled              bool
	TroubleAt, deferSince time.Duration
	deferring             bool
	// inconclusive counts the checks in a row that could not see this instance's assignment, and
	// retryAt is when the next may start (backOffInconclusive).
	inconclusive int
	retryAt      time.Duration
}

// newRoles makes the roles, each with its lease, for config and timing as New derived them, on the
// clock clk from base. The simulation makes its members' roles here too.
func NewRoles(config Settings, timing GroupTiming, names []string, clk Clock, base time.Time) []*Role {
	var roles []*Role
	for i, name := range names {
		roles = append(roles, &Role{ID: int32(i), Name: name, Lease: NewLease(LeaseConfig{
			role: name, Timeout: config.Lease, Interval: config.Renew, poll: config.MinPoll, ReleaseWait: timing.MaxPoll,
			window: timing.CommitWindow(config), ticks: len(names) > 1, recheck: !timing.Classic,
			answerBound: timing.AnswerBound(config), hbInterval: timing.Heartbeat(), Clock: clk, Base: base,
		})})
	}
	return roles
}

// newMachine makes the machine of roles, whose leases are made, for config and timing as New
// derived them.
func NewMachine(config Settings, timing GroupTiming, roles []*Role, fx Effects, clk Clock, base time.Time) *Machine {
	m := &Machine{
		name:       config.Name,
		topic:      config.Topic,
		timing:     timing,
		config:     config,
		fx:         fx,
		Clock:      clk,
		Base:       base,
		roles:      roles,
		commitAsks: map[int32]commitAsk{},
		storeAsks:  map[int32]commitAsk{},
		resets:     map[int32]bool{},
		handover:   newHandover(config.Lease, config.HandOverAfter),
	}
	m.Group.Parts = map[int32]bool{}
	return m
}

// now is the time on the machine's clock, the monotonic scale that leases, yields and deadlines
// are measured in. Safe without the caller's lock.
func (m *Machine) now() time.Duration {
	return m.Clock.Now().Sub(m.Base)
}

// newGate makes the commit gate of a consumer whose StoreOffsets st is (commitgate.go), for
// librdkafka's auto-commit interval in whole milliseconds, as the consumer's configuration has it.
func (m *Machine) NewGate(st Storer) {
	tick := time.Duration(m.timing.Commit.Milliseconds()) * time.Millisecond
	m.Gate = newCommitGate(st, tick, m.timing.Heartbeat(), m.config.Lease/4, m.now, &m.GateCounts)
}

// useTiming replaces the group timing once New, or a group check under KIP-848, has read the
// broker's; the leases' window and answer bound follow it.
func (m *Machine) UseTiming(t GroupTiming) {
	m.timing = t
	for _, p := range m.roles {
		p.Lease.useCommitWindow(t.CommitWindow(m.config))
		p.Lease.useAnswerBound(t.AnswerBound(m.config), t.Heartbeat())
	}
}

// apply carries out what p's lease asked for after a transition, and returns the delivery of its
// last event. A group check it asks for is started by the cycle, together with any others.
func (m *Machine) apply(p *Role, out LeaseOut) *Delivery {
	if out.Heartbeat != nil {
		m.fx.Produce(p, out.Heartbeat)
	}
	if out.Store != 0 {
		m.storeAsks[p.ID] = commitAsk{out.Store, out.Tag}
	}
	if out.commit != 0 {
		if out.restarted {
			m.fx.Note(LevelWarn, "", "goneli %s: partition %d restarted below the offset committed last; committing %d explicitly",
				m.name, p.ID, out.commit)
		}
		m.commitAsks[p.ID] = commitAsk{out.commit, out.Tag}
		if out.restarted {
			m.resets[p.ID] = true
		}
	}
	if out.check {
		p.wantCheck = true
	}
	// The deadline is read once the cycle is over (watchPending) rather than after every lease's
	// transition: reading it walks every lease, and a cycle of an instance that leads N roles
	// makes a few transitions per role.
	m.unwatched = true
	return m.deliver(p, out.Events)
}

// deliver posts events of p to the barrier and returns the delivery of the last one, nil if none.
func (m *Machine) deliver(p *Role, events []TenureEvent) *Delivery {
	if len(events) == 0 {
		return nil
	}
	dl := NewDelivery()
	m.fx.Deliver(p, events, dl)
	return dl
}

// tick lets the leases act on the time that has passed: due heartbeats (beats says whether the
// producer may take more: driver.mayProduce), fences, stalled commits, group checks. Called once a
// cycle.
func (m *Machine) Tick(beats bool) {
	for _, p := range m.roles {
		m.apply(p, p.Lease.Due(beats))
	}
}

// polled records that a Poll found the consumer's queue empty.
func (m *Machine) Polled(empty bool) {
	if empty {
		m.drainedAt = m.now()
	}
}

// readBack takes an own heartbeat of p read back at offset.
func (m *Machine) ReadBack(p *Role, h Heartbeat, offset int64) {
	m.apply(p, p.Lease.ReadBack(h, offset))
}

// foreign takes another instance's record of p, or an earlier tenure's.
func (m *Machine) Foreign(p *Role, h Heartbeat) {
	m.apply(p, p.Lease.Foreign(h))
}

// fail fences every lease for a reason found outside the protocol (a fatal client error).
func (m *Machine) Fail(reason string) {
	for _, p := range m.roles {
		m.apply(p, p.Lease.fail(reason))
	}
}

// partition returns the part of partition id, or nil if this instance does not contend for it.
func (m *Machine) partition(id int32) *Role {
	if id < 0 || int(id) >= len(m.roles) {
		return nil
	}
	return m.roles[id]
}

// deadline is when the machine must be called next (alarm) whatever else happens: the earliest
// end of a lease held, or the commit gate's next withdrawal. The driver's alarm and the
// simulation call alarm then.
func (m *Machine) Deadline() (time.Duration, bool) {
	end, ok := time.Duration(0), false
	for _, p := range m.roles {
		if e, leading := p.Lease.deadline(); leading && (!ok || e < end) {
			end, ok = e, true
		}
	}
	if m.Gate != nil {
		if at, armed := m.Gate.due(); armed && (!ok || at < end) {
			end, ok = at, true
		}
	}
	return end, ok
}

// alarm fences every lease that has run out and lets the commit gate withdraw or place what is
// due. The driver calls it from its alarm goroutine, the watchdog, at the deadline, without waiting
// for the poll loop, so that LeaderFenced arrives even when nobody pulses and an offset is
// withdrawn within its tick.
func (m *Machine) Alarm() {
	for _, p := range m.roles {
		m.deliver(p, p.Lease.Expire().Events)
	}
	if m.Gate != nil {
		m.Gate.alarm(m.now())
	}
}

// watchPending reports whether a lease or the gate changed since the deadline was last read, and
// clears it: the driver aims its alarm again.
func (m *Machine) WatchPending() bool {
	pending := m.unwatched
	m.unwatched = false
	return pending
}

// proving reports whether a tenure is proving its first lease: assigned, not acquired yet, not
// waiting for a predecessor to release the partition, and within one HeartbeatTimeout of its
// assignment, so that a tenure that cannot lead (a group conflict, say) does not keep the instance
// polling fast.
func (m *Machine) proving() bool {
	now := m.now()
	for _, p := range m.roles {
		if v := p.Lease.Load(); v.ProveBy > now && !v.Releasing {
			return true
		}
	}
	return false
}

// active reports whether any role's tenure is under way, or a release or a yield needs the loop.
func (m *Machine) BusyLoop() bool {
	if len(m.Releases) > 0 || m.Yielding() {
		return true
	}
	for _, p := range m.roles {
		if p.Lease.active() {
			return true
		}
	}
	return false
}

// leadsAny reports whether the protocol has any role of this instance leading.
func (m *Machine) leadsAny() bool {
	for _, p := range m.roles {
		if p.Lease.Load().Leading {
			return true
		}
	}
	return false
}
