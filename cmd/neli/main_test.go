package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"go.uber.org/goleak"
)

// neliBin is the neli binary under test, built once by TestMain.
var neliBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "neli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	neliBin = filepath.Join(dir, "neli")
	args := []string{"build", "-o", neliBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building neli: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// awaitLimit bounds every wait so that a broken handover fails the test instead of hanging it.
// It is not a performance assertion.
const awaitLimit = 60 * time.Second

func TestBadCommandLines(t *testing.T) {
	cases := []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"run", "--bogus", "--", "true"}, exitUsage, "-bogus"},
		{[]string{"run", "--kafka", "127.0.0.1:9092"}, exitUsage, "missing command"},
		{[]string{"run", "--"}, exitUsage, "missing command after --"},
		{[]string{"run", "sleep", "1"}, exitUsage, `unexpected argument "sleep"`},
		{[]string{"run", "--on-acquired", "true", "--", "true"}, exitUsage, "not both"},
		{[]string{"run", "--heartbeat-timeout", "10ms", "--", "true"}, exitUsage, "--heartbeat-timeout"},
		{[]string{"run", "--heartbeat-timeout", "soon", "--", "true"}, exitUsage, "-heartbeat-timeout"},
		{[]string{"run", "--heartbeat-timeout", "1h", "--", "true"}, exitUsage, "--heartbeat-timeout 1h0m0s is too long: the maximum is 30m0s"},
		{[]string{"run", "--log-format", "xml", "--", "true"}, exitUsage, "--log-format"},
		{[]string{"run", "--log-level", "loud", "--", "true"}, exitUsage, "--log-level"},
		{[]string{"run", "--grace", "-1s", "--", "true"}, exitUsage, "--grace"},
		{[]string{"run", "--", "no-such-command-for-neli"}, exitUsage, "no-such-command-for-neli"},
		// A server without a port is on 9092, as librdkafka takes it: one that is not there cannot
		// be reached, which is no usage error.
		{[]string{"run", "--kafka", "nohost", "--", "true"}, exitFail, "cannot reach Kafka at nohost"},
		{[]string{"run", "--kafka", "[::1", "--", "true"}, exitUsage, "--kafka"},
		{[]string{"run", "--kafka", "127.0.0.1:1", "--", "true"}, exitFail, "cannot reach Kafka at 127.0.0.1:1"},
		{[]string{"demo", "--members", "1"}, exitUsage, "--members"},
		{[]string{"demo", "--duration", "abc"}, exitUsage, "-duration"},
		{[]string{"demo", "--duration", "1s"}, exitUsage, "--duration"},
		{[]string{"demo", "--kafka", "127.0.0.1:1"}, exitFail, "cannot reach Kafka"},
		{[]string{"run", "--metrics-addr", "9464", "--", "true"}, exitUsage, "--metrics-addr"},
		{[]string{"run", "--yield-for", "-1s", "--", "true"}, exitUsage, "--yield-for"},
		{[]string{"run", "--hand-over-after", "0s", "--", "true"}, exitUsage, "--hand-over-after 0s must be positive"},
		{[]string{"run", "--hand-over-after", "-2s", "--", "true"}, exitUsage, "--hand-over-after -2s must be positive"},
		{[]string{"run", "--hand-over-after", "2s", "--", "true"}, exitUsage, "--hand-over-after 2s is too short: the minimum is half of --heartbeat-timeout (2.5s)"},
		{[]string{"run", "--heartbeat-timeout", "4s", "--hand-over-after", "1999ms", "--", "true"}, exitUsage, "--hand-over-after 1.999s is too short: the minimum is half of --heartbeat-timeout (2s)"},
		{[]string{"run", "--hand-over-after", "soon", "--", "true"}, exitUsage, "-hand-over-after"},
		{[]string{"run", "--roles", "2", "--role", "a", "--", "true"}, exitUsage, "--roles and --role cannot be used together"},
		{[]string{"run", "--role", "a", "--roles", "2", "--", "true"}, exitUsage, "--roles and --role cannot be used together"},
		{[]string{"run", "--roles", "0", "--", "true"}, exitUsage, "--roles 0: want at least 1 role"},
		{[]string{"run", "--roles", "-3", "--", "true"}, exitUsage, "--roles -3: want at least 1 role"},
		{[]string{"run", "--roles", "1001", "--", "true"}, exitUsage, "--roles 1001: at most 1000 roles"},
		{[]string{"run", "--roles", "many", "--", "true"}, exitUsage, "-roles"},
		{[]string{"run", "--role", "", "--", "true"}, exitUsage, "--role must not be empty"},
		{[]string{"run", "--role", "a", "--role", "", "--", "true"}, exitUsage, "--role must not be empty"},
		{[]string{"run", "--role", "billing", "--role", "audit", "--role", "billing", "--", "true"}, exitUsage, `--role "billing" is given twice`},
		{[]string{"run", "--roles", "0", "--kafka", "127.0.0.1:1", "--", "true"}, exitUsage, "--roles 0"},
		{[]string{"watch", "--format", "xml"}, exitUsage, "--format"},
		{[]string{"watch", "now"}, exitUsage, `unexpected argument "now"`},
		{[]string{"watch", "--heartbeat-timeout", "1ms"}, exitUsage, "--heartbeat-timeout"},
		{[]string{"watch", "--kafka", "127.0.0.1:1"}, exitFail, "cannot reach Kafka at 127.0.0.1:1"},
		{[]string{"status", "--format", "yaml"}, exitUsage, "--format"},
		{[]string{"status", "now"}, exitUsage, `unexpected argument "now"`},
		{[]string{"status", "--group", ""}, exitUsage, "--group"},
		// An empty --topic was taken as no --topic at all, while an empty --group was refused.
		{[]string{"run", "--topic", "", "--", "true"}, exitUsage, "--topic must not be empty"},
		{[]string{"watch", "--topic", ""}, exitUsage, "--topic must not be empty"},
		{[]string{"status", "--topic", ""}, exitUsage, "--topic must not be empty"},
		// An empty bootstrap list reached goneli, which accepted it (issue 23).
		{[]string{"status", "--kafka", ""}, exitUsage, "--kafka must not be empty"},
		{[]string{"status", "-X", "bootstrap.servers= ,"}, exitUsage, "bootstrap.servers (from -X, -F or NELI_X_BOOTSTRAP_SERVERS) must not be empty"},
		{[]string{"run", "--kafka", ",", "--", "true"}, exitUsage, "--kafka must not be empty"},
		{[]string{"status", "--kafka", "127.0.0.1:1"}, exitFail, "cannot reach Kafka at 127.0.0.1:1"},
		{[]string{"run", "--address", strings.Repeat("x", 1025), "--", "true"}, exitUsage, "--address is 1025 bytes long: at most 1024"},
		{[]string{"run", "--group", "my group", "--", "true"}, exitUsage, `--group "my group" cannot name the leader topic`},
		{[]string{"status", "--group", "my group"}, exitUsage, "pass --topic"},
		{[]string{"watch", "--topic", "a/b"}, exitUsage, `--topic "a/b"`},
		{[]string{"broker", "--topics", "ok,bad topic"}, exitUsage, `--topics: "bad topic"`},
		{[]string{"run", "-X", "security.protocol", "--", "true"}, exitUsage, "-X"},
		{[]string{"run", "--replication-factor", "-1", "--", "true"}, exitUsage, "--replication-factor -1"},
		{[]string{"version", "now"}, exitUsage, `unexpected argument "now"`},
		{[]string{"broker", "--listen", "10.1.2.3:9092"}, exitUsage, "--listen"},
		{[]string{"broker", "--listen", "127.0.0.1:port"}, exitUsage, "--listen"},
		{[]string{"run", "--priority", "1000", "--", "true"}, exitUsage, "--priority 1000: want -999 to 999"},
		{[]string{"run", "--priority", "high", "--", "true"}, exitUsage, "-priority"},
		{[]string{"run", "--priority", "2", "-X", "client.id=mine", "--", "true"}, exitUsage, "--priority 2 cannot be combined with a client.id of your own"},
		{[]string{"transfer"}, exitUsage, "--to is required"},
		{[]string{"transfer", "--to", "b", "--timeout", "-1s"}, exitUsage, "--timeout -1s must not be negative"},
		{[]string{"transfer", "--to", "b", "now"}, exitUsage, `unexpected argument "now"`},
		{[]string{"transfer", "--to", "b", "--kafka", "127.0.0.1:1"}, exitFail, "cannot reach Kafka at 127.0.0.1:1"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			status, stdout, stderr := runNeli(t, c.args...)
			if status != c.status {
				t.Errorf("exit status %d, want %d; stderr: %s", status, c.status, stderr)
			}
			if stdout != "" {
				t.Errorf("unexpected output on stdout: %q", stdout)
			}
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if len(lines) != 1 {
				t.Errorf("want a one-line error, got %d lines: %q", len(lines), stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("error %q does not mention %q", stderr, c.want)
			}
			if strings.Contains(stderr, "goroutine") || strings.Contains(stderr, "panic") {
				t.Errorf("error looks like a panic: %q", stderr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		status, stdout, stderr := runNeli(t, args...)
		if status != exitOK || !strings.HasPrefix(stdout, "neli ") || !strings.Contains(stdout, "librdkafka 2.11.1") ||
			!strings.Contains(stdout, "confluent-kafka-go v2.11.1") || !strings.Contains(stdout, " go1.") || stderr != "" {
			t.Errorf("neli %v: status %d, stdout %q, stderr %q", args, status, stdout, stderr)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, sub := range []string{"demo", "run", "watch", "status", "transfer", "broker", "version"} {
		status, stdout, stderr := runNeli(t, sub, "--help")
		if status != exitOK || !strings.Contains(stdout, "Usage: neli "+sub) || !strings.Contains(stdout, "-log-level") && sub != "broker" && sub != "version" {
			t.Errorf("neli %s --help: status %d, stdout %q, stderr %q", sub, status, stdout, stderr)
		}
	}
	// The run help is where the environment and signals of CMD are documented.
	_, stdout, _ := runNeli(t, "run", "--help")
	for _, want := range []string{"NELI_TOKEN", "SIGUSR1", "-yield-for", "-metrics-addr", "/healthz", "-roles", "-role", "NELI_ROLE", "-address",
		"If a copy exits by itself", "-priority", "neli transfer"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("neli run --help does not mention %s", want)
		}
	}
	status, stdout, _ := runNeli(t, "--help")
	if status != exitOK || !strings.Contains(stdout, "demo") || !strings.Contains(stdout, "watch") || strings.Contains(stdout, "member") {
		t.Errorf("neli --help: status %d, stdout %q", status, stdout)
	}
}

// runNeli runs neli to completion and returns its status and output.
func runNeli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runNeliEnv(t, nil, args...)
}

// leaderScript is the command under neli run. It logs its start, a tick every 50 ms and its stop
// to $LOG with O_APPEND writes, and says "start NAME TOKEN" on stdout so that the test can wait for
// it.
const leaderScript = `echo "start $NELI_NAME" >> "$LOG"
trap 'echo "stop $NELI_NAME" >> "$LOG"; exit 0' TERM
echo "start $NELI_NAME $NELI_TOKEN"
while :; do echo "tick $NELI_NAME" >> "$LOG"; sleep 0.05; done`

// TestRunNeverRunsTwoCopies runs the leader's command under several neli run processes against
// one embedded broker, stops one leader gracefully and kills the next with SIGKILL, and checks
// from the shared log that no copy of the command wrote anything after another copy started.
func TestRunNeverRunsTwoCopies(t *testing.T) {
	b := startBroker(t)
	logPath := filepath.Join(t.TempDir(), "leader.log")
	lines := make(chan procLine, 100)
	procs := map[string]*runProc{}
	start := func(name string) {
		procs[name] = startRun(t, b.Addr, lines, []string{"LOG=" + logPath},
			"--name", name, "--grace", "5s", "--", "sh", "-c", leaderScript)
	}
	start("a")
	start("b")

	first := awaitLine(t, lines, "start ", "")
	other := map[string]string{"a": "b", "b": "a"}[first]
	t.Logf("%s leads; stopping it with SIGTERM", first)
	procs[first].signal(t, syscall.SIGTERM)
	awaitLine(t, lines, "start ", other)
	if status := procs[first].wait(t); status != 0 {
		t.Errorf("neli run %s exited with %d after SIGTERM, want 0", first, status)
	}

	start("c")
	t.Logf("%s leads; killing it with SIGKILL", other)
	procs[other].signal(t, syscall.SIGKILL)
	awaitLine(t, lines, "start ", "c")
	procs[other].wait(t)
	procs["c"].signal(t, syscall.SIGTERM)
	if status := procs["c"].wait(t); status != 0 {
		t.Errorf("neli run c exited with %d after SIGTERM, want 0", status)
	}

	checkLeaderLog(t, logPath, first, other, "c")
}

// TestRunStopsCommandWhenFenced cuts the leader off from the broker. Its lease runs out while its
// pulse loop is stuck, and the command must be stopped before the other instance starts its own.
func TestRunStopsCommandWhenFenced(t *testing.T) {
	b := startBroker(t)
	logPath := filepath.Join(t.TempDir(), "leader.log")
	lines := make(chan procLine, 100)
	procs := map[string]*runProc{}
	for _, name := range []string{"a", "b"} {
		procs[name] = startRun(t, b.Addr, lines, []string{"LOG=" + logPath},
			"--name", name, "--grace", "5s", "--", "sh", "-c", leaderScript)
	}
	first := awaitLine(t, lines, "start ", "")
	other := map[string]string{"a": "b", "b": "a"}[first]
	t.Logf("%s leads; cutting it off from the broker", first)
	b.Net.Cut("goneli-"+first, kafkatest.Blackhole)
	awaitLine(t, lines, "start ", other)
	b.Net.Heal("goneli-" + first)
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range procs {
		p.wait(t)
	}
	checkLeaderLog(t, logPath, first, other)
	if log := readFile(t, logPath); !strings.Contains(log, "stop "+first+"\n") {
		t.Errorf("%s's command was not stopped by SIGTERM when it was fenced:\n%s", first, log)
	}
}

// checkLeaderLog checks that the commands started in the order want, and that no command wrote
// to the log after another one had started.
func checkLeaderLog(t *testing.T, logPath string, want ...string) {
	t.Helper()
	data := readFile(t, logPath)
	var starts []string
	current := ""
	for i, line := range strings.Split(strings.TrimSpace(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("line %d of the log is malformed: %q", i+1, line)
		}
		if f[0] == "start" {
			current = f[1]
			starts = append(starts, f[1])
		} else if f[1] != current {
			t.Errorf("line %d: %q after %s's command started: two copies ran at once", i+1, line, current)
		}
	}
	if strings.Join(starts, " ") != strings.Join(want, " ") {
		t.Errorf("commands started in the order %v, want %v", starts, want)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestRunExitsWithCommandStatus(t *testing.T) {
	b := startBroker(t)
	lines := make(chan procLine, 10)
	p := startRun(t, b.Addr, lines, nil, "--name", "solo", "--", "sh", "-c", `echo "start $NELI_NAME"; exit 3`)
	awaitLine(t, lines, "start ", "solo")
	if status := p.wait(t); status != 3 {
		t.Errorf("neli run exited with %d, want the command's 3", status)
	}
}

func TestRunHooks(t *testing.T) {
	b := startBroker(t)
	lines := make(chan procLine, 10)
	p := startRun(t, b.Addr, lines, nil, "--name", "hooked",
		"--on-acquired", `echo "start $NELI_NAME $NELI_EVENT"`,
		"--on-revoked", `echo "end $NELI_NAME $NELI_EVENT"`)
	if l := awaitLine(t, lines, "start ", "hooked"); l != "hooked" {
		t.Fatalf("unexpected leader %q", l)
	}
	p.signal(t, syscall.SIGTERM)
	awaitLine(t, lines, "end ", "hooked")
	if status := p.wait(t); status != 0 {
		t.Errorf("neli run exited with %d after SIGTERM, want 0", status)
	}
}

// TestBroker starts the standalone broker, elects a leader on it with neli run, and stops both.
func TestBroker(t *testing.T) {
	cmd := exec.Command(neliBin, "broker", "--listen", "127.0.0.1:0", "--topics", "a,b")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	addrs := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "neli broker: listening on "); ok {
				addrs <- addr
			}
		}
		done <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("neli broker exited early: %v", err)
	case <-time.After(awaitLimit):
		t.Fatalf("neli broker printed no address within %v", awaitLimit)
	}

	lines := make(chan procLine, 10)
	p := startRun(t, addr, lines, nil, "--name", "on-broker", "--", "sh", "-c", `echo "start $NELI_NAME"; exit 0`)
	awaitLine(t, lines, "start ", "on-broker")
	if status := p.wait(t); status != 0 {
		t.Errorf("neli run exited with %d, want 0", status)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("neli broker after SIGTERM: %v, want a clean exit", err)
		}
		done <- err
	case <-time.After(awaitLimit):
		t.Fatalf("neli broker did not stop within %v of SIGTERM", awaitLimit)
	}
}

// TestDemo runs the README's first command, shortened, from end to end.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes 20 s")
	}
	status, stdout, stderr := runNeli(t, "demo", "--duration", "20s")
	if status != 0 {
		t.Fatalf("neli demo exited with %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	// The freeze lands in a commit that the broker refuses once the successor leads.
	for _, want := range []string{"LEADS", "== Summary ==", "overlap check: PASSED", "refused by the broker (a successor leads)",
		"write check: PASSED", "result: PASSED"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
	t.Logf("demo output:\n%s", stdout)
}

func startBroker(t *testing.T) *kafkatest.Broker {
	t.Helper()
	return kafkatest.StartT(t)
}

// procLine is a line that a neli run process printed on stdout, which is where its command's
// output goes.
type procLine struct {
	proc string
	text string
}

type runProc struct {
	name   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan int
}

// testGroup is the leader group of the neli processes that a test starts.
func testGroup(t *testing.T) string {
	return "cli-" + strings.ToLower(t.Name())
}

// startRun starts neli run against addr with a short lease; its stdout lines go to lines.
func startRun(t *testing.T, addr string, lines chan<- procLine, env []string, args ...string) *runProc {
	t.Helper()
	all := append([]string{"run", "--kafka", addr, "--group", testGroup(t),
		"--heartbeat-timeout", "1s", "--log-level", "debug"}, args...)
	name := all[len(all)-1]
	for i, a := range all {
		if a == "--name" {
			name = all[i+1]
		}
	}
	return startProc(t, name, lines, env, all...)
}

// startProc starts neli with args and sends its stdout lines, labelled with name, to lines. The
// process is killed when the test ends if it is still running.
func startProc(t *testing.T, name string, lines chan<- procLine, env []string, args ...string) *runProc {
	t.Helper()
	cmd := exec.Command(neliBin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &runProc{name: name, cmd: cmd, stderr: &syncBuffer{}, done: make(chan int, 1)}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- procLine{proc: p.name, text: sc.Text()}
		}
		_, _ = io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		var ee *exec.ExitError
		status := 0
		if errors.As(err, &ee) {
			status = ee.ExitCode()
		} else if err != nil {
			status = -1
		}
		p.done <- status
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("stderr of neli %s %s:\n%s", p.cmd.Args[1], p.name, p.stderr.String())
		}
	})
	return p
}

func (p *runProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v to neli run %s: %v", sig, p.name, err)
	}
}

// wait returns the process's exit status (-1 if killed by a signal).
func (p *runProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case status := <-p.done:
		p.done <- status
		return status
	case <-time.After(awaitLimit):
		t.Fatalf("neli run %s did not exit within %v", p.name, awaitLimit)
	}
	return 0
}

// awaitLine waits for a line "<prefix><name>" (any name if name is empty) and returns the name.
func awaitLine(t *testing.T, lines <-chan procLine, prefix, name string) string {
	t.Helper()
	timeout := time.After(awaitLimit)
	for {
		select {
		case l := <-lines:
			rest, ok := strings.CutPrefix(l.text, prefix)
			if !ok {
				continue
			}
			got := strings.Fields(rest)[0]
			if name == "" || got == name {
				return got
			}
		case <-timeout:
			t.Fatalf("no line %q%s within %v", prefix, name, awaitLimit)
		}
	}
}

// syncBuffer is a bytes.Buffer that the process's stderr copier and the test may share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHandOverAfterReachesConfig checks that --hand-over-after becomes Config.HandOverAfter, which
// goneli accepts, and that leaving it out leaves goneli's default rather than some value of neli's.
func TestHandOverAfterReachesConfig(t *testing.T) {
	o, err := parseRun([]string{"--kafka", "127.0.0.1:9092", "--heartbeat-timeout", "2s", "--hand-over-after", "7s", "--", "true"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.runConfig(nil)
	if c.HandOverAfter == nil || *c.HandOverAfter != 7*time.Second {
		t.Errorf("HandOverAfter = %v, want 7s", c.HandOverAfter)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("goneli refuses the configuration: %v", err)
	}
	o, err = parseRun([]string{"--kafka", "127.0.0.1:9092", "--", "true"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c := o.runConfig(nil); c.HandOverAfter != nil {
		t.Errorf("HandOverAfter = %v without the flag, want nil (goneli's default, one lease)", *c.HandOverAfter)
	}
}
