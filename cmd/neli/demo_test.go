package main

import (
	"testing"
	"time"
)

// A fence is explained only by its own member's thaw, up to a lease after it: the case the demo
// showed (a member that had been frozen earlier, fenced a second after leading again) is flagged.
func TestUnexplainedFences(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	thaws := map[string][]time.Time{"n3": {at(9.804)}}
	fences := []fenceAt{
		{"n3", at(9.805)},  // on waking: explained
		{"n3", at(12.476)}, // after leading again at 11.475: not
		{"n4", at(9.805)},  // another member at n3's thaw: not
	}
	odd := unexplainedFences(fences, thaws, time.Second)
	if len(odd) != 2 || odd[0] != fences[1] || odd[1] != fences[2] {
		t.Errorf("unexplained %v, want n3 at 12.476 and n4 at 9.805", odd)
	}
	if odd := unexplainedFences(fences[:1], thaws, time.Second); len(odd) != 0 {
		t.Errorf("a fence on waking was flagged: %v", odd)
	}
}

// The hold catches one commit per arming, and only while armed; let frees the caught commit once.
func TestCommitHold(t *testing.T) {
	var h commitHold
	if h.catch() != nil {
		t.Fatal("caught a commit while not armed")
	}
	h.arm()
	release := h.catch()
	if release == nil {
		t.Fatal("armed, caught nothing")
	}
	if h.catch() != nil {
		t.Error("caught a second commit on one arming")
	}
	if h.disarm() {
		t.Error("disarm after a catch reports the hold still armed")
	}
	if !h.let() {
		t.Fatal("let freed nothing")
	}
	select {
	case <-release:
	default:
		t.Error("the caught commit is still held after let")
	}
	if h.let() {
		t.Error("let freed a commit twice")
	}
	h.arm()
	if !h.disarm() || h.catch() != nil {
		t.Error("a disarmed hold still catches")
	}
	var none *commitHold
	if none.let() {
		t.Error("a demo without writes let a commit through")
	}
}
