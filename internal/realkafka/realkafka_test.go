package realkafka

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// awaitLimit bounds waits on the cluster, so that a broken one fails a test instead of hanging it.
const awaitLimit = time.Minute

func admin(t *testing.T, seeds string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(seeds, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// brokerConfigs returns the named settings of broker id as it describes them.
func brokerConfigs(t *testing.T, adm *kadm.Client, id int32, keys ...string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	rcs, err := adm.DescribeBrokerConfigs(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, rc := range rcs {
		if rc.Err != nil {
			t.Fatalf("describing broker %d: %v", id, rc.Err)
		}
		for _, c := range rc.Configs {
			if slices.Contains(keys, c.Key) && c.Value != nil {
				out[c.Key] = *c.Value
			}
		}
	}
	return out
}

func checkConfigs(t *testing.T, adm *kadm.Client, id int32, want map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	got := brokerConfigs(t, adm, id, keys...)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("broker %d describes %s=%q, want %q", id, k, got[k], v)
		}
	}
}

// The fast profile is what the tests of short leases need, and the broker says it applies it.
func TestFastProfile(t *testing.T) {
	c := Shared(t, Options{})
	t.Logf("Kafka %s at %s; %s", c.Version(), c.Bootstrap(), c.Timing())
	adm := admin(t, c.Bootstrap())
	want := map[string]string{
		"group.initial.rebalance.delay.ms":     "0",
		"group.min.session.timeout.ms":         "500",
		"group.consumer.session.timeout.ms":    "2000",
		"group.consumer.heartbeat.interval.ms": "100",
		"offsets.topic.replication.factor":     "1",
	}
	if c.External() {
		t.Skipf("KAFKA_BOOTSTRAP=%s: the cluster has the settings it was given", c.Bootstrap())
	}
	checkConfigs(t, adm, 0, want)

	// A record goes in and comes out.
	// A topic of this run's own: -count runs the test again on the same shared cluster.
	topic := fmt.Sprintf("realkafka-roundtrip-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()), kgo.ConsumeTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A fetch can fail while the new topic's leadership reaches every part of a broker that has
	// just started (1 run of the package in 4 at a load average of 20, beside realtest's clusters
	// starting); such an error is one to fetch again after, as a consumer does.
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no record read back within %v", awaitLimit)
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !kerr.IsRetriable(err) {
				t.Fatalf("fetching %s[%d]: %v", topic, p, err)
			}
			t.Logf("fetching %s[%d]: %v; fetching again", topic, p, err)
		})
		if recs := fs.Records(); len(recs) > 0 {
			if len(recs) != 1 || string(recs[0].Value) != "hello" {
				t.Fatalf("read back %d records, want the one written", len(recs))
			}
			return
		}
	}
}

// answers reports whether the broker at addr answers a Metadata request within d.
func answers(addr string, d time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(d))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	_, err = cl.SeedBrokers()[0].Request(ctx, req)
	return err
}

// Three nodes at Kafka's stock group timing, each killed, paused and stopped in turn.
func TestNodeControl(t *testing.T) {
	c := Start(t, Options{Nodes: 3, Profile: Stock})
	t.Logf("3 nodes: %s", c.Timing())
	nodes := c.Nodes(t)
	adm := admin(t, c.Bootstrap())
	checkConfigs(t, adm, 1, map[string]string{
		"group.initial.rebalance.delay.ms":      "3000",
		"group.min.session.timeout.ms":          "6000",
		"group.consumer.session.timeout.ms":     "45000",
		"group.consumer.min.session.timeout.ms": "45000",
		"group.consumer.heartbeat.interval.ms":  "5000",
		"offsets.topic.replication.factor":      "3",
		"transaction.state.log.min.isr":         "2",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*awaitLimit)
	defer cancel()
	topic := "realkafka-control"
	if _, err := adm.CreateTopic(ctx, 6, 3, nil, topic); err != nil {
		t.Fatal(err)
	}

	t.Run("kill", func(t *testing.T) {
		n := nodes[2]
		pid := n.Pid()
		st, err := startTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		if alive(pid, st) || n.Running() {
			t.Fatalf("node 2 (pid %d) runs after Kill", pid)
		}
		if err := n.Kill(); err == nil {
			t.Error("a second Kill of a dead node did not say that it had ended")
		}
		if err := answers(nodes[0].Addr, 10*time.Second); err != nil {
			t.Fatalf("node 0 does not answer while node 2 is dead: %v", err)
		}
		started := time.Now()
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		t.Logf("node 2 served again %v after its restart began", time.Since(started))
		awaitBrokers(t, adm, 3)
	})

	t.Run("pause", func(t *testing.T) {
		n := nodes[1]
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		err := answers(n.Addr, 2*time.Second)
		if resumeErr := n.Resume(); resumeErr != nil {
			t.Fatal(resumeErr)
		}
		if err == nil {
			t.Fatal("a paused node answered")
		}
		if err := answers(nodes[0].Addr, 10*time.Second); err != nil {
			t.Fatalf("node 0 does not answer: %v", err)
		}
		// Resumed, it answers again: nothing awaits, it carries on where it stopped.
		if err := poll(ctx, "node 1 to answer after SIGCONT", func() error { return answers(n.Addr, 2*time.Second) }); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stop", func(t *testing.T) {
		n := nodes[0]
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
		if n.Running() {
			t.Fatal("node 0 runs after Stop")
		}
		// A controlled shutdown (KafkaApis.handleControlledShutdown in ZooKeeper days; in KRaft the
		// broker asks the controller to be fenced, BrokerLifecycleManager.beginControlledShutdown)
		// moves every leadership away before the JVM exits.
		others := admin(t, nodes[1].Addr+","+nodes[2].Addr)
		md, err := others.Metadata(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range md.Topics[topic].Partitions {
			if p.Leader == n.ID {
				t.Errorf("partition %d is still led by node 0 after its graceful stop", p.Partition)
			}
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		awaitBrokers(t, adm, 3)
	})
}

// awaitBrokers waits until the cluster's metadata lists n brokers.
func awaitBrokers(t *testing.T, adm *kadm.Client, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	err := poll(ctx, fmt.Sprintf("%d brokers in the metadata", n), func() error {
		md, err := adm.BrokerMetadata(ctx)
		if err != nil {
			return err
		}
		if len(md.Brokers) != n {
			return fmt.Errorf("%d brokers listed", len(md.Brokers))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// childEnv makes the test binary, run again by TestNoJVMOutlivesKilledTestBinary, the victim: it
// starts a node, says which, and waits to be killed.
const childEnv = "REALKAFKA_TEST_VICTIM"

func TestVictim(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("the victim of TestNoJVMOutlivesKilledTestBinary; runs only as its child")
	}
	c := Start(t, Options{Cold: true})
	n := c.nodes[0]
	st, err := startTime(n.Pid())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("victim jvm=%d start=%d dir=%s\n", n.Pid(), st, c.Dir())
	// The parent never writes; it kills this process.
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// A test binary killed with SIGKILL runs no cleanup at all: its JVMs must die with it all the
// same (Pdeathsig), and its directory is removed by the next run's reaper.
func TestNoJVMOutlivesKilledTestBinary(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("the victim does not run it")
	}
	if os.Getenv("KAFKA_BOOTSTRAP") != "" {
		t.Skip("KAFKA_BOOTSTRAP is set: this test starts a node of its own, which KAFKA_BOOTSTRAP forbids")
	}
	// Where Kafka cannot run, say so as every test here does.
	if _, err := checkJava(DefaultVersion); err != nil {
		unavailable(t, err)
	}
	if _, err := provision(Options{}.withDefaults().Version); err != nil {
		unavailable(t, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestVictim$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var jvm int
	var start uint64
	var dir string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "victim jvm=%d start=%d dir=%s", &jvm, &start, &dir); err == nil {
			break
		}
	}
	if jvm == 0 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the victim started no node: %s", stderr.String())
	}
	if !alive(jvm, start) {
		t.Fatalf("the victim's JVM %d is not running", jvm)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	_ = cmd.Wait()
	if !awaitExit(jvm, start, 30*time.Second) {
		_ = syscall.Kill(-jvm, syscall.SIGKILL)
		t.Fatalf("the JVM (pid %d) outlived the test binary that started it by 30 s", jvm)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the victim's directory %s is gone already (%v): it ran a cleanup it should not have had", dir, err)
	}
	if _, err := reap(dataBase); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the reaper left the directory of a dead test binary: %s (%v)", dir, err)
	}
}

// The reaper kills a JVM whose test binary is gone (should one escape Pdeathsig) and leaves alone
// the clusters of live test binaries and processes that only happen to have a stamped pid.
func TestReaper(t *testing.T) {
	base := t.TempDir()
	// A stand-in for a JVM: a shell whose command line names the cluster's directory, in a process
	// group of its own, as the harness starts JVMs.
	fake := func(dir string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", "read x", filepath.Join(dir, "node-0", "server.properties"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if _, err := cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	cluster := func(name string, owner string) (string, *exec.Cmd) {
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(dir, "node-0"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := fake(dir)
		if err := writeStamp(filepath.Join(dir, "node-0", pidFileName), cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		return dir, cmd
	}
	own, err := startTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A process that has ended stands for the killed test binary.
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	staleDir, stale := cluster("cluster-stale", fmt.Sprintf("%d 1\n", gone.Process.Pid))
	liveDir, live := cluster("cluster-live", fmt.Sprintf("%d %d\n", os.Getpid(), own))
	// A stamp of a pid that runs something else (the stale cluster's directory is not on its
	// command line) must not get it killed.
	otherDir := filepath.Join(base, "cluster-other")
	if err := os.MkdirAll(filepath.Join(otherDir, "node-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(otherDir, ownerFile), []byte(fmt.Sprintf("%d 1\n", gone.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeStamp(filepath.Join(otherDir, "node-0", pidFileName), live.Process.Pid); err != nil {
		t.Fatal(err)
	}

	killed, err := reap(base)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(killed, []int{stale.Process.Pid}) {
		t.Errorf("reaped pids %v, want only the stale one, %d", killed, stale.Process.Pid)
	}
	if err := stale.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the stale process ended with %v, want killed", err)
	}
	for dir, want := range map[string]bool{staleDir: false, otherDir: false, liveDir: true} {
		if _, err := os.Stat(dir); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(dir), err == nil, want)
		}
	}
	if err := live.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the reaper killed the process of a live test binary's cluster: %v", err)
	}
}

// Where Kafka cannot run the tests skip, saying what to install, or fail under
// GONELI_REAL_KAFKA=require.
func TestUnavailable(t *testing.T) {
	t.Setenv("JAVA_HOME", "")
	t.Setenv("PATH", t.TempDir())
	_, err := lookJava()
	var m *missing
	if !errors.As(err, &m) || !strings.Contains(err.Error(), "install Java 17") || !strings.Contains(err.Error(), "KAFKA_BOOTSTRAP") {
		t.Fatalf("without java: %v", err)
	}
	t.Setenv("GONELI_KAFKA_CACHE", t.TempDir())
	_, err = fetch("4.0.0")
	if !errors.As(err, &m) || !strings.Contains(err.Error(), "install Maven") {
		t.Fatalf("without mvn: %v", err)
	}
	for _, tc := range []struct{ mode, want string }{{"", "skip"}, {"require", "fatal"}} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			t.Setenv("GONELI_REAL_KAFKA", tc.mode)
			r := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				unavailable(r, m)
			}()
			<-done
			if r.how != tc.want || !strings.Contains(r.msg, "install Maven") {
				t.Errorf("GONELI_REAL_KAFKA=%q: %s %q, want %s", tc.mode, r.how, r.msg, tc.want)
			}
		})
	}
}

// recorder is a testing.TB whose Skip and Fatal are recorded, then end the goroutine.
type recorder struct {
	testing.TB
	how, msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.how, r.msg = "skip", fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.how, r.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// KAFKA_BOOTSTRAP points the tests at a cluster they did not start: node control then skips.
func TestExternalCluster(t *testing.T) {
	c := Shared(t, Options{})
	t.Setenv("KAFKA_BOOTSTRAP", c.Bootstrap())
	ext := Start(t, Options{Nodes: 3})
	if !ext.External() || ext.Bootstrap() != c.Bootstrap() {
		t.Fatalf("KAFKA_BOOTSTRAP=%s gave a cluster at %s, external %v", c.Bootstrap(), ext.Bootstrap(), ext.External())
	}
	reached := false
	t.Run("nodes", func(t *testing.T) {
		ext.Nodes(t)
		reached = true
	})
	if reached {
		t.Error("Nodes of an external cluster did not skip")
	}
	t.Setenv("KAFKA_BOOTSTRAP", "127.0.0.1:1")
	if _, err := start(Options{}); err == nil || !strings.Contains(err.Error(), "cannot connect") {
		t.Errorf("KAFKA_BOOTSTRAP naming nothing: %v", err)
	}
}
