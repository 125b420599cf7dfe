package driver

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The decision itself, on its own: a run of failures gives way once it is a lease old and one of
// them began after a commit of librdkafka's that was accepted during the run; a success ends the
// run.
func TestSideWatch(t *testing.T) {
	const lease = time.Second
	boom := errors.New("connection refused")
	var w sideWatch
	w.commitAccepted(0) // before any failure: says nothing
	w.failed(0, boom)
	w.failed(lease/2, boom)
	if w.givesWay(2*lease, lease) != nil {
		t.Fatal("gave way without any commit of librdkafka's accepted during the failures")
	}
	w.commitAccepted(lease / 2)
	w.commitAccepted(lease)
	if w.givesWay(2*lease, lease) != nil {
		t.Fatal("gave way though no failure began after librdkafka's commit (an outage that both saw end)")
	}
	w.failed(lease/2+time.Millisecond, boom)
	if w.givesWay(lease-time.Millisecond, lease) != nil {
		t.Fatal("gave way before a lease of failures")
	}
	if why := w.givesWay(lease, lease); why == nil || !strings.Contains(why.Error(), "connection refused") {
		t.Fatalf("a lease of failures, one after a commit accepted: %v, want a reason naming the last failure", why)
	}
	w.worked()
	if w.givesWay(3*lease, lease) != nil {
		t.Fatal("gave way after a success")
	}
	w.failed(3*lease, boom)
	w.failed(4*lease, boom)
	if w.givesWay(5*lease, lease) != nil {
		t.Fatal("a commit accepted before the run of failures began counted")
	}
}
