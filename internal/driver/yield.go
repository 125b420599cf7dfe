package driver

import (
	"time"

	"github.com/goneli/goneli/internal/core"
)

// The shell's side of a yield (internal/core, machine_yield.go, decides it).

// yielding reports whether a Yield keeps this instance from leading now. Safe without mu.
func (d *Driver) yielding() bool {
	return d.m.Yielding()
}

// extendYield keeps the instance out of the group for at least dur from now. Safe without mu.
func (d *Driver) extendYield(dur time.Duration) {
	d.m.ExtendYield(dur)
}

// requestYield keeps the instance out of the group for d from now (Curator.Yield). inCall says
// whether the application is being called, perhaps the barrier making this very call.
func (d *Driver) requestYield(dur time.Duration, inCall bool) {
	// However briefly it lasts, a yield leaves the group once: the time may be up before the next
	// cycle, and a yield that then did nothing would hand nothing over. IsLeader is false from
	// here on.
	d.m.RequestYield(dur)
	// The group is left now if nothing else holds the consumer, else by the next cycle. From the
	// barrier it is always the next cycle: leaving waits for the barrier to see LeaderRevoked,
	// and the barrier would be waiting for itself.
	if !inCall && d.mu.TryLock() {
		defer d.mu.Unlock()
		if d.Live() {
			d.applyYield()
		}
	}
}

// applyYield carries out the machine's yield (machine.applyYield): it leaves the group while a
// yield is in force, once what ending the tenures leaves to wait for is over, and rejoins after
// it. A failed unsubscribe leaves the instance in the group, perhaps still owning partition 0 with
// no tenure: the next cycle tries again, and the machine contends again if the yield ends first.
// Called with mu held.
func (d *Driver) applyYield() {
	var w *core.ReleaseWait
	var then func()
	d.machine(func(m *core.Machine) { w, then = m.ApplyYield() })
	d.finishYield(w, then)
}

// finishYield makes the waits a yield leaves, then what follows them.
func (d *Driver) finishYield(w *core.ReleaseWait, then func()) {
	d.waitReleases(w)
	if then != nil {
		d.machine(func(*core.Machine) { then() })
	}
}

// checkHandOver lets the machine hand the roles over (machine.checkHandOver). Called with mu held.
func (d *Driver) checkHandOver() {
	if !d.Live() {
		return
	}
	delivering := d.delivering()
	var w *core.ReleaseWait
	var then func()
	d.machine(func(m *core.Machine) { w, then = m.CheckHandOver(delivering) })
	d.finishYield(w, then)
}
