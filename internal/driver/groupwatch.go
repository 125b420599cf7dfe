package driver

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/core"
)

// The priorities (priority.go), the transfers (transfer.go) and leaving the group all need to know
// who is in the group now, which only a description of it tells. They share one description at a
// time, made off the pulsing goroutine like the group check's (groupcheck.go) and under the same
// rules: over goneli's own connection where it can speak the clients' settings, else through an
// admin client of its own (never the producer's, which the heartbeats need), and not within
// checkQuiet of a failed broker connection (librdkafka#4605). Each asks only when it has a
// question: a leader after each rebalance (under KIP-848, every half settle time) and when a
// member of higher priority is due to have settled; a member standing by once a lease; a member
// that left the group while its yield ends; a tenure that found a transfer to another member, once.
// A quiet group under the classic protocol with no priorities set costs nothing.

// priorityState is what the driver keeps for priorities, transfers and leaving the group.
type priorityState struct {
	watch groupWatch
	pref  preference
	init  bool // pref is set up
	// wake is when the leader describes the group again to see whether a member of higher priority
	// has settled (preference.decide); zero for no such time.
	wake time.Duration
	// standby is set while this instance stays out of the group, after it handed over for
	// priority, for as long as a member of higher priority is in it; from is when it began, and
	// next when it describes the group again.
	standby     bool
	standbyFrom time.Duration
	standbyNext time.Duration
	leave       leaveCheck
	// asked is a TransferTo for the next cycle to carry out.
	asked atomic.Pointer[pendingTransfer]
	// hops are transfers to other members found on this instance's partitions, by partition.
	hops map[int32]*hop
	// requests are transfer requests read from partitions this instance leads.
	requests     []transferRequest
	transfers    atomic.Uint64 // Stats.Transfers
	descriptions atomic.Uint64 // Stats.GroupDescriptions
	isStandby    atomic.Bool   // Stats.Standby
}

// groupWatch runs one description of the group at a time for priorityState.
type groupWatch struct {
	done chan describedGroup
	busy bool
	// began is when the description under way began, and rebalances the rebalances counted then.
	began      time.Duration
	rebalances int
	// described says that the leader has a description; last is when it ended, and lastRebalances
	// the rebalances counted when it began.
	described      bool
	last           time.Duration
	lastRebalances int
	retryAt        time.Duration
	failures       int
}

// leaveCheck is the membership an instance left the group under, until a description shows that
// the coordinator has let it go. librdkafka sends one LeaveGroup when a consumer unsubscribes, and
// sends it no second time if the coordinator refuses it (rd_kafka_cgrp_handle_LeaveGroup in
// librdkafka v2.11.1's src/rdkafka_cgrp.c:968-1008 only logs the error; rd_kafka_cgrp_leave at
// 1125-1170 has already cleared the member id). A coordinator that has just moved, and is still
// loading the group, refuses it with COORDINATOR_LOAD_IN_PROGRESS, and the member stays in the group,
// holding its partitions without heartbeats, until its session times out (Apache Kafka reschedules
// every classic member's session when the group is loaded: GroupMetadataManager.onLoaded,
// GroupMetadataManager.java:3807-3833). An instance that rejoined meanwhile would be a second,
// newer member, and with the same client.id it sorts where the old one did: the assignor would give
// partition 0 straight back to it when the old one expires. So an instance stays out of the group
// past its yield until a description no longer lists the member it left (or, should the group not
// be described, a rebalance timeout and a lease after it left, by which time the coordinator has
// expelled it).
//
// The check starts as soon as the instance has left, so that it is normally over by the end of the
// yield; while the member is still listed it is made again after a recheck, doubling up to a lease.
type leaveCheck struct {
	member  string // the member id left behind; empty when there is nothing to check
	at      time.Duration
	holding bool // the yield is over and the instance waits for the check
	next    time.Duration
	tries   int
}

// leadsAny reports whether a tenure of this instance leads.
func (d *Driver) leadsAny() bool {
	return slices.ContainsFunc(d.parts, func(p *core.Role) bool { return p.Lease.Load().Leading })
}

// recheck is how soon a member that waits to rejoin describes the group again.
func (d *Driver) recheck() time.Duration {
	return max(d.timing.Heartbeat(), 100*time.Millisecond)
}

// preferences sets up the preference on first use.
func (d *Driver) preferences() *preference {
	if !d.prio.init {
		d.prio.init = true
		d.prio.pref = newPreference(d.config.Priority, prioritySettle(*d.config.HeartbeatTimeout))
		d.prio.hops = map[int32]*hop{}
	}
	return &d.prio.pref
}

// leftGroup records that the instance has left the group under member id member (yield.go).
func (d *Driver) leftGroup(member string) {
	d.prio.leave = leaveCheck{member: member, at: d.now()}
}

// holdOut keeps the instance out of the group once its yield is over, while it stands by or its
// previous membership may still be in the group (leaveCheck). It extends the yield a little at a
// time, so that the instance rejoins within a recheck of the answer. Called at the start of each
// cycle, before applyYield.
// It also carries out a TransferTo that could not take the lock.
func (d *Driver) holdOut() {
	d.preferences()
	if d.Live() {
		d.takeAsked()
	}
	l := &d.prio.leave
	if !d.m.Yield.Unsubscribed || d.m.Yield.Requested.Load() || time.Duration(d.m.Yield.Until.Load()) > d.now() {
		l.holding = false
		return
	}
	now := d.now()
	switch {
	case d.prio.standby:
		d.extendYield(d.recheck())
	case l.member != "":
		if bound := d.timing.MaxPoll + *d.config.HeartbeatTimeout; now-l.at > bound {
			d.log.W()("goneli %s: could not see member %s leave group %s within %v; rejoining regardless",
				d.config.Name, l.member, d.config.LeaderGroupID, bound)
			*l = leaveCheck{}
			return
		}
		l.holding = true
		l.next = min(l.next, now+d.recheck())
		d.extendYield(d.recheck())
	}
}

// endHold ends at once a yield that holdOut extended, rather than a recheck later; a yield of
// the application's (longer, or asked for since) stands.
func (d *Driver) endHold(now time.Duration) {
	if until := time.Duration(d.m.Yield.Until.Load()); !d.m.Yield.Requested.Load() && until > now && until <= now+d.recheck() {
		d.m.Yield.Until.CompareAndSwap(int64(until), int64(now))
	}
}

// wantWatch reports whether anything needs a description of the group now.
func (d *Driver) wantWatch(now time.Duration) bool {
	w, pr := &d.prio.watch, &d.prio
	if l := pr.leave; l.member != "" && now >= l.next {
		return true
	}
	if pr.standby && d.m.Yield.Unsubscribed && now >= pr.standbyNext {
		return true
	}
	if len(pr.requests) > 0 || slices.ContainsFunc(d.parts, func(p *core.Role) bool { return d.hopDue(p) }) {
		return true
	}
	if d.m.Yield.Unsubscribed || !d.leadsAny() {
		return false
	}
	settle := prioritySettle(*d.config.HeartbeatTimeout)
	return !w.described || w.lastRebalances != d.m.Group.Rebalances ||
		(!d.timing.Classic && now-w.last >= settle/2) || (pr.wake != 0 && now >= pr.wake)
}

// watchGroup takes the answer of the description under way, if it has come, and starts another
// if one is wanted. Called from every cycle, after checkHandOver.
func (d *Driver) watchGroup() {
	d.preferences()
	w := &d.prio.watch
	now := d.now()
	if w.busy {
		select {
		case res := <-w.done:
			w.busy = false
			d.watched(res, now)
		default:
			return
		}
	}
	if !d.Live() || now < w.retryAt || !d.wantWatch(now) {
		return
	}
	if d.troubled() {
		return
	}
	desc, release, err := d.watchDescriber()
	if err != nil {
		d.throttle.Log(d.log.W(), "watch", "goneli %s: cannot describe group %s: %v", d.config.Name, d.config.LeaderGroupID, err)
		w.retryAt = now + d.recheck()
		return
	}
	if w.done == nil {
		w.done = make(chan describedGroup, 1)
	}
	w.busy, w.began, w.rebalances = true, now, d.m.Group.Rebalances
	d.prio.descriptions.Add(1)
	// The group checker's context and wait group, so that Close stops this description with
	// the group check's (closer.go).
	parent, timeout, group, done := d.check.checker, *d.config.HeartbeatTimeout, d.config.LeaderGroupID, w.done
	parent.running.Add(1)
	go func() {
		defer parent.running.Done()
		defer release()
		desc, err := DescribeGroup(parent.ctx, desc, group, timeout)
		done <- describedGroup{desc: desc, err: err}
	}()
}

// watchDescriber is what describes the group for the watch: goneli's own connection unless it has
// given way to librdkafka, else an admin client of its own, closed after the description.
func (d *Driver) watchDescriber() (GroupDescriber, func(), error) {
	if d.sideUsable() {
		return d.check.wire, func() {}, nil
	}
	a, err := d.config.KafkaAdminProvider(d.confs.admin)
	if err != nil {
		return nil, nil, err
	}
	return a, a.Close, nil
}

// describeNow describes the group from the calling goroutine, without the driver's lock
// (TransferTo).
func (d *Driver) describeNow(ctx context.Context) (describedGroup, error) {
	desc, release, err := d.watchDescriber()
	if err != nil {
		return describedGroup{}, err
	}
	defer release()
	d.prio.descriptions.Add(1)
	res, err := DescribeGroup(ctx, desc, d.config.LeaderGroupID, *d.config.HeartbeatTimeout)
	return describedGroup{desc: res, err: err}, err
}

// watched takes a description that began at w.began and ended at now.
func (d *Driver) watched(res describedGroup, now time.Duration) {
	w, pr := &d.prio.watch, &d.prio
	if res.err != nil {
		w.failures++
		w.retryAt = now + min(d.recheck()*time.Duration(1<<min(w.failures, 5)), *d.config.HeartbeatTimeout)
		d.throttle.Log(d.log.D(), "watch", "goneli %s: cannot describe group %s: %v", d.config.Name, d.config.LeaderGroupID, res.err)
		return
	}
	w.failures = 0
	cs := contendersOf(res.desc)
	if l := &pr.leave; l.member != "" && w.began >= l.at {
		if !slices.ContainsFunc(cs, func(c contender) bool { return c.member == l.member }) {
			if l.holding {
				d.log.D()("goneli %s: member %s has left the group", d.config.Name, l.member)
				d.endHold(now)
			}
			*l = leaveCheck{}
		} else {
			l.tries++
			l.next = now + min(d.recheck()<<min(l.tries, 6), *d.config.HeartbeatTimeout)
			if l.holding {
				d.throttle.Log(d.log.I(), "leave", "goneli %s: member %s is still in group %s after leaving it "+
					"(the coordinator refused its LeaveGroup?); staying out until it is gone", d.config.Name, l.member, d.config.LeaderGroupID)
			}
		}
	}
	if pr.standby && w.began >= pr.standbyFrom {
		d.stoodBy(cs, now)
	}
	d.serveHops(cs, now)
	d.serveRequests(cs, now)
	if d.m.Yield.Unsubscribed || !d.leadsAny() {
		return
	}
	w.described, w.last, w.lastRebalances = true, now, w.rebalances
	pref := d.preferences()
	pref.observe(now, d.clientID, cs)
	ledFor := time.Duration(-1)
	for _, p := range d.parts {
		if v := p.Lease.Load(); v.Leading && (ledFor < 0 || now-v.Led < ledFor) {
			ledFor = now - v.Led
		}
	}
	to, hand, wake := pref.decide(now, ledFor)
	pr.wake = wake
	if hand {
		d.handOverForPriority(to, now)
	}
}

// stoodBy takes a description made while standing by: the instance rejoins once no member of
// higher priority is in the group.
func (d *Driver) stoodBy(cs []contender, now time.Duration) {
	pr := &d.prio
	if outranked(d.config.Priority, d.clientID, cs) {
		pr.standbyNext = now + *d.config.HeartbeatTimeout
		return
	}
	pr.standby = false
	pr.isStandby.Store(false)
	d.endHold(now)
	d.log.I()("goneli %s: no member of priority above %d is left in group %s; contending again",
		d.config.Name, d.config.Priority, d.config.LeaderGroupID)
}

// handOverForPriority leaves the group so that to, a member of higher priority that has settled,
// is assigned what this instance leads, and stands by while such a member is in the group.
// Called with mu held, from a cycle.
func (d *Driver) handOverForPriority(to contender, now time.Duration) {
	pr := &d.prio
	pr.transfers.Add(1)
	who := to.name
	if who == "" {
		who = to.clientID
	}
	d.log.I()("goneli %s: member %s has priority %d, above this instance's %d, and has been in the group for %v: handing over",
		d.config.Name, who, to.priority, d.config.Priority, (now - pr.pref.seen[to.member]).Round(time.Millisecond))
	pr.standby, pr.standbyFrom, pr.standbyNext, pr.wake = true, now, now+*d.config.HeartbeatTimeout, 0
	pr.isStandby.Store(true)
	pr.watch.described = false
	d.extendYield(d.recheck())
	d.m.Yield.Requested.Store(true)
	d.applyYield()
}

// standbyAtJoin has an instance of several roles that a member of the group outranks stand by
// from the start, rather than join, be given its share of the roles, and hand them back a settle
// time later (two rebalances and a hand-over of each role for nothing). New's description of the
// group (prepareGroup) tells. A single leader joins: it is given nothing while another member
// leads.
func (d *Driver) standbyAtJoin(desc kafka.ConsumerGroupDescription) {
	if len(d.parts) < 2 || !outranked(d.config.Priority, d.clientID, contendersOf(desc)) {
		return
	}
	now := d.now()
	pr := &d.prio
	pr.standby, pr.standbyFrom, pr.standbyNext = true, now, now+*d.config.HeartbeatTimeout
	pr.isStandby.Store(true)
	d.m.Yield.Unsubscribed = true
	d.extendYield(d.recheck())
	d.log.I()("goneli %s: a member of group %s has a priority above %d; standing by until none is left",
		d.config.Name, d.config.LeaderGroupID, d.config.Priority)
}
