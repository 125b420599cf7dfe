package core

import (
	"strings"
	"testing"
	"time"
)

// TestSimEndsWaitScenario plays issue 46's schedule (A) on the machine: a member that holds no role
// is given two at once and waits in the rebalance callback for their ends, whose answer is held up,
// until the wait gives up (HeartbeatTimeout/2); a member joins as the wait begins, so a rebalance
// starts that the waiting member's librdkafka ignores until the assignment is taken; then it
// auto-commits into that rebalance and cannot rejoin it (its JoinGroups fail), and the coordinator
// removes it, when the others are given its roles. Judged before the wait (heldAssignment at the
// start of Assign, issue 46's code), the assignment looks prompt: the member leads, the anchor of
// the commit window lands in the rebalance, its explicit commits keep it in the group until the
// rebalance timeout and renew its leases past it, and its successor leads beside it (for 915 ms at
// this seed). Judged once the assignment is taken, its renewals are held back and no two lead. The
// test checks that the schedule takes that shape, and that no one violates anything.
func TestSimEndsWaitScenario(t *testing.T) {
	p, _ := simProfileNamed("ht5s-hb250")
	w := simEndsWaitScenario(simEndsWaitSeed, p, true)
	trace := w.trace.String()
	for _, want := range []string{
		"m      the rebalance callback reads the ends of partitions 1,2",
		"m      the ends of partitions 1,2 are not read within",
		"JoinGroup of m fails",
	} {
		if !strings.Contains(trace, want) {
			t.Fatalf("the schedule did not take issue 46's shape (no %q):\n%s", want, trace)
		}
	}
	if !strings.Contains(trace, "(m) removed: it did not rejoin") && !strings.Contains(trace, "(m) expired: removed") {
		t.Fatalf("the schedule did not take issue 46's shape (m is not removed):\n%s", trace)
	}
	if testing.Verbose() {
		t.Log("\n" + trace)
	}
	if v := w.verdict; v != nil {
		t.Fatalf("%s at %s: %s\n%s", strings.ToUpper(v.kind), fmtDur(v.at), v.detail, trace)
	}
}

// simEndsWaitSeed draws the latencies of TestSimEndsWaitScenario's schedule.
const simEndsWaitSeed = 1

// simEndsWaitScenario is the schedule of TestSimEndsWaitScenario: four roles, member a alone at
// first, then member m, which is given two of them; as m asks for their ends, the answer is held up,
// member c joins and m's JoinGroups begin to fail.
func simEndsWaitScenario(seed uint64, p simProfile, trace bool) *simWorld {
	w := newSimWorld(seed, p, trace)
	a := newSimAdversary(w)
	w.adv = a
	w.setRoles(4)
	w.coordClock = &simClock{w: w, zero: time.Unix(1_600_000_000, 0)}
	c := newSimClassic(w, w.coordClock)
	c.describeAll = true // Apache Kafka 4.0
	w.coord = c
	w.topic = newSimTopic(w, w.roles, a.appendDelay)
	a.names = 2 // members the faults start are c, d, ...
	w.at(0, func() { w.startMember("a", 0, 0) })
	w.at(3*time.Second, func() { w.startMember("m", 0, 0) })
	// As m asks for the ends: the answer is held up for longer than the wait, c joins, and m's
	// JoinGroups begin to fail.
	a.faults = []*simFault{
		{kind: faultLinkDown, target: targetOther, trigger: trigEndsAsked, link: linkEnds, dur: p.ht},
		{kind: faultJoin, trigger: trigEndsAsked},
		{kind: faultJoinFail, target: targetOther, trigger: trigEndsAsked, count: 1 << 20, err: errUnknownServerError},
	}
	w.end = 60 * time.Second
	w.run()
	return w
}
