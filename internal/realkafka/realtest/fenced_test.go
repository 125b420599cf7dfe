package realtest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/member"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/goneli/goneli/internal/verdict"
	"github.com/twmb/franz-go/pkg/kgo"
)

// heldEnv, when set, turns the test binary into the held writer of TestFencedWrites (heldWriter).
const heldEnv = "GONELI_REALTEST_HELD_WRITER"

// eventHolding is the held writer's line saying that its second transaction has passed goneli's
// own check that the tenure is current, and waits to commit.
const eventHolding = "holding"

// heldWriter leads with goneli.New and writes member.WriteRecords through a FencedProducer, as a
// member with -writes does, but twice only: one transaction it commits, and one it holds just
// before the commit, after goneli's own check that the tenure is current, until SIGUSR1. That is a
// leader paused between its check and its commit: the case that only the broker can refuse. It
// prints member lines, and a line for each write's outcome.
func heldWriter() int {
	fs := flag.NewFlagSet("held", flag.ContinueOnError)
	var o member.Options
	fs.StringVar(&o.Broker, "kafka", "", "bootstrap servers")
	fs.StringVar(&o.Group, "group", "", "group")
	fs.StringVar(&o.Name, "name", "", "name")
	fs.StringVar(&o.Writes, "writes", "", "topic written")
	kip848 := fs.Bool("consumer-protocol", false, "group.protocol=consumer")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	go func() {
		// The harness holds stdin open; its end means the harness is gone.
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	say := func(l member.Line) {
		mu.Lock()
		defer mu.Unlock()
		if l.At == 0 {
			l.At = time.Now().UnixNano()
		}
		l.Name = o.Name
		_ = enc.Encode(l)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM)
	term, commit := make(chan struct{}), make(chan struct{}, 1)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM {
				close(term)
				return
			}
			select {
			case commit <- struct{}{}:
			default:
			}
		}
	}()
	kc := goneli.KafkaConfigMap{"bootstrap.servers": o.Broker, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 250, "log_level": 3}
	if *kip848 {
		kc["group.protocol"] = "consumer"
	}
	inited := map[int64]bool{} // tenures whose producer initialised at acquisition; under mu
	n, err := goneli.New(goneli.Config{KafkaConfig: kc, LeaderGroupID: o.Group, LeaderTopic: o.Group + ".neli", Name: o.Name,
		HeartbeatTimeout: goneli.Duration(lease), MinPollInterval: goneli.Duration(pollInterval)},
		func(e goneli.Event) {
			switch e := e.(type) {
			case goneli.LeaderAcquired:
				mu.Lock()
				init := inited[e.Token]
				mu.Unlock()
				say(member.Line{Event: member.EventAcquired, Info: e.Tenure, Token: e.Token, Init: init, Since: e.Since.UnixNano()})
			case goneli.LeaderFenced:
				say(member.Line{Event: member.EventFenced, Info: e.Reason})
			case goneli.LeaderRevoked:
				say(member.Line{Event: member.EventRevoked, Info: e.Tenure})
			}
		})
	if err != nil {
		say(member.Line{Event: member.EventError, Info: err.Error()})
		return 1
	}
	var committing time.Time // the last commit call's; set and read on this goroutine
	commits := 0
	f, err := goneli.NewFencedProducer(n.(goneli.Curator), goneli.FencedConfig{Trace: &goneli.FencedTrace{
		Initialised: func(token int64) {
			mu.Lock()
			defer mu.Unlock()
			inited[token] = true
		},
		Committing: func(token int64) {
			if commits++; commits == 2 {
				say(member.Line{Event: eventHolding, Token: token})
				select {
				case <-commit:
				case <-term:
				}
			}
			committing = time.Now()
		},
	}})
	if err != nil {
		_ = n.Close()
		say(member.Line{Event: member.EventError, Info: err.Error()})
		return 1
	}
	p, err := n.Background(func() { time.Sleep(time.Millisecond) })
	if err != nil {
		_ = f.Close()
		_ = n.Close()
		say(member.Line{Event: member.EventError, Info: err.Error()})
		return 1
	}
	say(member.Line{Event: member.EventStarted})
	for seq := int64(1); seq <= 2; seq++ {
		var token int64
		err := f.Transaction(context.Background(), func(tx *goneli.FencedTx) error {
			token = tx.Token()
			v, _ := json.Marshal(member.WriteRecord{Member: o.Name, Token: tx.Token(), Seq: seq})
			return tx.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &o.Writes, Partition: 0}, Value: v})
		})
		var fe *goneli.FencedWriteError
		switch {
		case err == nil:
			say(member.Line{At: committing.UnixNano(), Event: member.EventCommit, Token: token})
		case errors.As(err, &fe) && !fe.Broker && seq == 1:
			// IsLeader turns true once the barrier has returned from LeaderAcquired, which nothing
			// announces: a first write before then is refused by goneli's own check, and tried again.
			time.Sleep(time.Millisecond)
			seq--
		case errors.As(err, &fe):
			how := member.RefusedLocally
			if fe.Broker {
				how = member.RefusedByBroker
			}
			say(member.Line{Event: member.EventRefused, Token: fe.Token, Info: how})
		default:
			say(member.Line{Event: member.EventError, Info: fmt.Sprintf("write %d: %v", seq, err)})
			return 1
		}
	}
	<-term
	p.Close()
	_ = p.Await()
	_ = f.Close()
	if err := n.Close(); err != nil {
		say(member.Line{Event: member.EventError, Info: err.Error()})
		return 1
	}
	say(member.Line{Event: member.EventClosed})
	return 0
}

// A leader is paused between goneli's check that its tenure is current and its transaction's
// commit, with the transaction's record in the log; it loses its lease meanwhile, and a member
// leads and writes in its place. Resumed, the paused leader commits: Kafka refuses the commit
// (the successor's producer initialised under the same transactional id), a read_committed
// reader sees the paused leader's earlier record and after it only the successor's, never the
// refused one, and no transaction committed after a successor had fenced it.
func TestFencedWrites(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *realkafka.Cluster, p protocol) {
		group := groupName(t)
		writes := group + ".writes"
		ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
		defer cancel()
		if _, err := admin(t, c).CreateTopic(ctx, 1, -1, nil, writes); err != nil {
			t.Fatal(err)
		}
		r := newRig(t, c, p, 1, 0, withArgs("-writes", writes), idle())
		held := r.startHeld(writes)
		if _, _, err := r.fleet.WaitFor(0, awaitLimit, "the held writer to hold its second commit", func(l member.Line) bool {
			return l.Name == held.Name && l.Event == eventHolding
		}); err != nil {
			t.Fatal(err)
		}
		// The held transaction's record is in the log, uncommitted.
		readWrites(t, c, writes, false, func(w member.WriteRecord) bool { return w.Member == held.Name && w.Seq == 2 })

		r.start(0) // the successor, a follower while the held writer leads
		r.awaitStable(2)
		f := verdict.Fault{Kind: "sigstop", Victim: held.Name, WasLeader: true}
		var err error
		if f.At, err = r.fleet.Signal(held, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		successor := r.procs[0].Name
		acquired, _, err := r.fleet.WaitFor(0, awaitLimit, "the successor to acquire", func(l member.Line) bool {
			return l.Name == successor && l.Event == member.EventAcquired
		})
		if err != nil {
			t.Fatal(err)
		}
		// The successor's producer initialised before its barrier heard of the acquisition: the
		// broker aborted the held transaction then, and fences the held writer's producer.
		t.Logf("the successor acquired %v after the freeze; its producer's initialisation (at acquisition: %v) took %v",
			time.Unix(0, acquired.Since).Sub(f.At).Round(time.Millisecond), acquired.Init, time.Duration(acquired.At-acquired.Since).Round(time.Millisecond))
		if _, _, err := r.fleet.WaitFor(0, awaitLimit, "the successor to commit a write", func(l member.Line) bool {
			return l.Name == successor && l.Event == member.EventCommit
		}); err != nil {
			t.Fatal(err)
		}
		f.Healed = time.Now()
		r.faults = append(r.faults, f)
		if _, err := r.fleet.Signal(held, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		cursor := r.fleet.Cursor()
		if _, err := r.fleet.Signal(held, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		outcome, _, err := r.fleet.WaitFor(cursor, awaitLimit, "the held commit's outcome", func(l member.Line) bool {
			return l.Name == held.Name && (l.Event == member.EventCommit || l.Event == member.EventRefused)
		})
		if err != nil {
			t.Fatal(err)
		}
		if outcome.Event != member.EventRefused || outcome.Info != member.RefusedByBroker {
			t.Fatalf("the deposed leader's held commit: %s %s, want refused by the broker", outcome.Event, outcome.Info)
		}
		t.Logf("the deposed leader's commit for tenure %d was refused by the broker", outcome.Token)
		// A write of the successor's after the refusal, so that the log goes on past it.
		if _, _, err := r.fleet.WaitFor(cursor, awaitLimit, "the successor to commit after the refusal", func(l member.Line) bool {
			return l.Name == successor && l.Event == member.EventCommit && l.At > outcome.At
		}); err != nil {
			t.Fatal(err)
		}
		// The successor leads only once its producer has initialised (docs/fenced-writes.md), which
		// has the broker abort the held transaction first.
		tm := r.groupTiming()
		initialising := time.Duration(acquired.At - acquired.Since)
		rep := r.check(func(kind string) time.Duration { return bounds(tm)(kind) + initialising })
		for _, lc := range rep.LateCommits {
			t.Errorf("late commit: %v", lc)
		}

		// Every transaction is committed or aborted now that the writers have closed: a record
		// written after them marks the end, which a read_committed reader reaches once no
		// transaction before it is open.
		const end = "end"
		v, _ := json.Marshal(member.WriteRecord{Member: end})
		if err := client(t, c).ProduceSync(ctx, &kgo.Record{Topic: writes, Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		var order verdict.WriteOrder
		var seen []member.WriteRecord
		readWrites(t, c, writes, true, func(w member.WriteRecord) bool {
			if w.Member == end {
				return true
			}
			if !order.Add(int64(len(seen)), w) {
				t.Errorf("interleaved: %v", order.Interleaved[len(order.Interleaved)-1])
			}
			seen = append(seen, w)
			return false
		})
		if len(seen) == 0 || seen[0].Member != held.Name || seen[0].Seq != 1 {
			t.Fatalf("read_committed, the first record is %+v, want the held writer's first", seen)
		}
		for _, w := range seen[1:] {
			if w.Member != successor {
				t.Fatalf("read_committed, after the held writer's first record: %+v, want only the successor's records", w)
			}
		}
		t.Logf("read_committed: the held writer's first record, then %d of the successor's; %d commits in all", len(seen)-1, rep.Commits)
	})
}

// idle makes newRig start no member: the test starts them itself.
func idle() rigOption { return func(r *rig) { r.idle = true } }

// startHeld starts the held writer (heldWriter) in the rig's group, writing to topic.
func (r *rig) startHeld(topic string) *fleet.Proc {
	r.t.Helper()
	args := []string{"-kafka", r.bootstrap(0), "-group", r.group, "-name", "held", "-writes", topic}
	if r.p.name == consumer.name {
		args = append(args, "-consumer-protocol")
	}
	p, err := r.fleet.Start(fleet.Spec{Name: "held", Path: os.Args[0], Args: args, Env: []string{heldEnv + "=1"}, HoldStdin: true})
	if err != nil {
		r.t.Fatalf("starting the held writer: %v", err)
	}
	return p
}

// readWrites reads topic's member.WriteRecords from the start, read_committed or not, until last
// returns true for one.
func readWrites(t *testing.T, c *realkafka.Cluster, topic string, committed bool, last func(member.WriteRecord) bool) {
	t.Helper()
	level := kgo.ReadUncommitted()
	if committed {
		level = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Bootstrap(), ",")...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(level),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: gave up waiting for the last record", topic)
		}
		for _, rec := range fs.Records() {
			var w member.WriteRecord
			if err := json.Unmarshal(rec.Value, &w); err != nil {
				t.Fatalf("reading %s: offset %d: %v", topic, rec.Offset, err)
			}
			if last(w) {
				return
			}
		}
	}
}
