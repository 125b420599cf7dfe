package core

import (
	"errors"
	"testing"
	"time"
)

func TestHandoverDecide(t *testing.T) {
	const lease = time.Second
	stuckFor := func(d time.Duration) roleLease { return roleLease{assigned: true, since: -d} }
	ledFor := func(d time.Duration) roleLease { return roleLease{assigned: true, leading: true, since: -d} }
	// Each step is decided at instant 0, the roles' since being relative to it.
	type step struct {
		roles   []roleLease
		backoff time.Duration // 0: no hand-over
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a follower never hands over", []step{{roles: []roleLease{{}}}}},
		{"leading, however long", []step{{roles: []roleLease{ledFor(time.Hour)}}}},
		{"not leading for less than the bound", []step{{roles: []roleLease{stuckFor(lease - time.Millisecond)}}}},
		{"not leading for the bound", []step{{roles: []roleLease{stuckFor(lease)}, backoff: 2 * lease}}},
		{"a fresh tenure gets twice the bound", []step{
			{roles: []roleLease{{assigned: true, fresh: true, since: -2*lease + time.Millisecond}}},
			{roles: []roleLease{{assigned: true, fresh: true, since: -2 * lease}}, backoff: 2 * lease},
		}},
		{"heartbeats come back promptly: a rebalance holds the commits", []step{{roles: []roleLease{{assigned: true, since: -time.Hour, readsBack: true}}}}},
		{"deferred to the consumer's replacement", []step{{roles: []roleLease{{assigned: true, since: -time.Hour, deferred: true}}}}},
		{"one stuck role of several hands over the instance", []step{
			{roles: []roleLease{ledFor(time.Minute), stuckFor(2 * lease), {}}, backoff: 2 * lease},
		}},
		{"the back-off doubles and is capped", []step{
			{roles: []roleLease{stuckFor(lease)}, backoff: 2 * lease},
			{roles: []roleLease{stuckFor(lease)}, backoff: 4 * lease},
			{roles: []roleLease{stuckFor(lease)}, backoff: 8 * lease},
			{roles: []roleLease{stuckFor(lease)}, backoff: 16 * lease},
			{roles: []roleLease{stuckFor(lease)}, backoff: 16 * lease},
		}},
		{"a short tenure between hand-overs does not reset the back-off", []step{
			{roles: []roleLease{stuckFor(lease)}, backoff: 2 * lease},
			{roles: []roleLease{ledFor(4*lease - time.Millisecond)}},
			{roles: []roleLease{stuckFor(lease)}, backoff: 4 * lease},
		}},
		{"a tenure that led for four leases resets the back-off", []step{
			{roles: []roleLease{stuckFor(lease)}, backoff: 2 * lease},
			{roles: []roleLease{stuckFor(lease)}, backoff: 4 * lease},
			{roles: []roleLease{ledFor(4 * lease)}},
			{roles: []roleLease{stuckFor(lease)}, backoff: 2 * lease},
		}},
		{"another role's settled tenure resets the back-off too", []step{
			{roles: []roleLease{stuckFor(lease), {}}, backoff: 2 * lease},
			{roles: []roleLease{stuckFor(lease), ledFor(time.Hour)}, backoff: 2 * lease},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandover(lease, HandOverBound(lease))
			for i, s := range tc.steps {
				backoff, ok := h.decide(0, s.roles)
				if ok != (s.backoff > 0) || backoff != s.backoff {
					t.Fatalf("step %d: decide = %v, %v; want %v, %v", i, backoff, ok, s.backoff, s.backoff > 0)
				}
			}
		})
	}
}

func TestHandoverQuiet(t *testing.T) {
	const lease = time.Second
	h := newHandover(lease, HandOverBound(lease))
	for _, tc := range []struct {
		name  string
		r     roleLease
		quiet bool
	}{
		{"a follower", roleLease{}, false},
		{"leading", roleLease{assigned: true, leading: true, since: -time.Hour}, false},
		{"fenced this instant", roleLease{assigned: true}, true},
		{"a fresh tenure, for less than half of its bound", roleLease{assigned: true, fresh: true, since: -lease + time.Millisecond}, false},
		{"a fresh tenure, for half of its bound", roleLease{assigned: true, fresh: true, since: -lease}, true},
		{"heartbeats come back promptly", roleLease{assigned: true, since: -time.Hour, readsBack: true}, false},
		{"deferred to the consumer's replacement", roleLease{assigned: true, since: -time.Hour, deferred: true}, true},
	} {
		if got := h.quiet(0, tc.r); got != tc.quiet {
			t.Errorf("%s: quiet = %v, want %v", tc.name, got, tc.quiet)
		}
	}
	// A longer bound: quiet for its last lease only, so that a tenure whose heartbeats come back
	// late may still lead again on them until then.
	h = newHandover(lease, 5*lease)
	if h.quiet(0, roleLease{assigned: true, since: -4*lease + time.Millisecond}) || !h.quiet(0, roleLease{assigned: true, since: -4 * lease}) {
		t.Error("with a bound of five leases: not quiet for exactly the last lease")
	}
}

// A quiesced tenure stores no heartbeat that comes back late and asks for no explicit commit; one
// that comes back promptly is stored and ends the quiet, and so does a renewal from an offset
// stored before.
func TestLeaseQuiesce(t *testing.T) {
	r := newRig(t)
	r.l.window = commitWindow(2*rigLease, rigLease, rigLease/10, 0, 0)
	r.acquire()
	h, off := r.heartbeat()
	r.wait(10 * time.Millisecond)
	r.back(h, off) // stored; its commit has yet to come
	r.take(r.l.rejected("test"))
	if r.kinds() != "AF" {
		t.Fatalf("events %s, want AF", r.kinds())
	}

	r.l.quiesce(true)
	stored := len(r.stored)
	h, off = r.heartbeat()
	r.wait(rigLease/2 + time.Millisecond)
	r.back(h, off)
	if len(r.stored) != stored || !r.l.t.quiet {
		t.Fatalf("stored %v, quiet %v after a late heartbeat; want none, true", r.stored[stored:], r.l.t.quiet)
	}
	r.wait(commitStall(rigInterval))
	r.due()
	if len(r.commits) != 0 {
		t.Fatalf("explicit commits %v while quiet", r.commits)
	}
	r.l.quiesce(false)
	r.due()
	if len(r.commits) != 1 || r.commits[0] != r.stored[stored-1] {
		t.Fatalf("explicit commits %v once no longer quiet, want [%d]", r.commits, r.stored[stored-1])
	}

	// A prompt heartbeat is stored and ends the quiet.
	r.l.quiesce(true)
	h, off = r.heartbeat()
	r.wait(10 * time.Millisecond)
	r.back(h, off)
	if len(r.stored) != stored+1 || r.stored[stored] != off+1 || r.l.t.quiet {
		t.Fatalf("stored %v, quiet %v after a prompt heartbeat; want [%d], false", r.stored[stored:], r.l.t.quiet, off+1)
	}

	// A renewal from an offset stored before ends it too.
	r.l.quiesce(true)
	r.commit(off + 1)
	if r.kinds() != "AFA" || r.l.t.quiet {
		t.Fatalf("events %s, quiet %v after a renewal; want AFA, false", r.kinds(), r.l.t.quiet)
	}

	// A new tenure starts unquiet.
	r.l.quiesce(true)
	r.revoke(false)
	r.assign()
	if r.l.t.quiet {
		t.Fatal("a new tenure starts quiet")
	}
}

// The lease tells the hand-over since when its tenure has not led, counted from the assignment or
// the fence, and not while it waits for a predecessor or is held back by a group conflict.
func TestLeaseNotLeadingSince(t *testing.T) {
	t.Run("from the assignment, then from the fence", func(t *testing.T) {
		r := newRig(t)
		r.wait(time.Second)
		r.assign()
		if v := r.l.Load(); v.Idle != time.Second || v.Leading {
			t.Fatalf("assigned: idle %v, leading %v; want 1s, false", v.Idle, v.Leading)
		}
		r.verify()
		r.wait(20 * time.Millisecond)
		r.renewal(10*time.Millisecond, 10*time.Millisecond)
		if v := r.l.Load(); !v.Leading || v.Led != r.l.Now() {
			t.Fatalf("renewed: leading %v since %v; want since %v", v.Leading, v.Led, r.l.Now())
		}
		ledAt := r.l.Now()
		r.wait(rigInterval)
		r.renewal(10*time.Millisecond, 10*time.Millisecond)
		if v := r.l.Load(); v.Led != ledAt {
			t.Fatalf("a renewal while leading moved led to %v from %v", v.Led, ledAt)
		}
		r.wait(2 * rigLease)
		r.expire()
		if v := r.l.Load(); v.Leading || v.Idle != r.l.Now() {
			t.Fatalf("fenced: leading %v, idle %v; want false, %v", v.Leading, v.Idle, r.l.Now())
		}
	})
	t.Run("not reset by a relapse that no renewal extended", func(t *testing.T) {
		r := newRig(t)
		r.acquire()
		r.wait(2 * rigLease)
		r.expire()
		fenced := r.l.Now()
		// Led again on one renewal, and fenced again without another: idle since the first fence.
		r.renewal(10*time.Millisecond, 10*time.Millisecond)
		if v := r.l.Load(); !v.Leading || v.Led != r.l.Now() {
			t.Fatalf("re-acquired: leading %v since %v; want since %v", v.Leading, v.Led, r.l.Now())
		}
		r.wait(rigLease)
		r.expire()
		if v := r.l.Load(); v.Leading || v.Idle != fenced {
			t.Fatalf("fenced again: leading %v, idle %v; want false, %v (the first fence)", v.Leading, v.Idle, fenced)
		}
		// Led again and renewed since: idle from the latest fence.
		r.renewal(10*time.Millisecond, 10*time.Millisecond)
		r.wait(rigInterval)
		r.renewal(10*time.Millisecond, 10*time.Millisecond)
		r.wait(rigLease)
		r.expire()
		if v := r.l.Load(); v.Leading || v.Idle != r.l.Now() {
			t.Fatalf("fenced after a renewed relapse: leading %v, idle %v; want false, %v", v.Leading, v.Idle, r.l.Now())
		}
		if got := r.kinds(); got != "AFAFAF" {
			t.Fatalf("events %s, want AFAFAF", got)
		}
	})
	t.Run("not while a predecessor releases the partition", func(t *testing.T) {
		r := newRig(t)
		r.assign()
		r.foreignMarker(KindReleasing)
		r.wait(rigLease)
		r.due()
		if v := r.l.Load(); v.Idle != r.l.Now() {
			t.Fatalf("waiting: idle %v; want now, %v", v.Idle, r.l.Now())
		}
	})
	t.Run("not while the group check has yet to clear it", func(t *testing.T) {
		r := newRig(t)
		r.assign()
		r.check(GroupCheck{err: errors.New("describe refused")})
		r.wait(rigLease)
		r.due()
		if v := r.l.Load(); v.Idle != r.l.Now() || !v.Excused {
			t.Fatalf("unchecked: idle %v, excused %v; want now, %v, and true", v.Idle, v.Excused, r.l.Now())
		}
		r.verify()
		if v := r.l.Load(); v.Excused {
			t.Fatal("still excused once the check cleared the tenure")
		}
	})
	t.Run("not while a group conflict holds it back", func(t *testing.T) {
		r := newRig(t)
		r.assign()
		r.check(GroupCheck{Verdict: GroupVerdict{Conflict: &GroupConflictError{}}})
		r.wait(rigLease)
		r.due()
		if v := r.l.Load(); v.Idle != r.l.Now() {
			t.Fatalf("conflict: idle %v; want now, %v", v.Idle, r.l.Now())
		}
	})
}

// A tenure whose heartbeats come back promptly while it does not lead (a rebalance holds its
// commits) counts toward a hand-over only from the last cycle that saw it so, and that leaves
// NotLeadingSince (Idle) at its fence.
func TestLeaseHeard(t *testing.T) {
	r := newRig(t)
	r.acquire()
	r.wait(2 * rigLease)
	r.expire()
	fenced := r.l.Now()
	var heard time.Duration
	for range 15 {
		h, off := r.heartbeat()
		r.wait(10 * time.Millisecond)
		r.back(h, off) // read back, its commit never answered
		r.wait(rigInterval - 10*time.Millisecond)
		r.due()
		heard = r.l.Now()
		if v := r.l.Load(); v.Leading || v.Idle != fenced || v.Heard != heard {
			t.Fatalf("reading back: leading %v, idle %v, heard %v; want false, %v (the fence), %v", v.Leading, v.Idle, v.Heard, fenced, heard)
		}
	}
	// A stall of its own: the next cycle comes more than half a lease later and reads back nothing.
	r.wait(rigLease/2 + time.Millisecond)
	r.due()
	if v := r.l.Load(); v.Heard != heard || v.Idle != fenced {
		t.Fatalf("after the stall: heard %v, idle %v; want %v, %v", v.Heard, v.Idle, heard, fenced)
	}
	if r.l.readsBack() {
		t.Fatal("reads back after a stall of over half a lease")
	}
	// Leading again leaves heard where it was; the next fence is what counts then.
	r.renewal(10*time.Millisecond, 10*time.Millisecond)
	r.wait(rigInterval)
	r.renewal(10*time.Millisecond, 10*time.Millisecond)
	if v := r.l.Load(); !v.Leading || v.Heard != heard {
		t.Fatalf("renewed: leading %v, heard %v; want true, %v", v.Leading, v.Heard, heard)
	}
}

// foreignMarker reads a predecessor's marker of kind back from the partition.
func (r *rig) foreignMarker(kind RecordKind) {
	r.take(r.l.Foreign(Heartbeat{Tenure: 0x1, Seq: 9, Kind: kind}))
}

// A tenure reads back promptly while its newest heartbeat came back within a quarter lease of its
// sending, no more than half a lease ago.
func TestLeaseReadsBack(t *testing.T) {
	r := newRig(t)
	r.assign()
	if r.l.readsBack() {
		t.Fatal("reads back before any heartbeat came back")
	}
	r.verify()
	r.renewal(10*time.Millisecond, 10*time.Millisecond)
	if !r.l.readsBack() {
		t.Fatal("does not read back after a prompt renewal")
	}
	r.wait(rigLease/2 + time.Millisecond)
	if r.l.readsBack() {
		t.Fatal("reads back with nothing read back for over half a lease")
	}
	h, off := r.heartbeat()
	r.wait(rigLease/4 + time.Millisecond)
	r.back(h, off)
	if r.l.readsBack() {
		t.Fatal("reads back a heartbeat that took over a quarter lease")
	}
	r.renewal(10*time.Millisecond, 0)
	if !r.l.readsBack() {
		t.Fatal("does not read back once heartbeats come back promptly again")
	}
}
