package coretest

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Regression tests for the defects that a review of the protocol found (issue 15).

func TestYieldForAnAgeStaysOut(t *testing.T) {
	b := startBroker(t)
	log, r := newTestLog(t), newRecorder()
	a := soloLeader(t, b, log, r)
	// now + d overflowed, the yield was dropped, and leadership came back at the next renewal.
	if err := a.Yield(math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	r.await(t, "a to give up leadership", has[LeaderRevoked]("a"))
	if s := a.Stats(); s.YieldRemaining < 100*365*24*time.Hour {
		t.Fatalf("YieldRemaining = %v after Yield(MaxInt64)", s.YieldRemaining)
	}
}

func TestBriefYieldStillHandsOver(t *testing.T) {
	b := startBroker(t)
	log, r := newTestLog(t), newRecorder()
	a := soloLeader(t, b, log, r)
	// A yield that is over before Yield gets the instance's lock used to do nothing at all.
	if err := a.Yield(time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	events := r.await(t, "a to give up leadership and take it back", acquiredAfter[LeaderRevoked]("a"))
	checkGrammar(t, events)
}

// unsubscribeFails is a real consumer whose Unsubscribe can be made to fail.
type unsubscribeFails struct {
	*kafka.Consumer
	fail atomic.Bool
}

func (c *unsubscribeFails) Unsubscribe() error {
	if c.fail.Load() {
		return errors.New("injected Unsubscribe failure")
	}
	return c.Consumer.Unsubscribe()
}

func TestYieldThatCannotLeaveContendsAgain(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	var consumer *unsubscribeFails
	config := testConfig(b, group, "a", log)
	config.KafkaConsumerProvider = func(conf *KafkaConfigMap) (KafkaConsumer, error) {
		c, err := StandardKafkaConsumerProvider()(conf)
		if err != nil {
			return nil, err
		}
		consumer = &unsubscribeFails{Consumer: c.(*kafka.Consumer)}
		return consumer, nil
	}
	a := newNeli(t, config, r).(Curator)
	t.Cleanup(func() { consumer.fail.Store(false) }) // runs before a's Close
	pulse(t, a)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))

	// The yield ends the tenure but cannot take a out of the group: partition 0 stays with a, and
	// nobody led again once the yield was over.
	consumer.fail.Store(true)
	if err := a.Yield(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	events := r.await(t, "a to lead again after the yield", acquiredAfter[LeaderRevoked]("a"))
	checkGrammar(t, events)
}

func TestPulseCtxOnLeaderAnswersAnEndedContext(t *testing.T) {
	b := startBroker(t)
	log, r := newTestLog(t), newRecorder()
	checkEndedContexts(t, soloLeader(t, b, log, r))
}

// A barrier that blocks in the final LeaderRevoked holds Close back for at most the rebalance
// timeout, as it would hold back a rebalance; Close used to wait for it without bound.
func TestCloseIsBoundedWhileRevokedBarrierBlocks(t *testing.T) {
	b := startBroker(t)
	log, group := newTestLog(t), groupName(t)
	release := make(chan struct{})
	returned := make(chan struct{})
	acquired := make(chan struct{}, 1)
	n, err := New(testConfig(b, group, "a", log), func(e Event) {
		switch e.(type) {
		case LeaderAcquired:
			acquired <- struct{}{}
		case LeaderRevoked:
			<-release
			close(returned)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	p := pulse(t, n)
	<-acquired
	p.Close()
	_ = p.Await()
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(awaitLimit):
		t.Error("Close waited for a barrier that does not return")
	}
	close(release)
	<-returned
	if err := <-closedOrNil(closed); err != nil {
		t.Errorf("Close: %v", err)
	}
	awaitClientsClosed(t, n)
}

// closedOrNil lets a test wait for Close once more after giving up on it.
func closedOrNil(c chan error) chan error {
	out := make(chan error, 1)
	select {
	case err := <-c:
		out <- err
	default:
		out <- nil
	}
	return out
}

// heartbeatV1 encodes a heartbeat in the record format's first version, which every later
// version's reader accepts: "NL", the version byte, then tenure, sequence, wall-clock send time,
// monotonic send time, tenure start and token, each eight bytes big-endian.
func heartbeatV1(tenure, seq uint64, wall, token int64) []byte {
	b := append([]byte(nil), 'N', 'L', 1)
	for _, v := range []uint64{tenure, seq, uint64(wall), 0, uint64(wall), uint64(token)} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b
}

// ghostHeartbeat writes a heartbeat of a leader named "ghost" with the given token, as the last
// leader before a log restart left it.
func ghostHeartbeat(t *testing.T, addr, topic string, token int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	rec := &kgo.Record{Topic: topic, Partition: 0, Key: []byte("ghost"), Value: heartbeatV1(1, 1, time.Now().UnixNano(), token)}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// After partition 0's log restarts (lost broker data, an unclean leader election, a recreated
// topic), tokens start again from the bottom. The observer dropped every heartbeat whose token was
// below the highest it had seen, so it never reported a leader again.
func TestObserverFollowsLeadersAfterTokensRestart(t *testing.T) {
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	topic := group + ".neli"
	b, err := kafkatest.Start(kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	w := watch(t, b, group, log)
	const ghostToken = 1 << 40
	ghostHeartbeat(t, b.Addr, topic, ghostToken)
	w.await(t, "the ghost", named("ghost"))
	contender(t, testConfig(b, group, "a", log), r)
	info := w.await(t, "a, whose token restarted from the bottom", named("a"))
	if info.Token >= ghostToken {
		t.Fatalf("a's token %d", info.Token)
	}
}
