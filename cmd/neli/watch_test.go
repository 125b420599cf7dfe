package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goneli/goneli"
)

// tokenScript is a leader command that reports its fencing token and runs until stopped.
const tokenScript = `echo "start $NELI_NAME $NELI_TOKEN"; exec sleep 600`

// awaitStart waits for a command's "start NAME TOKEN" line (any name if name is empty) and returns
// the name and the token.
func awaitStart(t *testing.T, lines <-chan procLine, name string) (string, int64) {
	t.Helper()
	f := awaitFields(t, lines, name, func(f []string) bool { return len(f) == 3 && f[0] == "start" })
	token, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || token <= 0 {
		t.Fatalf("NELI_TOKEN of %s is %q, want a positive integer", f[1], f[2])
	}
	return f[1], token
}

// awaitWatched waits for neli watch to report name as leader and returns the token it printed.
// Lines about other leaders and "no leader" lines are skipped.
func awaitWatched(t *testing.T, lines <-chan procLine, name string) int64 {
	t.Helper()
	// 2026-11-21T16:30:01.123Z leader NAME token N since T
	f := awaitFields(t, lines, "", func(f []string) bool {
		return len(f) == 7 && f[1] == "leader" && f[2] == name && f[3] == "token" && f[5] == "since"
	})
	for _, at := range []string{f[0], f[6]} {
		if _, err := time.Parse(watchTime, at); err != nil {
			t.Errorf("neli watch printed a malformed time %q: %v", at, err)
		}
	}
	token, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		t.Fatalf("neli watch printed a malformed token %q", f[4])
	}
	return token
}

// awaitFields waits for a line whose fields satisfy match and, unless name is empty, whose second
// field is name, and returns its fields.
func awaitFields(t *testing.T, lines <-chan procLine, name string, match func([]string) bool) []string {
	t.Helper()
	timeout := time.After(awaitLimit)
	for {
		select {
		case l := <-lines:
			f := strings.Fields(l.text)
			if match(f) && (name == "" || f[1] == name) {
				return f
			}
			t.Logf("%s: %s", l.proc, l.text)
		case <-timeout:
			t.Fatalf("no awaited line from %s within %v", orAny(name), awaitLimit)
		}
	}
}

func orAny(name string) string {
	if name == "" {
		return "any process"
	}
	return name
}

// TestWatchFollowsHandoffs runs two contenders and neli watch, hands leadership over with SIGTERM,
// and checks that watch printed both leaders with the tokens that their commands received in
// NELI_TOKEN, increasing, and that watching did not touch the group.
func TestWatchFollowsHandoffs(t *testing.T) {
	b := startBroker(t)
	group := testGroup(t)
	cmdLines, watchLines := make(chan procLine, 100), make(chan procLine, 100)
	procs := map[string]*runProc{}
	for _, name := range []string{"a", "b"} {
		procs[name] = startRun(t, b.Addr, cmdLines, nil, "--name", name, "--", "sh", "-c", tokenScript)
	}
	first, firstToken := awaitStart(t, cmdLines, "")
	other := map[string]string{"a": "b", "b": "a"}[first]
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	before, err := b.WaitGroupStable(ctx, group, 2)
	if err != nil {
		t.Fatalf("group %s did not settle with both contenders: %v", group, err)
	}

	w := startProc(t, "watch", watchLines, nil, "watch", "--kafka", b.Addr, "--group", group,
		"--heartbeat-timeout", "1s", "--name", "watcher")
	if got := awaitWatched(t, watchLines, first); got != firstToken {
		t.Errorf("neli watch shows %s with token %d, but its command got NELI_TOKEN=%d", first, got, firstToken)
	}
	// Watch has been reading partition 0 for a while now; had it joined the group, the group
	// would have a third member and a new generation.
	after := b.GroupInfo(group)
	if len(after.Members) != 2 || after.Epoch != before.Epoch {
		t.Errorf("group %s went from %d members (generation %d) to %d (generation %d) while watched",
			group, len(before.Members), before.Epoch, len(after.Members), after.Epoch)
	}
	for _, m := range after.Members {
		if strings.Contains(m.ClientID, "watcher") {
			t.Errorf("neli watch (%s) is a member of group %s", m.ClientID, group)
		}
	}

	t.Logf("%s leads with token %d; stopping it with SIGTERM", first, firstToken)
	procs[first].signal(t, syscall.SIGTERM)
	_, otherToken := awaitStart(t, cmdLines, other)
	if otherToken <= firstToken {
		t.Errorf("NELI_TOKEN went from %d (%s) to %d (%s): not increasing", firstToken, first, otherToken, other)
	}
	if got := awaitWatched(t, watchLines, other); got != otherToken {
		t.Errorf("neli watch shows %s with token %d, but its command got NELI_TOKEN=%d", other, got, otherToken)
	}

	w.signal(t, syscall.SIGINT)
	if status := w.wait(t); status != 0 {
		t.Errorf("neli watch exited with %d after SIGINT, want 0", status)
	}
	procs[other].signal(t, syscall.SIGTERM)
	for _, name := range []string{first, other} {
		if status := procs[name].wait(t); status != 0 {
			t.Errorf("neli run %s exited with %d after SIGTERM, want 0", name, status)
		}
	}
}

// TestRunYieldsOnSIGUSR1 moves leadership away with SIGUSR1, checks that the command was stopped
// before the other instance started its own and that tokens increase, then that the yielded
// instance contends again once --yield-for has passed.
func TestRunYieldsOnSIGUSR1(t *testing.T) {
	b := startBroker(t)
	logPath := t.TempDir() + "/leader.log"
	lines := make(chan procLine, 100)
	procs := map[string]*runProc{}
	for _, name := range []string{"a", "b"} {
		procs[name] = startRun(t, b.Addr, lines, []string{"LOG=" + logPath},
			"--name", name, "--grace", "5s", "--yield-for", "2s", "--", "sh", "-c", leaderScript)
	}
	first, t1 := awaitStart(t, lines, "")
	other := map[string]string{"a": "b", "b": "a"}[first]
	t.Logf("%s leads with token %d; sending it SIGUSR1", first, t1)
	procs[first].signal(t, syscall.SIGUSR1)
	_, t2 := awaitStart(t, lines, other)

	t.Logf("%s leads with token %d; stopping it so that %s takes over after its yield", other, t2, first)
	procs[other].signal(t, syscall.SIGTERM)
	_, t3 := awaitStart(t, lines, first)
	if !(t1 < t2 && t2 < t3) {
		t.Errorf("NELI_TOKEN went %d, %d, %d across the handoffs: not increasing", t1, t2, t3)
	}
	procs[first].signal(t, syscall.SIGTERM)
	for _, name := range []string{first, other} {
		if status := procs[name].wait(t); status != 0 {
			t.Errorf("neli run %s exited with %d, want 0", name, status)
		}
	}
	checkLeaderLog(t, logPath, first, other, first)
}

// TestRunMetrics serves metrics from a leader and a follower and checks what they report.
func TestRunMetrics(t *testing.T) {
	b := startBroker(t)
	lines := make(chan procLine, 100)
	addrs := map[string]string{"a": freeAddr(t), "b": freeAddr(t)}
	procs := map[string]*runProc{}
	for name, addr := range addrs {
		procs[name] = startRun(t, b.Addr, lines, nil, "--name", name, "--metrics-addr", addr, "--", "sh", "-c", tokenScript)
	}
	leader, token := awaitStart(t, lines, "")
	follower := map[string]string{"a": "b", "b": "a"}[leader]

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	want := map[string]string{
		leader:   fmt.Sprintf(`goneli_leader{group="%s",name="%s"} 1`, testGroup(t), leader),
		follower: fmt.Sprintf(`goneli_leader{group="%s",name="%s"} 0`, testGroup(t), follower),
	}
	// The follower's server may not be up yet, and the leader's gauge turns to 1 just after its
	// command starts, so both are polled until they say so.
	for name, line := range want {
		body := pollMetrics(t, client, "http://"+addrs[name]+"/metrics", line)
		if name == leader && !strings.Contains(body, fmt.Sprintf("goneli_fencing_token{group=%q,name=%q} %d", testGroup(t), leader, token)) {
			t.Errorf("the leader's /metrics lacks its fencing token %d:\n%s", token, body)
		}
	}
	for name, addr := range addrs {
		status, body := get(t, client, "http://"+addr+"/healthz")
		var h struct {
			Healthy bool `json:"healthy"`
			Leader  bool `json:"leader"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &h) != nil || !h.Healthy || h.Leader != (name == leader) {
			t.Errorf("/healthz of %s: status %d, body %s; want 200, healthy, leader=%v", name, status, body, name == leader)
		}
	}
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
	}
	for name, p := range procs {
		if status := p.wait(t); status != 0 {
			t.Errorf("neli run %s exited with %d, want 0", name, status)
		}
	}
}

func TestRunMetricsAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	status, stdout, stderr := runNeli(t, "run", "--kafka", "127.0.0.1:1", "--metrics-addr", ln.Addr().String(), "--", "true")
	if status != exitFail || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "--metrics-addr") {
		t.Errorf("status %d, stdout %q, stderr %q; want status 1 and a one-line error naming --metrics-addr", status, stdout, stderr)
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// pollMetrics fetches url until the body has a line equal to want, and returns the body.
func pollMetrics(t *testing.T, client *http.Client, url, want string) string {
	t.Helper()
	deadline := time.Now().Add(awaitLimit)
	var body []byte
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
		}
		if err == nil && resp.StatusCode == http.StatusOK {
			for _, line := range strings.Split(string(body), "\n") {
				if line == want {
					return string(body)
				}
			}
		}
		time.Sleep(50 * time.Millisecond) // a bounded poll: there is no event to await
	}
	t.Fatalf("%s never showed %q within %v; last body:\n%s", url, want, awaitLimit, body)
	return ""
}

func get(t *testing.T, client *http.Client, url string) (int, []byte) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, body
}

// TestWatchPrinter checks both output formats in process.
func TestWatchPrinter(t *testing.T) {
	at := time.Date(2026, 11, 21, 16, 30, 1, 123e6, time.UTC)
	since := at.Add(-2 * time.Second)
	leader := goneli.LeaderInfo{Name: "a", Address: "10.0.0.7:8080", Tenure: "3", Token: 42, Since: since}
	for _, c := range []struct {
		json bool
		want string
	}{
		{false, "2026-11-21T16:30:01.123Z no leader\n" +
			"2026-11-21T16:30:01.123Z leader a at 10.0.0.7:8080 token 42 since 2026-11-21T16:29:59.123Z\n" +
			"2026-11-21T16:30:01.123Z no leader (a's heartbeats stopped; its token was 42)\n"},
		{true, `{"time":"2026-11-21T16:30:01.123Z","event":"no-leader"}` + "\n" +
			`{"time":"2026-11-21T16:30:01.123Z","event":"leader","leader":"a","address":"10.0.0.7:8080","tenure":"3","token":42,"since":"2026-11-21T16:29:59.123Z"}` + "\n" +
			`{"time":"2026-11-21T16:30:01.123Z","event":"no-leader","last_leader":"a","last_token":42}` + "\n"},
	} {
		var out bytes.Buffer
		p := &watchPrinter{w: &out, json: c.json, now: func() time.Time { return at }}
		p.print(goneli.LeaderInfo{})
		p.print(leader)
		p.print(goneli.LeaderInfo{})
		if out.String() != c.want {
			t.Errorf("json=%v: got\n%s\nwant\n%s", c.json, out.String(), c.want)
		}
	}
}

// TestWatchPrinterRoles checks that lines about roles name them and that each role's "no leader"
// recalls that role's last leader, not another role's.
func TestWatchPrinterRoles(t *testing.T) {
	at := time.Date(2026, 11, 21, 16, 30, 1, 123e6, time.UTC)
	since := at.Add(-2 * time.Second)
	billing := goneli.LeaderInfo{Role: "billing", Partition: 0, Name: "a", Tenure: "3", Token: 42, Since: since}
	audit := goneli.LeaderInfo{Role: "audit", Partition: 1, Name: "b", Tenure: "5", Token: 7, Since: since}
	odd := goneli.LeaderInfo{Role: "two words", Partition: 2, Name: "c", Address: "http://c:8080/a b", Tenure: "1", Token: 1, Since: since}
	for _, c := range []struct {
		json bool
		want string
	}{
		{false, "2026-11-21T16:30:01.123Z role billing leader a token 42 since 2026-11-21T16:29:59.123Z\n" +
			"2026-11-21T16:30:01.123Z role audit leader b token 7 since 2026-11-21T16:29:59.123Z\n" +
			"2026-11-21T16:30:01.123Z role billing no leader (a's heartbeats stopped; its token was 42)\n" +
			"2026-11-21T16:30:01.123Z role audit no leader (b's heartbeats stopped; its token was 7)\n" +
			`2026-11-21T16:30:01.123Z role "two words" leader c at "http://c:8080/a b" token 1 since 2026-11-21T16:29:59.123Z` + "\n"},
		{true, `{"time":"2026-11-21T16:30:01.123Z","role":"billing","partition":0,"event":"leader","leader":"a","tenure":"3","token":42,"since":"2026-11-21T16:29:59.123Z"}` + "\n" +
			`{"time":"2026-11-21T16:30:01.123Z","role":"audit","partition":1,"event":"leader","leader":"b","tenure":"5","token":7,"since":"2026-11-21T16:29:59.123Z"}` + "\n" +
			`{"time":"2026-11-21T16:30:01.123Z","role":"billing","partition":0,"event":"no-leader","last_leader":"a","last_token":42}` + "\n" +
			`{"time":"2026-11-21T16:30:01.123Z","role":"audit","partition":1,"event":"no-leader","last_leader":"b","last_token":7}` + "\n" +
			`{"time":"2026-11-21T16:30:01.123Z","role":"two words","partition":2,"event":"leader","leader":"c","address":"http://c:8080/a b","tenure":"1","token":1,"since":"2026-11-21T16:29:59.123Z"}` + "\n"},
	} {
		var out bytes.Buffer
		p := &watchPrinter{w: &out, json: c.json, now: func() time.Time { return at }}
		p.print(billing)
		p.print(audit)
		p.print(goneli.LeaderInfo{Role: "billing", Partition: 0})
		p.print(goneli.LeaderInfo{Role: "audit", Partition: 1})
		p.print(odd)
		if out.String() != c.want {
			t.Errorf("json=%v: got\n%s\nwant\n%s", c.json, out.String(), c.want)
		}
	}
}
