package core

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) advance(d time.Duration) { c.now = c.now.Add(d) }

const (
	rigLease    = time.Second
	rigInterval = 100 * time.Millisecond
)

// rig drives one lease the way the driver does, with a fake clock and a pretend log in which every
// produced heartbeat lands at the next offset.
type rig struct {
	t       *testing.T
	clock   *fakeClock
	l       *Lease
	events  []TenureEvent
	sent    []Heartbeat
	offset  int64 // where the next record lands
	stored  []int64
	commits []int64 // explicit commits asked for
	checks  int
	// gated says that the commit gate holds stores back: the test stores with storedAt itself.
	gated bool
}

func newRig(t *testing.T) *rig {
	c := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	l := NewLease(LeaseConfig{Timeout: rigLease, Interval: rigInterval, ReleaseWait: 2 * rigLease, Clock: c, Base: c.now})
	ids := uint64(0xa0)
	l.random = func() uint64 { ids++; return ids }
	return &rig{t: t, clock: c, l: l}
}

func (r *rig) take(out LeaseOut) {
	r.events = append(r.events, out.Events...)
	if out.Heartbeat != nil {
		r.sent = append(r.sent, *out.Heartbeat)
		r.l.Sent()
	}
	if out.Store != 0 {
		r.stored = append(r.stored, out.Store)
		// The driver stores it at once, as it does while no commit is in flight (commitgate.go).
		if !r.gated {
			r.l.StoredAt(out.Store, r.l.Now())
		}
	}
	if out.commit != 0 {
		r.commits = append(r.commits, out.commit)
	}
	if out.check {
		r.checks++
	}
}

// deliver stands for the dispatcher: the barrier has returned from every event so far.
func (r *rig) deliver() {
	for _, e := range r.events {
		if _, ok := e.(Acquired); ok {
			r.l.AcquiredDelivered(r.l.Load().Epoch)
		}
	}
}

func (r *rig) assign()              { r.take(r.l.Assign(false)) }
func (r *rig) revoke(lost bool)     { r.take(r.l.Revoke(lost)) }
func (r *rig) due()                 { r.take(r.l.Due(true)) }
func (r *rig) expire()              { r.take(r.l.Expire()) }
func (r *rig) wait(d time.Duration) { r.clock.advance(d) }

// heartbeat produces the next heartbeat now and returns it with the offset it lands at.
func (r *rig) heartbeat() (Heartbeat, int64) {
	r.t.Helper()
	r.l.t.next = 0 // due now, whatever the interval says
	n := len(r.sent)
	r.due()
	if len(r.sent) != n+1 {
		r.t.Fatalf("no heartbeat produced")
	}
	off := r.offset
	r.offset++
	return r.sent[n], off
}

func (r *rig) back(h Heartbeat, off int64) { r.take(r.l.ReadBack(h, off)) }

// tagOf is the commit metadata of the heartbeat stored at off, as librdkafka hands it back.
func (r *rig) tagOf(off int64) string { return r.l.t.pending[off].tag }
func (r *rig) commit(off int64)       { r.take(r.l.Committed(off, r.tagOf(off), false)) }
func (r *rig) verify()                { r.check(GroupCheck{Verdict: GroupVerdict{SawSelf: true}}) }
func (r *rig) check(c GroupCheck)     { r.take(r.l.Checked(r.l.t.id, c)) }

// renewal sends a heartbeat, reads it back after rtt, and has its offset commit accepted after a
// further lag.
func (r *rig) renewal(rtt, lag time.Duration) {
	h, off := r.heartbeat()
	r.wait(rtt)
	r.back(h, off)
	r.wait(lag)
	r.commit(off + 1)
}

// acquire assigns, verifies and renews, and lets the barrier see LeaderAcquired.
func (r *rig) acquire() {
	r.assign()
	r.verify()
	r.renewal(10*time.Millisecond, 10*time.Millisecond)
	r.deliver()
}

// eventOrder is the documented order of a tenure's events (Barrier): an acquisition, any number of
// fences each followed by an acquisition again, then perhaps a fence, and the revocation.
var eventOrder = regexp.MustCompile(`^(A(FA)*F?R)*(A(FA)*F?)?$`)

// kinds renders the events as letters: A(cquired), F(enced), R(evoked).
func (r *rig) kinds() string {
	var sb strings.Builder
	for _, e := range r.events {
		switch e.(type) {
		case Acquired:
			sb.WriteString("A")
		case Fenced:
			sb.WriteString("F")
		case Revoked:
			sb.WriteString("R")
		}
	}
	return sb.String()
}

func TestLeaseTransitions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		steps  func(r *rig)
		events string
		leader bool
	}{
		{"assigned, nothing confirmed", func(r *rig) { r.assign(); r.verify(); r.heartbeat() }, "", false},
		{"read back but not committed", func(r *rig) {
			r.assign()
			r.verify()
			h, off := r.heartbeat()
			r.back(h, off)
		}, "", false},
		{"committed: acquires", func(r *rig) { r.acquire() }, "A", true},
		{"acquired, barrier still busy", func(r *rig) {
			r.assign()
			r.verify()
			r.renewal(time.Millisecond, time.Millisecond)
		}, "A", false},
		{"lease runs out without renewal", func(r *rig) { r.acquire(); r.wait(rigLease); r.expire() }, "AF", false},
		{"a pulse notices the lapse too", func(r *rig) { r.acquire(); r.wait(rigLease); r.due() }, "AF", false},
		{"renewals keep it", func(r *rig) {
			r.acquire()
			for range 30 {
				r.wait(rigInterval)
				r.renewal(5*time.Millisecond, 5*time.Millisecond)
				r.expire()
			}
		}, "A", true},
		{"refused commit fences", func(r *rig) { r.acquire(); r.take(r.l.rejected("UNKNOWN_MEMBER_ID")) }, "AF", false},
		{"fresh heartbeat resumes the fenced tenure", func(r *rig) {
			r.acquire()
			r.wait(rigLease)
			r.expire()
			r.renewal(time.Millisecond, time.Millisecond)
			r.deliver()
		}, "AFA", true},
		{"a renewal after an unnoticed lapse fences first", func(r *rig) {
			r.acquire()
			r.wait(rigLease) // nobody calls expire: the watchdog is waiting for the lock
			r.renewal(time.Millisecond, time.Millisecond)
			r.deliver()
		}, "AFA", true},
		{"late heartbeat never revives", func(r *rig) {
			r.acquire()
			h, off := r.heartbeat()
			r.wait(rigLease)
			r.expire()
			r.back(h, off) // it took a whole lease to come back
			r.commit(off + 1)
		}, "AF", false},
		{"orderly revoke", func(r *rig) { r.acquire(); r.revoke(false) }, "AR", false},
		{"revoke after fence", func(r *rig) { r.acquire(); r.wait(rigLease); r.expire(); r.revoke(false) }, "AFR", false},
		{"revoke of a lapse nobody noticed", func(r *rig) { r.acquire(); r.wait(rigLease); r.revoke(false) }, "AFR", false},
		{"lost assignment", func(r *rig) { r.acquire(); r.revoke(true) }, "AFR", false},
		{"revoke before acquiring is silent", func(r *rig) { r.assign(); r.verify(); r.heartbeat(); r.revoke(false) }, "", false},
		{"fence while not leading is silent", func(r *rig) { r.assign(); r.take(r.l.rejected("ILLEGAL_GENERATION")) }, "", false},
		{"a new tenure acquires anew", func(r *rig) { r.acquire(); r.revoke(false); r.acquire() }, "ARA", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			tc.steps(r)
			if got := r.kinds(); got != tc.events {
				t.Errorf("events %q, want %q: %v", got, tc.events, r.events)
			}
			if got := r.l.IsLeader(); got != tc.leader {
				t.Errorf("isLeader = %v, want %v", got, tc.leader)
			}
			if !eventOrder.MatchString(r.kinds()) {
				t.Errorf("events %q break the documented order", r.kinds())
			}
		})
	}
}

// The lease ends HeartbeatTimeout after the send time of the newest heartbeat behind a renewal,
// however late the renewal itself came.
func TestLeaseEndsATimeoutAfterTheSendTime(t *testing.T) {
	r := newRig(t)
	r.assign()
	r.verify()
	r.renewal(300*time.Millisecond, 200*time.Millisecond) // accepted 500 ms after it was sent
	r.deliver()
	r.wait(rigLease - 500*time.Millisecond - time.Nanosecond)
	if !r.l.IsLeader() {
		t.Fatal("lease ended early")
	}
	r.wait(time.Nanosecond)
	if r.l.IsLeader() {
		t.Fatal("lease outlived HeartbeatTimeout after the heartbeat's send time")
	}
	r.expire()
	f, ok := r.events[len(r.events)-1].(Fenced)
	if !ok || f.LeaseAge != rigLease {
		t.Fatalf("want a fence with a lease age of %v, got %v", rigLease, r.events)
	}
	if d, ok := r.l.deadline(); ok {
		t.Fatalf("a fenced lease still has a deadline %v", d)
	}
}

// Only this tenure's own heartbeats, each newer than the last, renew.
func TestLeaseIgnoresForeignAndStaleHeartbeats(t *testing.T) {
	r := newRig(t)
	r.acquire()
	old, _ := r.heartbeat()
	r.revoke(false)
	r.assign()
	r.verify()
	r.back(old, 40) // the previous tenure's, read back late
	h1, off1 := r.heartbeat()
	h2, off2 := r.heartbeat()
	r.back(h2, off2)
	r.back(h1, off1) // a retry that lost the race to a newer one
	if got := r.l.Load().Counts.Stale; got != 2 {
		t.Fatalf("stale heartbeats %d, want 2", got)
	}
	r.commit(off1 + 1) // librdkafka never stored it, but a commit of it must not renew either
	if strings.Count(r.kinds(), "A") != 1 {
		t.Fatalf("a stale heartbeat renewed: %q", r.kinds())
	}
	r.commit(off2 + 1)
	r.deliver()
	if !r.l.IsLeader() || r.kinds() != "ARA" {
		t.Fatalf("the newest own heartbeat should renew: %q, leader %v", r.kinds(), r.l.IsLeader())
	}
}

// A commit of a later offset accepts every earlier one, but renews from the heartbeat it names.
func TestLeaseRenewsFromTheCommittedHeartbeat(t *testing.T) {
	r := newRig(t)
	r.assign()
	r.verify()
	h1, off1 := r.heartbeat()
	r.back(h1, off1)
	r.wait(300 * time.Millisecond)
	h2, off2 := r.heartbeat()
	r.back(h2, off2)
	r.commit(off2 + 1)
	r.deliver()
	if end := r.l.Load().End; end != h2.SentMono+rigLease {
		t.Fatalf("lease ends at %v, want the second heartbeat's send time plus the lease (%v)", end, h2.SentMono+rigLease)
	}
	r.commit(off1 + 1) // an older commit result arriving late changes nothing
	if end := r.l.Load().End; end != h2.SentMono+rigLease {
		t.Fatalf("an older commit moved the lease end to %v", end)
	}
}

// The token is the offset of the tenure's first confirmed heartbeat plus one; a fenced tenure that
// resumes keeps it, and so do its heartbeats.
func TestLeaseToken(t *testing.T) {
	r := newRig(t)
	r.offset = 41
	r.acquire()
	acq := r.events[0].(Acquired)
	if acq.Token != 42 || r.l.Load().Token != 42 {
		t.Fatalf("token %d, want 42", acq.Token)
	}
	h, _ := r.heartbeat()
	if h.Token != 42 || h.Since != acq.Since.UnixNano() {
		t.Fatalf("heartbeat carries token %d since %d", h.Token, h.Since)
	}
	r.wait(rigLease)
	r.expire()
	r.renewal(time.Millisecond, time.Millisecond)
	if again := r.events[2].(Acquired); again.Token != 42 || again.Tenure != acq.Tenure || !again.Since.Equal(acq.Since) {
		t.Fatalf("resumed with %v, want %v", again, acq)
	}
	r.revoke(false)
	r.offset = 90
	r.acquire()
	if next := r.events[len(r.events)-1].(Acquired); next.Token != 91 || next.Tenure == acq.Tenure {
		t.Fatalf("new tenure acquired with %v", next)
	}
}

// After partition 0's log restarts below what librdkafka last committed, the lease asks for an
// explicit commit of the heartbeat's offset, and acquires once it is accepted. With several roles,
// a commit result also lists the partitions it did not commit, with a logical offset: that must
// not make the lease forget what was committed, or the restart goes unnoticed.
func TestLeaseLogRestartedBelowCommittedOffset(t *testing.T) {
	for _, logical := range []bool{false, true} {
		t.Run(fmt.Sprintf("logical offset in between %v", logical), func(t *testing.T) {
			r := newRig(t)
			r.offset = 500
			r.acquire()
			if logical {
				r.commit(-1001) // kafka.OffsetInvalid
			}
			r.revoke(false)
			r.offset = 3 // the log starts again
			r.assign()
			r.verify()
			h, off := r.heartbeat()
			r.back(h, off)
			if len(r.commits) != 1 || r.commits[0] != 4 {
				t.Fatalf("explicit commits %v, want [4]", r.commits)
			}
			r.commit(4)
			r.deliver()
			if !r.l.IsLeader() || r.l.Load().Token != 4 {
				t.Fatalf("leader %v with token %d after the restart", r.l.IsLeader(), r.l.Load().Token)
			}
		})
	}
}

// The window for explicit commits is anchored at when the automatically committed offset was
// stored, not at when the commit's result was seen (issue 38). A poll loop that stops just after
// storing an offset sees its accepted auto-commit only when it resumes: had that moment anchored
// the window, explicit commits of heartbeats sent after the pause would renew a lease that the
// coordinator, whose rebalance began meanwhile, may already be about to hand on.
func TestLeaseWindowAnchoredAtStoreTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause time.Duration
		renew bool // whether an explicit commit of a heartbeat sent after the pause may renew
	}{
		{"result seen at once", 0, true},
		{"result seen after a pause shorter than the window", 100 * time.Millisecond, true},
		{"result seen after a pause past the window", 600 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.l.window = 300 * time.Millisecond
			r.acquire()
			h, off := r.heartbeat()
			r.wait(5 * time.Millisecond)
			r.back(h, off)
			stored := r.l.Now()
			r.wait(tc.pause) // the auto-commit is accepted meanwhile; its result waits in the queue
			r.commit(off + 1)
			if r.l.AutoAt != stored {
				t.Fatalf("window anchored %v after the offset was stored, want at its store time", r.l.AutoAt-stored)
			}
			// librdkafka now stops auto-committing: the next heartbeat is stored and stalls.
			h, off = r.heartbeat()
			r.wait(5 * time.Millisecond)
			r.back(h, off)
			end := r.l.Load().End
			before := len(r.commits)
			r.wait(commitStall(rigInterval))
			r.due()
			if asked := len(r.commits) > before; asked != tc.renew {
				t.Fatalf("explicit commit asked %v, want %v (heartbeat sent %v after the anchor, window %v)",
					asked, tc.renew, h.SentMono-r.l.AutoAt, r.l.window)
			}
			// Whether asked or not, an accepted explicit commit renews only within the window.
			r.take(r.l.Committed(off+1, r.tagOf(off+1), true))
			if renewed := r.l.Load().End > end; renewed != tc.renew {
				t.Fatalf("explicit commit renewed %v, want %v", renewed, tc.renew)
			}
			if unwindowed := r.l.Load().Counts.unwindowed; (unwindowed == 1) == tc.renew {
				t.Fatalf("%d explicit commits counted outside the window", unwindowed)
			}
		})
	}
}

// A commit that librdkafka sends as the partition is revoked carries an offset that no tenure
// holds any longer: it must not move the anchor of the window.
func TestLeaseRevocationCommitAnchorsNothing(t *testing.T) {
	r := newRig(t)
	r.l.window = 300 * time.Millisecond
	r.acquire()
	anchor := r.l.AutoAt
	h, off := r.heartbeat()
	r.back(h, off)
	r.revoke(false)
	r.wait(time.Second)
	r.commit(off + 1)
	if r.l.AutoAt != anchor {
		t.Fatalf("the revocation's commit moved the anchor by %v", r.l.AutoAt-anchor)
	}
}

// An explicit commit asked for because the log restarted below the last commit renews only within
// the window, like any other: outside it, it only resets what librdkafka last committed, and the
// automatic commit of the next heartbeat renews.
func TestLeaseRestartedLogOutsideTheWindow(t *testing.T) {
	r := newRig(t)
	r.l.window = 300 * time.Millisecond
	r.offset = 500
	r.acquire()
	r.revoke(false)
	r.wait(time.Second) // the anchor is a second old
	r.offset = 3
	r.assign()
	r.verify()
	h, off := r.heartbeat()
	r.back(h, off)
	if len(r.commits) != 1 || r.commits[0] != off+1 {
		t.Fatalf("explicit commits %v, want [%d]", r.commits, off+1)
	}
	r.take(r.l.Committed(off+1, r.tagOf(off+1), true))
	r.deliver()
	if r.l.IsLeader() {
		t.Fatal("leads on an explicit commit outside the window")
	}
	r.renewal(5*time.Millisecond, 5*time.Millisecond)
	r.deliver()
	if !r.l.IsLeader() || r.l.Load().Token != 5 {
		t.Fatalf("leader %v with token %d after the automatic commit", r.l.IsLeader(), r.l.Load().Token)
	}
}

// When the lease can ask for an explicit commit only after its newest heartbeat was sent past the
// window (the commit gate waited out a slow answer meanwhile), it asks for the newest heartbeat
// sent within the window, whose commit still renews up to that heartbeat's send time, rather than
// for none at all.
func TestLeaseAsksForTheNewestCommitInTheWindow(t *testing.T) {
	r := newRig(t)
	r.l.window = 300 * time.Millisecond
	r.acquire()
	r.renewal(5*time.Millisecond, 5*time.Millisecond)
	r.due()
	anchor := r.l.AutoAt

	// The auto-commit stops, and no explicit commit can start for a while: heartbeats are read back
	// and stored, and the lease is asked nothing until the newest was sent past the window.
	var inWindow, past int64
	for past == 0 {
		h, off := r.heartbeat()
		r.wait(5 * time.Millisecond)
		r.back(h, off)
		if h.SentMono-anchor < r.l.window {
			inWindow = off + 1
		} else {
			past = off + 1
		}
		r.wait(50 * time.Millisecond)
	}
	if inWindow == 0 {
		t.Fatal("no heartbeat sent within the window")
	}
	end := r.l.Load().End
	before := len(r.commits)
	r.wait(commitStall(rigInterval))
	r.due()
	if asked := r.commits[before:]; len(asked) != 1 || asked[0] != inWindow {
		t.Fatalf("explicit commits %v, want [%d] (the newest sent within the window; %d was sent past it)", asked, inWindow, past)
	}
	r.take(r.l.Committed(inWindow, r.tagOf(inWindow), true))
	if r.l.Load().End <= end {
		t.Fatal("the accepted explicit commit of a heartbeat sent within the window renewed nothing")
	}
}

// librdkafka auto-commits nothing while its consumer waits to rejoin the group, for up to a second.
// An offset stored and left uncommitted for the stall (two polls) is asked for as an explicit
// commit, the newest one, once per stall; its acceptance renews the lease as an automatic commit's
// would. Offsets whose commits come back in time are never asked for, and none is asked for once
// the window has passed since the last automatic commit.
func TestLeaseAsksForAStalledCommit(t *testing.T) {
	stall := commitStall(rigInterval) // the rig's poll is its interval
	r := newRig(t)
	r.l.window = commitWindow(2*rigLease, rigLease, rigLease/10, 0, 0)
	if r.l.window != 800*time.Millisecond {
		t.Fatalf("window %v for a session of twice the lease, want 0.8 x HeartbeatTimeout", r.l.window)
	}
	r.acquire()
	r.renewal(10*time.Millisecond, 10*time.Millisecond)
	r.due()
	if len(r.commits) != 0 {
		t.Fatalf("explicit commits %v although every commit came back", r.commits)
	}
	firstEnd := r.l.Load().End

	// The auto-commit stops: heartbeats come back and are stored, and nothing is committed.
	var last int64
	for range 4 {
		h, off := r.heartbeat()
		r.wait(5 * time.Millisecond)
		r.back(h, off)
		last = off + 1
		r.wait(stall / 4)
		r.due()
	}
	if len(r.commits) != 1 || r.commits[0] != last {
		t.Fatalf("explicit commits %v after %v without one, want [%d]", r.commits, 4*(stall/4+5*time.Millisecond), last)
	}
	r.wait(stall / 2)
	r.due()
	if len(r.commits) != 1 {
		t.Fatalf("explicit commits %v: asked again within the stall", r.commits)
	}
	r.take(r.l.Committed(last, r.tagOf(last), true))
	if end := r.l.Load().End; end <= firstEnd {
		t.Fatalf("the accepted explicit commit left the lease end at %v (was %v)", end, firstEnd)
	}
	r.wait(stall)
	r.due()
	if len(r.commits) != 1 {
		t.Fatalf("explicit commits %v after the stalled offset was committed", r.commits)
	}

	// Still stalled a stall later: asked again.
	h, off := r.heartbeat()
	r.back(h, off)
	r.wait(stall)
	r.due()
	if len(r.commits) != 2 || r.commits[1] != off+1 {
		t.Fatalf("explicit commits %v, want a second one of %d", r.commits, off+1)
	}
	r.take(r.l.Committed(off+1, r.tagOf(off+1), true))

	// Explicit commits renew only heartbeats sent within the window after the anchor: past it the
	// member may be one that never rejoined the rebalance, and the lease must run out before the
	// coordinator can expel it.
	for r.l.Now()-r.l.AutoAt < r.l.window {
		h, off := r.heartbeat()
		r.back(h, off)
		r.wait(stall)
		r.due()
		if n := len(r.commits); h.SentMono-r.l.AutoAt >= r.l.window && n > 0 && r.commits[n-1] == off+1 {
			t.Fatalf("explicit commit of %d asked for, of a heartbeat sent %v after the anchor (window %v)", off+1, h.SentMono-r.l.AutoAt, r.l.window)
		}
		r.take(r.l.Committed(off+1, r.tagOf(off+1), true))
	}
	h, off = r.heartbeat()
	r.back(h, off)
	before := len(r.commits)
	r.wait(stall)
	r.due()
	if len(r.commits) != before {
		t.Fatalf("explicit commits %v past the window", r.commits[before:])
	}
	r.expire()
	if r.kinds() != "A" && r.kinds() != "AF" {
		t.Fatalf("events %s, want A (and a fence once explicit renewals stop)", r.kinds())
	}
}

// Heartbeats go out once per interval, and a pulse in between produces nothing.
func TestLeaseHeartbeatCadence(t *testing.T) {
	r := newRig(t)
	r.assign()
	r.due()
	r.due()
	r.wait(rigInterval - time.Millisecond)
	r.due()
	if len(r.sent) != 1 {
		t.Fatalf("%d heartbeats within one interval, want 1", len(r.sent))
	}
	r.wait(time.Millisecond)
	r.due()
	if len(r.sent) != 2 || r.sent[1].Seq != 2 || r.sent[1].SentMono-r.sent[0].SentMono != rigInterval {
		t.Fatalf("second heartbeat %+v", r.sent)
	}
	r.revoke(false)
	r.wait(rigInterval)
	r.due()
	if len(r.sent) != 2 {
		t.Fatal("a heartbeat without a tenure")
	}
}

// Until a tenure acquires, its heartbeats come every poll, so that a proof that failed is retried
// soon; on acquiring it sends one at once, the first to carry its token; from then on they come
// every renewal interval.
func TestLeaseRenewsLessOftenThanItProves(t *testing.T) {
	const poll = 20 * time.Millisecond
	r := newRig(t)
	r.l = NewLease(LeaseConfig{Timeout: rigLease, Interval: rigInterval, poll: poll, ReleaseWait: 2 * rigLease, Clock: r.clock, Base: r.clock.now})
	r.assign()
	r.verify()
	r.due()
	r.wait(poll)
	r.due()
	if len(r.sent) != 2 {
		t.Fatalf("%d heartbeats one poll after the first, before acquiring; want 2", len(r.sent))
	}
	r.back(r.sent[1], 0)
	r.commit(1)
	if !r.l.Load().Leading {
		t.Fatal("not leading after a confirmed heartbeat")
	}
	r.due()
	if len(r.sent) != 3 || r.sent[2].Token == 0 {
		t.Fatalf("heartbeats %+v; want a third one at once on acquiring, carrying the token for observers", r.sent)
	}
	r.wait(rigInterval - time.Millisecond)
	r.due()
	if len(r.sent) != 3 {
		t.Fatal("a leader's heartbeat before its renewal interval had passed")
	}
	r.wait(time.Millisecond)
	r.due()
	if len(r.sent) != 4 {
		t.Fatalf("%d heartbeats; want one a renewal interval after the previous", len(r.sent))
	}
}

// Leases of one instance that acquired at different moments renew on the same ticks, so that the
// driver produces their heartbeats in one cycle; a heartbeat sent late, by a cycle that came after
// the tick, is followed by the next tick, never more than an interval after it.
func TestLeasesRenewOnSharedTicks(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	base := clock.now
	var rigs []*rig
	for i := range 3 {
		r := &rig{t: t, clock: clock, l: NewLease(LeaseConfig{Timeout: rigLease, Interval: rigInterval, poll: rigInterval / 10,
			ReleaseWait: 2 * rigLease, ticks: true, Clock: clock, Base: base})}
		r.l.random = func() uint64 { return uint64(0xb0 + i) }
		r.acquire()
		r.due() // the heartbeat at once, off the ticks
		rigs = append(rigs, r)
		clock.advance(37 * time.Millisecond)
	}
	for round := range 4 {
		// A cycle a little after each tick, by a varying amount.
		late := time.Duration(round*7) * time.Millisecond
		tick := renewalTick(clock.now.Sub(base), rigInterval)
		clock.now = base.Add(tick + late)
		var sent []time.Duration
		for _, r := range rigs {
			n := len(r.sent)
			r.due()
			if len(r.sent) != n+1 {
				t.Fatalf("round %d: a lease renewed no heartbeat at its tick", round)
			}
			sent = append(sent, r.sent[n].SentMono)
			if round > 0 && r.sent[n].SentMono-r.sent[n-1].SentMono > rigInterval+late {
				t.Fatalf("round %d: %v between heartbeats, more than an interval after the tick", round, r.sent[n].SentMono-r.sent[n-1].SentMono)
			}
		}
		for _, s := range sent {
			if s != tick+late {
				t.Fatalf("round %d: heartbeats sent at %v, want all at %v", round, sent, tick+late)
			}
		}
		clock.advance(rigInterval - late - time.Millisecond)
		for _, r := range rigs {
			n := len(r.sent)
			r.due()
			if len(r.sent) != n {
				t.Fatalf("round %d: a heartbeat before the next tick", round)
			}
		}
	}
}

func TestRenewalTick(t *testing.T) {
	for _, c := range []struct{ now, want time.Duration }{{0, 500}, {1, 500}, {499, 500}, {500, 1000}, {1234, 1500}} {
		if got := renewalTick(c.now*time.Millisecond, 500*time.Millisecond); got != c.want*time.Millisecond {
			t.Errorf("renewalTick(%vms) = %v, want %vms", c.now, got, c.want)
		}
	}
}

// The view tells the driver to poll fast while a tenure proves its first lease: from assignment
// until it acquires, or for one lease at most.
func TestLeaseProofWindow(t *testing.T) {
	r := newRig(t)
	if r.l.Load().ProveBy != 0 {
		t.Fatal("proving without a tenure")
	}
	r.assign()
	if got, want := r.l.Load().ProveBy, r.l.Now()+rigLease; got != want {
		t.Fatalf("proveBy %v after assignment, want %v", got, want)
	}
	r.verify()
	r.renewal(time.Millisecond, time.Millisecond)
	if r.l.Load().ProveBy != 0 {
		t.Fatal("still proving after acquiring")
	}
	r.wait(2 * rigLease)
	r.expire()
	if r.kinds() != "AF" || r.l.Load().ProveBy != 0 {
		t.Fatalf("events %q, proveBy %v: a fenced tenure that led once renews at the normal pace", r.kinds(), r.l.Load().ProveBy)
	}
	r.revoke(false)
	if r.l.Load().ProveBy != 0 {
		t.Fatal("proving after revocation")
	}
}

// A tenure does not lead before a group check made after its assignment found no member on another
// topic; the renewal it held back then takes effect.
func TestLeaseWaitsForTheGroupCheck(t *testing.T) {
	conflict := &GroupConflictError{Group: "g", Topic: "t", Members: []ForeignMember{{ClientID: "x", Topics: []string{"u"}}}}
	r := newRig(t)
	r.assign()
	r.due()
	if r.checks != 1 {
		t.Fatalf("%d checks started at assignment, want 1", r.checks)
	}
	r.renewal(time.Millisecond, time.Millisecond)
	if r.kinds() != "" {
		t.Fatalf("led before the group check: %q", r.kinds())
	}

	r.check(GroupCheck{Verdict: GroupVerdict{Conflict: conflict, SawSelf: true}})
	if r.kinds() != "" || r.l.Load().Conflict != conflict {
		t.Fatalf("conflict: events %q, view conflict %v", r.kinds(), r.l.Load().Conflict)
	}
	r.due()
	if r.checks != 1 {
		t.Fatal("a conflict is checked again only after a lease")
	}
	r.wait(rigLease)
	r.due()
	if r.checks != 2 {
		t.Fatal("no second check a lease after the conflict")
	}

	r.check(GroupCheck{Verdict: GroupVerdict{}}) // own assignment not visible yet
	r.wait(inconclusiveCheckRetry)
	r.due()
	if r.checks != 3 {
		t.Fatal("an inconclusive check must be repeated soon")
	}
	r.check(GroupCheck{err: errors.New("coordinator unavailable")})
	r.wait(rigInterval - time.Millisecond)
	r.due()
	if r.checks != 3 {
		t.Fatal("a failed check is repeated only after a backoff")
	}
	r.wait(time.Millisecond)
	r.due()
	if r.checks != 4 {
		t.Fatal("no retry after the backoff")
	}

	r.renewal(time.Millisecond, time.Millisecond) // held until the check passes
	r.verify()
	r.deliver()
	if r.kinds() != "A" || !r.l.IsLeader() || r.l.Load().Conflict != nil {
		t.Fatalf("after a clean check: %q, leader %v, conflict %v", r.kinds(), r.l.IsLeader(), r.l.Load().Conflict)
	}
	r.check(GroupCheck{Verdict: GroupVerdict{Conflict: conflict}}) // a stale result changes nothing
	if !r.l.IsLeader() {
		t.Fatal("a late check result deposed the leader")
	}
}

// A tenure of a membership that passed a check already asks for none and leads on its first
// renewal; cleared says so, and says no for another tenure.
func TestLeaseVouchedTenureNeedsNoCheck(t *testing.T) {
	r := newRig(t)
	r.take(r.l.Assign(true))
	r.due()
	if r.checks != 0 {
		t.Fatalf("%d checks started for a vouched tenure, want 0", r.checks)
	}
	if !r.l.cleared(r.l.t.id) || r.l.cleared(r.l.t.id+1) {
		t.Fatal("cleared does not tell the vouched tenure")
	}
	r.renewal(time.Millisecond, time.Millisecond)
	r.deliver()
	if r.kinds() != "A" || !r.l.IsLeader() {
		t.Fatalf("vouched tenure after a renewal: %q, leader %v", r.kinds(), r.l.IsLeader())
	}
	r.revoke(false)
	if r.l.cleared(r.l.t.id) {
		t.Fatal("a revoked tenure still reads as cleared")
	}
}

// A check result for an earlier tenure is ignored.
func TestLeaseIgnoresAnEarlierTenuresCheck(t *testing.T) {
	r := newRig(t)
	r.assign()
	first := r.l.t.id
	r.revoke(false)
	r.assign()
	r.take(r.l.Checked(first, GroupCheck{Verdict: GroupVerdict{SawSelf: true}}))
	r.renewal(time.Millisecond, time.Millisecond)
	if r.kinds() != "" {
		t.Fatalf("acquired on the previous tenure's check: %q", r.kinds())
	}
}

func TestLeaseCounts(t *testing.T) {
	r := newRig(t)
	r.acquire()
	r.wait(rigLease)
	r.expire()
	r.renewal(time.Millisecond, time.Millisecond)
	r.take(r.l.rejected("ILLEGAL_GENERATION"))
	r.revoke(false)
	c := r.l.Load().Counts
	want := leaseCounts{Acquired: 2, Fenced: 2, Revoked: 1, Sent: 2, Confirmed: 2, Rejected: 1}
	if c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
}

// A tenure whose predecessor is still releasing the partition does not lead until the predecessor
// says it has released it, or until the rebalance timeout has passed since the assignment.
func TestLeaseWaitsForAReleasingPredecessor(t *testing.T) {
	releasing := Heartbeat{Tenure: 7, Kind: KindReleasing}
	released := Heartbeat{Tenure: 7, Kind: KindReleased}
	for _, tc := range []struct {
		name   string
		steps  func(r *rig)
		events string
	}{
		{"released: leads", func(r *rig) {
			r.take(r.l.Foreign(releasing))
			r.renewal(time.Millisecond, time.Millisecond)
			if r.kinds() != "" || !r.l.Load().Releasing {
				t.Errorf("led while the predecessor was releasing: %q", r.kinds())
			}
			r.take(r.l.Foreign(released))
		}, "A"},
		{"released at once: never waits", func(r *rig) {
			r.take(r.l.Foreign(releasing))
			r.take(r.l.Foreign(released))
			r.renewal(time.Millisecond, time.Millisecond)
		}, "A"},
		{"never released: leads after the rebalance timeout", func(r *rig) {
			r.take(r.l.Foreign(releasing))
			r.wait(r.l.releaseWait - 500*time.Millisecond)
			r.renewal(time.Millisecond, time.Millisecond)
			if r.kinds() != "" {
				t.Errorf("led before the rebalance timeout: %q", r.kinds())
			}
			r.wait(500 * time.Millisecond)
			r.due() // the held renewal is still fresh: it takes effect at once
		}, "A"},
		{"a marker after the own first heartbeat is ignored", func(r *rig) {
			h, off := r.heartbeat()
			r.back(h, off)
			r.take(r.l.Foreign(releasing))
			r.commit(off + 1)
		}, "A"},
		{"one heartbeat while waiting", func(r *rig) {
			r.due() // the first heartbeat goes out at once, before any record is read
			r.take(r.l.Foreign(releasing))
			for range 5 {
				r.wait(rigInterval)
				r.due()
			}
			if len(r.sent) != 1 {
				t.Errorf("%d heartbeats while waiting for the predecessor, want 1", len(r.sent))
			}
			r.take(r.l.Foreign(released))
			r.due()
			if len(r.sent) != 2 {
				t.Errorf("no heartbeat once the wait was over")
			}
			h, off := r.sent[1], r.offset
			r.offset++
			r.back(h, off)
			r.commit(off + 1)
		}, "A"},
		{"other records are ignored", func(r *rig) {
			r.take(r.l.Foreign(Heartbeat{Tenure: 7}))
			r.take(r.l.Foreign(released)) // a release nobody waited for
			r.renewal(time.Millisecond, time.Millisecond)
		}, "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.assign()
			r.verify()
			tc.steps(r)
			r.deliver()
			if got := r.kinds(); got != tc.events {
				t.Errorf("events %q, want %q", got, tc.events)
			}
		})
	}
}

// An orderly revocation of a tenure that led asks for a release marker; a lost assignment, or a
// tenure that never led, has nothing to release.
func TestLeaseReleaseMarker(t *testing.T) {
	r := newRig(t)
	r.acquire()
	out := r.l.Revoke(false)
	if out.release == nil || out.release.Kind != KindReleasing || out.release.Tenure != r.sent[0].Tenure || out.release.Token == 0 {
		t.Fatalf("orderly revocation: release %+v", out.release)
	}
	r.acquire()
	if out := r.l.Revoke(true); out.release != nil {
		t.Fatal("a lost assignment must not ask for a release marker")
	}
	r.assign()
	if out := r.l.Revoke(false); out.release != nil {
		t.Fatal("a tenure that never led must not ask for a release marker")
	}
}

// unread runs from the assignment and from each own heartbeat read back, and stands still while
// the tenure waits for a predecessor.
func TestLeaseUnread(t *testing.T) {
	r := newRig(t)
	if r.l.unread() != 0 {
		t.Fatal("unread without a tenure")
	}
	r.assign()
	r.take(r.l.Foreign(Heartbeat{Tenure: 99, Kind: KindReleasing}))
	r.wait(time.Second)
	if got := r.l.unread(); got != 0 {
		t.Fatalf("unread %v while waiting for a predecessor, want 0", got)
	}
	r.take(r.l.Foreign(Heartbeat{Tenure: 99, Kind: KindReleased}))
	r.wait(300 * time.Millisecond)
	if got := r.l.unread(); got != 300*time.Millisecond {
		t.Fatalf("unread %v after the wait, want 300ms", got)
	}
	h, off := r.heartbeat()
	r.wait(100 * time.Millisecond)
	r.back(h, off)
	if got := r.l.unread(); got != 0 {
		t.Fatalf("unread %v just after a read-back, want 0", got)
	}
	r.wait(50 * time.Millisecond)
	if got := r.l.unread(); got != 50*time.Millisecond {
		t.Fatalf("unread %v 50ms after a read-back, want 50ms", got)
	}
}

// Under KIP-848 a fenced tenure passes a new group check, which reads the broker's session again,
// before it leads again (leaseConfig.recheck): a renewal that comes first is held until then.
func TestLeaseRecheckAfterAFence(t *testing.T) {
	for _, recheck := range []bool{false, true} {
		t.Run(fmt.Sprintf("recheck %v", recheck), func(t *testing.T) {
			r := newRig(t)
			r.l.recheck = recheck
			r.acquire()
			r.wait(rigLease)
			r.expire()
			checks := r.checks
			r.due()
			if asked := r.checks > checks; asked != recheck {
				t.Fatalf("group check asked for after the fence: %v, want %v", asked, recheck)
			}
			r.renewal(time.Millisecond, time.Millisecond)
			r.deliver()
			if r.l.IsLeader() == recheck {
				t.Fatalf("leads %v before a new check, want %v", r.l.IsLeader(), !recheck)
			}
			if recheck {
				r.verify()
				r.deliver()
				if !r.l.IsLeader() {
					t.Fatal("not leading once the new check cleared the tenure")
				}
			}
		})
	}
}

// Under KIP-848 (answerBound set) a commit answer that comes late shows that the coordinator
// connection held its answers back, and with them librdkafka's next group heartbeat, which alone
// keeps the session there: commits seen after it renew no heartbeat sent after the late offset was
// stored, until a group heartbeat interval after the late answer was seen (lease.heldAnswers).
func TestLeaseHeldAnswersUnderKIP848(t *testing.T) {
	r := newRig(t)
	r.l.answerBound, r.l.hbInterval = 150*time.Millisecond, rigInterval
	r.acquire()
	end := func() time.Duration { return r.l.Load().End }

	// Two heartbeats read back and stored 50 ms apart; their commits' answers are held for 600 ms.
	h1, o1 := r.heartbeat()
	r.back(h1, o1)
	r.wait(50 * time.Millisecond)
	h2, o2 := r.heartbeat()
	r.back(h2, o2)
	r.wait(600 * time.Millisecond)
	before := end()
	r.commit(o1 + 1)
	if end() <= before {
		t.Fatal("the late commit's own heartbeat, sent before the hold, did not renew")
	}
	before = end()
	r.commit(o2 + 1)
	if end() != before || r.l.Load().Counts.held != 1 {
		t.Fatalf("a heartbeat sent during the hold renewed (end %v -> %v, held %d)", before, end(), r.l.Load().Counts.held)
	}

	// Two group heartbeat intervals later nothing has been answered since the late answer: the
	// connection may still be holding answers back (a slow link's, delivered in order, with the
	// group heartbeat's that tells of a rebalance among them), so a heartbeat sent now does not
	// renew, even answered in time (issue 46: the simulation found two leaders when time alone
	// ended the hold). That answer shows the connection prompt again: a heartbeat sent a group
	// heartbeat interval after its store renews.
	r.wait(2 * rigInterval)
	before = end()
	r.renewal(5*time.Millisecond, 5*time.Millisecond)
	if end() != before {
		t.Fatalf("a heartbeat sent before any answer came in time since the late one renewed (end %v -> %v)", before, end())
	}
	r.wait(rigInterval)
	before = end()
	r.renewal(5*time.Millisecond, 5*time.Millisecond)
	if end() <= before {
		t.Fatal("no renewal once an answer came in time")
	}
}

// A commit's result names the heartbeat whose offset it committed (its metadata, confirmed.tag). A
// log that restarts below an offset while that offset's commit is under way stores another
// heartbeat at the same offset; the old commit's result, accepted before that heartbeat was even
// sent, must not renew it (the simulation found two leaders so, at KIP-848's least session).
func TestLeaseCommitOfAnotherLogRenewsNothing(t *testing.T) {
	r := newRig(t)
	r.acquire()
	h, off := r.heartbeat()
	r.back(h, off)
	old := r.tagOf(off + 1)
	r.offset = off // the log restarts: the next heartbeat lands at the same offset
	r.wait(100 * time.Millisecond)
	h2, off2 := r.heartbeat()
	r.back(h2, off2)
	if off2 != off || r.tagOf(off+1) == old {
		t.Fatalf("offset %d tag %q, want %d with a new tag", off2, r.tagOf(off+1), off)
	}
	end := r.l.Load().End
	r.take(r.l.Committed(off+1, old, false))
	if r.l.Load().End != end || r.l.Load().Counts.mismatched != 1 {
		t.Fatalf("the old log's commit renewed (end %v -> %v, mismatched %d)", end, r.l.Load().End, r.l.Load().Counts.mismatched)
	}
	r.commit(off + 1)
	if r.l.Load().End <= end {
		t.Fatal("the commit of the heartbeat stored there did not renew")
	}
}

// The commit gate stores an offset only once the commit under way is answered, and stores it again
// if that commit is presumed never sent. The lease counts an offset as stored when librdkafka first
// had it (storedAt), so a store made again keeps the first time: a commit of the first store was
// sent after it, and its answer must not look more timely, nor anchor later, for the second. A
// late answer holds renewals back from the send time of the heartbeats the gate held back, which
// may precede the late offset's store.
func TestLeaseStoreTimeUnderTheGate(t *testing.T) {
	r := newRig(t)
	r.l.answerBound, r.l.hbInterval = 150*time.Millisecond, rigInterval
	r.acquire()
	r.gated = true
	end := func() time.Duration { return r.l.Load().End }

	h1, o1 := r.heartbeat()
	r.back(h1, o1)
	if st := r.l.t.pending[o1+1].stored; st != 0 {
		t.Fatalf("an offset the gate holds back counts as stored at %v", st)
	}
	r.wait(10 * time.Millisecond)
	h2, o2 := r.heartbeat() // sent before o1 is stored
	r.wait(10 * time.Millisecond)
	r.back(h2, o2)
	r.wait(20 * time.Millisecond)
	first := r.l.Now()
	r.l.StoredAt(o1+1, first)
	r.wait(60 * time.Millisecond)
	r.l.StoredAt(o1+1, r.l.Now()) // presumed never sent, and stored again
	if st := r.l.t.pending[o1+1].stored; st != first {
		t.Fatalf("stored at %v after a second store, want the first, %v", st, first)
	}
	// The first store's commit went out after all, and its answer comes 200 ms after that store:
	// late, measured from the first store (from the second it would look in time).
	r.wait(140 * time.Millisecond)
	before := end()
	r.commit(o1 + 1)
	if end() <= before || r.l.HeldUntil == 0 {
		t.Fatalf("the late answer renewed %v and held until %v; want its own heartbeat renewed and a hold", end() > before, r.l.HeldUntil)
	}
	if r.l.AutoAt != first {
		t.Errorf("anchor %v, want the first store, %v", r.l.AutoAt, first)
	}
	// h2 was sent before o1 was stored, while the gate held o1 back: the hold covers it.
	r.l.StoredAt(o2+1, r.l.Now())
	r.wait(10 * time.Millisecond)
	before = end()
	r.commit(o2 + 1)
	if end() != before || r.l.Load().Counts.held != 1 {
		t.Fatalf("a heartbeat the gate held back renewed after a late answer (end %v -> %v, held %d)", before, end(), r.l.Load().Counts.held)
	}
}

// A store that the commit gate makes after presumptions (commitGate.store) anchors the window at
// the store that began its chain, whatever came between, and its answer's lateness still counts
// from the store itself: a chain of stores librdkafka did not send (it was rejoining, say) shows
// no answers held back.
func TestLeaseChainedStoreAnchorsAtItsChain(t *testing.T) {
	r := newRig(t)
	r.l.answerBound, r.l.hbInterval = 150*time.Millisecond, rigInterval
	r.acquire()
	r.gated = true
	end := func() time.Duration { return r.l.Load().End }

	h, o := r.heartbeat()
	r.back(h, o)
	chain := r.l.Now() // a store of an older offset, presumed unsent, then more
	r.wait(400 * time.Millisecond)
	at := r.l.Now()
	r.l.storedSince(o+1, at, chain)
	r.wait(20 * time.Millisecond)
	before := end()
	r.commit(o + 1)
	if end() <= before || r.l.HeldUntil != 0 {
		t.Fatalf("renewed %v, held until %v; want a renewal and no hold (answered 20 ms after its store)", end() > before, r.l.HeldUntil)
	}
	if r.l.AutoAt != chain {
		t.Errorf("anchor %v, want the chain's first store, %v (the store was at %v)", r.l.AutoAt, chain, at)
	}
}

// After an assignment taken late (driver.heldAssignment), an offset stored inside the hold anchors
// nothing even when its heartbeat was sent before the hold began, as one slow to come back is: the
// commit may have been sent by a librdkafka unaware of a rebalance. It still renews from the
// heartbeat's send time, which the acceptance proves. An offset stored after the hold anchors again.
func TestLeaseStoreInAnAssignmentHoldAnchorsNothing(t *testing.T) {
	r := newRig(t)
	r.l.answerBound, r.l.hbInterval = 150*time.Millisecond, rigInterval
	r.acquire()
	r.gated = true
	end := func() time.Duration { return r.l.Load().End }
	anchor := r.l.AutoAt

	h, o := r.heartbeat() // sent before the hold; comes back inside it
	r.wait(10 * time.Millisecond)
	from := r.l.Now()
	r.wait(300 * time.Millisecond) // the callback's wait for the ends
	r.l.holdRenewals(from, r.l.Now()+r.l.answerBound)
	r.back(h, o)
	r.l.StoredAt(o+1, r.l.Now())
	r.wait(10 * time.Millisecond)
	before := end()
	r.commit(o + 1)
	if end() <= before {
		t.Errorf("the commit of a heartbeat sent before the hold renewed nothing (end %v -> %v)", before, end())
	}
	if r.l.AutoAt != anchor {
		t.Errorf("anchored at %v, a store inside the hold; want the anchor kept at %v", r.l.AutoAt, anchor)
	}

	// Once the hold is over, a heartbeat sent and stored after it renews and anchors.
	r.wait(r.l.answerBound)
	h2, o2 := r.heartbeat()
	r.back(h2, o2)
	stored := r.l.Now()
	r.l.StoredAt(o2+1, stored)
	r.wait(10 * time.Millisecond)
	r.commit(o2 + 1)
	if r.l.AutoAt != stored {
		t.Errorf("anchor %v after the hold, want the store at %v", r.l.AutoAt, stored)
	}
}
