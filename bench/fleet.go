package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/member"
)

// memberEnv, set in a process's environment, makes the benchmark binary (or the test binary of
// this package) run as one member instead of as the benchmark.
const memberEnv = "GONELI_BENCH_MEMBER"

// runMemberIfAsked runs this process as a member if memberEnv is set, and then exits.
func runMemberIfAsked() {
	if os.Getenv(memberEnv) != "" {
		os.Exit(member.Main(os.Args[1:]))
	}
}

// Events the harness adds to a fleet's log next to the members' own lines and the fleet's
// markers (spawned, sigterm, sigkill, exit), so that one log holds everything a trial's timeline
// needs.
const (
	evCut  = "cut"  // the harness black-holed the member's connections
	evHeal = "heal" // the harness ended the cut
)

// memberFleet is the set of member processes contending in one group of one scenario.
type memberFleet struct {
	*fleet.Fleet
	env      *env
	scenario string
	group    string
	lease    time.Duration
	task     time.Duration
	spawned  int // only the scenario's goroutine spawns
	// roles, if not empty, are the roles every member contends for (member -roles); otherwise
	// members contend for the single leadership of goneli.New.
	roles []string
	// ownGroups puts every member in a group of its own, <group>-<member>, instead of all in one.
	ownGroups bool
	// extra are more arguments for every member.
	extra []string
}

func newFleet(e *env, scenario string, lease, task time.Duration) *memberFleet {
	return &memberFleet{
		Fleet:    fleet.New(fleet.Options{Marks: true}),
		env:      e,
		scenario: scenario,
		group:    fmt.Sprintf("bench-%s-%s", e.runID, scenario),
		lease:    lease,
		task:     task,
	}
}

// spawn starts one more member.
func (f *memberFleet) spawn() (*fleet.Proc, error) {
	f.spawned++
	name := fmt.Sprintf("%s-m%02d", f.scenario, f.spawned)
	group := f.group
	if f.ownGroups {
		group = f.memberGroup(name)
	}
	args := []string{
		"--kafka", f.env.addr,
		"--group", group,
		"--name", name,
		"--heartbeat-timeout", f.lease.String(),
		"--task", f.task.String(),
		"--log-level", f.env.opts.memberLog,
	}
	if len(f.roles) > 0 {
		args = append(args, "--roles", strconv.Itoa(len(f.roles)))
	}
	args = append(args, f.extra...)
	s := fleet.Spec{
		Name:      name,
		Path:      f.env.exe,
		Args:      args,
		Env:       []string{memberEnv + "=1"},
		Pdeathsig: true, // a member outliving a crashed harness would contend in a group nobody watches
	}
	if dir := f.env.opts.memberLogs; dir != "" {
		s.LogFile = filepath.Join(dir, name+".log")
	}
	p, err := f.Start(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.scenario, err)
	}
	return p, nil
}

// waitFor returns the first line at index from or later that satisfies pred, waiting for the
// members to print it, and the index after it. It gives up after limit, which only guards against
// a broken run: it is not a measurement.
func (f *memberFleet) waitFor(from int, limit time.Duration, what string, pred func(member.Line) bool) (member.Line, int, error) {
	l, next, err := f.WaitFor(from, limit, what, pred)
	if err != nil {
		err = fmt.Errorf("%s: %w", f.scenario, err)
	}
	return l, next, err
}

// waitCount waits until n lines from index from on satisfy pred.
func (f *memberFleet) waitCount(from, n int, limit time.Duration, what string, pred func(member.Line) bool) error {
	seen := 0
	_, _, err := f.waitFor(from, limit, what, func(l member.Line) bool {
		if pred(l) {
			seen++
		}
		return seen >= n
	})
	return err
}

// memberGroup is the group of a member with a group of its own.
func (f *memberFleet) memberGroup(name string) string { return f.group + "-" + name }

// leader names the member that leads now, judged by its latest leadership event.
func (f *memberFleet) leader() (string, bool) {
	name, ok := leaders(f.Lines())[""]
	return name, ok
}

// leaders names the member that leads each role now ("" without roles), judged by the members'
// latest leadership events; a role nobody leads is missing.
func leaders(lines []member.Line) map[string]string {
	t := newLeaderTracker()
	for _, l := range lines {
		t.add(l)
	}
	return t.leaders()
}

// leaderTracker follows who leads each role through a log, one line at a time.
type leaderTracker struct {
	n int // lines added
	// latest maps a member and a role to the index of the member's latest acquisition of the
	// role, or -1 after it lost it. The latest acquisition wins should an old leader not have
	// reported its fencing yet.
	latest map[leaderKey]int
}

type leaderKey struct{ name, role string }

func newLeaderTracker() *leaderTracker { return &leaderTracker{latest: map[leaderKey]int{}} }

func (t *leaderTracker) add(l member.Line) {
	i := t.n
	t.n++
	switch l.Event {
	case member.EventAcquired:
		t.latest[leaderKey{l.Name, l.Role}] = i
	case member.EventFenced, member.EventRevoked:
		t.latest[leaderKey{l.Name, l.Role}] = -1
	case fleet.EventExit:
		for k := range t.latest {
			if k.name == l.Name {
				t.latest[k] = -1
			}
		}
	}
}

// leaders is who leads each role after the lines added so far.
func (t *leaderTracker) leaders() map[string]string {
	best := map[string]int{}
	out := map[string]string{}
	for k, i := range t.latest {
		if b, seen := best[k.role]; i >= 0 && (!seen || i > b) {
			best[k.role], out[k.role] = i, k.name
		}
	}
	return out
}

// signal sends sig to p and returns when it was sent, which the log marks too.
func (f *memberFleet) signal(p *fleet.Proc, sig syscall.Signal) time.Time {
	t, _ := f.Signal(p, sig)
	return t
}

// close stops every member that is still running and waits for all output to be read.
func (f *memberFleet) close() error {
	err := f.StopAll(30*time.Second + 2*f.lease)
	if err != nil {
		err = fmt.Errorf("%s: %w", f.scenario, err)
	}
	return err
}
