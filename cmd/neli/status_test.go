package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// statusJSON runs neli status --format json against addr and decodes its output.
func statusJSON(t *testing.T, addr, group string) statusRecord {
	t.Helper()
	code, stdout, stderr := runNeli(t, "status", "--kafka", addr, "--group", group, "--heartbeat-timeout", "1s", "--format", "json")
	if code != exitOK {
		t.Fatalf("neli status: status %d, stderr %s", code, stderr)
	}
	var st statusRecord
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("neli status --format json printed %q: %v", stdout, err)
	}
	return st
}

// TestStatus checks neli status against a group whose leader advertises an address and is then
// killed: the killed leader is no longer reported live once its newest heartbeat is older than
// the lease. A group that does not exist gives one line and status 1.
func TestStatus(t *testing.T) {
	b := startBroker(t)
	group := testGroup(t)

	code, _, stderr := runNeli(t, "status", "--kafka", b.Addr, "--group", "no-such-group")
	if code != exitFail || !strings.Contains(stderr, `group "no-such-group" does not exist`) || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("status of a missing group: status %d, stderr %q", code, stderr)
	}

	lines := make(chan procLine, 100)
	a := startRun(t, b.Addr, lines, nil, "--name", "a", "--address", "http://a.example:8080", "--", "sh", "-c", tokenScript)
	_, token := awaitStart(t, lines, "a")

	st := statusJSON(t, b.Addr, group)
	if st.Group != group || len(st.Members) != 1 || st.Members[0].Name != "a" || len(st.Roles) != 1 {
		t.Fatalf("status of a group led by a: %+v", st)
	}
	if l := st.Roles[0].Leader; l == nil || l.Name != "a" || l.Address != "http://a.example:8080" || l.Token != token {
		t.Fatalf("leader %+v, want a at http://a.example:8080 with token %d", l, token)
	}
	code, text, _ := runNeli(t, "status", "--kafka", b.Addr, "--group", group, "--heartbeat-timeout", "1s")
	if code != exitOK || !strings.Contains(text, "Stable") || !strings.Contains(text, "http://a.example:8080") {
		t.Fatalf("text status: %d\n%s", code, text)
	}

	a.signal(t, syscall.SIGKILL)
	limit := time.Now().Add(awaitLimit)
	for {
		// No event announces that a heartbeat has aged past the lease: ask again until it has.
		st = statusJSON(t, b.Addr, group)
		if st.Roles[0].Leader == nil {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("a still reported live %v after SIGKILL: %+v", awaitLimit, st.Roles[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := st.Roles[0].Newest; n == nil || n.Name != "a" || n.Kind != "heartbeat" || n.AgeMs <= 1000 {
		t.Fatalf("newest record after a was killed: %+v, want a's heartbeat older than the 1s lease", n)
	}
	code, text, _ = runNeli(t, "status", "--kafka", b.Addr, "--group", group, "--heartbeat-timeout", "1s")
	if code != exitOK || !strings.Contains(text, "none") {
		t.Fatalf("text status without a live leader: %d\n%s", code, text)
	}
}

// awaitText waits for a line from lines that contains text, and returns it.
func awaitText(t *testing.T, lines <-chan procLine, text string) string {
	t.Helper()
	timeout := time.After(awaitLimit)
	for {
		select {
		case l := <-lines:
			if strings.Contains(l.text, text) {
				return l.text
			}
			t.Logf("%s: %s", l.proc, l.text)
		case <-timeout:
			t.Fatalf("no line with %q within %v", text, awaitLimit)
		}
	}
}

// neli watch says at once why nobody leads: a group that does not exist, or a leader whose newest
// heartbeat is older than the lease.
func TestWatchSaysWhyNobodyLeads(t *testing.T) {
	b := startBroker(t)
	group := testGroup(t)
	lines := make(chan procLine, 100)
	w := startProc(t, "watch", lines, nil, "watch", "--kafka", b.Addr, "--group", group, "--heartbeat-timeout", "1s")
	awaitText(t, lines, "no leader (group "+group+" does not exist (yet)")
	w.signal(t, syscall.SIGTERM)
	if status := w.wait(t); status != exitOK {
		t.Fatalf("neli watch exited with %d", status)
	}

	a := startRun(t, b.Addr, lines, nil, "--name", "a", "--", "sh", "-c", tokenScript)
	awaitStart(t, lines, "a")
	a.signal(t, syscall.SIGKILL)
	for limit := time.Now().Add(awaitLimit); statusJSON(t, b.Addr, group).Roles[0].Leader != nil; {
		// No event announces that a's heartbeat has aged past the lease: ask again until it has.
		if time.Now().After(limit) {
			t.Fatalf("a still reported live %v after SIGKILL", awaitLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	startProc(t, "watch2", lines, nil, "watch", "--kafka", b.Addr, "--group", group, "--heartbeat-timeout", "1s")
	awaitText(t, lines, "no leader (newest heartbeat from a, ")
}
