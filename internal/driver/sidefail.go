package driver

import (
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
)

// # When goneli's own connection gives way to librdkafka
//
// goneli's own connection (internal/sidechan) is there for availability: it spares the group check
// librdkafka's admin client, which can abort the process while brokers restart
// (confluentinc/librdkafka#4605), and batches heartbeats. It must never make an instance less
// available than librdkafka alone would. Where it cannot follow the settings it is not made, and
// where a TLS handshake fails for a reason of TLS it gives way by itself (sidechan's
// handshakeRefused). Any other way in which it cannot do what librdkafka does (a proxy, a broker's
// answer kgo cannot read, an authentication that only librdkafka's client completes, a bug) shows
// in the same way: its requests keep failing while librdkafka's consumer, in the same group on the
// same brokers, has its commits accepted. A lease is long enough to tell that from a broker
// restart, in which librdkafka's commits fail too, or from a single broker that both lose. So
// when the connection's group checks have failed since at least a HeartbeatTimeout ago, and a
// commit of librdkafka's was accepted after the first of those failures began, the instance makes
// the connection give way for good, as a failed handshake does: the group check, the session reads
// of KIP-848, the heartbeats and the tails go through librdkafka from then on, and New's log says
// so once. The check and the commits both go to the group's coordinator, so the one working while
// the other fails says something of the connection, not of a broker.
//
// Only failures of the connection count. A description in which the coordinator answers for the
// group (refused, not found, KAFKA-18813) is what librdkafka would be told as well: such answers
// end a run of failures.
//
// Failed heartbeats do not count (they did until the chaos run of issue 46's changes). A heartbeat
// goes to its partition's leader, not to the coordinator: while brokers restart one after another,
// a round fails on whichever broker is down, librdkafka delivers to the others and the coordinator
// accepts its commits, and a healthy connection looked broken for a lease. It then gave way, and
// the group check went through librdkafka's admin client, which aborted the process
// (confluentinc/librdkafka#4605) in the next restart. Nor would giving way help availability: a
// heartbeat that fails on the connection goes to librdkafka at once, and the next ones go there
// while the connection's rounds pause (sidechan.Beats.Fail).

// sideWatch tells when goneli's own connection has failed for long enough, while librdkafka worked,
// to give way; the driver keeps one, for its group checks. It does no I/O; the driver calls it with
// its lock held.
//
// librdkafka counts as working beside the failures only when one of them began after a commit of
// librdkafka's was accepted, and that commit came after the first failure began: the connection
// then failed while librdkafka, after the same trouble, had got through. An outage of the brokers
// starts a run of failures too, and librdkafka's commits come back when it ends; so does the
// connection, whose next request then succeeds and ends the run.
type sideWatch struct {
	failing bool
	since   time.Duration // when the first failed operation of the current run began
	last    error
	// commitAt is when the first commit of librdkafka's accepted during the run came, if one did
	// (inRun); corroborated says that a failure of the run began after it.
	commitAt            time.Duration
	inRun, corroborated bool
}

// failed records an operation over the connection that began at began and failed with err.
func (w *sideWatch) failed(began time.Duration, err error) {
	if !w.failing {
		w.failing, w.since, w.inRun, w.corroborated = true, began, false, false
	} else if w.inRun && began >= w.commitAt {
		w.corroborated = true
	}
	w.last = err
}

// worked records an operation over the connection that succeeded: a run of failures ends.
func (w *sideWatch) worked() {
	w.failing, w.inRun, w.corroborated, w.last = false, false, false, nil
}

// commitAccepted records a commit of librdkafka's that the coordinator accepted at now.
func (w *sideWatch) commitAccepted(now time.Duration) {
	if w.failing && !w.inRun && now >= w.since {
		w.inRun, w.commitAt = true, now
	}
}

// givesWay returns why the connection should give way at now, for a lease of lease, or nil.
func (w *sideWatch) givesWay(now, lease time.Duration) error {
	if !w.failing || !w.corroborated || now-w.since < lease {
		return nil
	}
	return fmt.Errorf("it has failed for %v while librdkafka's commits were accepted (the last failure: %v)",
		(now - w.since).Round(time.Millisecond), w.last)
}

// giver is the part of goneli's own connection that can be made to give way (*sidechan.Client).
type giver interface {
	GiveWay(why error)
}

// sideUsable reports whether goneli's own connection is there and has not given way. Safe without
// the driver's lock.
func (d *Driver) sideUsable() bool {
	return d.check.wire != nil && d.check.wire.Fallback() == nil && !d.check.sideOff.Load()
}

// sideFailed records that a group check over goneli's own connection that began at began failed
// with err, and makes the connection give way if it has failed for long enough (sideWatch).
func (d *Driver) sideFailed(began time.Duration, err error) {
	if !d.sideUsable() || sidechan.IsFallback(err) || !d.Live() {
		return
	}
	w := &d.check.side
	w.failed(began, err)
	why := w.givesWay(d.now(), *d.config.HeartbeatTimeout)
	if why == nil {
		return
	}
	d.check.sideOff.Store(true)
	if g, ok := d.check.wire.(giver); ok {
		// The client logs it once, through OnFallback.
		g.GiveWay(why)
		return
	}
	d.log.W()("goneli %s: %s", d.config.Name, ViaLibrdkafka(fmt.Errorf("goneli's own connection gave way to librdkafka: %w", why)))
}

// sideCommit records a commit answer of librdkafka's consumer: one that the coordinator accepted
// for any partition shows librdkafka reaching it.
func (d *Driver) sideCommit(e kafka.OffsetsCommitted) {
	if e.Error != nil {
		return
	}
	for _, tp := range e.Offsets {
		if tp.Error == nil {
			d.check.side.commitAccepted(d.now())
			return
		}
	}
}

// sideChecked takes the result of a group check for the watch of goneli's own connection, if the
// check went over it. The check failed on the connection when the description failed without the
// coordinator's answer about the group (an answer about the group, which librdkafka would be
// given as well, does not count), or under KIP-848 when the group's config resource did not
// answer.
func (d *Driver) sideChecked(res describedGroup) {
	if !d.check.sided {
		return
	}
	var err error
	switch {
	case res.err != nil && res.desc.Error.Code() == kafka.ErrNoError:
		err = res.err
	case res.err == nil && res.timing != nil && res.timing.unanswered != nil:
		err = res.timing.unanswered
	}
	if err != nil {
		d.sideFailed(d.check.began, err)
		return
	}
	d.check.side.worked()
}
