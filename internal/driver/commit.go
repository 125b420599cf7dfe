package driver

import (
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// committer sends the explicit commits that leases ask for (lease.stalled, lease.readBack) for one
// consumer, from a goroutine of its own and one at a time. confluent-kafka-go's commit waits for
// the coordinator's answer, up to a session timeout while the coordinator is unknown, and the poll
// loop must not wait that long with the lock held: the answer comes back through collect instead,
// on a later cycle.
type committer struct {
	consumer KafkaConsumer
	running  *sync.WaitGroup
	// gate is held shared while a commit is inside the client and alone by close: a commit that
	// began after its consumer's Close could reach a handle that librdkafka has already freed.
	gate   sync.RWMutex
	closed bool
	busy   bool // a commit was started and its answer not collected yet; guarded by the driver's lock
	// sentAt is when the commit under way was started, on the driver's clock; guarded by the
	// driver's lock.
	sentAt time.Duration
	answer chan kafka.OffsetsCommitted
}

func newCommitter(c KafkaConsumer, running *sync.WaitGroup) *committer {
	return &committer{consumer: c, running: running, answer: make(chan kafka.OffsetsCommitted, 1)}
}

// start commits offsets unless a commit is still under way, and reports whether it began one.
// now is the driver's time. Called with the driver's lock held.
func (m *committer) start(offsets []kafka.TopicPartition, now time.Duration) bool {
	if m.busy || len(offsets) == 0 {
		return false
	}
	m.busy, m.sentAt = true, now
	m.running.Add(1)
	go func() {
		defer m.running.Done()
		m.gate.RLock()
		if m.closed {
			m.gate.RUnlock()
			return // busy stays set: this consumer commits nothing more
		}
		committed, err := m.consumer.CommitOffsets(offsets)
		m.gate.RUnlock()
		// The channel holds one answer and only one commit is ever under way, so this never waits.
		m.answer <- kafka.OffsetsCommitted{Error: err, Offsets: committed}
	}()
	return true
}

// collect returns the answer to the commit under way once it has come, and how long after its
// start (at the driver's time now) it was collected. Called with the driver's lock held.
func (m *committer) collect(now time.Duration) (kafka.OffsetsCommitted, time.Duration, bool) {
	select {
	case e := <-m.answer:
		m.busy = false
		return e, now - m.sentAt, true
	default:
		return kafka.OffsetsCommitted{}, 0, false
	}
}

// waiting is how long the commit under way has waited for its answer at the driver's time now;
// zero when none is. Called with the driver's lock held.
func (m *committer) waiting(now time.Duration) time.Duration {
	if !m.busy {
		return 0
	}
	return now - m.sentAt
}

// close keeps commits from starting on the consumer from now on, after waiting for one under way;
// the consumer may then close. Not called with the driver's lock held, since the wait can last as
// long as librdkafka keeps a commit waiting for the coordinator.
func (m *committer) close() {
	m.gate.Lock()
	m.closed = true
	m.gate.Unlock()
}
