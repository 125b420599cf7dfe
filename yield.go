package goneli

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"
)

// yieldState is what the driver keeps of Curator.Yield: the instance leaves the group while a
// yield is in force (applyYield) and contends again after it.
type yieldState struct {
	until     atomic.Int64 // on the driver's clock, until which this instance stays out of the group
	requested atomic.Bool  // a Yield has yet to take this instance out of the group
	// unsubscribed is set while the instance is out of the group for a yield. Guarded by mu.
	unsubscribed bool
	// handingOver says that the yield is a hand-over (checkHandOver) whose tenures have yet to
	// end. Guarded by mu.
	handingOver bool
}

// yielding reports whether a Yield keeps this instance from leading now. Safe without mu.
func (d *driver) yielding() bool {
	return d.yield.requested.Load() || d.yield.until.Load() > int64(d.now())
}

// requestYield keeps the instance out of the group for d from now (Curator.Yield). inCall says
// whether the application is being called, perhaps the barrier making this very call.
func (d *driver) requestYield(dur time.Duration, inCall bool) {
	d.extendYield(dur)
	// However briefly it lasts, a yield leaves the group once: the time may be up before the next
	// cycle, and a yield that then did nothing would hand nothing over. IsLeader is false from
	// here on.
	d.yield.requested.Store(true)
	// The group is left now if nothing else holds the consumer, else by the next cycle. From the
	// barrier it is always the next cycle: leaving waits for the barrier to see LeaderRevoked,
	// and the barrier would be waiting for itself.
	if !inCall && d.mu.TryLock() {
		defer d.mu.Unlock()
		if d.live() {
			d.applyYield()
		}
	}
}

// applyYield leaves the group while a yield is in force and rejoins after it. Called with mu held.
func (d *driver) applyYield() {
	yielding := d.yield.until.Load() > int64(d.now())
	switch {
	case (yielding || d.yield.requested.Load()) && !d.yield.unsubscribed:
		d.endTenures(d.parts, false, !d.yield.handingOver)
		d.yield.handingOver = false
		member := d.group.member.member
		d.group.member.left()
		if err := d.consumer.Unsubscribe(); err != nil {
			// Still in the group, perhaps still owning partition 0 with no tenure: the next cycle
			// tries again, and resumeTenure contends again if the yield ends first.
			d.throttle.log(d.log.W(), "unsubscribe", "goneli %s: cannot leave the group to yield: %v", d.config.Name, err)
			if !yielding {
				d.yield.requested.Store(false)
			}
			return
		}
		d.yield.requested.Store(false)
		d.yield.unsubscribed = true
		if member != "" {
			// It rejoins only once the group has let this membership go (groupwatch.go, leaveCheck).
			d.leftGroup(member)
		}
		d.log.I()("goneli %s: yielding for %v", d.config.Name, max(time.Duration(d.yield.until.Load())-d.now(), 0))
	case !yielding && d.yield.unsubscribed:
		if err := d.consumer.Subscribe(d.topic, d.onRebalance); err != nil {
			d.throttle.log(d.log.W(), "subscribe", "goneli %s: cannot rejoin the group after yielding: %v", d.config.Name, err)
			return
		}
		d.yield.unsubscribed = false
		d.log.I()("goneli %s: yield over, contending again", d.config.Name)
	case !yielding && !d.yield.unsubscribed:
		d.resumeTenure()
	}
}

// resumeTenure starts a tenure for every partition this instance owns without one, which happens
// when a yield ended its tenures but could not take it out of the group. Called with mu held.
func (d *driver) resumeTenure() {
	for _, p := range d.parts {
		if !p.lease.active() && d.group.parts[p.id] {
			d.log.I()("goneli %s: still assigned partition %d after yielding; contending again", d.config.Name, p.id)
			d.beginTenure(p)
		}
	}
}

// extendYield makes the yield last for at least dur from now. Safe without mu.
func (d *driver) extendYield(dur time.Duration) {
	now := d.now()
	until := int64(now + dur)
	if until < int64(now) {
		// A duration too long to add to the clock means for as long as the instance lives.
		until = math.MaxInt64
	}
	for {
		old := d.yield.until.Load()
		if old >= until || d.yield.until.CompareAndSwap(old, until) {
			return
		}
	}
}

// checkHandOver hands every role over, through the yield, when a role this instance holds has gone
// without leading for the hand-over bound (handover.go). Called with mu held, after the leases
// have seen the time.
func (d *driver) checkHandOver() {
	if !d.live() || d.yield.unsubscribed {
		return
	}
	now := d.now()
	roles := make([]roleLease, len(d.parts))
	for i, p := range d.parts {
		v := p.lease.load()
		r := roleLease{assigned: v.assigned, leading: v.leading, fresh: v.token == 0, since: v.idle}
		if v.leading {
			r.since = v.led
		}
		r.deferred, r.readsBack = d.consumerSuspect(p, now), p.lease.readsBack()
		roles[i] = r
		if p.lease.quiesce(d.handover.quiet(now, r)) {
			d.withdraw(p)
		}
	}
	if d.yielding() {
		return
	}
	backoff, ok := d.handover.decide(now, roles)
	if !ok {
		return
	}
	d.handOvers.Add(1)
	var stuck []string
	for i, r := range roles {
		if d.handover.stuck(now, r) {
			stuck = append(stuck, fmt.Sprintf("partition %d for %v", d.parts[i].id, (now-r.since).Round(time.Millisecond)))
		}
	}
	d.log.W()("goneli %s: assigned but not leading (%s): handing over, and contending again in %v",
		d.config.Name, strings.Join(stuck, ", "), backoff)
	d.extendYield(backoff)
	d.yield.requested.Store(true)
	d.yield.handingOver = true
	d.applyYield()
}
