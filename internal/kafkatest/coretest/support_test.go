// Package coretest holds the tests of package goneli that need a Kafka broker: they run on the
// embedded one (kafkatest). They live in this module, not goneli's, so that a program importing
// goneli has nothing of the embedded broker in its module graph; docs/modules.md says more.
// They import goneli with a dot so that they read as they did inside the package, and reach the
// few internals they check through goneli/internal/hooks. The log, task log and wait limit come
// from goneli/internal/testkit; the recorder and checkGrammar, which name goneli's Event, have a
// copy in goneli's support_test.go, which its own tests use: keep the two in step.
//
// The tests of how goneli copes with what Apache Kafka answers (goneli's own connection, the group
// check, the heartbeats, Describe, the doctor and its ACLs, KIP-848, the lease) start their broker
// with startKafka, which answers as Kafka does where kfake is more lenient (kafkatest.AsKafka); the
// others with startBroker, plain kfake. KAFKATEST_AS_KAFKA in the environment overrides both: 1 (or
// 4.0, or 3.9 for Kafka 3.9's answers) runs them all against the Kafka-like broker (`make
// test-as-kafka`), 0 on plain kfake; a test that sets one of AsKafka's knobs keeps its own.
package coretest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/testkit"
	"github.com/obsidiandynamics/libstdgo/scribe"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"
)

// childEnv, when set, turns the test binary into a contender process for crash tests.
const childEnv = "GONELI_TEST_CHILD_BROKER"

func TestMain(m *testing.M) {
	if addr := os.Getenv(childEnv); addr != "" {
		runChild(addr, os.Getenv("GONELI_TEST_CHILD_GROUP"), os.Getenv("GONELI_TEST_CHILD_NAME"))
		return
	}
	goleak.VerifyTestMain(m)
}

// awaitLimit bounds every wait; see testkit.AwaitLimit.
const awaitLimit = testkit.AwaitLimit

// testLease is the HeartbeatTimeout used by the tests: session timeout 2 s, group heartbeat 100 ms.
const testLease = time.Second

func startBroker(t *testing.T, opts ...kfake.Opt) *kafkatest.Broker {
	t.Helper()
	return kafkatest.StartT(t, opts...)
}

// startKafka is startBroker with a broker that answers as Apache Kafka does where kfake is more
// lenient, unless KAFKATEST_AS_KAFKA says otherwise (kafkatest.AsKafkaByDefault). It costs about
// 1.5 s per broker: Kafka's coordinators serve a new cluster's groups only once
// __consumer_offsets is created and loaded.
func startKafka(t *testing.T, opts ...kfake.Opt) *kafkatest.Broker {
	t.Helper()
	return startBroker(t, append(opts, kafkatest.AsKafkaByDefault())...)
}

// awaitStable waits until the group is stable with n members.
func awaitStable(t *testing.T, b *kafkatest.Broker, group string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	if _, err := b.WaitGroupStable(ctx, group, n); err != nil {
		t.Fatalf("group %s never became stable with %d members: %v", group, n, err)
	}
}

func groupName(t *testing.T) string {
	return Sanitise(strings.ToLower(t.Name()))
}

// testLog collects the log lines of a test's instances.
type testLog = testkit.Log

func newTestLog(t *testing.T) *testLog { return testkit.NewLog(t) }

func testConfig(b *kafkatest.Broker, group, name string, log *testLog) Config {
	return Config{
		KafkaConfig:      KafkaConfigMap{"bootstrap.servers": b.Addr},
		LeaderGroupID:    group,
		LeaderTopic:      group + ".neli",
		Name:             name,
		Scribe:           log.Scribe(),
		HeartbeatTimeout: Duration(testLease),
		MinPollInterval:  Duration(50 * time.Millisecond),
	}
}

// stamped is an event with the instance that saw it and when, on this process's clock.
type stamped struct {
	at   time.Time
	who  string
	what Event
}

// recorder is a barrier shared by all instances of a test, so that events can be ordered on one
// clock and awaited.
type recorder struct {
	mu      sync.Mutex
	events  []stamped
	changed chan struct{}
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{})}
}

func (r *recorder) barrier(who string) Barrier {
	return func(e Event) { r.add(who, e) }
}

func (r *recorder) add(who string, e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, stamped{at: time.Now(), who: who, what: e})
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) snapshot() []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]stamped(nil), r.events...)
}

// await blocks until cond holds over the events so far.
func (r *recorder) await(t *testing.T, what string, cond func([]stamped) bool) []stamped {
	t.Helper()
	limit := time.NewTimer(awaitLimit)
	defer limit.Stop()
	for {
		r.mu.Lock()
		events, changed := append([]stamped(nil), r.events...), r.changed
		r.mu.Unlock()
		if cond(events) {
			return events
		}
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("gave up waiting for %s; events: %v", what, describe(events))
		}
	}
}

// first returns the first event of type E seen by who (any instance if who is ""), after index from.
func first[E Event](events []stamped, who string, from int) (int, *stamped) {
	for i := max(from, 0); i < len(events); i++ {
		if _, ok := events[i].what.(E); ok && (who == "" || events[i].who == who) {
			return i, &events[i]
		}
	}
	return -1, nil
}

func has[E Event](who string) func([]stamped) bool {
	return func(events []stamped) bool {
		i, _ := first[E](events, who, 0)
		return i >= 0
	}
}

func describe(events []stamped) string {
	var sb strings.Builder
	for _, e := range events {
		fmt.Fprintf(&sb, "\n  %s %s %v", e.at.Format("15:04:05.000"), e.who, e.what)
	}
	return sb.String()
}

var grammar = regexp.MustCompile(`^(A(FA)*F?R)*(A(FA)*F?)?$`)

// checkGrammar asserts that each instance's events follow the documented order.
func checkGrammar(t *testing.T, events []stamped) {
	t.Helper()
	seq := map[string]string{}
	for _, e := range events {
		seq[e.who] += map[string]string{"LeaderAcquired": "A", "LeaderFenced": "F", "LeaderRevoked": "R"}[fmt.Sprintf("%T", e.what)[len("goneli."):]]
	}
	for who, s := range seq {
		if !grammar.MatchString(s) {
			t.Errorf("%s: events %q break the documented order; events: %s", who, s, describe(events))
		}
	}
}

// checkExclusive asserts that no two instances held leadership at the same time, judged by their
// events: an instance leads from LeaderAcquired until its next LeaderFenced or LeaderRevoked.
func checkExclusive(t *testing.T, events []stamped) {
	t.Helper()
	leading := map[string]bool{}
	for _, e := range events {
		switch e.what.(type) {
		case LeaderAcquired:
			for other, on := range leading {
				if on && other != e.who {
					t.Errorf("%s acquired at %s while %s still led; events: %s", e.who, e.at.Format("15:04:05.000"), other, describe(events))
				}
			}
			leading[e.who] = true
		case LeaderFenced, LeaderRevoked:
			leading[e.who] = false
		}
	}
}

func newNeli(t *testing.T, config Config, r *recorder) Neli {
	t.Helper()
	n, err := New(config, r.barrier(config.Name))
	if err != nil {
		t.Fatalf("New(%s): %v", config.Name, err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		awaitClientsClosed(t, n)
	})
	return n
}

// awaitClientsClosed waits for Kafka clients that went on closing after Close returned: Await
// returns once they have, or at the close bound, and a client that outlives the bound (its Close
// timed out, ErrCloseTimeout) is waited for by the goroutine that closes the instance's log once
// every client is done, which this watches for in the stacks of the process. Tests run one at a
// time, so any such goroutine is this test's. A client still closing when the package's tests end
// fails them in TestMain (goleak), should that goroutine ever be renamed.
func awaitClientsClosed(t *testing.T, n interface{ Await() }) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		n.Await()
		close(done)
	}()
	limit := time.After(awaitLimit)
	select {
	case <-done:
	case <-limit:
		t.Errorf("Await has not returned %v after Close", awaitLimit)
		return
	}
	for closing() {
		select {
		case <-limit:
			t.Errorf("Kafka clients still closing %v after Close", awaitLimit)
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// closing reports whether an instance of goneli is still waiting for its Kafka clients to close.
func closing() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Contains(buf[:n], []byte("goneli/goneli.(*neli).shutdown.func1"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// lateRebalanceLog is in the log line of an instance whose consumer's Close served a rebalance
// event, which the close sequence exists to prevent (issue 16).
const lateRebalanceLog = "rebalance event reached a closing consumer"

// contender is an instance that pulses in the background for the rest of the test.
func contender(t *testing.T, config Config, r *recorder) Neli {
	t.Helper()
	n := newNeli(t, config, r)
	pulse(t, n)
	return n
}

// leaderAndFollower starts a, waits for it to lead, then adds c and waits for the group to settle;
// it returns a.
func leaderAndFollower(t *testing.T, b *kafkatest.Broker, group string, log *testLog, r *recorder) Curator {
	t.Helper()
	a := contender(t, testConfig(b, group, "a", log), r).(Curator)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	contender(t, testConfig(b, group, "c", log), r)
	awaitStable(t, b, group, 2)
	return a
}

// checkEndedContexts checks PulseCtx's answers to a cancelled and to an expired context.
func checkEndedContexts(t *testing.T, n Neli) {
	t.Helper()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if leader, err := n.PulseCtx(cancelled); leader || !errors.Is(err, context.Canceled) {
		t.Fatalf("PulseCtx(cancelled) = %v, %v; want false, context.Canceled", leader, err)
	}
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now())
	defer cancel2()
	if leader, err := n.PulseCtx(expired); leader || err != nil {
		t.Fatalf("PulseCtx(expired) = %v, %v; want false, nil", leader, err)
	}
}

// faultName names a network fault for subtests.
func faultName(f kafkatest.Fault) string {
	return map[kafkatest.Fault]string{kafkatest.Blackhole: "blackhole", kafkatest.Refuse: "refuse"}[f]
}

// pulse runs a Background pulser whose task stands in for a millisecond of leader work.
func pulse(t *testing.T, n Neli) Pulser {
	t.Helper()
	p, err := n.Background(func() { time.Sleep(time.Millisecond) })
	if err != nil {
		t.Fatalf("Background: %v", err)
	}
	t.Cleanup(func() {
		p.Close()
		if err := p.Await(); err != nil {
			t.Errorf("pulser: %v", err)
		}
	})
	return p
}

// runChild is a contender in its own process: it prints every event and pulses until killed.
func runChild(addr, group, name string) {
	config := Config{
		KafkaConfig:      KafkaConfigMap{"bootstrap.servers": addr},
		LeaderGroupID:    group,
		LeaderTopic:      group + ".neli",
		Name:             name,
		HeartbeatTimeout: Duration(testLease),
		MinPollInterval:  Duration(50 * time.Millisecond),
		Scribe:           scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)}),
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	panics := os.Getenv(childPanicEnv)
	n, err := New(config, func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%T\n", e)
		out.Flush()
		if _, ok := e.(LeaderAcquired); ok && panics == "barrier" {
			panic("barrier panics on purpose")
		}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	leading, once := make(chan struct{}), sync.Once{}
	if topic := os.Getenv(childFencedEnv); topic != "" {
		go fencedChild(n.(Curator), topic, name, leading, func(line string) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintln(out, line)
			out.Flush()
		})
	}
	p, _ := n.Background(func() {
		once.Do(func() { close(leading) })
		if panics == "task" {
			panic("task panics on purpose")
		}
		time.Sleep(time.Millisecond)
	})
	_ = p.Await()
}

// startChild runs a contender process against b and returns it with a channel of its event names.
func startChild(t *testing.T, b *kafkatest.Broker, group, name string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd, _, lines := spawnChild(t, b, group, name)
	return cmd, lines
}

// spawnChild runs a contender process against b with env added to its environment, and returns
// it, the write end of its stdin and its output lines ("goneli." trimmed from event names). The
// process is killed and reaped when the test ends.
func spawnChild(t *testing.T, b *kafkatest.Broker, group, name string, env ...string) (*exec.Cmd, *os.File, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+b.Addr, "GONELI_TEST_CHILD_GROUP="+group, "GONELI_TEST_CHILD_NAME="+name), env...)
	stdin, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = stdin
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child: %v", err)
	}
	_ = stdin.Close()
	lines := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- strings.TrimPrefix(sc.Text(), "goneli."):
			default: // nobody is listening any more
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = w.Close()
		<-done
		_ = cmd.Wait()
	})
	return cmd, w, lines
}
