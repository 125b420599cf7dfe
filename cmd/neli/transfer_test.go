package main

import (
	"strings"
	"testing"
	"time"
)

// neli status shows each member's priority, and neli transfer moves leadership to a named member:
// refused for a name that is not a member, and for a member that another one outranks.
func TestTransferAndPriorities(t *testing.T) {
	b := startBroker(t)
	group := testGroup(t)
	lines := make(chan procLine, 100)
	startRun(t, b.Addr, lines, nil, "--name", "a", "--priority", "1", "--", "sh", "-c", tokenScript)
	awaitStart(t, lines, "a")
	startRun(t, b.Addr, lines, nil, "--name", "b", "--priority", "1", "--", "sh", "-c", tokenScript)
	startRun(t, b.Addr, lines, nil, "--name", "low", "--", "sh", "-c", tokenScript)
	var st statusRecord
	for limit := time.Now().Add(awaitLimit); ; {
		// No event says that the other two have joined: ask until the group shows them.
		if st = statusJSON(t, b.Addr, group); len(st.Members) == 3 && !st.Rebalancing {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("the group never showed three members: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	priorities := map[string]int{}
	for _, m := range st.Members {
		priorities[m.Name] = m.Priority
	}
	if priorities["a"] != 1 || priorities["b"] != 1 || priorities["low"] != 0 {
		t.Fatalf("priorities %v, want a and b 1, low 0", priorities)
	}
	_, text, _ := runNeli(t, "status", "--kafka", b.Addr, "--group", group, "--heartbeat-timeout", "1s")
	if !strings.Contains(text, "PRIORITY") || !strings.Contains(text, "goneli--999-a") {
		t.Fatalf("text status does not show priorities:\n%s", text)
	}

	transfer := func(to string) (int, string, string) {
		return runNeli(t, "transfer", "--kafka", b.Addr, "--group", group, "--heartbeat-timeout", "1s", "--to", to, "--timeout", "20s")
	}
	if status, _, stderr := transfer("nobody"); status != exitFail || !strings.Contains(stderr, "not a member of the group") {
		t.Fatalf("transfer to nobody: %d %s", status, stderr)
	}
	if status, _, stderr := transfer("low"); status != exitFail || !strings.Contains(stderr, "its priority 0 is below the 1 of the leader a") {
		t.Fatalf("transfer to an outranked member: %d %s", status, stderr)
	}
	for limit := time.Now().Add(awaitLimit); ; {
		status, stdout, stderr := transfer("b")
		if status == exitOK {
			if !strings.Contains(stdout, "moved from a to b in") {
				t.Fatalf("transfer to b printed %q", stdout)
			}
			break
		}
		// The leader may not hand over within the settle time of its election.
		if !strings.Contains(stderr, "try again in") || time.Now().After(limit) {
			t.Fatalf("transfer to b: %d %s", status, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	awaitStart(t, lines, "b")
	if status, stdout, _ := transfer("b"); status != exitOK || !strings.Contains(stdout, "b leads group") {
		t.Fatalf("transfer to the leader: %d %q", status, stdout)
	}
}
