package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"
	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/obsidiandynamics/libstdgo/scribe"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"go.uber.org/goleak"
)

// defaultKafkaImage is the Apache Kafka image the suite starts under GONELI_KAFKA=testcontainers,
// the same as docker-compose.yml's default; GONELI_KAFKA_IMAGE names another, such as
// apache/kafka:4.1.0. Both the 3.9 and the 4.x images are configured the same way, by KAFKA_*
// environment variables, in KRaft mode.
const defaultKafkaImage = "apache/kafka:3.9.1"

// kafkaImage is the image to start.
func kafkaImage() string {
	if v := os.Getenv("GONELI_KAFKA_IMAGE"); v != "" {
		return v
	}
	return defaultKafkaImage
}

// awaitLimit bounds every wait, so that a broken election fails the test instead of hanging it.
// It is not a performance assertion.
const awaitLimit = 60 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	// A container outlives the tests that share it; it must be gone before looking for leaks.
	container.stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// target is the broker the scenarios run against.
type target struct {
	servers string
	lease   time.Duration
	net     *kafkatest.Netem // nil unless the broker is embedded
}

func broker(t *testing.T) target {
	t.Helper()
	switch v := os.Getenv("GONELI_KAFKA"); v {
	case "", "kfake":
		b, err := kafkatest.Start()
		if err != nil {
			t.Fatalf("starting the embedded broker: %v", err)
		}
		t.Cleanup(b.Close)
		return target{servers: b.Addr, lease: time.Second, net: b.Net}
	case "testcontainers":
		return target{servers: container.start(t), lease: time.Second}
	default:
		if !strings.Contains(v, ":") {
			t.Fatalf("GONELI_KAFKA=%q: want kfake, testcontainers or host:port", v)
		}
		// goneli would retry an absent broker for ever; a test should say at once what is wrong.
		conn, err := net.DialTimeout("tcp", strings.Split(v, ",")[0], 10*time.Second)
		if err != nil {
			t.Fatalf("GONELI_KAFKA=%s: cannot connect (%v); start the cluster or unset GONELI_KAFKA", v, err)
		}
		_ = conn.Close()
		// A stock broker rejects sessions under 6 s; New raises the 3.75 s that a 3 s lease implies
		// to the broker's minimum where it can read it.
		return target{servers: v, lease: 3 * time.Second}
	}
}

// sharedContainer starts one Kafka container for the whole package: starting one takes longer
// than all the scenarios together.
type sharedContainer struct {
	once    sync.Once
	c       testcontainers.Container
	servers string
	err     error
	skip    string
}

var container sharedContainer

func (s *sharedContainer) start(t *testing.T) string {
	t.Helper()
	s.once.Do(func() {
		if err := dockerProblem(); err != nil {
			s.skip = fmt.Sprintf("GONELI_KAFKA=testcontainers needs a Docker engine and none is reachable (%v); "+
				"skipping. Use GONELI_KAFKA=kfake (the default) or run where Docker is available", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		s.c, s.servers, s.err = runKafka(ctx, kafkaImage())
	})
	if s.skip != "" {
		t.Skip(s.skip)
	}
	if s.err != nil {
		t.Fatalf("starting Kafka in Docker: %v", s.err)
	}
	return s.servers
}

func (s *sharedContainer) stop() {
	if s.c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.c.Terminate(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "terminating the Kafka container: %v\n", err)
		}
	}
}

// runKafka starts a one-node Apache Kafka from image in KRaft mode, configured as
// docker-compose.yml configures it, and returns its bootstrap address.
//
// A client learns the broker's address from the broker itself (advertised.listeners), so the
// container's port is bound to a host port chosen before it starts, which the broker can then
// advertise. testcontainers-go's Kafka module solves this with a start script that only the
// Confluent images can run.
func runKafka(ctx context.Context, image string) (testcontainers.Container, string, error) {
	host, err := dockerHost(ctx)
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, "", err
	}
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	servers := net.JoinHostPort(host, port)
	c, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts("9092/tcp"),
		testcontainers.WithHostConfigModifier(func(hc *dockercontainer.HostConfig) {
			hc.PortBindings = nat.PortMap{"9092/tcp": {{HostIP: "0.0.0.0", HostPort: port}}}
		}),
		testcontainers.WithEnv(map[string]string{
			"KAFKA_NODE_ID":                                  "1",
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_LISTENERS":                                "PLAINTEXT://:9092,CONTROLLER://:9093",
			"KAFKA_ADVERTISED_LISTENERS":                     "PLAINTEXT://" + servers,
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9093",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
			// Short leases need short group sessions, which Kafka refuses below 6 s by default.
			"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("Kafka Server started").WithStartupTimeout(3*time.Minute)),
	)
	if err != nil {
		return c, "", fmt.Errorf("starting %s: %w", image, err)
	}
	return c, servers, nil
}

// dockerHost is the host on which the Docker engine publishes container ports.
func dockerHost(ctx context.Context) (string, error) {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", err
	}
	defer p.Close()
	return p.DaemonHost(ctx)
}

// dockerProblem reports why no Docker engine can be used, or nil if one answers.
func dockerProblem() (err error) {
	defer func() {
		// testcontainers-go panics in some set-ups without Docker instead of returning an error.
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	p, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Health(ctx)
}

// event is one barrier call, in the order the barriers of all contenders were called.
type event struct {
	name string
	e    goneli.Event
}

// election is a set of contenders in one group, each pulsing in the background. Their tasks
// check that no two of them act as leader at once.
type election struct {
	t        *testing.T
	target   target
	group    string
	mu       sync.Mutex
	log      []event
	notify   chan struct{}
	members  map[string]goneli.Neli
	active   atomic.Int32
	overlaps atomic.Int32
	steady   map[string]chan struct{} // closed when the member has run its leader task steadyRuns times
	stops    []func()                 // close a member and wait for it, reporting failures to t
	logs     []func()                 // print a member's goneli log
}

// steadyRuns is how many leader task runs show that a leader is settled in.
const steadyRuns = 50

func newElection(t *testing.T, tg target) *election {
	el := &election{
		t:       t,
		target:  tg,
		group:   fmt.Sprintf("goneli-it-%s-%d", strings.ToLower(t.Name()), time.Now().UnixNano()),
		notify:  make(chan struct{}, 1),
		members: map[string]goneli.Neli{},
		steady:  map[string]chan struct{}{},
	}
	// Cleanups run last-registered first: the members close before their logs are judged, so that
	// a failed Close brings them out.
	t.Cleanup(func() {
		if t.Failed() {
			for _, print := range el.logs {
				print()
			}
		}
	})
	t.Cleanup(el.closeAll)
	return el
}

// closeAll closes every member at once, as the separate processes they stand for would stop.
// One after another, each Close would wait on the rebalance that the previous one's departure
// began, and that rebalance waits for every member still in the group, one just reconnected
// after a cut among them, to join it again: a Close can then outlast its bound (3 s) through no
// fault of its own (TestFailoverOnNetworkCut under CI load).
func (el *election) closeAll() {
	var wg sync.WaitGroup
	for _, stop := range el.stops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop()
		}()
	}
	wg.Wait()
}

func (el *election) add(name string) {
	t := el.t
	t.Helper()
	n, err := goneli.New(goneli.Config{
		KafkaConfig:      goneli.KafkaConfigMap{"bootstrap.servers": el.target.servers},
		LeaderGroupID:    el.group,
		Name:             name,
		HeartbeatTimeout: goneli.Duration(el.target.lease),
		Scribe:           el.quietScribe(name),
	}, func(e goneli.Event) {
		el.mu.Lock()
		el.log = append(el.log, event{name, e})
		el.mu.Unlock()
		select {
		case el.notify <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	var runs atomic.Int64
	steady := make(chan struct{})
	el.steady[name] = steady
	p, err := n.Background(func() {
		if !n.IsLeader() {
			return
		}
		if el.active.Add(1) > 1 {
			el.overlaps.Add(1)
		}
		if runs.Add(1) == steadyRuns {
			close(steady)
		}
		time.Sleep(time.Millisecond)
		el.active.Add(-1)
	})
	if err != nil {
		t.Fatalf("Background(%s): %v", name, err)
	}
	el.members[name] = n
	el.stops = append(el.stops, func() {
		// The broker is healthy until every member has closed, so Close has no excuse to fail; a
		// timed-out close would also leave a consumer closing after the broker is gone.
		if err := n.Close(); err != nil {
			t.Errorf("Close(%s): %v", name, err)
		}
		// Close returns within its bound even while a client is still closing (a reach probe
		// waiting out its metadata timeout after a cut, say); Await waits for them, so that the
		// leak check after the tests sees none (it found a probe's GetMetadata under .ci/stress).
		n.Await()
		if err := p.Await(); err != nil {
			t.Errorf("pulser of %s: %v", name, err)
		}
	})
}

// await waits until the event log satisfies found, which returns the index of the matching event
// or -1.
func (el *election) await(what string, found func([]event) int) int {
	el.t.Helper()
	timeout := time.After(awaitLimit)
	for {
		el.mu.Lock()
		i := found(el.log)
		el.mu.Unlock()
		if i >= 0 {
			return i
		}
		select {
		case <-el.notify:
		case <-timeout:
			el.t.Fatalf("no %s within %v; events: %v", what, awaitLimit, el.events())
		}
	}
}

func (el *election) at(i int) event {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.log[i]
}

func (el *election) events() []string {
	el.mu.Lock()
	defer el.mu.Unlock()
	var out []string
	for _, e := range el.log {
		out = append(out, e.name+":"+e.e.String())
	}
	return out
}

// acquired finds the first LeaderAcquired at or after index from by anyone except not.
func acquired(from int, not string) func([]event) int {
	return func(log []event) int {
		for i := from; i < len(log); i++ {
			if _, ok := log[i].e.(goneli.LeaderAcquired); ok && log[i].name != not {
				return i
			}
		}
		return -1
	}
}

func (el *election) checkNoOverlap() {
	el.t.Helper()
	if n := el.overlaps.Load(); n > 0 {
		el.t.Errorf("%d leader task runs overlapped with another contender's", n)
	}
}

func TestSingleLeaderOfThree(t *testing.T) {
	el := newElection(t, broker(t))
	for _, name := range []string{"a", "b", "c"} {
		el.add(name)
	}
	leader := el.at(el.await("leader", acquired(0, ""))).name
	select {
	case <-el.steady[leader]:
	case <-time.After(awaitLimit):
		t.Fatalf("leader %s did not run its task %d times within %v", leader, steadyRuns, awaitLimit)
	}
	var leaders []string
	for name, n := range el.members {
		if n.IsLeader() {
			leaders = append(leaders, name)
		}
	}
	if len(leaders) > 1 {
		t.Errorf("%v all report IsLeader", leaders)
	}
	el.checkNoOverlap()
}

func TestHandoffOnClose(t *testing.T) {
	el := newElection(t, broker(t))
	for _, name := range []string{"a", "b", "c"} {
		el.add(name)
	}
	i := el.await("leader", acquired(0, ""))
	old := el.at(i).name
	if err := el.members[old].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	j := el.await("successor", acquired(i+1, old))
	revoked := el.await("revocation", func(log []event) int {
		for k := i; k < len(log); k++ {
			if _, ok := log[k].e.(goneli.LeaderRevoked); ok && log[k].name == old {
				return k
			}
		}
		return -1
	})
	if revoked > j {
		t.Errorf("the successor acquired before the old leader's LeaderRevoked: %v", el.events())
	}
	el.checkNoOverlap()
}

func TestFailoverOnNetworkCut(t *testing.T) {
	tg := broker(t)
	if tg.net == nil {
		t.Skip("cutting one client's network needs the embedded broker (GONELI_KAFKA=kfake)")
	}
	el := newElection(t, tg)
	for _, name := range []string{"a", "b", "c"} {
		el.add(name)
	}
	i := el.await("leader", acquired(0, ""))
	old := el.at(i).name
	// goneli names its clients goneli-<Name>; the broker's network layer recognises them by it.
	tg.net.Cut("goneli-"+old, kafkatest.Blackhole)
	defer tg.net.Heal("goneli-" + old)
	j := el.await("successor", acquired(i+1, old))
	fenced := false
	for k := i; k < j; k++ {
		if f, ok := el.at(k).e.(goneli.LeaderFenced); ok && el.at(k).name == old {
			fenced = true
			t.Logf("%s fenced: %s", old, f.Reason)
		}
	}
	if !fenced {
		t.Errorf("the successor %s acquired before the cut-off leader %s was fenced: %v", el.at(j).name, old, el.events())
	}
	el.checkNoOverlap()
}

// quietScribe keeps goneli's logs out of the test output unless the test fails.
func (el *election) quietScribe(name string) scribe.Scribe {
	var mu sync.Mutex
	var lines []string
	el.logs = append(el.logs, func() {
		mu.Lock()
		defer mu.Unlock()
		el.t.Logf("goneli log of %s:\n%s", name, strings.Join(lines, "\n"))
	})
	return scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(func(format string, args ...interface{}) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	})})
}

// docker-compose.yml and the suite start the same image by default, so that what a newcomer tries
// is what the suite tested.
func TestComposeImageIsTheSuites(t *testing.T) {
	compose, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := "image: ${KAFKA_IMAGE:-" + defaultKafkaImage + "}"
	if !strings.Contains(string(compose), want) {
		t.Fatalf("docker-compose.yml does not say %q: its default image differs from the integration suite's", want)
	}
}
