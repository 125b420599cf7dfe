package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
)

// runNeliEnv is runNeli with extra environment variables.
func runNeliEnv(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, neliBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("running neli %v: %v", args, err)
	return 0, "", ""
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "client.properties")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Bad -X and -F input costs one line and status 2, without echoing what may be a secret.
func TestKafkaSettingsBadInput(t *testing.T) {
	noKey := writeFile(t, "# comment\nbootstrap.servers=127.0.0.1:1\nhunter2\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-X", "security.protocol", "--", "true"}, "-X"},
		{[]string{"watch", "-X", "=SSL"}, "want key=value"},
		{[]string{"status", "-X", "sasl.password:hunter2"}, "want key=value"},
		{[]string{"status", "-F", "/no/such/file.properties"}, "-F /no/such/file.properties"},
		{[]string{"status", "--config", noKey}, "line 3: want key=value"},
	} {
		status, stdout, stderr := runNeli(t, c.args...)
		if status != exitUsage || stdout != "" || strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 ||
			!strings.Contains(stderr, c.want) || strings.Contains(stderr, "hunter2") {
			t.Errorf("neli %v: status %d, stdout %q, stderr %q; want status 2 and one line with %q", c.args, status, stdout, stderr, c.want)
		}
	}
}

// Properties reach the Kafka clients from a file, the environment and -X, in that order of
// precedence, and a file may name the bootstrap servers in place of --kafka.
func TestKafkaSettingsReachTheClients(t *testing.T) {
	b := startBroker(t)
	file := writeFile(t, "bootstrap.servers = "+b.Addr+"\n! another comment\nclient.rack: rack-1\n")

	// The servers come from the file: the group is looked up on b and found missing.
	status, _, stderr := runNeli(t, "status", "-F", file, "--group", "nobody")
	if status != exitFail || !strings.Contains(stderr, `group "nobody" does not exist on `+b.Addr) {
		t.Fatalf("status with -F: %d %q", status, stderr)
	}
	status, _, stderr = runNeliEnv(t, []string{"NELI_CONFIG_FILE=" + file}, "status", "--group", "nobody")
	if status != exitFail || !strings.Contains(stderr, `does not exist on `+b.Addr) {
		t.Fatalf("status with $NELI_CONFIG_FILE: %d %q", status, stderr)
	}

	// A property librdkafka does not know is reported, whichever way it came.
	status, _, stderr = runNeliEnv(t, []string{"NELI_X_NO_SUCH_PROPERTY=1"}, "status", "-F", file, "--group", "nobody")
	if status != exitFail || !strings.Contains(stderr, "no.such.property") {
		t.Fatalf("status with NELI_X_NO_SUCH_PROPERTY: %d %q", status, stderr)
	}
	status, _, stderr = runNeli(t, "status", "-F", file, "-X", "no.such.property=1", "--group", "nobody")
	if status != exitFail || !strings.Contains(stderr, "no.such.property") {
		t.Fatalf("status with -X no.such.property: %d %q", status, stderr)
	}

	// -X overrides the environment, which overrides the file; --kafka overrides them all.
	status, _, stderr = runNeliEnv(t, []string{"NELI_X_BOOTSTRAP_SERVERS=127.0.0.1:1"}, "status", "-F", file, "--group", "nobody")
	if status != exitFail || !strings.Contains(stderr, "cannot reach Kafka at 127.0.0.1:1") {
		t.Fatalf("the environment did not override the file: %d %q", status, stderr)
	}
	status, _, stderr = runNeliEnv(t, []string{"NELI_X_BOOTSTRAP_SERVERS=127.0.0.1:1"}, "status", "-X", "bootstrap.servers="+b.Addr, "--group", "nobody")
	if status != exitFail || !strings.Contains(stderr, "does not exist on "+b.Addr) {
		t.Fatalf("-X did not override the environment: %d %q", status, stderr)
	}
	status, _, stderr = runNeli(t, "status", "-F", file, "--kafka", "127.0.0.1:1", "--group", "nobody")
	if status != exitFail || !strings.Contains(stderr, "cannot reach Kafka at 127.0.0.1:1") {
		t.Fatalf("--kafka did not override the file: %d %q", status, stderr)
	}

	// A secret on the command line is warned about, never printed.
	status, _, stderr = runNeli(t, "status", "--kafka", b.Addr, "-X", "sasl.password=hunter2", "--group", "nobody")
	if status != exitFail || !strings.Contains(stderr, "-X sasl.password puts a secret on the command line") ||
		!strings.Contains(stderr, "NELI_X_SASL_PASSWORD") || strings.Contains(stderr, "hunter2") {
		t.Fatalf("status with -X sasl.password: %d %q", status, stderr)
	}
}

// neli run, watch and status reach a broker that requires SASL/SCRAM, with the settings in a file
// and the password in the environment, as docs/operations.md shows.
func TestSASLSCRAM(t *testing.T) {
	b := kafkatest.StartT(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "scheduler", "s3cret-pw"))
	file := writeFile(t, "bootstrap.servers="+b.Addr+"\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanisms=SCRAM-SHA-256\nsasl.username=scheduler\n")
	env := []string{"NELI_X_SASL_PASSWORD=s3cret-pw"}
	group := testGroup(t)

	lines := make(chan procLine, 100)
	a := startProc(t, "a", lines, env, "run", "-F", file, "--group", group, "--name", "a", "--heartbeat-timeout", "1s",
		"--", "sh", "-c", tokenScript)
	_, token := awaitStart(t, lines, "a")
	status, stdout, stderr := runNeliEnv(t, env, "status", "-F", file, "--group", group, "--heartbeat-timeout", "1s", "--format", "json")
	if status != exitOK || !strings.Contains(stdout, `"name": "a"`) || !strings.Contains(stdout, fmt.Sprintf(`"token": %d`, token)) {
		t.Fatalf("status over SASL: %d %s %s", status, stdout, stderr)
	}
	if strings.Contains(a.stderr.String(), "s3cret-pw") || strings.Contains(stderr, "s3cret-pw") {
		t.Fatal("the password appeared in a log")
	}

	// A wrong password ends in an error, not a silent retry.
	status, _, stderr = runNeliEnv(t, []string{"NELI_X_SASL_PASSWORD=wrong"}, "status", "-F", file, "--group", group)
	if status != exitFail || !strings.Contains(strings.ToLower(stderr), "authentication") {
		t.Fatalf("status with a wrong password: %d %q", status, stderr)
	}
}

// neli run against a broker that refuses the session of its lease ends with one line naming the
// setting, instead of retrying for ever.
func TestRunRefusedSession(t *testing.T) {
	b := kafkatest.StartT(t, kafkatest.MinSession(6*time.Second)...)
	// A session set by hand is not raised to the broker's minimum, as a derived one is.
	status, _, stderr := runNeli(t, "run", "--kafka", b.Addr, "--group", testGroup(t), "--heartbeat-timeout", "1s", "--log-level", "off",
		"-X", "session.timeout.ms=2000", "--", "true")
	if status != exitFail || !strings.Contains(stderr, "refuses a group session of 2s") || !strings.Contains(stderr, "raise HeartbeatTimeout") {
		t.Fatalf("neli run with a refused session: status %d, stderr %q", status, stderr)
	}
}

// A --kafka that names a port of some other service ends at once with one line, instead of
// librdkafka retrying its ApiVersions request for ever.
func TestKafkaThatIsNotKafka(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\n"))
			_ = conn.Close()
		}
	}()
	defer func() {
		_ = ln.Close()
		<-served
	}()
	for _, cmd := range [][]string{{"run", "--", "true"}, {"watch"}, {"status"}} {
		args := append([]string{cmd[0], "--kafka", ln.Addr().String()}, cmd[1:]...)
		status, _, stderr := runNeli(t, args...)
		if status != exitFail || !strings.Contains(stderr, "accepts connections but does not answer as Kafka") ||
			strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 {
			t.Errorf("neli %v: status %d, stderr %q", args, status, stderr)
		}
	}
}
