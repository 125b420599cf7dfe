package core

import "time"

// The pulse loop of a simulated member (neli.pulse, Background, driver.cycle): see simMember.

// wakeLoop makes the loop run at true time t: the next pulse.
func (m *simMember) wakeLoop(t time.Duration) {
	m.loopTok++
	tok := m.loopTok
	m.at(t, func() {
		if tok == m.loopTok {
			m.loop()
		}
	})
}

func (m *simMember) loop() {
	if m.w.now < m.pausedUntil {
		m.wakeLoop(m.pausedUntil)
		return
	}
	if m.blocked {
		return // the wait under way goes on with the cycle when it is over
	}
	if m.closing {
		m.cycleClosing()
		return
	}
	now := m.clock.local(m.w.now)
	switch {
	case now >= m.deadlineAt+m.prof.minPoll:
		m.deadlineAt = now
		m.cycle(m.pollFor())
	case m.mach.proving():
		m.cycle(m.prof.pollDuration)
	default:
		m.wakeLoop(m.clock.trueAt(m.deadlineAt + m.prof.minPoll))
	}
}

// pollFor is driver.pollFor, with the driver's idle poll of MinPollInterval.
func (m *simMember) pollFor() time.Duration {
	if m.mach.BusyLoop() {
		return m.prof.pollDuration
	}
	return m.prof.minPoll
}

// idle reports whether a cycle would do nothing but poll (see cycle).
func (m *simMember) idle() bool {
	if m.mach.BusyLoop() || m.mach.Yield.Unsubscribed || m.commitAns != nil || m.checkAns != nil || m.transfer != nil ||
		m.mach.explicit.busy || m.mach.Check.busy || len(m.mach.commitAsks) > 0 {
		return false
	}
	for _, r := range m.roles {
		if r.wantCheck {
			return false
		}
	}
	return true
}

// cycle is driver.cycle: a transfer asked for carried out (holdOut's takeAsked), a yield applied,
// a poll, then the rest (finish).
func (m *simMember) cycle(wait time.Duration) {
	next := func() {
		w, then := m.mach.ApplyYield()
		m.wait(w, then, func() { m.poll(wait) })
	}
	if t := m.transfer; t != nil {
		m.transfer = nil
		if m.carryOut(t, next) {
			return
		}
	}
	next()
}

// carryOut is transfer.go's carryOut: the tenures end with release markers that name the target,
// and the instance leaves the group for the transfer's hold, as for a yield; then goes on with
// next. It reports false if the tenure that asked no longer leads.
func (m *simMember) carryOut(t *simTransfer, next func()) bool {
	v := m.view(0)
	if !v.Leading || v.Tenure != t.tenure || m.mach.Yield.Unsubscribed {
		m.note("no longer leads; not handing over to %s", t.to)
		return false
	}
	m.note("hands over to %s, staying out of the group for %s", t.to, fmtDur(t.hold))
	m.mach.Tagging = t.to
	m.mach.ExtendYield(t.hold)
	m.mach.Yield.Requested.Store(true)
	w, then := m.mach.ApplyYield()
	m.mach.Tagging = ""
	m.wait(w, then, next)
	return true
}

// requestYield is Curator.Yield (driver.requestYield): the machine's requestYield, carried out by
// the next cycle. The driver's loop holds its lock while it polls, so the yield waits for the poll
// under way; a member of the simulation that waits in its poll for the next event (poll) is woken.
func (m *simMember) requestYield(d time.Duration) {
	m.mach.RequestYield(d)
	m.wakePoll()
}

// wakePoll ends a poll's wait now, if one is under way.
func (m *simMember) wakePoll() {
	if m.polling {
		tok := m.pollTok
		m.at(m.w.now, func() {
			if m.polling && tok == m.pollTok {
				m.pollWake()
			}
		})
	}
}

// poll is the cycle's poll.
func (m *simMember) poll(wait time.Duration) {
	m.lastPoll = m.clock.local(m.w.now)
	m.rdk.polled()
	if len(m.queue) == 0 && wait > 0 {
		m.polling = true
		m.pollTok++
		if m.idle() {
			// An instance with no tenure, no release under way and no yield has nothing to do in
			// a cycle but take what the poll brings (its lease's due, the hand-over check and the
			// rest find nothing), and polls again at once: it waits in the poll for the next event.
			return
		}
		tok := m.pollTok
		m.at(m.clock.afterLocal(wait), func() {
			if m.polling && tok == m.pollTok {
				m.pollWake()
			}
		})
		return
	}
	m.drain()
}

// pollWake ends a poll's wait: an event came, or the wait is over.
func (m *simMember) pollWake() {
	if m.w.now < m.pausedUntil {
		tok := m.pollTok
		m.at(m.pausedUntil, func() {
			if m.polling && tok == m.pollTok {
				m.pollWake()
			}
		})
		return
	}
	m.polling = false
	m.pollTok++
	m.lastPoll = m.clock.local(m.w.now) // librdkafka counts a poll from its return (rd_kafka_app_polled)
	m.drain()
}

// push queues an event for goneli's next poll; one waiting in a poll takes it at once.
func (m *simMember) push(e simAppEvent) {
	e.queued = m.w.now
	m.queue = append(m.queue, e)
	m.wakePoll()
}

// drain handles the polled events, then finishes the cycle. A rebalance callback that waits
// (blocked) goes on with drain when its wait is over.
func (m *simMember) drain() {
	for n := 0; n < MaxEventsPerCycle && len(m.queue) > 0 && !m.blocked; n++ {
		e := m.queue[0]
		m.queue = m.queue[1:]
		m.handle(e)
	}
	if m.blocked {
		return
	}
	m.mach.Polled(len(m.queue) == 0)
	m.finish()
}

// finish is the rest of driver.cycle once the poll is over.
func (m *simMember) finish() {
	if m.closing {
		m.afterClosingCycle()
		return
	}
	m.collectCommits()
	m.collectGroupCheck()
	m.mach.FinishReleases()
	m.mach.Tick(m.mayProduce())
	m.sendBeats()
	w, then := m.mach.CheckHandOver(false)
	m.wait(w, then, func() {
		if !m.closing {
			m.mach.StartGroupCheck()
			m.mach.StartCommits()
		}
		m.watchPending()
		next := m.clock.trueAt(m.deadlineAt + m.prof.minPoll)
		if m.mach.proving() {
			next = min(next, m.clock.afterLocal(ProofPoll))
		}
		m.wakeLoop(next)
	})
}

func (m *simMember) cycleClosing() {
	m.lastPoll = m.clock.local(m.w.now)
	m.rdk.polled()
	m.drain()
}
