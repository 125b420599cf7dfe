package goneli

import (
	"sync"

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
	answer chan kafka.OffsetsCommitted
}

func newCommitter(c KafkaConsumer, running *sync.WaitGroup) *committer {
	return &committer{consumer: c, running: running, answer: make(chan kafka.OffsetsCommitted, 1)}
}

// start commits offsets unless a commit is still under way, and reports whether it began one.
// Called with the driver's lock held.
func (m *committer) start(offsets []kafka.TopicPartition) bool {
	if m.busy || len(offsets) == 0 {
		return false
	}
	m.busy = true
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

// collect returns the answer to the commit under way once it has come. Called with the driver's
// lock held.
func (m *committer) collect() (kafka.OffsetsCommitted, bool) {
	select {
	case e := <-m.answer:
		m.busy = false
		return e, true
	default:
		return kafka.OffsetsCommitted{}, false
	}
}

// close keeps commits from starting on the consumer from now on, after waiting for one under way;
// the consumer may then close. Not called with the driver's lock held, since the wait can last as
// long as librdkafka keeps a commit waiting for the coordinator.
func (m *committer) close() {
	m.gate.Lock()
	m.closed = true
	m.gate.Unlock()
}
