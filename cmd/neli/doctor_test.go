package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestDoctor runs neli doctor against a broker whose minimum session (stated as a broker config,
// which kfake then also describes) admits a 1 s lease, and against one whose 6 s minimum does not.
func TestDoctor(t *testing.T) {
	ok := kafkatest.StartT(t, kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "500"}))
	status, stdout, stderr := runNeli(t, "doctor", "--kafka", ok.Addr, "--group", "jobs", "--heartbeat-timeout", "1s")
	if status != exitOK || !strings.Contains(stdout, "ok    session") || strings.Contains(stdout, "FAIL") {
		t.Errorf("healthy broker: status %d, stdout:\n%s\nstderr: %s", status, stdout, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if !strings.HasPrefix(line, "ok ") && !strings.HasPrefix(line, "warn ") {
			t.Errorf("line %q: want it to start with ok or warn", line)
		}
	}

	// A session set by hand below the broker's minimum is refused at every join (a derived one New
	// would raise to it).
	strict := kafkatest.StartT(t, kafkatest.MinSession(6*time.Second)...)
	status, stdout, _ = runNeli(t, "doctor", "--kafka", strict.Addr, "--group", "jobs", "--heartbeat-timeout", "1s", "--format", "json",
		"-X", "session.timeout.ms=2000")
	var rec doctorRecord
	if err := json.Unmarshal([]byte(stdout), &rec); err != nil {
		t.Fatalf("--format json: %v in %q", err, stdout)
	}
	if status != exitFail || rec.OK || rec.Worst != "FAIL" {
		t.Errorf("6 s minimum session: status %d, record %+v; want 1 and a failure", status, rec)
	}
	found := false
	for _, c := range rec.Checks {
		found = found || c.Name == "session" && c.Status == "FAIL" && strings.Contains(c.Fix, "at least 6000")
	}
	if !found {
		t.Errorf("no failed session check saying to raise session.timeout.ms to 6000 in %+v", rec.Checks)
	}
}

// TestDoctorNotKafka: a port that accepts connections and never answers is a FAIL, exit status 1.
func TestDoctorNotKafka(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	status, stdout, stderr := runNeli(t, "doctor", "--kafka", ln.Addr().String())
	t.Logf("neli doctor on a silent port took %v", time.Since(start).Round(time.Millisecond))
	if status != exitFail || !strings.Contains(stdout, "FAIL  reach") || !strings.Contains(stdout, "did not answer an ApiVersions request") {
		t.Errorf("status %d, stdout %q, stderr %q; want 1 and a reach FAIL", status, stdout, stderr)
	}
}

func TestDoctorBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"doctor", "--format", "yaml"},
		{"doctor", "--roles", "0"},
		{"doctor", "--heartbeat-timeout", "1ms"},
		{"doctor", "extra"},
	} {
		status, _, stderr := runNeli(t, args...)
		if status != exitUsage || !strings.Contains(stderr, "neli doctor:") {
			t.Errorf("%v: status %d, stderr %q; want 2 and a one-line error", args, status, stderr)
		}
	}
}
