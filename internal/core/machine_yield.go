package core

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"
)

// # Yielding
//
// A yield takes the instance out of the group for a while: every tenure ends, as in a revocation,
// and the consumer unsubscribes, which makes librdkafka leave the group; when the yield is over it
// subscribes again and joins as a new member. Yield (stats.go), the hand-over of a role the
// instance cannot renew (checkHandOver), a transfer and a priority hand-over (internal/driver, transfer.go,
// groupwatch.go) all come here.

// yieldState is whether, and until when, the instance yields.
type yieldState struct {
	Until     atomic.Int64 // on the machine's clock, until which this instance stays out of the group
	Requested atomic.Bool  // a Yield has yet to take this instance out of the group
	// unsubscribed says that the consumer has left the group for a yield (or a standby) and not
	// joined it again yet.
	Unsubscribed bool
	// handingOver says that the yield under way is a hand-over (checkHandOver): its revocation is
	// held back at once, without release markers (endTenures).
	handingOver bool
}

// yielding reports whether a yield is asked for or under way. Safe without the caller's lock.
func (m *Machine) Yielding() bool {
	return m.Yield.Requested.Load() || m.Yield.Until.Load() > int64(m.now())
}

// extendYield makes the instance stay out of the group for at least d from now. Safe without the
// caller's lock.
func (m *Machine) ExtendYield(d time.Duration) {
	now := m.now()
	until := int64(now + d)
	if until < int64(now) {
		until = math.MaxInt64
	}
	for {
		old := m.Yield.Until.Load()
		if old >= until || m.Yield.Until.CompareAndSwap(old, until) {
			return
		}
	}
}

// requestYield asks for a yield of at least d, carried out by the next cycle (applyYield). Safe
// without the caller's lock.
func (m *Machine) RequestYield(d time.Duration) {
	m.ExtendYield(d)
	m.Yield.Requested.Store(true)
}

// applyYield leaves the group when a yield is asked for, joins it again once it is over, and
// otherwise begins the tenure of a partition that stayed assigned across a yield that could not
// leave. What it returns is for the caller: to wait for, then to call (then is nil if nothing is
// to follow).
func (m *Machine) ApplyYield() (*ReleaseWait, func()) {
	yielding := m.Yield.Until.Load() > int64(m.now())
	switch {
	case (yielding || m.Yield.Requested.Load()) && !m.Yield.Unsubscribed:
		w := m.endTenures(m.roles, false, !m.Yield.handingOver)
		m.Yield.handingOver = false
		return w, func() { m.leave(yielding) }
	case !yielding && m.Yield.Unsubscribed:
		if err := m.fx.Subscribe(); err != nil {
			m.fx.Note(LevelWarn, "subscribe", "goneli %s: cannot rejoin the group after yielding: %v", m.name, err)
			return nil, nil
		}
		m.Yield.Unsubscribed = false
		m.fx.Note(LevelInfo, "", "goneli %s: yield over, contending again", m.name)
	case !yielding && !m.Yield.Unsubscribed:
		m.resumeTenure()
	}
	return nil, nil
}

// leave unsubscribes for the yield under way, its tenures ended.
func (m *Machine) leave(yielding bool) {
	member := m.Group.member.member
	m.Group.member.Left()
	if err := m.fx.Unsubscribe(); err != nil {
		m.fx.Note(LevelWarn, "unsubscribe", "goneli %s: cannot leave the group to yield: %v", m.name, err)
		if !yielding {
			m.Yield.Requested.Store(false)
		}
		return
	}
	m.Yield.Requested.Store(false)
	m.Yield.Unsubscribed = true
	if member != "" {
		m.fx.Left(member)
	}
	m.fx.Note(LevelInfo, "", "goneli %s: yielding for %v", m.name, max(time.Duration(m.Yield.Until.Load())-m.now(), 0))
}

// resumeTenure begins the tenure of a partition the group still assigns this instance after a
// yield that could not leave the group (the unsubscribe failed), or one that ended too soon for
// the rebalance to take effect.
func (m *Machine) resumeTenure() {
	for _, p := range m.roles {
		if !p.Lease.active() && m.Group.Parts[p.ID] {
			m.fx.Note(LevelInfo, "", "goneli %s: still assigned partition %d after yielding; contending again", m.name, p.ID)
			m.beginTenure(p)
		}
	}
}

// checkHandOver tells each tenure whether it is stuck on its way to a hand-over (lease.quiesce),
// and hands every role over when one has been assigned for the hand-over bound without leading
// (handover.go): the instance yields for the back-off, so that the group gives its roles to
// others. delivering says whether the producer delivered a heartbeat within the last lease. What
// it returns is applyYield's.
func (m *Machine) CheckHandOver(delivering bool) (*ReleaseWait, func()) {
	if !m.fx.Live() || m.Yield.Unsubscribed {
		return nil, nil
	}
	now := m.now()
	roles := make([]roleLease, len(m.roles))
	for i, p := range m.roles {
		v := p.Lease.Load()
		r := roleLease{assigned: v.Assigned, leading: v.Leading, fresh: v.Token == 0, since: max(v.Idle, v.Heard)}
		if v.Leading {
			r.since = v.Led
		}
		r.deferred, r.readsBack = m.consumerSuspect(p, now, delivering), p.Lease.readsBack()
		roles[i] = r
		if p.Lease.quiesce(m.handover.quiet(now, r)) {
			m.withdraw(p)
		}
	}
	if m.Yielding() {
		return nil, nil
	}
	backoff, ok := m.handover.decide(now, roles)
	if !ok {
		return nil, nil
	}
	m.HandOvers.Add(1)
	var stuck []string
	for i, r := range roles {
		if m.handover.stuck(now, r) {
			stuck = append(stuck, fmt.Sprintf("partition %d for %v", m.roles[i].ID, (now-r.since).Round(time.Millisecond)))
		}
	}
	m.fx.Note(LevelWarn, "", "goneli %s: assigned but not leading (%s): handing over, and contending again in %v",
		m.name, strings.Join(stuck, ", "), backoff)
	m.RequestYield(backoff)
	m.Yield.handingOver = true
	return m.ApplyYield()
}
