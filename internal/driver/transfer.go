package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/goneli/goneli/internal/core"
)

// # Transfers
//
// Curator.TransferTo hands leadership to a named member. The leader checks, with a fresh
// description of the group, that the member is in it and that no member outranks it (else the
// role would move on to that member a settle time later), then leaves the group as Yield does, and
// its release markers name the target (heartbeat.to). The assignor gives partition 0 to the member
// next in line, the one whose member id sorts first (priority.go). That may be another member than
// the target: such a member reads the marker among the last records of the partition before its
// own first heartbeat comes back, holds its tenure (as for a predecessor that is releasing: the
// lease does not lead meanwhile), describes the group, and if the target is still in it passes the
// partition on: it leaves the group, never having led, and the next member in line is assigned
// the partition and reads the same marker. Each member ahead of the target costs one more
// rebalance (librdkafka sends at most one JoinGroup a second, so about a second each), and every
// member that left stays out long enough for the partition to reach the target (transferHold).
// A target that left in the meantime ends the chain: the member that finds it gone leads.
//
// None of this can give two leaders: every step is a revocation like any other. The leader leaves
// the group; its release markers hold every successor back until its barrier has returned from
// LeaderRevoked; a member that is assigned the partition leads only after the group assigned it,
// it proved its own lease (a heartbeat read back and committed under its membership) and its group
// check passed. A member that passes the partition on never leads at all. What a transfer costs is
// liveness: a leaderless gap of one hand-over per member in the chain.
//
// Any client may also ask for a transfer by writing a request (kindTransfer) to the role's
// partition, which the leader reads back with its heartbeats: Transfer and `neli transfer` do. The
// leader acts only on a request that it reads while it leads, which is one written after its tenure
// began (the records before its first own heartbeat are read before it can lead), and checks it as
// TransferTo does. A request takes one of the releaseLookback records a successor reads.
//
// Roles cannot be transferred one at a time: a member gives a role up only by leaving the group,
// which takes every role it holds along, and cooperative-sticky assigns the orphaned roles to the
// least loaded members and moves roles back to balance the group when a member returns
// (isBalanced and performReassignments, librdkafka v2.11.1 src/rdkafka_sticky_assignor.c:750-880
// and 1136-1350), so a role sent to one member would not stay there. Priorities place roles.

// ErrNotLeader, ErrNotMember and ErrRolesTransfer are goneli's, documented there.
var ErrNotLeader = errors.New("goneli: this instance does not lead")

var ErrNotMember = errors.New("goneli: no such member in the group")

var ErrRolesTransfer = errors.New("goneli: roles cannot be transferred one at a time; use Config.Priority to place them")

// pendingTransfer is a TransferTo for the next cycle: to is the target's sanitised Name, hold how
// long this instance then stays out of the group, tenure the one that leads.
type pendingTransfer struct {
	to     string
	hold   time.Duration
	tenure uint64
}

// hop is a transfer to another member, found by a tenure of this instance on its partition.
type hop struct {
	to     string
	tenure uint64 // this instance's tenure that found it
	from   uint64 // the tenure that handed over
	// sentinel is the tenure id of the releasing marker fed to the lease to hold it; at is when
	// the hop was found, and confirmed the lease's count of own heartbeats read back then: the
	// decision waits for one more, which shows every record before it read (ready).
	sentinel  uint64
	at, ready time.Duration
	confirmed uint64
}

// hopSentinel makes the id of the marker that holds a tenure while it decides on a hop.
const hopSentinel = 0x6e656c692d686f70

// transferRequest is a request record read from a partition this instance leads.
type transferRequest struct {
	to, by    string
	partition int32
	tenure    uint64
	at        time.Duration
}

// transferHold is how long a member that hands over or passes a transfer on stays out of the group:
// two leases, and for each member still ahead of the target the hand-over that passes the
// partition on, which librdkafka's one JoinGroup a second and the group heartbeats that announce
// each rebalance bound.
func transferHold(lease, hb time.Duration, ahead int) time.Duration {
	return 2*lease + time.Duration(ahead)*(time.Second+2*hb)
}

// planTransfer checks a transfer to the member named to against the group's members cs, for a
// leader of client.id self and priority mine, called leader in messages, and returns how long the
// leader then stays out.
func planTransfer(errs Errors, cs []contender, self string, mine int, leader, to string, lease, hb time.Duration) (time.Duration, error) {
	target := Sanitise(to)
	var found []contender
	var names []string
	top, topName := mine, leader
	for _, c := range cs {
		if c.clientID == self {
			continue
		}
		name := c.name
		if name == "" {
			name = c.clientID
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		if c.name != "" && c.name == target && !slices.ContainsFunc(found, func(f contender) bool { return f.clientID == c.clientID }) {
			found = append(found, c)
		}
		if c.priority > top {
			top, topName = c.priority, name
		}
	}
	slices.Sort(names)
	switch len(found) {
	case 0:
		return 0, errs.Transfer(to, "it is not a member of the group", names, ErrNotMember)
	case 1:
	default:
		return 0, errs.Transfer(to, fmt.Sprintf("%d members of the group have that name", len(found)), nil, nil)
	}
	t := found[0]
	if t.priority < top {
		return 0, errs.Transfer(to, fmt.Sprintf("its priority %d is below the %d of %s, so leadership would move on to "+
			"a member of higher priority after the settle time; raise its priority, or lower the others'", t.priority, top, topName), nil, nil)
	}
	ahead := 0
	for _, c := range cs {
		if c.clientID != self && c.clientID != t.clientID && c.member < t.member {
			ahead++
		}
	}
	return transferHold(lease, hb, ahead), nil
}

// transferTo checks a transfer of p to the member named name and has the next cycle (or this call,
// if it can take the lock) carry it out. Called without mu.
func (d *Driver) transferTo(p *core.Role, name string, inCall bool) error {
	if !d.Live() {
		return ErrNonLivePulse
	}
	if len(d.parts) > 1 {
		return d.config.Errors.Transfer(name, "this instance contends for several roles", nil, ErrRolesTransfer)
	}
	v := p.Lease.Load()
	if !p.Lease.IsLeader() {
		return d.config.Errors.Transfer(name, "this instance does not lead; call TransferTo on the leader, or use goneli.Transfer", nil, ErrNotLeader)
	}
	if Sanitise(name) == Sanitise(d.config.Name) {
		return d.config.Errors.Transfer(name, "that is this instance, which leads already", nil, nil)
	}
	lease := *d.config.HeartbeatTimeout
	if wait := d.settleLeft(v); wait > 0 {
		return d.config.Errors.Transfer(name, fmt.Sprintf("this instance has led for %v, and a role changes hands at most once per "+
			"settle time (%v); try again in %v", (prioritySettle(lease)-wait).Round(time.Millisecond), prioritySettle(lease), wait.Round(time.Millisecond)), nil, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lease)
	defer cancel()
	res, err := d.describeNow(ctx)
	if err != nil {
		return fmt.Errorf("goneli: cannot describe group %s to transfer leadership to %q: %w", d.config.LeaderGroupID, name, err)
	}
	hold, err := planTransfer(d.config.Errors, contendersOf(res.desc), d.clientID, d.config.Priority, "this instance", name, lease, d.timing.Heartbeat())
	if err != nil {
		return err
	}
	d.prio.asked.Store(&pendingTransfer{to: Sanitise(name), hold: hold, tenure: v.Tenure})
	if !inCall && d.mu.TryLock() {
		defer d.mu.Unlock()
		if d.Live() {
			d.takeAsked()
		}
	}
	return nil
}

// settleLeft is how long the tenure behind v must still lead before it may hand over: a role
// changes hands at most once per settle time.
func (d *Driver) settleLeft(v *core.LeaseView) time.Duration {
	return max(prioritySettle(*d.config.HeartbeatTimeout)-(d.now()-v.Led), 0)
}

// takeAsked carries out a TransferTo. Called with mu held.
func (d *Driver) takeAsked() {
	if t := d.prio.asked.Swap(nil); t != nil {
		d.carryOut(*t, "")
	}
}

// carryOut hands over to t.to: the tenures end with release markers that name it, and the
// instance leaves the group for t.hold. by names who asked, if not the application. Called with mu
// held.
func (d *Driver) carryOut(t pendingTransfer, by string) {
	v := d.parts[0].Lease.Load()
	if !v.Leading || v.Tenure != t.tenure || d.m.Yield.Unsubscribed {
		d.log.I()("goneli %s: no longer leads; not handing over to %s", d.config.Name, t.to)
		return
	}
	if by != "" {
		by = " (asked by " + by + ")"
	}
	d.prio.transfers.Add(1)
	d.log.I()("goneli %s: handing over to %s%s; staying out of the group for %v", d.config.Name, t.to, by, t.hold)
	// The release markers of the tenures that end now name the target (machine.endTenures).
	d.machine(func(m *core.Machine) { m.Tagging = t.to })
	d.extendYield(t.hold)
	d.m.Yield.Requested.Store(true)
	d.applyYield()
	d.machine(func(m *core.Machine) { m.Tagging = "" })
}

// foreignRecord takes a record of another tenure from p's partition (driver.onMessage): a
// transfer request, a release marker that names a transfer's target, or anything else, which the
// lease judges.
func (d *Driver) foreignRecord(p *core.Role, key string, h core.Heartbeat) {
	d.preferences()
	switch h.Kind {
	case core.KindTransfer:
		d.transferAsked(p, key, h)
		return
	case core.KindReleasing, core.KindReleased:
		if h.To != "" {
			d.transferSeen(p, h)
		}
	case core.KindHeartbeat:
		if hp := d.prio.hops[p.ID]; hp != nil && h.Token > 0 && h.Tenure != hp.from {
			// A tenure led after the transfer: it is over.
			d.cancelHop(p)
		}
	}
	d.machine(func(m *core.Machine) { m.Foreign(p, h) })
}

// transferAsked takes a transfer request. Only a tenure that leads as it reads the request acts
// on it: that one was written after the tenure began.
func (d *Driver) transferAsked(p *core.Role, by string, h core.Heartbeat) {
	v := p.Lease.Load()
	if !v.Leading || h.Role != p.Name {
		return
	}
	if len(d.parts) > 1 {
		d.log.W()("goneli %s: %s asked for role %s to be handed over to %s: %v", d.config.Name, by, p.Name, h.To, ErrRolesTransfer)
		return
	}
	d.prio.requests = append(d.prio.requests, transferRequest{to: h.To, by: by, partition: p.ID, tenure: v.Tenure, at: d.now()})
}

// serveRequests checks the transfer requests against a description that began after they were
// read, and carries out the first that passes.
func (d *Driver) serveRequests(cs []contender, now time.Duration) {
	began := d.prio.watch.began
	kept := d.prio.requests[:0]
	for _, r := range d.prio.requests {
		if began < r.at {
			kept = append(kept, r)
			continue
		}
		p := d.parts[r.partition]
		v := p.Lease.Load()
		if !v.Leading || v.Tenure != r.tenure || d.m.Yield.Unsubscribed {
			continue
		}
		if wait := d.settleLeft(v); wait > 0 {
			d.log.W()("goneli %s: not handing over to %s as %s asked: led for less than the settle time (%v left)",
				d.config.Name, r.to, r.by, wait.Round(time.Millisecond))
			continue
		}
		hold, err := planTransfer(d.config.Errors, cs, d.clientID, d.config.Priority, "this instance", r.to, *d.config.HeartbeatTimeout, d.timing.Heartbeat())
		if err != nil {
			d.log.W()("goneli %s: not handing over as %s asked: %v", d.config.Name, r.by, err)
			continue
		}
		d.carryOut(pendingTransfer{to: r.to, hold: hold, tenure: r.tenure}, r.by)
	}
	d.prio.requests = kept
}

// transferSeen takes a release marker that names the target of a transfer. A tenure that is not
// the target holds its renewals (a releasing marker of its own making, hopSentinel) until a
// description says whether to pass the partition on.
func (d *Driver) transferSeen(p *core.Role, h core.Heartbeat) {
	v := p.Lease.Load()
	if !v.Assigned || v.Leading || len(d.parts) > 1 {
		return
	}
	if h.To == Sanitise(d.config.Name) {
		d.cancelHop(p)
		return
	}
	if hp := d.prio.hops[p.ID]; hp != nil && hp.from == h.Tenure && hp.tenure == v.Tenure {
		return
	}
	d.cancelHop(p)
	hp := &hop{to: h.To, tenure: v.Tenure, from: h.Tenure, sentinel: h.Tenure ^ hopSentinel, at: d.now(), confirmed: v.Counts.Confirmed}
	d.prio.hops[p.ID] = hp
	d.machine(func(m *core.Machine) {
		m.Foreign(p, core.Heartbeat{Tenure: hp.sentinel, Kind: core.KindReleasing, Role: p.Name})
	})
}

// cancelHop lets p's tenure go on as if no transfer had been found.
func (d *Driver) cancelHop(p *core.Role) {
	hp := d.prio.hops[p.ID]
	if hp == nil {
		return
	}
	delete(d.prio.hops, p.ID)
	d.machine(func(m *core.Machine) {
		m.Foreign(p, core.Heartbeat{Tenure: hp.sentinel, Kind: core.KindReleased, Role: p.Name})
	})
}

// hopDue reports whether p's hop waits for a description: once an own heartbeat of the tenure has
// come back after the marker, every record before that has been read, and any that ended the
// transfer has cancelled the hop.
func (d *Driver) hopDue(p *core.Role) bool {
	hp := d.prio.hops[p.ID]
	if hp == nil {
		return false
	}
	if hp.ready == 0 && p.Lease.Load().Counts.Confirmed > hp.confirmed {
		hp.ready = d.now()
	}
	return hp.ready != 0
}

// serveHops decides each hop whose description began once it was ready: pass the partition on if
// the target is still in the group, else lead.
func (d *Driver) serveHops(cs []contender, now time.Duration) {
	began := d.prio.watch.began
	for _, p := range d.parts {
		hp := d.prio.hops[p.ID]
		if hp == nil || hp.ready == 0 || began < hp.ready {
			continue
		}
		v := p.Lease.Load()
		if !v.Assigned || v.Tenure != hp.tenure || v.Leading || d.m.Yield.Unsubscribed {
			d.cancelHop(p)
			continue
		}
		hold, err := planTransfer(d.config.Errors, cs, d.clientID, d.config.Priority, "this instance", hp.to, *d.config.HeartbeatTimeout, d.timing.Heartbeat())
		if err != nil {
			d.log.I()("goneli %s: partition %d was handed over to %s, but not passing it on: %v", d.config.Name, p.ID, hp.to, err)
			d.cancelHop(p)
			continue
		}
		d.log.I()("goneli %s: partition %d was handed over to %s: passing it on, and staying out of the group for %v",
			d.config.Name, p.ID, hp.to, hold)
		delete(d.prio.hops, p.ID)
		d.extendYield(hold)
		d.m.Yield.Requested.Store(true)
		d.applyYield()
		return
	}
}

// Member is a member of the group as goneli.Transfer reads it in a description.
type Member struct {
	MemberID, ClientID, Name string
	Priority                 int
}

// PlanTransfer checks, for goneli.Transfer, which asks from outside the group, a transfer from the
// leader named leader to the member named to, among members.
func PlanTransfer(errs Errors, members []Member, leader, to string, lease, hb time.Duration) error {
	var cs []contender
	self, mine := "", 0
	for _, m := range members {
		cs = append(cs, contender{member: m.MemberID, clientID: m.ClientID, name: m.Name, priority: m.Priority})
		if m.Name == leader && self == "" {
			self, mine = m.ClientID, m.Priority
		}
	}
	if self == "" {
		return errs.Transfer(to, fmt.Sprintf("the leader %s is not in the group's description", leader), nil, nil)
	}
	_, err := planTransfer(errs, cs, self, mine, "the leader "+leader, to, lease, hb)
	return err
}

// PrioritySettle is the settle time for a lease: how long a member must have been in the group, and
// a tenure must have led, before a role changes hands for priority or on a transfer.
func PrioritySettle(lease time.Duration) time.Duration {
	return prioritySettle(lease)
}
