package goneli_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli"
)

// The Examples of New, Run, RunRoles, NewRoles, NewFencedProducer and Watch have no Output: they need a Kafka broker,
// and this module keeps the embedded one out of its go.mod (module_test.go), so `go test` compiles
// them without running them. The ones that do run use the mock, which stands in for an instance in
// tests. Examples that run on the embedded broker are in internal/kafkatest/coretest and nelitest.

// Stand-ins for the application's own code, so that the Examples compile.
func settleInvoices(ctx context.Context) error      { return ctx.Err() }
func runOneBatch()                                  {}
func runOneBatchOf(role string, token int64)        {}
func runJob(ctx context.Context, role string) error { return ctx.Err() }

// Run is the whole lifecycle in one call: contend, run the task for each tenure won, and hand
// leadership over when the program is told to stop.
func ExampleRun() {
	// SIGTERM ends ctx, and Run then hands leadership over at once: a process that just exits
	// leaves its successor waiting for its group session to expire.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	config := goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": "kafka-1:9092,kafka-2:9092"},
		LeaderGroupID: "billing-scheduler",
		// Heartbeats should outlive the loss of a broker.
		LeaderTopicReplicationFactor: 3,
	}
	err := goneli.Run(ctx, config, func(ctx context.Context) {
		// ctx ends the moment this process stops leading: fenced, revoked or shutting down.
		ticker := time.NewTicker(time.Minute)
		defer ticker.Stop()
		for {
			if err := settleInvoices(ctx); err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	})
	if err != nil {
		log.Fatal(err)
	}
}

// RunRoles spreads several singleton jobs over the members of a group: each member runs the task
// for the roles the group gives it, each role with a context of its own.
func ExampleRunRoles() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	config := goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": "kafka-1:9092"},
		LeaderGroupID: "jobs",
	}
	// Every member must list the same roles in the same order.
	roles := []string{"billing", "mailer", "reconciler"}
	err := goneli.RunRoles(ctx, config, roles, func(ctx context.Context, role string) {
		if err := runJob(ctx, role); err != nil && !errors.Is(err, context.Canceled) {
			log.Printf("%s: %v", role, err)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
}

// New, a task that Background runs over and over while the instance leads, and a barrier that
// learns of every transition; Close hands leadership over on the way out.
func ExampleNew() {
	n, err := goneli.New(goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": "kafka-1:9092"},
		LeaderGroupID: "billing-scheduler",
	}, func(e goneli.Event) {
		switch e := e.(type) {
		case goneli.LeaderAcquired:
			// IsLeader turns true when this returns: set leader state up here.
			log.Printf("leading, token %d", e.Token)
		case goneli.LeaderFenced:
			// Another instance may already lead: stop leader work now.
			log.Printf("fenced: %s", e.Reason)
		case goneli.LeaderRevoked:
			// The successor waits for this to return: finish in-flight work.
			log.Print("handing over")
		}
	})
	if err != nil {
		log.Fatal(err)
	}

	// Each run should take well under HeartbeatTimeout: leadership is checked between runs.
	p, err := n.Background(runOneBatch)
	if err != nil {
		log.Fatal(err)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	// Without Close, the successor would wait for this process's group session to expire.
	if err := n.Close(); err != nil {
		log.Print(err)
	}
	if err := p.Await(); err != nil {
		log.Fatal(err)
	}
}

// A leader that writes its results to Kafka through a FencedProducer: once a successor leads, no
// write of this instance's tenure can commit, even if this process was paused mid-transaction.
func ExampleNewFencedProducer() {
	n, err := goneli.NewCurator(goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": "kafka-1:9092"},
		LeaderGroupID: "billing-scheduler",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	// Every contender of the group shares the transactional id, derived from LeaderGroupID.
	f, err := goneli.NewFencedProducer(n, goneli.FencedConfig{})
	if err != nil {
		log.Fatal(err)
	}
	// Before n.Close, so that the producer is not used after its leadership is gone.
	defer f.Close()

	topic := "invoices"
	p, err := n.Background(func() {
		// One Send is one transaction: the records commit together, or none does.
		err := f.Send(context.Background(),
			&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte("invoice 1")},
			&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte("invoice 2")})
		if errors.Is(err, goneli.ErrWriteFenced) {
			// Another instance leads, or will before this one could commit: nothing was written.
			log.Print(err)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Await(); err != nil {
		log.Fatal(err)
	}
}

// NewRoles with a task per role; each role has a fencing token of its own.
func ExampleNewRoles() {
	r, err := goneli.NewRoles(goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": "kafka-1:9092"},
		LeaderGroupID: "shards",
	}, goneli.Shards(16))
	if err != nil {
		log.Fatal(err)
	}

	// One goroutine per role led, so a slow shard holds up no other.
	p, err := r.Background(func(role string) {
		runOneBatchOf(role, r.Role(role).Token())
	})
	if err != nil {
		log.Fatal(err)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	if err := r.Close(); err != nil {
		log.Print(err)
	}
	if err := p.Await(); err != nil {
		log.Fatal(err)
	}
}

// Watch follows who leads a group without joining it, for a follower that forwards work to the
// leader's Address or a dashboard.
func ExampleWatch() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	config := goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": "kafka-1:9092"},
		LeaderGroupID: "billing-scheduler",
	}
	err := goneli.Watch(ctx, config, func(info goneli.LeaderInfo) {
		if info.Name == "" {
			log.Print("no leader")
			return
		}
		log.Printf("%s leads at %q since %s", info.Name, info.Address, info.Since)
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// tokenStore stands for a downstream system that remembers the highest fencing token it has seen
// and refuses writes that carry a lower one.
type tokenStore struct {
	highest int64
	value   string
}

func (s *tokenStore) write(token int64, value string) error {
	if token < s.highest {
		return fmt.Errorf("token %d refused: %d has written", token, s.highest)
	}
	s.highest, s.value = token, value
	return nil
}

// A leader stamps its writes with its fencing token, so that one deposed while paused cannot
// overwrite its successor's work when it wakes. A MockNeli is a Curator, and stands in here for
// the instance that NewCurator returns: its tokens count tenures, where a broker's are offsets,
// but both only grow.
func ExampleCurator() {
	m, err := goneli.NewMock(goneli.MockConfig{Address: "10.0.0.7:8080"})
	if err != nil {
		log.Fatal(err)
	}
	var c goneli.Curator = m
	defer c.Close()
	store := &tokenStore{}

	m.AcquireLeader()
	paused := c.Token() // taken by a leader that is then paused for longer than its lease
	fmt.Println("first tenure writes:", store.write(paused, "first"))

	m.RevokeLeader()
	m.AcquireLeader()
	fmt.Println("next tenure writes:", store.write(c.Token(), "next"))
	fmt.Println("paused leader writes:", store.write(paused, "stale"))
	fmt.Println("store holds:", store.value)

	leader, _ := c.Leader()
	fmt.Println("leader:", leader.Name, leader.Address, leader.Token)
	s := c.Stats()
	fmt.Println("acquired:", s.Acquired, "revoked:", s.Revoked)
	// Output:
	// first tenure writes: <nil>
	// next tenure writes: <nil>
	// paused leader writes: token 1 refused: 2 has written
	// store holds: next
	// leader: mock 10.0.0.7:8080 2
	// acquired: 2 revoked: 1
}

// Yield steps down on purpose, for a rolling deploy or an instance that knows it is unhealthy:
// the barrier sees LeaderRevoked, and the instance stays out of the running for the duration.
func ExampleCurator_yield() {
	m, err := goneli.NewMock(goneli.MockConfig{}, func(e goneli.Event) { fmt.Println(e) })
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	m.AcquireLeader()
	if err := m.Yield(time.Minute); err != nil {
		log.Fatal(err)
	}
	m.AcquireLeader() // the group would offer leadership again; a yielding instance declines
	fmt.Println("leader:", m.IsLeader(), "out for a while:", m.Stats().YieldRemaining > 0)
	// Output:
	// LeaderAcquired[Tenure=mock-1, Token=1]
	// LeaderRevoked[Tenure=mock-1]
	// leader: false out for a while: true
}

// A barrier that sets leader state up on LeaderAcquired, stops on LeaderFenced and finishes on
// LeaderRevoked, driven by the mock as a unit test of it would be.
func ExampleBarrier() {
	var running bool
	barrier := func(e goneli.Event) {
		switch e.(type) {
		case goneli.LeaderAcquired:
			running = true
			fmt.Println("leader state loaded")
		case goneli.LeaderFenced:
			running = false
			fmt.Println("leader work stopped")
		case goneli.LeaderRevoked:
			running = false
			fmt.Println("in-flight work finished")
		}
	}
	m, err := goneli.NewMock(goneli.MockConfig{}, barrier)
	if err != nil {
		log.Fatal(err)
	}
	m.AcquireLeader()
	m.FenceLeader()
	m.AcquireLeader() // the same tenure resumes after a fence
	_ = m.Close()
	fmt.Println("running:", running)
	// Output:
	// leader state loaded
	// leader work stopped
	// leader state loaded
	// in-flight work finished
	// running: false
}

// Shards names numbered roles for NewRoles and RunRoles.
func ExampleShards() {
	fmt.Println(goneli.Shards(4))
	// Output: [0 1 2 3]
}
