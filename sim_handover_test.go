package goneli

// Hand-over, yield and Close of a simulated member (handover.go, yield.go, closer.go).

// checkHandOver is driver.checkHandOver for the one role.
func (m *simMember) checkHandOver() {
	if m.unsubscribed {
		return
	}
	now := m.dnow()
	v := m.lease.view()
	r := roleLease{assigned: v.assigned, leading: v.leading, fresh: v.token == 0, since: v.idle}
	if v.leading {
		r.since = v.led
	}
	r.readsBack = m.lease.readsBack()
	if m.lease.quiesce(m.handover.quiet(now, r)) {
		m.withdraw()
	}
	if m.yielding() {
		return
	}
	backoff, ok := m.handover.decide(now, []roleLease{r})
	if !ok {
		return
	}
	m.note("hands over, out for %s", fmtDur(backoff))
	m.yieldUntil = max(m.yieldUntil, now+backoff)
	m.yieldAsked, m.handingOver = true, true
	m.applyYield()
}

// yielding is driver.yielding.
func (m *simMember) yielding() bool {
	return m.yieldAsked || m.yieldUntil > m.dnow()
}

// applyYield is driver.applyYield.
func (m *simMember) applyYield() {
	yielding := m.yieldUntil > m.dnow()
	switch {
	case (yielding || m.yieldAsked) && !m.unsubscribed:
		markers := !m.handingOver
		m.handingOver = false
		m.member.left()
		m.yieldAsked, m.unsubscribed = false, true
		m.endTenure(false, markers, m.rdk.unsubscribe)
	case !yielding && m.unsubscribed:
		m.unsubscribed = false
		m.note("yield over, contending again")
		m.rdk.subscribe()
	case !yielding && !m.unsubscribed:
		if !m.lease.active() && m.groupP0 {
			m.beginTenure()
		}
	}
}

// close is Close: IsLeader turns false at once, the tenure ends, the consumer leaves the group,
// and the process exits once its LeaveGroup is out.
func (m *simMember) close() {
	if m.closing || !m.alive {
		return
	}
	m.note("Close")
	m.closing = true
	m.endTenure(false, true, m.rdk.unsubscribe)
	m.wakeLoop(m.w.now)
}
