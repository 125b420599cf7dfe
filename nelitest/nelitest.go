// Package nelitest runs an embedded Kafka-protocol broker for the tests of programs that use
// goneli, so that a test can elect a leader, cut a contender off the network or take the broker
// away, and check what the program does, with no Kafka, container or network beyond loopback.
//
//	b := nelitest.Start(t)                 // stops when the test ends
//	n, err := goneli.New(b.Config("a"))    // one contender; b.Config("b") another
//	...                                    // pulse it, close it when done
//	nelitest.AwaitLeader(t, nelitest.DefaultTimeout, n)
//	b.Cut("a")                             // a's connections go dead until b.Heal("a")
//
// The broker is franz-go's kfake, in this process, listening on a loopback port, with a layer in
// front of it that can cut one contender's connections (by the name it was given with
// Broker.Config) while the others go on. It lives in a module of its own, so that a program that
// imports only goneli has none of it in its module graph.
//
// # Timing
//
// Broker.Config gives a lease (HeartbeatTimeout) of Lease, 1 s, where goneli's default is 5 s, so
// that failovers take seconds rather than tens of seconds. With it, the group session is 1.25 s and
// the group heartbeat 100 ms; on an idle machine a first leader is elected within about a second of
// New, a graceful handover (Close) takes well under a second, and a leader that is cut off, or
// that crashes, is succeeded after about its session, 1.5 to 3 s. A machine loaded by other tests,
// or the race detector, stretches all of these, and the cgo client (librdkafka) runs threads of
// its own that the Go scheduler does not pace. So wait for events, not for durations: AwaitLeader
// and WaitLeader poll until the state they wait for holds, and DefaultTimeout (30 s) is a bound
// for a test that has gone wrong, not a figure any election is expected to come near. Do not
// assert how long a failover took: on a shared CI machine that assertion fails at random.
//
// The embedded broker is not Kafka. It runs one node and keeps the cluster's data in a temporary
// directory, so that Restart brings back topics, offsets and groups; but it forgets the members of
// a group and their sessions when it stops, which Kafka would keep. Restart therefore waits, if
// need be, until a lease has passed since Stop, so that no lease granted by the old broker is still
// running when the new one assigns the leader's partition: goneli's safety argument needs that
// (docs/safety.md). Test against a real cluster as well before relying on behaviour that the
// broker's implementation decides, such as the exact order of a rebalance.
package nelitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/obsidiandynamics/libstdgo/scribe"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Lease is the HeartbeatTimeout of the configurations that Broker.Config returns: the shortest
// lease that the embedded broker's group sessions and goneli's renewals fit comfortably, so that
// tests fail over in seconds.
const Lease = time.Second

// MinPollInterval is the MinPollInterval of the configurations that Broker.Config returns: with a
// 1 s lease, goneli's default would be Lease/20; 50 ms gives an idle member time to see a
// rebalance early without spinning a busy test machine.
const MinPollInterval = 50 * time.Millisecond

// DefaultTimeout bounds a wait for an election in a test. It is far beyond what an election takes
// even on a loaded machine under the race detector, so that reaching it means the test is wrong
// or goneli is; it says nothing about how fast an election is.
const DefaultTimeout = 30 * time.Second

// portWait bounds how long Restart tries to listen on the old port again: the listener that Stop
// closed can take a moment to release it.
const portWait = 10 * time.Second

// Broker is an embedded broker and the group its configurations contend in. Its methods are safe
// for concurrent use; those of a broker made by Start that fail the test (Config, Restart) must be
// called from the test's goroutine, as testing.TB.Fatal must.
type Broker struct {
	tb      testing.TB // nil for a broker made by New
	addr    string     // bootstrap servers: one loopback address, kept across restarts
	port    int
	dataDir string
	ownDir  bool // dataDir is ours to remove (New); Start's is tb.TempDir's
	group   string
	net     *kafkatest.Netem
	log     scribe.Scribe

	life    sync.Mutex // held through Stop, Restart and Close, so that they run one at a time
	mu      sync.Mutex // guards the fields below
	kb      *kafkatest.Broker
	stopped time.Time // when the broker last stopped
	closed  bool
	bases   map[string]bool // the client.id of each name given to Config or Cut
}

// brokers numbers the brokers made by New, to give each a group of its own.
var brokers atomic.Int64

// Start starts an embedded broker for the test tb and stops it when tb ends (tb.Cleanup), after
// the test's own cleanups, registered later. Its configurations log into tb.Log, at Info level and
// above, until then (their Scribe is one for all of them: b.Config("a").Scribe.SetEnabled(
// scribe.Debug) turns on goneli's debug lines for every contender); their group and topic are
// named after the test. Start fails tb if the broker cannot start.
func Start(tb testing.TB) *Broker {
	tb.Helper()
	b := &Broker{tb: tb, dataDir: tb.TempDir(), group: groupOf(tb.Name())}
	// Lines that goneli's and librdkafka's goroutines log once the test is over (an instance left
	// open) are dropped: testing.T panics on a Log made after its test. The lock keeps a line
	// that began before the end from being written after it.
	var ended sync.RWMutex
	done := false
	b.log = scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(func(format string, args ...any) {
		ended.RLock()
		defer ended.RUnlock()
		if !done {
			tb.Logf(format, args...)
		}
	})})
	b.log.SetEnabled(scribe.Info)
	if err := b.start(); err != nil {
		tb.Fatalf("nelitest: starting the embedded broker: %v", err)
	}
	tb.Cleanup(func() {
		b.Close()
		ended.Lock()
		done = true
		ended.Unlock()
	})
	return b
}

// New starts an embedded broker outside a test: for a runnable example, a demo or a program's
// local mode. Close stops it and removes its data. Its configurations log nothing (set
// Config.Scribe to see goneli's logs), and it panics where a broker made by Start would fail its
// test.
func New() (*Broker, error) {
	dir, err := os.MkdirTemp("", "nelitest-")
	if err != nil {
		return nil, err
	}
	b := &Broker{dataDir: dir, ownDir: true, group: "nelitest-" + strconv.FormatInt(brokers.Add(1), 10)}
	b.log = scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)})
	if err := b.start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}

// groupOf names a test's group after the test: readable in logs, and distinct between the tests
// of a package (subtests included: their names carry the parent's). Kafka allows topic names of up
// to 249 characters, and the topic adds ".neli".
func groupOf(test string) string {
	g := "nelitest." + goneli.Sanitise(test)
	if len(g) > 200 {
		g = g[:200]
	}
	return g
}

// start runs the broker the first time, on a free port that Restart then reuses.
func (b *Broker) start() error {
	b.net = kafkatest.NewNetem()
	b.net.SetClientKey(b.clientKey)
	b.bases = map[string]bool{}
	kb, err := kafkatest.StartNet(b.net, kfake.DataDir(b.dataDir))
	if err != nil {
		return err
	}
	_, port, err := net.SplitHostPort(kb.Addr)
	if err == nil {
		b.port, err = strconv.Atoi(port)
	}
	if err != nil {
		kb.Close()
		return fmt.Errorf("reading the port of %q: %w", kb.Addr, err)
	}
	b.addr, b.kb = kb.Addr, kb
	return nil
}

// fail reports a misuse or a failure: through the test if there is one, else by panicking.
func (b *Broker) fail(format string, args ...any) {
	if b.tb != nil {
		b.tb.Helper()
		b.tb.Fatalf(format, args...)
		return
	}
	panic(fmt.Sprintf(format, args...))
}

// Addr returns the broker's bootstrap servers: one loopback host:port, the same after Restart.
func (b *Broker) Addr() string { return b.addr }

// Group returns the consumer group that the configurations of Config contend in. Their leader
// topic is Group() + ".neli".
func (b *Broker) Group() string { return b.group }

// Config returns a configuration for one contender of the broker's group, named name: every call
// with another name is one more contender of the same group, and a call with a name given before
// returns that contender's configuration again (to start it anew after Close, say). The name must
// not be empty: Cut, Refuse and Heal find the contender's connections by it. goneli creates the
// leader topic the first time New, NewRoles, Run or RunRoles meets it.
//
// The configuration sets bootstrap.servers, the group and topic, Name, a Scribe (see Start and
// New), HeartbeatTimeout (Lease) and MinPollInterval, and makes the Kafka clients reconnect within
// a quarter of a second after a cut heals or the broker restarts (librdkafka backs off for up to a
// second otherwise). It is the caller's to change: a longer HeartbeatTimeout, an Address,
// ObserveLeader. A client.id set in KafkaConfig hides the contender from Cut, Refuse and Heal.
func (b *Broker) Config(name string) goneli.Config {
	if b.tb != nil {
		b.tb.Helper()
	}
	if name == "" {
		b.fail("nelitest: Config needs a name, by which Cut and Heal find the contender")
		return goneli.Config{}
	}
	b.register(name)
	return goneli.Config{
		KafkaConfig: goneli.KafkaConfigMap{
			"bootstrap.servers":        b.addr,
			"reconnect.backoff.ms":     50,
			"reconnect.backoff.max.ms": 250,
		},
		LeaderGroupID:    b.group,
		LeaderTopic:      b.group + ".neli",
		Name:             name,
		Scribe:           b.log,
		HeartbeatTimeout: goneli.Duration(Lease),
		MinPollInterval:  goneli.Duration(MinPollInterval),
	}
}

// base is the client.id that goneli gives the producer and admin client of the contender named
// name; its consumer's, and those of its leader observer and of Describe, begin with it followed
// by a hyphen.
func base(name string) string { return "goneli-" + goneli.Sanitise(name) }

func (b *Broker) register(name string) string {
	id := base(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bases[id] = true
	return id
}

// clientKey is the Netem's key of a client: the base of the contender it belongs to. goneli names
// each of an instance's clients after it (docs/curator.md, "The leader's address, and `neli status`": goneli-a--roles-ce27a023 is a's
// consumer under RunRoles; goneli-a-observer its leader observer), so that one Cut covers an
// instance's every connection. Where several bases fit ("a" and "a-2" both fit goneli-a-2) the
// longest wins: a-2's own clients begin with it, and a's never do unless a-2 is named like one of
// a's suffixes (a-observer, a-status).
func (b *Broker) clientKey(clientID string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := clientID
	best := 0
	for id := range b.bases {
		if len(id) > best && (clientID == id || strings.HasPrefix(clientID, id+"-")) {
			key, best = id, len(id)
		}
	}
	return key
}

// Cut black-holes the connections of the contender named name, present and future, until Heal:
// the broker receives nothing from it and it nothing from the broker, the way a silent network
// partition looks, so that the contender finds out only through its own timeouts. A leader that is
// cut off stops leading when its lease runs out (Lease after its last confirmed heartbeat), and
// the group elects another member once the cut member's session has expired. The cut outlasts
// Stop and Restart.
func (b *Broker) Cut(name string) { b.net.Cut(b.register(name), kafkatest.Blackhole) }

// Refuse closes the connections of the contender named name, and every new one as soon as it
// identifies itself, until Heal: the way a firewall that rejects its packets looks. The contender
// learns of it at once, though it loses the lead no sooner than under Cut.
func (b *Broker) Refuse(name string) { b.net.Cut(b.register(name), kafkatest.Refuse) }

// Heal ends a Cut or Refuse of the contender named name. Black-holed connections are closed, as
// the bytes they lost leave them unusable, and the contender reconnects and rejoins the group,
// which rebalances; WaitSettled waits for that to end.
func (b *Broker) Heal(name string) { b.net.Heal(b.register(name)) }

// WaitSettled waits until the group of the broker's configurations has members members and no
// rebalance under way. When ctx ends first, or the broker is stopped, the error says so (wrapping
// ctx.Err()).
//
// Let the group settle before closing contenders after a Heal, a Restart or a contender's start:
// librdkafka 2.11.1, which confluent-kafka-go v2.11.1 bundles, can end the whole process with a
// segmentation fault when a consumer is closed while one of its group requests is still
// unanswered, as the follower's SyncGroup of a rebalance is until the group's leader has sent its
// own. If that answer comes after the consumer's group handle has shut down, librdkafka rejoins,
// finds no subscription, and leaves the group through a broker handle it has already released
// (rd_kafka_cgrp_handle_LeaveGroup dereferences it: confluentinc/librdkafka#5347, fixed in
// librdkafka 2.14.2). The tests of this package saw it twice in 61 runs under load, each time
// closing a contender just healed from a cut.
func (b *Broker) WaitSettled(ctx context.Context, members int) error {
	b.mu.Lock()
	kb := b.kb
	b.mu.Unlock()
	if kb == nil {
		return errors.New("nelitest: WaitSettled on a stopped broker")
	}
	if _, err := kb.WaitGroupStable(ctx, b.group, members); err != nil {
		return fmt.Errorf("nelitest: %w waiting for group %s to settle with %d members", err, b.group, members)
	}
	return nil
}

// Stop stops the broker and drops every connection, as a broker that crashes does; the contenders
// keep trying to reconnect. Restart brings it back. Stopping a stopped broker does nothing.
func (b *Broker) Stop() {
	b.life.Lock()
	defer b.life.Unlock()
	b.stop()
}

func (b *Broker) stop() {
	b.mu.Lock()
	kb := b.kb
	if kb != nil {
		b.kb, b.stopped = nil, time.Now()
	}
	b.mu.Unlock()
	if kb != nil {
		kb.Close()
	}
}

// Restart starts the broker again on the same port with the data it had when it stopped, the
// topics, committed offsets and groups, stopping it first if it runs. It returns once the broker
// listens. If less than Lease has passed since the broker stopped, it waits out the rest first:
// the restarted broker has forgotten the groups' members, and would otherwise let a successor
// lead while a lease granted before Stop was still running (see the package doc). A test that
// raised its contenders' HeartbeatTimeout must wait out the difference itself before Restart.
// Restart fails the test, or panics for a broker made by New, if the port cannot be had again or
// the broker was closed.
func (b *Broker) Restart() {
	if b.tb != nil {
		b.tb.Helper()
	}
	b.life.Lock()
	defer b.life.Unlock()
	if err := b.restart(); err != nil {
		b.fail("nelitest: restarting the broker on %s: %v", b.addr, err)
	}
}

func (b *Broker) restart() error {
	b.stop()
	b.mu.Lock()
	closed, stopped := b.closed, b.stopped
	b.mu.Unlock()
	if closed {
		return fmt.Errorf("the broker is closed")
	}
	// Nothing happens at the end of the old leases that could be awaited: they lapse on each
	// contender's own clock, which is why this waits for time itself.
	time.Sleep(time.Until(stopped.Add(Lease)))
	kb, err := kafkatest.StartNetOnPort(b.net, b.port, portWait, kfake.DataDir(b.dataDir))
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.kb = kb
	b.mu.Unlock()
	return nil
}

// Close stops the broker for good. A broker made by Start closes itself when its test ends; one
// made by New must be closed, after the contenders using it (their Close needs the broker to leave
// the group at once). Close is idempotent.
func (b *Broker) Close() {
	b.life.Lock()
	defer b.life.Unlock()
	b.stop()
	b.mu.Lock()
	wasClosed := b.closed
	b.closed = true
	b.mu.Unlock()
	if !wasClosed && b.ownDir {
		_ = os.RemoveAll(b.dataDir)
	}
}
