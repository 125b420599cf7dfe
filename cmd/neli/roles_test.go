package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goneli/goneli"
)

// roleScript is the command under neli run --roles. Like leaderScript it logs its start, a tick
// every 50 ms and its stop to $LOG with O_APPEND writes, each line naming its role; on stdout it
// says "start ROLE NAME TOKEN" so that the test can follow who runs which role.
const roleScript = `echo "start $NELI_ROLE $NELI_NAME" >> "$LOG"
trap 'echo "stop $NELI_ROLE $NELI_NAME" >> "$LOG"; exit 0' TERM
echo "start $NELI_ROLE $NELI_NAME $NELI_TOKEN"
while :; do echo "tick $NELI_ROLE $NELI_NAME" >> "$LOG"; sleep 0.05; done`

// roleTracker follows the "start ROLE NAME TOKEN" lines of the copies of a command: which
// instance started each role last, and every token each role's copies were given.
type roleTracker struct {
	t      *testing.T
	lines  <-chan procLine
	holder map[string]string  // role -> instance whose copy started last
	tokens map[string][]int64 // role -> NELI_TOKEN of each copy, in order of start
	// starts is role -> "NAME TOKEN" of each copy, in order of start, for messages.
	starts map[string][]string
}

func newRoleTracker(t *testing.T, lines <-chan procLine) *roleTracker {
	return &roleTracker{t: t, lines: lines, holder: map[string]string{}, tokens: map[string][]int64{}, starts: map[string][]string{}}
}

// await reads start lines until cond holds for the holders, and returns them.
func (rt *roleTracker) await(what string, cond func(holder map[string]string) bool) map[string]string {
	rt.t.Helper()
	timeout := time.After(awaitLimit)
	for !cond(rt.holder) {
		select {
		case l := <-rt.lines:
			f := strings.Fields(l.text)
			if len(f) != 4 || f[0] != "start" {
				rt.t.Logf("%s: %s", l.proc, l.text)
				continue
			}
			token, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil || token <= 0 {
				rt.t.Fatalf("the copy of role %q under %s got NELI_TOKEN %q, want a positive integer", f[1], f[2], f[3])
			}
			role, name := f[1], f[2]
			// A copy restarted after a fence resumes the tenure with its token; a copy of another
			// tenure, which another instance's copy always is, must have a larger one.
			if ts := rt.tokens[role]; len(ts) > 0 {
				if last := ts[len(ts)-1]; token < last || token == last && rt.holder[role] != name {
					rt.t.Errorf("role %s: the copy under %s got NELI_TOKEN %d after copies %v: tokens must increase from tenure to tenure",
						role, name, token, rt.starts[role])
				}
			}
			rt.holder[role] = name
			rt.tokens[role] = append(rt.tokens[role], token)
			rt.starts[role] = append(rt.starts[role], name+" "+f[3])
		case <-timeout:
			rt.t.Fatalf("not within %v: %s; copies started last: %v", awaitLimit, what, rt.holder)
		}
	}
	rt.t.Logf("%s: %v", what, rt.holder)
	return maps.Clone(rt.holder)
}

// held returns the roles whose copies name started last, sorted.
func held(holder map[string]string, name string) []string {
	var out []string
	for role, h := range holder {
		if h == name {
			out = append(out, role)
		}
	}
	slices.Sort(out)
	return out
}

// allHeldBy holds when every one of roles was last started by one of names.
func allHeldBy(roles []string, names ...string) func(map[string]string) bool {
	return func(holder map[string]string) bool {
		for _, r := range roles {
			if !slices.Contains(names, holder[r]) {
				return false
			}
		}
		return true
	}
}

// TestRunRolesNeverRunTwoCopiesOfARole runs two neli run --roles 4 instances, then moves roles
// about with SIGUSR1, SIGTERM, a third instance and SIGKILL, and checks from the shared log that
// no role's command wrote anything after another copy of that role had started and that every copy
// saw its role in NELI_ROLE; the tracker checks that each role's tokens increased.
func TestRunRolesNeverRunTwoCopiesOfARole(t *testing.T) {
	b := startBroker(t)
	logPath := filepath.Join(t.TempDir(), "roles.log")
	lines := make(chan procLine, 1000)
	procs := map[string]*runProc{}
	start := func(name string) {
		procs[name] = startRun(t, b.Addr, lines, []string{"LOG=" + logPath},
			"--name", name, "--roles", "4", "--grace", "5s", "--yield-for", "2s", "--", "sh", "-c", roleScript)
	}
	roles := goneli.Shards(4)
	rt := newRoleTracker(t, lines)
	start("a")
	start("b")
	rt.await("every role runs, under both instances", func(h map[string]string) bool {
		return allHeldBy(roles, "a", "b")(h) && len(held(h, "a")) > 0 && len(held(h, "b")) > 0
	})

	procs["a"].signal(t, syscall.SIGUSR1)
	rt.await("a yielded every role to b", allHeldBy(roles, "b"))
	rt.await("a contends again after --yield-for and takes some roles back", func(h map[string]string) bool {
		return len(held(h, "a")) > 0
	})

	procs["a"].signal(t, syscall.SIGTERM)
	rt.await("a's roles handed to b on SIGTERM", allHeldBy(roles, "b"))
	if status := procs["a"].wait(t); status != 0 {
		t.Errorf("neli run a exited with %d after SIGTERM, want 0", status)
	}

	start("c")
	rt.await("c takes some roles from b", func(h map[string]string) bool { return len(held(h, "c")) > 0 })
	procs["b"].signal(t, syscall.SIGKILL)
	rt.await("c takes b's roles after b was killed", allHeldBy(roles, "c"))
	procs["b"].wait(t)
	procs["c"].signal(t, syscall.SIGTERM)
	if status := procs["c"].wait(t); status != 0 {
		t.Errorf("neli run c exited with %d after SIGTERM, want 0", status)
	}

	checkRoleLog(t, logPath, roles)
}

// checkRoleLog checks that every line of the log names one of roles, that each role was started,
// and that no copy of a role wrote to the log after another copy of the same role had started.
func checkRoleLog(t *testing.T, logPath string, roles []string) {
	t.Helper()
	current := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(readFile(t, logPath)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("line %d of the log is malformed (is NELI_ROLE missing?): %q", i+1, line)
		}
		role, name := f[1], f[2]
		switch {
		case !slices.Contains(roles, role):
			t.Errorf("line %d: %q names role %q, want one of %v in NELI_ROLE", i+1, line, role, roles)
		case f[0] == "start":
			current[role] = name
		case current[role] != name:
			t.Errorf("line %d: %q after %s's copy of role %s started: two copies of a role ran at once", i+1, line, current[role], role)
		}
	}
	if got := slices.Sorted(maps.Keys(current)); !slices.Equal(got, roles) {
		t.Errorf("roles started: %v, want %v", got, roles)
	}
}

// TestRunRolesExitsWithACopysStatus checks that when one copy exits by itself, neli stops the
// other copies and exits with that copy's status.
func TestRunRolesExitsWithACopysStatus(t *testing.T) {
	b := startBroker(t)
	logPath := filepath.Join(t.TempDir(), "roles.log")
	lines := make(chan procLine, 100)
	// Role quits exits with 5 once role stays has started, so that there is a copy to stop.
	script := `echo "start $NELI_ROLE" >> "$LOG"
if [ "$NELI_ROLE" = quits ]; then
  until grep -q "start stays" "$LOG"; do sleep 0.05; done
  echo "exit quits"; exit 5
fi
trap 'echo "stop $NELI_ROLE" >> "$LOG"; exit 0' TERM
echo "start $NELI_ROLE"
while :; do sleep 0.05; done`
	p := startRun(t, b.Addr, lines, []string{"LOG=" + logPath},
		"--name", "solo", "--role", "stays", "--role", "quits", "--", "sh", "-c", script)
	awaitLine(t, lines, "exit ", "quits")
	if status := p.wait(t); status != 5 {
		t.Errorf("neli run exited with %d, want the status 5 of the copy that exited", status)
	}
	if log := readFile(t, logPath); !strings.Contains(log, "stop stays\n") {
		t.Errorf("the copy of role stays was not stopped with SIGTERM:\n%s", log)
	}
}

// TestRunRolesHooks checks that the hooks run per role with NELI_ROLE.
func TestRunRolesHooks(t *testing.T) {
	b := startBroker(t)
	lines := make(chan procLine, 10)
	p := startRun(t, b.Addr, lines, nil, "--name", "hooked", "--role", "billing", "--role", "audit",
		"--on-acquired", `echo "start $NELI_ROLE $NELI_NAME $NELI_TOKEN"`,
		"--on-revoked", `echo "end $NELI_ROLE $NELI_NAME $NELI_EVENT"`)
	rt := newRoleTracker(t, lines)
	rt.await("both roles acquired", allHeldBy([]string{"billing", "audit"}, "hooked"))
	p.signal(t, syscall.SIGTERM)
	ended := map[string]bool{}
	for len(ended) < 2 {
		f := awaitFields(t, lines, "", func(f []string) bool { return len(f) == 4 && f[0] == "end" })
		if f[2] != "hooked" || f[3] != "revoked" {
			t.Errorf("revoked hook saw NELI_NAME %q and NELI_EVENT %q", f[2], f[3])
		}
		ended[f[1]] = true
	}
	if !ended["billing"] || !ended["audit"] {
		t.Errorf("revoked hooks ran for %v, want billing and audit", ended)
	}
	if status := p.wait(t); status != 0 {
		t.Errorf("neli run exited with %d after SIGTERM, want 0", status)
	}
}

// roleTokenScript is a command for roles that reports its role and token and runs until stopped.
const roleTokenScript = `echo "start $NELI_ROLE $NELI_NAME $NELI_TOKEN"; exec sleep 600`

// TestWatchRoles runs one instance with two named roles and neli watch in both formats, and
// checks that watch reports each role's leader with the token its copy got, and each role's
// release when the instance stops.
func TestWatchRoles(t *testing.T) {
	b := startBroker(t)
	group := testGroup(t)
	roles := []string{"billing", "audit"}
	cmdLines := make(chan procLine, 100)
	run := startRun(t, b.Addr, cmdLines, nil, "--name", "a", "--role", "billing", "--role", "audit", "--", "sh", "-c", roleTokenScript)
	rt := newRoleTracker(t, cmdLines)
	rt.await("both roles run", allHeldBy(roles, "a"))
	tokens := map[string]int64{"billing": rt.tokens["billing"][0], "audit": rt.tokens["audit"][0]}

	textLines, jsonLines := make(chan procLine, 100), make(chan procLine, 100)
	watchers := []*runProc{
		startProc(t, "watch-text", textLines, nil, "watch", "--kafka", b.Addr, "--group", group, "--heartbeat-timeout", "1s"),
		startProc(t, "watch-json", jsonLines, nil, "watch", "--kafka", b.Addr, "--group", group, "--heartbeat-timeout", "1s", "--format", "json"),
	}
	// 2026-11-21T16:30:01.123Z role billing leader a token 7 since 2026-11-21T16:29:58.950Z
	for role, f := range awaitRoleLines(t, textLines, roles, func(f []string) bool {
		return len(f) == 9 && f[1] == "role" && f[3] == "leader" && f[5] == "token" && f[7] == "since"
	}) {
		if f[4] != "a" || f[6] != strconv.FormatInt(tokens[role], 10) {
			t.Errorf("neli watch shows role %s led by %s with token %s; its copy runs under a with NELI_TOKEN=%d", role, f[4], f[6], tokens[role])
		}
	}
	type record struct {
		Role       string `json:"role"`
		Partition  *int32 `json:"partition"`
		Event      string `json:"event"`
		Leader     string `json:"leader"`
		Token      int64  `json:"token"`
		LastLeader string `json:"last_leader"`
		LastToken  int64  `json:"last_token"`
	}
	records := func(event string) map[string]record {
		t.Helper()
		got := map[string]record{}
		timeout := time.After(awaitLimit)
		for len(got) < len(roles) {
			select {
			case l := <-jsonLines:
				var r record
				if err := json.Unmarshal([]byte(l.text), &r); err != nil {
					t.Fatalf("neli watch --format json printed %q: %v", l.text, err)
				}
				if r.Event == event {
					got[r.Role] = r
				}
			case <-timeout:
				t.Fatalf("neli watch --format json printed no %s record for every role within %v: %v", event, awaitLimit, got)
			}
		}
		return got
	}
	leaders := records("leader")
	for i, role := range roles {
		r := leaders[role]
		if r.Leader != "a" || r.Token != tokens[role] || r.Partition == nil || *r.Partition != int32(i) {
			t.Errorf("json record for role %s: %+v; want leader a, token %d, partition %d", role, r, tokens[role], i)
		}
	}

	run.signal(t, syscall.SIGTERM)
	if status := run.wait(t); status != 0 {
		t.Errorf("neli run exited with %d after SIGTERM, want 0", status)
	}
	// 2026-11-21T16:30:09.004Z role billing no leader (a's heartbeats stopped; its token was 7)
	for role, f := range awaitRoleLines(t, textLines, roles, func(f []string) bool {
		return len(f) >= 5 && f[1] == "role" && f[3] == "no" && f[4] == "leader"
	}) {
		want := fmt.Sprintf("role %s no leader (a's heartbeats stopped; its token was %d)", role, tokens[role])
		if got := strings.Join(f[1:], " "); got != want {
			t.Errorf("neli watch printed %q, want %q", got, want)
		}
	}
	for role, r := range records("no-leader") {
		if r.LastLeader != "a" || r.LastToken != tokens[role] {
			t.Errorf("json no-leader record for role %s: %+v; want last leader a, last token %d", role, r, tokens[role])
		}
	}
	for _, w := range watchers {
		w.signal(t, syscall.SIGINT)
		if status := w.wait(t); status != 0 {
			t.Errorf("neli %s exited with %d after SIGINT, want 0", w.name, status)
		}
	}
}

// awaitRoleLines waits until, for every one of roles, a line "TIME role ROLE ..." satisfying match
// has come, and returns each role's first such line, split into fields.
func awaitRoleLines(t *testing.T, lines <-chan procLine, roles []string, match func([]string) bool) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for len(got) < len(roles) {
		f := awaitFields(t, lines, "", func(f []string) bool {
			return match(f) && slices.Contains(roles, f[2]) && got[f[2]] == nil
		})
		got[f[2]] = f
	}
	return got
}

// TestRunRolesMetrics serves the metrics of an instance that leads two numbered roles.
func TestRunRolesMetrics(t *testing.T) {
	b := startBroker(t)
	lines := make(chan procLine, 100)
	addr := freeAddr(t)
	p := startRun(t, b.Addr, lines, nil, "--name", "m", "--roles", "2", "--metrics-addr", addr, "--", "sh", "-c", roleTokenScript)
	rt := newRoleTracker(t, lines)
	rt.await("both roles run", allHeldBy([]string{"0", "1"}, "m"))

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	labels := func(role string) string {
		return fmt.Sprintf(`{group=%q,name="m",role=%q}`, testGroup(t), role)
	}
	for _, role := range []string{"0", "1"} {
		body := pollMetrics(t, client, "http://"+addr+"/metrics", "goneli_leader"+labels(role)+" 1")
		if want := fmt.Sprintf("goneli_fencing_token%s %d", labels(role), rt.tokens[role][0]); !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
		if want := fmt.Sprintf(`goneli_live{group=%q,name="m"} 1`, testGroup(t)); !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	status, body := get(t, client, "http://"+addr+"/healthz")
	var h struct {
		Healthy bool     `json:"healthy"`
		Leading []string `json:"leading"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &h) != nil || !h.Healthy || !slices.Equal(h.Leading, []string{"0", "1"}) {
		t.Errorf("/healthz: status %d, body %s; want 200, healthy, leading [0 1]", status, body)
	}
	p.signal(t, syscall.SIGTERM)
	if status := p.wait(t); status != 0 {
		t.Errorf("neli run exited with %d, want 0", status)
	}
}
