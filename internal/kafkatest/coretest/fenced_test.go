package coretest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// childFencedEnv, when set in a child (see runChild), names the topic its FencedProducer writes to.
const childFencedEnv = "GONELI_TEST_CHILD_FENCED"

func record(topic, value string) *kafka.Message {
	return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte(value)}
}

func newFenced(t *testing.T, lead Leadership, cfg FencedConfig) *FencedProducer {
	t.Helper()
	f, err := NewFencedProducer(lead, cfg)
	if err != nil {
		t.Fatalf("NewFencedProducer: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("FencedProducer.Close: %v", err)
		}
	})
	return f
}

// committed reads topic with isolation.level=read_committed up to and including the record
// valued last, which the caller has committed after everything it asserts on.
func committed(t *testing.T, b *kafkatest.Broker, topic, last string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	var got []string
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read_committed consumer never saw %q; saw %q", last, got)
		}
		for _, r := range fs.Records() {
			got = append(got, string(r.Value))
			if string(r.Value) == last {
				return got
			}
		}
	}
}

func assertFenced(t *testing.T, what string, err error, broker bool) {
	t.Helper()
	var fe *FencedWriteError
	if !errors.Is(err, ErrWriteFenced) || !errors.As(err, &fe) || fe.Broker != broker {
		t.Fatalf("%s: got %v, want a *FencedWriteError with Broker=%v", what, err, broker)
	}
}

// awaitLeader waits for IsLeader, which turns true once the barrier has returned from
// LeaderAcquired: no event follows that return, so it is polled.
func awaitLeader(t *testing.T, what string, l Leadership) {
	t.Helper()
	limit := time.Now().Add(awaitLimit)
	for !l.IsLeader() {
		if time.Now().After(limit) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// fixedLead is a Leadership that always claims to lead with the token it holds: two of them stand
// for a deposed leader that has not noticed (paused between its lease check and its commit) and
// its successor, so that only the broker can tell them apart.
type fixedLead struct{ token atomic.Int64 }

func (l *fixedLead) IsLeader() bool { return true }
func (l *fixedLead) Token() int64   { return l.token.Load() }

func TestFencedProducerBrokerFencesOverlappingHolder(t *testing.T) {
	const topic = "out"
	b := startBroker(t, kfake.SeedTopics(1, topic))
	cfg := FencedConfig{TransactionalID: "fenced-broker", KafkaConfig: KafkaConfigMap{"bootstrap.servers": b.Addr}}
	var l1, l2 fixedLead
	l1.token.Store(1)
	l2.token.Store(2)
	p1, p2 := newFenced(t, &l1, cfg), newFenced(t, &l2, cfg)
	ctx := context.Background()
	if err := p1.Send(ctx, record(topic, "p1-1")); err != nil {
		t.Fatalf("first holder's write: %v", err)
	}
	// p1 opens a transaction, and the successor initialises (and writes) while it is open.
	err := p1.Transaction(ctx, func(tx *FencedTx) error {
		if err := tx.Produce(record(topic, "p1-open")); err != nil {
			return err
		}
		return p2.Send(ctx, record(topic, "p2-1"))
	})
	assertFenced(t, "the open transaction of the fenced holder", err, true)
	assertFenced(t, "a later write of the fenced holder", p1.Send(ctx, record(topic, "p1-late")), true)
	if err := p2.Send(ctx, record(topic, "p2-end")); err != nil {
		t.Fatalf("successor's second write: %v", err)
	}
	got := committed(t, b, topic, "p2-end")
	if want := "p1-1 p2-1 p2-end"; strings.Join(got, " ") != want {
		t.Fatalf("read_committed saw %q, want %q", got, want)
	}
}

func TestFencedProducerFollowsTenures(t *testing.T) {
	const topic = "out"
	b := startBroker(t, kfake.SeedTopics(1, topic))
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	a := contender(t, testConfig(b, group, "a", log), r).(Curator)
	awaitLeader(t, "a to lead", a)
	fa := newFenced(t, a, FencedConfig{})
	c := contender(t, testConfig(b, group, "c", log), r).(Curator)
	// The trace's calls come on the dispatcher (Initialised) and on this goroutine (Committing).
	inits, commits := make(chan int64, 4), make(chan int64, 8)
	fc := newFenced(t, c, FencedConfig{Trace: &FencedTrace{
		Initialised: func(token int64) { inits <- token },
		Committing:  func(token int64) { commits <- token },
	}})
	if fa.TransactionalID() != "goneli-fenced."+group || fc.TransactionalID() != fa.TransactionalID() {
		t.Fatalf("transactional ids %q and %q, want both goneli-fenced.%s", fa.TransactionalID(), fc.TransactionalID(), group)
	}
	ctx := context.Background()
	// a bound its producer while leading already: it initialises at this first write.
	if err := fa.Send(ctx, record(topic, "a-1")); err != nil {
		t.Fatalf("leader's write: %v", err)
	}
	assertFenced(t, "a follower's write", fc.Send(ctx, record(topic, "c-0")), false)

	// a's transaction is open when a gives up leadership and c's producer initialises at its
	// acquisition, before c leads.
	err := fa.Transaction(ctx, func(tx *FencedTx) error {
		if err := tx.Produce(record(topic, "a-open")); err != nil {
			return err
		}
		if err := a.Yield(time.Hour); err != nil {
			return err
		}
		awaitLeader(t, "c to lead", c)
		return nil
	})
	assertFenced(t, "a's transaction across its tenure's end", err, false)
	if err := fc.Send(ctx, record(topic, "c-1"), record(topic, "c-2")); err != nil {
		t.Fatalf("successor's write: %v", err)
	}
	// c's producer initialised at its acquisition, for the token it then committed under.
	select {
	case token := <-inits:
		if token != c.Token() {
			t.Fatalf("trace: initialised for token %d, c leads with %d", token, c.Token())
		}
		if got := <-commits; got != token {
			t.Fatalf("trace: committing token %d, want %d", got, token)
		}
	default:
		t.Fatal("trace: c's producer did not report its initialisation at acquisition")
	}
	assertFenced(t, "a's write after its tenure", fa.Send(ctx, record(topic, "a-late")), false)
	if err := fc.Send(ctx, record(topic, "c-end")); err != nil {
		t.Fatalf("successor's last write: %v", err)
	}
	got := committed(t, b, topic, "c-end")
	if want := "a-1 c-1 c-2 c-end"; strings.Join(got, " ") != want {
		t.Fatalf("read_committed saw %q, want %q", got, want)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := fa.Send(ctx, record(topic, "x")); !errors.Is(err, ErrFencedProducerClosed) {
		t.Fatalf("Send after Close: %v, want ErrFencedProducerClosed", err)
	}
}

// fencedChild is what a child started with childFencedEnv does once it leads: it writes one record,
// opens a transaction with another, says "in-tx" and waits for a line on stdin before committing,
// then reports the commit's outcome as "late: <error>".
func fencedChild(n Curator, topic, name string, leading <-chan struct{}, say func(string)) {
	f, err := NewFencedProducer(n, FencedConfig{})
	if err != nil {
		say("error: " + err.Error())
		return
	}
	<-leading
	ctx := context.Background()
	if err := f.Send(ctx, record(topic, name+"-1")); err != nil {
		say("error: " + err.Error())
		return
	}
	in := bufio.NewReader(os.Stdin)
	err = f.Transaction(ctx, func(tx *FencedTx) error {
		if err := tx.Produce(record(topic, name+"-late")); err != nil {
			return err
		}
		say("in-tx")
		_, err := in.ReadString('\n')
		return err
	})
	say(fmt.Sprintf("late: %v", err))
}

// startFencedChild runs a child that leads and writes through a FencedProducer (fencedChild); it
// returns the child, its stdin and its output lines.
func startFencedChild(t *testing.T, b *kafkatest.Broker, group, name, topic string) (*exec.Cmd, *os.File, <-chan string) {
	t.Helper()
	return spawnChild(t, b, group, name, childFencedEnv+"="+topic)
}

// awaitLine returns the first line of lines that starts with prefix.
func awaitLine(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	limit := time.After(awaitLimit)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child ended before saying %q", prefix)
			}
			if strings.HasPrefix(l, "error: ") {
				t.Fatalf("child: %s", l)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-limit:
			t.Fatalf("the child never said %q", prefix)
		}
	}
}

// A leader process frozen past its lease in the middle of a transaction resumes after a successor
// has led and written: its commit is refused with an error that names the fencing, and no
// read_committed consumer sees its records.
func TestFencedWriteOfFrozenLeaderProcess(t *testing.T) {
	const topic = "out"
	b := startBroker(t, kfake.SeedTopics(1, topic))
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	child, stdin, lines := startFencedChild(t, b, group, "child", topic)
	awaitLine(t, lines, "in-tx")

	f := contender(t, testConfig(b, group, "f", log), r).(Curator)
	ff := newFenced(t, f, FencedConfig{})
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = child.Process.Signal(syscall.SIGCONT)
		}
	}()
	awaitLeader(t, "the follower to take over from the frozen leader", f)
	ctx := context.Background()
	if err := ff.Send(ctx, record(topic, "f-1")); err != nil {
		t.Fatalf("successor's write: %v", err)
	}
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	if _, err := stdin.WriteString("commit\n"); err != nil {
		t.Fatal(err)
	}
	late := awaitLine(t, lines, "late: ")
	if !strings.Contains(late, "write fenced") {
		t.Fatalf("the resumed leader's commit: %q, want an error naming the fencing", late)
	}
	t.Logf("the resumed leader's commit: %s", late)
	if err := ff.Send(ctx, record(topic, "f-end")); err != nil {
		t.Fatalf("successor's last write: %v", err)
	}
	got := committed(t, b, topic, "f-end")
	if want := "child-1 f-1 f-end"; strings.Join(got, " ") != want {
		t.Fatalf("read_committed saw %q, want %q", got, want)
	}
}

// BenchmarkFencedSend measures a Send on the embedded broker: its latency, and the requests the
// broker receives per Send, by kind. The figures back the cost stated in FencedProducer's doc.
func BenchmarkFencedSend(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			const topic = "out"
			broker, err := kafkatest.Start(kfake.SeedTopics(1, topic))
			if err != nil {
				b.Fatal(err)
			}
			defer broker.Close()
			var l fixedLead
			l.token.Store(1)
			f, err := NewFencedProducer(&l, FencedConfig{TransactionalID: "bench", KafkaConfig: KafkaConfigMap{"bootstrap.servers": broker.Addr}})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			msgs := make([]*kafka.Message, n)
			for i := range msgs {
				msgs[i] = record(topic, strings.Repeat("x", 100))
			}
			ctx := context.Background()
			if err := f.Send(ctx, msgs...); err != nil { // initialises
				b.Fatal(err)
			}
			var mu sync.Mutex
			counts := map[string]int{}
			broker.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
				broker.KeepControl()
				mu.Lock()
				counts[kmsg.NameForKey(req.Key())]++
				mu.Unlock()
				return nil, nil, false
			})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := f.Send(ctx, msgs...); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/send")
			mu.Lock()
			defer mu.Unlock()
			total := 0
			var kinds []string
			for k, c := range counts {
				total += c
				kinds = append(kinds, fmt.Sprintf("%s=%.2f", k, float64(c)/float64(b.N)))
			}
			sort.Strings(kinds)
			b.ReportMetric(float64(total)/float64(b.N), "requests/send")
			b.Logf("per Send of %d record(s), over %d: %s", n, b.N, strings.Join(kinds, " "))
		})
	}
}
