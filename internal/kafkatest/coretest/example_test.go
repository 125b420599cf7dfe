package coretest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/obsidiandynamics/libstdgo/scribe"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Contend for leadership on an embedded broker, lead, and hand over on Close.
func Example() {
	broker, err := kafkatest.Start()
	if err != nil {
		panic(err)
	}
	defer broker.Close()

	n, err := goneli.New(goneli.Config{
		KafkaConfig:      goneli.KafkaConfigMap{"bootstrap.servers": broker.Addr},
		LeaderGroupID:    "example",
		HeartbeatTimeout: goneli.Duration(time.Second),
		Scribe:           scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)}),
	}, func(e goneli.Event) {
		switch e.(type) {
		case goneli.LeaderAcquired:
			fmt.Println("acquired")
		case goneli.LeaderFenced:
			fmt.Println("fenced")
		case goneli.LeaderRevoked:
			fmt.Println("revoked")
		}
	})
	if err != nil {
		panic(err)
	}
	for {
		leader, err := n.Pulse(100 * time.Millisecond)
		if err != nil {
			panic(err)
		}
		if leader {
			fmt.Println("doing leader work")
			break
		}
	}
	_ = n.Close()
	fmt.Println(n.State())
	// Output:
	// acquired
	// doing leader work
	// revoked
	// Closed
}

// Contend for two roles with one instance: alone in its group, it leads both, each with its own
// token, and gives both up on Close.
func ExampleNewRoles() {
	broker, err := kafkatest.Start()
	if err != nil {
		panic(err)
	}
	defer broker.Close()

	var mu sync.Mutex
	var events []string
	r, err := goneli.NewRoles(goneli.Config{
		KafkaConfig:      goneli.KafkaConfigMap{"bootstrap.servers": broker.Addr},
		LeaderGroupID:    "example-roles",
		HeartbeatTimeout: goneli.Duration(time.Second),
		Scribe:           scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)}),
	}, []string{"billing", "mailer"}, func(e goneli.Event) {
		// Called from each role's own goroutine: events of different roles may interleave.
		mu.Lock()
		defer mu.Unlock()
		switch e := e.(type) {
		case goneli.LeaderAcquired:
			events = append(events, "acquired "+e.Role)
		case goneli.LeaderRevoked:
			events = append(events, "revoked "+e.Role)
		}
	})
	if err != nil {
		panic(err)
	}
	for len(r.Leading()) < 2 {
		if _, err := r.Pulse(100 * time.Millisecond); err != nil {
			panic(err)
		}
	}
	for _, role := range r.All() {
		// A token is the offset of the tenure's first confirmed heartbeat plus one: positive, and
		// larger than any earlier tenure's of the role, but not always 1 on a fresh topic.
		fmt.Printf("%s: partition %d, leader %v, token above 0 %v\n", role.Name(), role.Partition(), role.IsLeader(), role.Token() > 0)
	}
	_ = r.Close()
	r.Await()
	sort.Strings(events)
	fmt.Println(strings.Join(events, ", "))
	// Output:
	// billing: partition 0, leader true, token above 0 true
	// mailer: partition 1, leader true, token above 0 true
	// acquired billing, acquired mailer, revoked billing, revoked mailer
}

// Run a leader task that gets a context, and stop with the program's context: ending it cancels
// the task's context, waits for the task, and hands leadership over. A real program would end the
// context on SIGTERM with signal.NotifyContext.
func ExampleRun() {
	broker, err := kafkatest.Start()
	if err != nil {
		panic(err)
	}
	defer broker.Close()

	ctx, stop := context.WithCancel(context.Background())
	config := goneli.Config{
		KafkaConfig:      goneli.KafkaConfigMap{"bootstrap.servers": broker.Addr},
		LeaderGroupID:    "example-run",
		HeartbeatTimeout: goneli.Duration(time.Second),
		Scribe:           scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)}),
	}
	err = goneli.Run(ctx, config, func(ctx context.Context) {
		fmt.Println("leading")
		stop() // in a real program: SIGTERM
		<-ctx.Done()
		fmt.Println("task stopped:", ctx.Err())
	})
	fmt.Println("Run returned", err)
	// Output:
	// leading
	// task stopped: context canceled
	// Run returned <nil>
}

// Two contenders write through FencedProducers: after the first hands leadership over, its write
// is refused, and a read_committed consumer sees only the writes of each tenure while it led.
func ExampleNewFencedProducer() {
	broker, err := kafkatest.Start(kfake.SeedTopics(1, "invoices"))
	if err != nil {
		panic(err)
	}
	defer broker.Close()

	contend := func(name string) (goneli.Curator, *goneli.FencedProducer) {
		n, err := goneli.NewCurator(goneli.Config{
			KafkaConfig:      goneli.KafkaConfigMap{"bootstrap.servers": broker.Addr},
			LeaderGroupID:    "example-fenced",
			Name:             name,
			HeartbeatTimeout: goneli.Duration(time.Second),
			Scribe:           scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)}),
		})
		if err != nil {
			panic(err)
		}
		f, err := goneli.NewFencedProducer(n, goneli.FencedConfig{})
		if err != nil {
			panic(err)
		}
		return n, f
	}
	lead := func(n goneli.Curator) {
		for !n.IsLeader() {
			if _, err := n.Pulse(10 * time.Millisecond); err != nil {
				panic(err)
			}
		}
	}
	topic := "invoices"
	invoice := func(v string) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte(v)}
	}
	ctx := context.Background()

	a, fa := contend("a")
	lead(a)
	fmt.Println("a writes:", fa.Send(ctx, invoice("a-1")))
	b, fb := contend("b")
	_ = a.Yield(time.Hour) // a hands over; b's producer initialises as b acquires
	lead(b)
	fmt.Println("b writes:", fb.Send(ctx, invoice("b-1")))
	err = fa.Send(ctx, invoice("a-2"))
	fmt.Println("a's late write fenced:", errors.Is(err, goneli.ErrWriteFenced))

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addr), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	var seen []string
	for len(seen) < 2 {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen = append(seen, string(r.Value)) })
	}
	cl.Close()
	fmt.Println("read_committed:", strings.Join(seen, " "))

	for _, f := range []*goneli.FencedProducer{fa, fb} {
		_ = f.Close()
	}
	for _, n := range []goneli.Curator{a, b} {
		_ = n.Close()
		n.Await()
	}
	// Output:
	// a writes: <nil>
	// b writes: <nil>
	// a's late write fenced: true
	// read_committed: a-1 b-1
}
