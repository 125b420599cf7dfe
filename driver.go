package goneli

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The Kafka side of an instance: the poll cycle, the rebalance callback and the heartbeat
// producer. It tells the lease of each partition it contends for what happened there, and carries
// out what that lease answers (apply). Every method here is called with mu held.

// part is one role: a partition of the leader topic that this instance contends for, its lease,
// the dispatcher that calls the barrier with its events, and what the driver keeps beside them.
// The driver finds parts by partition (partOf) and walks them in order (neli.parts).
type part struct {
	id     int32
	name   string // the role's name; empty for the single leader of New
	lease  *lease
	events *dispatcher
	// stored is set once an offset has been stored since the partition was assigned: librdkafka
	// then commits it again when the partition is revoked (see neli.owedCommit).
	stored bool
	// wantCheck says that the lease asked for a group check that has not been started yet.
	wantCheck bool
	// member is the member id under which the current tenure was assigned, if known.
	member string
	// signal wakes the role's Background task when the barrier has returned from LeaderAcquired.
	signal chan struct{}
	// acquiring is the epoch of the newest LeaderAcquired whose barrier call has begun
	// (acquisitionStands). Written and read on the role's dispatcher goroutine.
	acquiring atomic.Uint64
}

// release is a tenure that gave its partition up while the barrier still had its LeaderRevoked:
// once the barrier has returned from it (done), the released marker is written.
type release struct {
	p      *part
	marker heartbeat
	done   *delivery
	fresh  bool // made by Close: its releasing marker has not been written yet
}

// releaseLookback is how many records before the end of a partition a new tenure starts reading,
// so that it sees a predecessor's release marker (lease.foreign). Only the partition's owner
// writes; a revoked owner writes nothing after its marker but the released one, and a tenure that
// waits on a marker writes one heartbeat until the wait is over, so the marker stays in reach
// through a chain of fifteen successors that came and went while it waited.
const releaseLookback = 16

// cycle polls the consumer dry (within bounds), waiting up to poll for the first event, lets the
// lease act on the time that has passed and starts what it asks for.
func (n *neli) cycle(poll time.Duration) error {
	n.applyYield()
	if n.observer != nil {
		n.observer.poll()
	}
	var fatal error
	ev := n.consumer.Poll(int(poll.Milliseconds()))
	for i := 0; ev != nil; i++ {
		if err := n.handle(ev); err != nil && fatal == nil {
			fatal = err
		}
		if i+1 >= maxEventsPerCycle || n.State() != Live {
			break
		}
		ev = n.consumer.Poll(0)
	}
	if denied := n.drainProducer(); fatal == nil {
		fatal = denied
	}
	n.collectCommits()
	n.checkReadBack()
	n.probeReach()
	n.collectGroupCheck()
	n.finishReleases()
	if n.State() == Live {
		for _, p := range n.parts {
			n.apply(p, p.lease.due())
		}
		n.startGroupCheck()
		n.startCommits()
	}
	return fatal
}

// apply carries out what p's lease asked for after a transition, and returns the delivery of its
// last event. A group check it asks for is started by the cycle, together with any others.
func (n *neli) apply(p *part, out leaseOut) *delivery {
	if out.heartbeat != nil {
		n.produce(p, out.heartbeat)
	}
	if out.store != 0 {
		n.store(p, out.store)
	}
	if out.commit != 0 {
		if out.restarted {
			n.log.W()("goneli %s: partition %d restarted below the offset committed last; committing %d explicitly",
				n.config.Name, p.id, out.commit)
		}
		n.commitAsks[p.id] = out.commit
	}
	if out.check {
		p.wantCheck = true
	}
	n.watch()
	return n.deliver(p, out.events)
}

func (n *neli) handle(ev kafka.Event) error {
	switch e := ev.(type) {
	case *kafka.Message:
		n.onMessage(e)
	case kafka.OffsetsCommitted:
		n.owedCommit = false
		if e.Error == nil {
			n.reachable("consumer", "a commit accepted")
		}
		n.onCommit(e, false)
	case kafka.Error:
		if e.IsFatal() {
			for _, p := range n.parts {
				n.apply(p, p.lease.fail("fatal consumer error: "+e.Error()))
			}
			return fmt.Errorf("goneli: fatal Kafka consumer error: %w", e)
		}
		if e.Code() == kafka.ErrInvalidSessionTimeout && n.timing.classic {
			// A configuration mismatch that no retry can mend. A lease this instance may still hold
			// runs out on its own: no commit is accepted without a session, and the watchdog
			// fences it.
			return &SessionTimeoutError{Session: n.timing.session, HeartbeatTimeout: *n.config.HeartbeatTimeout, Err: e}
		}
		if err := authorizationError(n.config, "consumer", e); err != nil {
			return err
		}
		if e.Code() == kafka.ErrAllBrokersDown {
			n.unreachable("consumer", e.Error())
		}
		n.noteTrouble(e)
		n.logKafkaError("consumer", e)
	}
	return nil
}

func (n *neli) onMessage(m *kafka.Message) {
	if m.TopicPartition.Error != nil {
		n.throttle.log(n.log.W(), "fetch:"+m.TopicPartition.Error.Error(), "goneli %s: fetch from %s failed: %v",
			n.config.Name, n.topic, m.TopicPartition.Error)
		return
	}
	n.reachable("consumer", "a record fetched")
	p := n.partOf(m.TopicPartition)
	if p == nil {
		return
	}
	var h heartbeat
	if h.decode(m.Value) != nil {
		return
	}
	if h.kind == kindHeartbeat && string(m.Key) == n.config.Name {
		n.apply(p, p.lease.readBack(h, int64(m.TopicPartition.Offset)))
		return
	}
	n.apply(p, p.lease.foreign(h))
}

// partOf returns the part of tp, or nil if tp is not one this instance contends for.
func (n *neli) partOf(tp kafka.TopicPartition) *part {
	if tp.Topic == nil || *tp.Topic != n.topic || tp.Partition < 0 || int(tp.Partition) >= len(n.parts) {
		return nil
	}
	return n.parts[tp.Partition]
}

// store hands a confirmed heartbeat's offset to librdkafka, whose auto-commit sends it to the
// coordinator; the answer arrives as an OffsetsCommitted event.
func (n *neli) store(p *part, offset int64) {
	if _, err := n.consumer.StoreOffsets([]kafka.TopicPartition{{Topic: &n.topic, Partition: p.id, Offset: kafka.Offset(offset)}}); err != nil {
		n.throttle.log(n.log.W(), "store", "goneli %s: cannot store heartbeat offset: %v", n.config.Name, err)
		return
	}
	p.stored = true
}

func (n *neli) onCommit(e kafka.OffsetsCommitted, explicit bool) {
	if e.Error != nil {
		// The whole commit failed: it carried every partition's offset.
		for _, p := range n.parts {
			n.onCommitError(p, e.Error)
		}
		return
	}
	for _, tp := range e.Offsets {
		p := n.partOf(tp)
		if p == nil {
			continue
		}
		if tp.Error != nil {
			n.onCommitError(p, tp.Error)
			continue
		}
		n.apply(p, p.lease.committed(int64(tp.Offset), explicit))
	}
}

// startCommits sends the explicit commits that the leases asked for in this cycle as one request,
// unless one is still under way; a lease whose offset stays uncommitted asks again (lease.stalled).
func (n *neli) startCommits() {
	if len(n.commitAsks) == 0 {
		return
	}
	offsets := make([]kafka.TopicPartition, 0, len(n.commitAsks))
	for id, off := range n.commitAsks {
		offsets = append(offsets, kafka.TopicPartition{Topic: &n.topic, Partition: id, Offset: kafka.Offset(off)})
	}
	clear(n.commitAsks)
	if n.commits.start(offsets) {
		n.throttle.log(n.log.D(), "explicit commit", "goneli %s: committing heartbeat offsets %v explicitly", n.config.Name, offsets)
	}
}

// collectCommits takes the answer to an explicit commit, once it has come.
func (n *neli) collectCommits() {
	e, ok := n.commits.collect()
	if !ok {
		return
	}
	var ke kafka.Error
	if errors.As(e.Error, &ke) && ke.Code() == kafka.ErrIllegalGeneration {
		// An explicit commit can go out behind the JoinGroup that ends the rebalance, still
		// carrying the generation it was made with, and reach the coordinator after the new one
		// began: the member is in the group all the same, unlike when librdkafka's own commit is
		// refused so. It renews nothing, and the lease runs out on its own if nothing else renews it.
		n.throttle.log(n.log.D(), "explicit commit generation", "goneli %s: explicit heartbeat commit overtaken by a rebalance: %v", n.config.Name, ke)
		return
	}
	if e.Error == nil {
		n.reachable("consumer", "a commit accepted")
	}
	n.onCommit(e, true)
}

func (n *neli) onCommitError(p *part, err error) {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		n.throttle.log(n.log.W(), "commit", "goneli %s: heartbeat offset commit failed: %v", n.config.Name, err)
		return
	}
	switch ke.Code() {
	case kafka.ErrNoOffset:
		return
	case kafka.ErrUnknownMemberID, kafka.ErrIllegalGeneration, kafka.ErrFencedInstanceID, kafka.ErrFencedMemberEpoch:
		n.apply(p, p.lease.rejected(ke.Error()))
	default:
		// Includes REBALANCE_IN_PROGRESS, and KIP-848's STALE_MEMBER_EPOCH, which says the member
		// is still in the group at a newer epoch: the lease simply goes unrenewed by this commit.
		n.throttle.log(n.log.D(), "commit:"+ke.Code().String(), "goneli %s: heartbeat offset commit not accepted: %v", n.config.Name, ke)
	}
}

func (n *neli) onRebalance(c *kafka.Consumer, ev kafka.Event) error {
	if _, retired := n.retired.Load(c); n.consumerClosing.Load() || (c != nil && retired) {
		// A consumer finishing its close, perhaps in the background, must not touch state that
		// the mutex no longer guards; confluent-kafka-go applies the change itself.
		n.lateRebalances.Add(1)
		return nil
	}
	n.rebalances++
	n.reachable("consumer", "a rebalance")
	cooperative := c != nil && c.GetRebalanceProtocol() == "COOPERATIVE"
	lost := c != nil && c.AssignmentLost()
	n.trackGroupAssignment(ev, cooperative, lost)
	switch ev.(type) {
	case kafka.AssignedPartitions:
		member := ""
		if c != nil {
			member = memberID(c, n.config.LeaderGroupID)
		}
		n.member.assigned(member, len(n.groupParts) > 0)
	case kafka.RevokedPartitions:
		n.member.revoked(lost, cooperative, len(n.groupParts) > 0)
		if lost {
			n.trouble()
		}
	}
	if n.State() != Live {
		// Close has ended the tenure already; confluent-kafka-go applies the change itself.
		return nil
	}
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		mine := n.mine(e.Partitions)
		for i := range mine {
			// A tenure needs the heartbeats it produces from now on, and the last few records
			// before them for a predecessor's release marker. Starting relative to the end, rather
			// than from the group's committed offset, also keeps librdkafka from learning a
			// committed offset that lies beyond the end of a log that restarted (a broker that lost
			// its data, an unclean leader election): it auto-commits only offsets above the one
			// it knows, so no heartbeat could be confirmed until the log grew past it.
			mine[i].Offset = kafka.OffsetTail(releaseLookback)
		}
		if c != nil {
			var err error
			if cooperative {
				err = c.IncrementalAssign(mine)
			} else {
				err = c.Assign(mine)
			}
			if err != nil {
				n.throttle.log(n.log.E(), "assign", "goneli %s: cannot take assignment: %v", n.config.Name, err)
				return err
			}
		}
		for _, tp := range mine {
			n.beginTenure(n.parts[tp.Partition])
		}
	case kafka.RevokedPartitions:
		mine := n.mine(e.Partitions)
		var ending []*part
		for _, tp := range mine {
			ending = append(ending, n.parts[tp.Partition])
		}
		n.endTenures(ending, c != nil && c.AssignmentLost())
		if c != nil {
			if cooperative {
				return c.IncrementalUnassign(mine)
			}
			return c.Unassign()
		}
	}
	return nil
}

// beginTenure starts p's tenure.
func (n *neli) beginTenure(p *part) {
	if p.lease.t.active {
		return
	}
	p.member = n.member.member
	n.apply(p, p.lease.assign(n.member.vouched))
	n.log.D()("goneli %s: assigned partition %d (tenure %s)", n.config.Name, p.id, p.lease.t.name())
}

// endTenures ends the tenures of parts. Unless the assignment was lost, a successor must not lead
// before the barrier has returned from LeaderRevoked (or the rebalance timeout has passed). Holding
// the revocation back until then would hold up the whole group, and with it the renewals of every
// other role, so instead each tenure whose LeaderRevoked is still on its way writes a releasing
// marker to its partition, which the successor waits on (lease.foreign), and a released marker
// once the barrier has returned (finishReleases). Only if the markers cannot be written in time is
// the revocation held back, as a rebalance would be, for up to the rebalance timeout; it ends
// early if Close begins, since Close may be waiting for it.
func (n *neli) endTenures(parts []*part, lost bool) {
	var pending []release
	for _, p := range parts {
		out := p.lease.revoke(lost)
		d := n.apply(p, out)
		if out.release != nil && d != nil {
			pending = append(pending, release{p: p, marker: *out.release, done: d})
		}
	}
	if len(pending) == 0 {
		return
	}
	// Released markers follow either way: a releasing marker that reaches the broker late must
	// not leave a successor waiting for the rebalance timeout.
	n.releases = append(n.releases, pending...)
	if n.writeMarkers(pending, n.releaseFlush()) {
		return
	}
	n.log.W()("goneli %s: could not write release markers within %v; holding the revocation until the barrier returns",
		n.config.Name, n.releaseFlush())
	deadline := time.Now().Add(n.timing.maxPoll)
	for _, r := range pending {
		if !awaitDelivery(r.done, time.Until(deadline), n.closing) {
			if n.State() == Live {
				n.log.W()("goneli %s: the barrier has not returned from LeaderRevoked within %v (the rebalance timeout); releasing the partition regardless",
					n.config.Name, n.timing.maxPoll)
			}
			return
		}
	}
}

// writeMarkers produces the release markers and waits up to limit for the broker to have them
// all, reporting whether it did. Their delivery reports come on a channel of their own, which the
// producer's own goroutine serves, so the wait needs no poll of ours.
func (n *neli) writeMarkers(rs []release, limit time.Duration) bool {
	if !n.ensureProducer() {
		return false
	}
	reports := make(chan kafka.Event, len(rs))
	for _, r := range rs {
		if n.produceRecordTo(r.p, &r.marker, reports) != nil {
			return false
		}
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for range rs {
		select {
		case ev := <-reports:
			if m, ok := ev.(*kafka.Message); !ok || m.TopicPartition.Error != nil {
				return false
			}
		case <-timer.C:
			return false
		}
	}
	return true
}

// releaseFlush bounds the wait for release markers to reach the broker.
func (n *neli) releaseFlush() time.Duration {
	return *n.config.HeartbeatTimeout / 2
}

// finishReleases writes the released marker of every release whose barrier call has returned.
func (n *neli) finishReleases() {
	kept := n.releases[:0]
	for _, r := range n.releases {
		select {
		case <-r.done.done:
			r.marker.kind = kindReleased
			r.marker.seq++
			r.marker.sentWall, r.marker.sentMono = time.Now().UnixNano(), n.now()
			if err := n.produceRecord(r.p, &r.marker); err != nil {
				n.throttle.log(n.log.W(), "produce", "goneli %s: cannot write the released marker of partition %d: %v", n.config.Name, r.p.id, err)
			}
		default:
			kept = append(kept, r)
		}
	}
	clear(n.releases[len(kept):])
	n.releases = kept
}

// trackGroupAssignment keeps the set of partitions the group has given this member, which Close
// waits to see revoked.
func (n *neli) trackGroupAssignment(ev kafka.Event, cooperative, lost bool) {
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		if !cooperative {
			clear(n.groupParts)
		}
		for _, tp := range e.Partitions {
			n.groupParts[tp.Partition] = true
		}
	case kafka.RevokedPartitions:
		for _, p := range n.parts {
			if n.groupParts[p.id] && (!cooperative || slices.ContainsFunc(e.Partitions, func(tp kafka.TopicPartition) bool { return tp.Partition == p.id })) {
				n.owedCommit = n.owedCommit || (p.stored && !lost)
				p.stored = false
			}
		}
		if !cooperative {
			clear(n.groupParts)
		}
		for _, tp := range e.Partitions {
			delete(n.groupParts, tp.Partition)
		}
	}
}

// mine picks, from a rebalance's partitions, those this instance contends for. The others (a leader
// topic with more partitions than parts) are taken and released with the rest but never used.
func (n *neli) mine(tps []kafka.TopicPartition) []kafka.TopicPartition {
	out := []kafka.TopicPartition{}
	for _, tp := range tps {
		if n.partOf(tp) != nil {
			out = append(out, tp)
		}
	}
	return out
}

// ensureProducer opens the heartbeat producer on the first heartbeat or group check; it is kept from
// then on.
func (n *neli) ensureProducer() bool {
	if n.producer == nil {
		p, err := n.config.KafkaProducerProvider(n.prodConf)
		if err != nil {
			n.throttle.log(n.log.E(), "producer", "goneli %s: cannot create heartbeat producer: %v", n.config.Name, err)
			return false
		}
		n.producer = p
		n.producerOK = n.now()
	}
	return true
}

// A producer that delivers nothing for a whole lease while it is being used is replaced. librdkafka
// keeps, for a handle's life, the highest leader epoch it has seen for each partition, and ignores
// metadata that names an older one: when the leader topic is deleted and recreated (by an
// operator, or by brokers that lost their data), its partitions start again at epoch 0, perhaps on
// another broker, and the old handle keeps sending heartbeats to a broker that no longer leads
// them, each timing out, for as long as it lives. A new handle learns the topic afresh. Renewals
// that fail for a lease have fenced the leader already, so the new handle costs it nothing it has.

// noteDelivery records a heartbeat or marker's delivery report, and replaces the producer when
// nothing has been delivered for longer than a lease (recycleProducer).
func (n *neli) noteDelivery(err error) {
	now := n.now()
	if err == nil {
		n.producerOK, n.producerDelivered = now, now
		return
	}
	if now-n.producerOK < *n.config.HeartbeatTimeout || len(n.releases) > 0 || (n.checker.busy() && n.wire == nil && !n.checkAlone) {
		// A release marker still on its way, or a group check through the producer's own
		// admin handle, needs this handle; the next failed heartbeat tries again.
		return
	}
	n.recycleProducer(fmt.Sprintf("nothing delivered for %v (%v)", (now - n.producerOK).Round(time.Millisecond), err))
}

// The consumer keeps the same stale leader epoch for the partitions it fetches (librdkafka #4898
// covers the producer; the consumer's fetcher behaves alike): after the topic is recreated its
// fetches go to the old broker, are answered NOT_LEADER_OR_FOLLOWER, and the metadata that would
// redirect them is ignored. The heartbeats then reach the log but are never read back, and the
// tenure can never renew. A consumer that has read back no own heartbeat of a tenure for two
// leases while the producer still delivers is therefore replaced: the instance leaves the group,
// as for a yield, and joins it again through a new handle. Its partitions go to others meanwhile,
// whose own handles may be as stale and are replaced in their turn.

// consumerRenewBackoff is the least time between two replacements of an instance's consumer.
func (n *neli) consumerRenewBackoff() time.Duration {
	return 4 * *n.config.HeartbeatTimeout
}

// checkReadBack replaces the consumer when a tenure reads nothing back although the producer
// delivers (see above).
func (n *neli) checkReadBack() {
	lease := *n.config.HeartbeatTimeout
	now := n.now()
	if n.State() != Live || n.unsubscribed || n.producer == nil || n.producerDelivered == 0 || now-n.producerDelivered >= lease ||
		(n.consumerRenewals > 0 && now-n.consumerRenewed < n.consumerRenewBackoff()) {
		return
	}
	for _, p := range n.parts {
		if unread := p.lease.unread(); unread > 2*lease {
			n.renewConsumer(fmt.Sprintf("partition %d has read back no own heartbeat for %v while the producer delivers them",
				p.id, unread.Round(time.Millisecond)))
			return
		}
	}
}

// renewConsumer leaves the group and joins it again through a new consumer; the old one closes in
// the background. Called with mu held.
func (n *neli) renewConsumer(reason string) {
	fresh, err := n.config.KafkaConsumerProvider(n.consConf)
	if err != nil {
		n.throttle.log(n.log.E(), "renew", "goneli %s: cannot create a Kafka consumer to replace one that %s: %v", n.config.Name, reason, err)
		return
	}
	n.log.W()("goneli %s: replacing the Kafka consumer: %s", n.config.Name, reason)
	n.consumerRenewed = n.now()
	n.consumerRenewals++
	n.endTenures(n.parts, false)
	n.member.left()
	old, oldCommits := n.consumer, n.commits
	if err := old.Unsubscribe(); err == nil {
		n.awaitLeft(time.Now().Add(*n.config.HeartbeatTimeout))
	}
	if kc, ok := old.(*kafka.Consumer); ok {
		n.retired.Store(kc, true)
	}
	n.consumer, n.commits = fresh, newCommitter(fresh, &n.closers)
	clear(n.groupParts)
	clear(n.commitAsks)
	n.owedCommit = false
	n.closers.Add(1)
	go func() {
		defer n.closers.Done()
		oldCommits.close()
		if err := old.Close(); err != nil {
			n.log.D()("goneli %s: closing the replaced Kafka consumer: %v", n.config.Name, err)
		}
	}()
	if err := fresh.Subscribe(n.topic, n.onRebalance); err != nil {
		n.throttle.log(n.log.E(), "subscribe", "goneli %s: the new Kafka consumer cannot subscribe to %s: %v", n.config.Name, n.topic, err)
	}
}

// recycleProducer closes the producer, in the background, and lets the next heartbeat open another.
func (n *neli) recycleProducer(reason string) {
	old := n.producer
	if old == nil {
		return
	}
	n.producer = nil
	n.producerRecycled++
	n.log.W()("goneli %s: replacing the heartbeat producer: %s", n.config.Name, reason)
	n.closers.Add(1)
	go func() {
		defer n.closers.Done()
		old.Close()
	}()
}

func (n *neli) produce(p *part, h *heartbeat) {
	if err := n.produceRecord(p, h); err != nil {
		n.throttle.log(n.log.W(), "produce", "goneli %s: cannot send heartbeat: %v", n.config.Name, err)
		return
	}
	p.lease.sent()
}

// produceRecord hands a heartbeat or marker for p's partition to the producer; its delivery report
// comes through the producer's events.
func (n *neli) produceRecord(p *part, h *heartbeat) error {
	return n.produceRecordTo(p, h, nil)
}

// produceRecordTo is produceRecord with the delivery report sent to reports, if not nil.
func (n *neli) produceRecordTo(p *part, h *heartbeat, reports chan kafka.Event) error {
	if !n.ensureProducer() {
		return errors.New("no producer")
	}
	rec := *h
	rec.address = n.config.Address
	return n.producer.Produce(&kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &n.topic, Partition: p.id},
		Key:            n.key,
		Value:          rec.appendTo(make([]byte, 0, rec.size())),
	}, reports)
}

// drainProducer takes the producer's delivery reports and errors, and returns the first
// authorization failure among the reports, which no retry can mend (authz.go).
func (n *neli) drainProducer() (denied error) {
	if n.producer == nil {
		return nil
	}
	for i := 0; i < maxEventsPerCycle; i++ {
		select {
		case ev := <-n.producer.Events():
			switch e := ev.(type) {
			case *kafka.Message:
				if e.TopicPartition.Error != nil {
					if denied == nil {
						denied = authorizationError(n.config, "producer", e.TopicPartition.Error)
					}
					n.throttle.log(n.log.W(), "delivery", "goneli %s: heartbeat not delivered: %v", n.config.Name, e.TopicPartition.Error)
				} else {
					n.reachable("producer", "a heartbeat delivered")
				}
				n.noteDelivery(e.TopicPartition.Error)
				if n.producer == nil {
					return denied
				}
			case kafka.Error:
				if e.Code() == kafka.ErrAllBrokersDown {
					n.unreachable("producer", e.Error())
				}
				n.noteTrouble(e)
				n.logKafkaError("producer", e)
			}
		default:
			return denied
		}
	}
	return denied
}

// startGroupCheck describes the group, off the pulsing goroutine, for every part whose lease has
// asked for a check; collectGroupCheck takes the result in a later cycle. One description is under
// way at a time and serves every part that asked before it began.
//
// While a client has just seen a broker connection fail, the check waits for a quiet checkQuiet
// (groupcheck.go), though never longer than checkQuietMax: a description sent as the
// coordinator's connection drops can abort the process.
func (n *neli) startGroupCheck() {
	if n.checker.busy() || !slices.ContainsFunc(n.parts, func(p *part) bool { return p.wantCheck }) {
		return
	}
	now := n.now()
	if n.troubled && now-n.troubleAt < checkQuiet {
		if !n.deferring {
			n.deferring, n.deferSince = true, now
		}
		if now-n.deferSince < checkQuietMax {
			return
		}
		n.throttle.log(n.log.W(), "check-unquiet", "goneli %s: broker connections have kept failing for %v; checking the group regardless",
			n.config.Name, checkQuietMax)
	}
	n.deferring = false
	n.groupChecks.Add(1)
	tenures := map[int32]uint64{}
	for _, p := range n.parts {
		if p.wantCheck {
			p.wantCheck = false
			tenures[p.id] = p.lease.t.id
		}
	}
	d, release, err := n.describer()
	if err != nil {
		n.throttle.log(n.log.W(), "check", "goneli %s: cannot check the group's members: %v", n.config.Name, err)
		for id, tenure := range tenures {
			p := n.parts[id]
			n.apply(p, p.lease.checked(tenure, groupCheck{err: err}))
		}
		return
	}
	n.checker.start(d, release, n.config.LeaderGroupID, *n.config.HeartbeatTimeout, tenures)
}

func (n *neli) collectGroupCheck() {
	res, tenures, ok := n.checker.result()
	if !ok {
		return
	}
	n.checkAlone = res.err != nil
	if res.err != nil {
		n.trouble()
	}
	switch {
	case res.err != nil:
		n.throttle.log(n.log.W(), "check", "goneli %s: cannot describe group %s to check its members (%v); not leading until it can",
			n.config.Name, n.config.LeaderGroupID, res.err)
	default:
		if conflict := judgeGroup(res.desc, n.topic, n.clientID, "", 0).conflict; conflict != nil {
			n.throttle.log(n.log.E(), "conflict", "goneli %s: not leading: %v", n.config.Name, conflict)
		}
	}
	for id, tenure := range tenures {
		p := n.parts[id]
		c := groupCheck{err: res.err}
		if res.err == nil {
			c.verdict = judgeGroup(res.desc, n.topic, n.clientID, p.member, id)
		}
		n.apply(p, p.lease.checked(tenure, c))
		if p.lease.cleared(tenure) {
			n.member.passed(p.member)
		}
	}
}

// noteTrouble marks a failed broker connection that a client reported (see startGroupCheck).
func (n *neli) noteTrouble(e kafka.Error) {
	switch e.Code() {
	case kafka.ErrTransport, kafka.ErrAllBrokersDown, kafka.ErrNetworkException, kafka.ErrNotCoordinator,
		kafka.ErrCoordinatorNotAvailable, kafka.ErrCoordinatorLoadInProgress, kafka.ErrResolve:
		n.trouble()
	}
}

// trouble marks now as a moment when the brokers' connections were unsettled.
func (n *neli) trouble() {
	n.troubled, n.troubleAt = true, n.now()
}

// describer returns what describes the group for the group check: goneli's own connection where
// it can speak the clients' security settings (groupwire.go), else an admin client.
//
// Of admin clients the producer's own is preferred: it shares the producer's connections, which,
// unlike the consumer's, never wait in a long fetch. But after a failed check the next one gets a
// client of its own, made and closed for it. A handle keeps the group's coordinator in a cache, and
// librdkafka 2.11 did not let go of a stale entry once the coordinator had moved to another broker:
// every retry through the producer's handle failed for as long as the instance lived
// (TestGroupCheckAfterCoordinatorMoves), and it never led. A new handle looks the coordinator up
// afresh. The producer's is tried again at the next tenure, as a working handle costs nothing to
// reuse and a stale one costs one retry.
func (n *neli) describer() (groupDescriber, func(), error) {
	if n.wire != nil {
		return n.wire, func() {}, nil
	}
	if !n.ensureProducer() {
		return nil, nil, errors.New("no producer")
	}
	if p, ok := n.producer.(*kafka.Producer); ok && !n.checkAlone {
		a, err := kafka.NewAdminClientFromProducer(p)
		if err != nil {
			return nil, nil, err
		}
		return a, func() {}, nil
	}
	a, err := n.config.KafkaAdminProvider(n.adminConf)
	if err != nil {
		return nil, nil, err
	}
	return a, a.Close, nil
}

// watch aims the watchdog at the earliest end of a lease held.
func (n *neli) watch() {
	end, ok := time.Duration(0), false
	for _, p := range n.parts {
		if e, leading := p.lease.deadline(); leading && (!ok || e < end) {
			end, ok = e, true
		}
	}
	if ok {
		n.watchdog.aim(end)
	}
}

// expireLeases fences every lease that has run out; the watchdog calls it.
func (n *neli) expireLeases() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.State() == Live {
		for _, p := range n.parts {
			n.deliver(p, p.lease.expire().events)
		}
		n.watch()
	}
}

func (n *neli) logKafkaError(client string, e kafka.Error) {
	hint := ""
	if e.Code() == kafka.ErrInconsistentGroupProtocol {
		hint = fmt.Sprintf(" (members of group %s use another assignment strategy; goneli v0.5.0 members use librdkafka's "+
			"eager default and cannot share a group with cooperative-sticky ones: see the README's Migrating section)", n.config.LeaderGroupID)
	}
	n.throttle.log(n.log.W(), client+":"+e.Code().String(), "goneli %s: Kafka %s: %v%s", n.config.Name, client, e, hint)
}
