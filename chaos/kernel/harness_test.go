package kernel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/member"
	"github.com/goneli/goneli/internal/verdict"
	"github.com/twmb/franz-go/pkg/kfake"
)

// The fault kinds. Each hits the current leader (delay-all: every member).
const (
	kindBlackhole = "blackhole"  // nothing gets through, either way
	kindOneWayIn  = "oneway-in"  // the broker's packets to the member are lost
	kindOneWayOut = "oneway-out" // the member's packets to the broker are lost
	kindDelay     = "delay"      // every packet, both ways, held for delay ± jitter
	kindDelayAll  = "delay-all"  // delay, of every member at once
	kindLinkDown  = "link-down"  // eth0 down: sends fail at once ("network is unreachable")
	kindSigkill   = "sigkill"    // crash, then a new process in the same namespace
	kindSigstop   = "sigstop"    // frozen, then SIGCONT
	kindSigterm   = "sigterm"    // graceful stop, then a new process
)

// kinds are the kinds of the random mix, one of each in the short run.
var kinds = []string{kindBlackhole, kindOneWayIn, kindOneWayOut, kindDelay, kindLinkDown, kindSigkill, kindSigstop, kindSigterm}

// The delay of the delay faults: 400 ms ± 100 ms each way (delayer).
const (
	delayBy     = 400 * time.Millisecond
	delayJitter = 100 * time.Millisecond
)

const (
	group = "kernel"
	topic = group + ".neli"
)

// awaitLimit bounds every wait for the group: it turns a stuck group into a failure, not a hang.
const awaitLimit = 60 * time.Second

// recent is how long ago a member's last action may be for it to count as leading: three of its
// reporting intervals.
const recent = 150 * time.Millisecond

// planned is a fault to inject and how long it lasts (for kinds that last: not sigkill, sigterm).
type planned struct {
	kind string
	dur  time.Duration
	name string // a scenario's name, or "" for the random mix
}

// harness is one trial: the lab, the broker on the bridge, a member per slot, and what happened.
type harness struct {
	t      *testing.T
	lease  time.Duration
	rng    *rand.Rand
	lab    *lab
	drop   *ebpf.Program
	broker *kfake.Cluster
	addr   string
	fleet  *fleet.Fleet
	procs  []*fleet.Proc
	gen    []int
	dir    string
	args   []string // extra member flags
	faults []verdict.Fault
	names  []string // scenario name of each fault, "" for none
}

// options of a trial.
type options struct {
	lease   time.Duration
	members int
	seed    uint64
	args    []string // extra member flags
	logDir  string
}

func newHarness(t *testing.T, o options) *harness {
	l := newLab(t, o.members)
	h := &harness{t: t, lease: o.lease, lab: l, rng: rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15)), args: o.args}
	h.drop = loadDrop(t)
	h.dir = o.logDir
	keep := h.dir != ""
	if h.dir == "" {
		var err error
		if h.dir, err = os.MkdirTemp("", "goneli-kernel-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || keep {
			t.Logf("member logs kept in %s", h.dir)
		} else {
			_ = os.RemoveAll(h.dir)
		}
	})
	// The broker listens on the bridge's address and so advertises it: every namespace reaches it
	// over its veth, and nothing else does.
	host := l.hostIP()
	opts := append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, topic),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, net.JoinHostPort(host, "0")) })},
		kafkatest.MinSession(kafkatest.DefaultGroupMinSessionTimeout)...)
	b, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	h.broker = b
	h.addr = b.ListenAddrs()[0]
	t.Cleanup(b.Close)
	h.fleet = fleet.New(fleet.Options{
		OnLine: func(l member.Line) {
			if l.Event == member.EventError && !strings.Contains(l.Info, goneli.ErrCloseTimeout.Error()) {
				t.Errorf("member %s reported an error: %s", l.Name, l.Info)
			}
		},
		OnExit: func(p *fleet.Proc) {
			if e, _ := p.Exit(); !e.Expected {
				t.Errorf("member %s exited on its own: %v (see %s)", p.Name, e.Status(), h.logFile(p.Name))
			}
		},
	})
	// Registered after the lab's cleanup, so it runs first: members stop before their namespaces
	// go. KillAll ends any that a failed test left running.
	t.Cleanup(func() {
		if err := h.fleet.StopAll(awaitLimit); err != nil {
			t.Logf("stopping members: %v", err)
		}
		h.fleet.KillAll()
	})
	h.procs = make([]*fleet.Proc, o.members)
	h.gen = make([]int, o.members)
	for slot := range o.members {
		h.start(slot)
	}
	h.awaitAct(time.Now(), "a first leader")
	return h
}

func (h *harness) logFile(name string) string { return filepath.Join(h.dir, name+".log") }

// start runs a new incarnation of the member of slot in the slot's namespace. `ip netns exec`
// execs the member, so the process started is the member itself, with its own pid.
func (h *harness) start(slot int) {
	h.gen[slot]++
	name := fmt.Sprintf("m%d-%d", slot, h.gen[slot])
	exe, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	args := []string{"netns", "exec", h.lab.slots[slot].ns, exe,
		"-kafka", h.addr, "-group", group, "-topic", topic, "-name", name,
		"-heartbeat-timeout", h.lease.String(), "-task", "1ms", "-log-level", "info"}
	if h.lease < goneli.DefaultHeartbeatTimeout {
		// As the chaos suite polls at a 1 s lease; at the default, goneli's default.
		args = append(args, "-min-poll-interval", "50ms")
	}
	args = append(args, h.args...)
	p, err := h.fleet.Start(fleet.Spec{Name: name, Path: "ip", Args: args, Env: []string{memberEnv + "=1"},
		HoldStdin: true, LogFile: h.logFile(name)})
	if err != nil {
		h.t.Fatalf("starting member %s: %v", name, err)
	}
	h.procs[slot] = p
}

// awaitAct waits until some member acts at or after since.
func (h *harness) awaitAct(since time.Time, what string) {
	h.t.Helper()
	if _, _, err := h.fleet.WaitFor(0, awaitLimit, what, func(l member.Line) bool {
		return l.Event == member.EventAct && l.To >= since.UnixNano()
	}); err != nil {
		h.t.Fatal(err)
	}
}

// leader returns the slot of the member that acted last, within recent, or -1.
func (h *harness) leader() int {
	names := make([]string, len(h.procs))
	for slot, p := range h.procs {
		names[slot] = p.Name
	}
	return verdict.LastActor(h.fleet.Lines(), names, time.Now().Add(-recent))
}

// awaitLeader waits for a member to lead now and returns its slot.
func (h *harness) awaitLeader() int {
	h.t.Helper()
	deadline := time.Now().Add(awaitLimit)
	for {
		if slot := h.leader(); slot >= 0 {
			return slot
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("nobody led within %v%s", awaitLimit, h.fleet.Diagnostics())
		}
		// The next act line, or the flush interval, whichever first: then look again.
		_, changed := h.fleet.Snapshot()
		select {
		case <-changed:
		case <-time.After(recent):
		}
	}
}

func (h *harness) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(h.rng.Int64N(int64(hi-lo)+1))
}

// run injects the faults in order, each on whoever leads when it begins, and waits after each for
// a leader again.
func (h *harness) run(plan []planned) {
	for i, p := range plan {
		if p.name != "" {
			// A scenario starts from a settled group, not from the last fault's aftermath.
			h.settle()
		} else {
			// Let the group run for a while, sometimes not long enough to settle.
			time.Sleep(h.between(h.lease/4, 2*h.lease))
		}
		f := h.inject(p)
		h.faults = append(h.faults, f)
		h.names = append(h.names, p.name)
		h.t.Logf("fault %d/%d %s%s: victim %s %s, healed after %v", i+1, len(plan), f.Kind, scenarioSuffix(p.name), f.Victim, f.Detail,
			f.Healed.Sub(f.At).Round(time.Millisecond))
		h.awaitAct(f.Healed, "a leader after "+f.Kind)
		if h.t.Failed() {
			return
		}
	}
}

func scenarioSuffix(name string) string {
	if name == "" {
		return ""
	}
	return " (" + name + ")"
}

// inject makes one fault on the leader, lasting p.dur, and undoes it.
func (h *harness) inject(p planned) verdict.Fault {
	victim := h.awaitLeader()
	proc, s := h.procs[victim], h.lab.slots[victim]
	f := verdict.Fault{Kind: p.kind, Victim: proc.Name, WasLeader: true}
	var a attachment
	// Whatever ends the fault early (a failed attach), nothing of it outlives it.
	defer a.Close()
	cut := func(ns, dev string) {
		if err := a.attach(ns, dev, h.drop, ebpf.AttachTCXIngress); err != nil {
			h.t.Fatal(err)
		}
	}
	f.At = time.Now()
	switch p.kind {
	case kindBlackhole, kindOneWayIn, kindOneWayOut:
		// The host end's ingress carries the member's packets, eth0's the broker's.
		if p.kind != kindOneWayIn {
			cut("", s.host)
		}
		if p.kind != kindOneWayOut {
			cut(s.ns, "eth0")
		}
		time.Sleep(p.dur)
		if err := a.Close(); err != nil {
			h.t.Error(err)
		}
	case kindDelay, kindDelayAll:
		slots := []*slot{s}
		if p.kind == kindDelayAll {
			slots = h.lab.slots
		}
		var ds []*delayer
		// Only if the fault ends early; otherwise they are closed before it is healed.
		defer func() {
			for _, d := range ds {
				if err := d.Close(); err != nil {
					h.t.Error(err)
				}
			}
		}()
		for _, s := range slots {
			d, err := startDelay(s.ns, delayBy, delayJitter)
			if err != nil {
				h.t.Fatal(err)
			}
			ds = append(ds, d)
		}
		time.Sleep(p.dur)
		for _, d := range ds {
			if err := d.Close(); err != nil {
				h.t.Error(err)
			}
		}
		ds = nil
	case kindLinkDown:
		h.lab.must("ip", "-n", s.ns, "link", "set", "eth0", "down")
		time.Sleep(p.dur)
		h.lab.must("ip", "-n", s.ns, "link", "set", "eth0", "up")
	case kindSigkill:
		h.signal(proc, syscall.SIGKILL)
		<-proc.Done()
		h.start(victim)
	case kindSigterm:
		if err := h.fleet.Stop(proc, awaitLimit); err != nil {
			h.t.Error(err)
		}
		h.start(victim)
	case kindSigstop:
		h.signal(proc, syscall.SIGSTOP)
		time.Sleep(p.dur)
		h.signal(proc, syscall.SIGCONT)
	default:
		h.t.Fatalf("unknown fault kind %q", p.kind)
	}
	f.Healed = time.Now()
	if p.kind != kindSigkill && p.kind != kindSigterm {
		f.Detail = fmt.Sprintf("for %v", p.dur.Round(time.Millisecond))
	}
	return f
}

func (h *harness) signal(p *fleet.Proc, sig syscall.Signal) {
	if _, err := h.fleet.Signal(p, sig); err != nil {
		h.t.Error(err)
	}
}

// settle waits until every member is in a stable group and someone leads, then lets it run a lease.
func (h *harness) settle() {
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	_, err := h.broker.WaitGroupStable(ctx, group, len(h.procs))
	cancel()
	if err != nil {
		h.t.Logf("the group did not settle within %v: %v", awaitLimit, err)
	}
	h.awaitLeader()
	// Nothing to await: a lease of ordinary renewals before the scenario.
	time.Sleep(h.lease)
}

// finish waits for the group to settle, stops every member, judges the trial and fails the test on
// an overlap or a broken event order.
func (h *harness) finish() verdict.Report {
	ctx, cancel := context.WithTimeout(context.Background(), 4*goneli.SessionTimeout(h.lease))
	_, _ = h.broker.WaitGroupStable(ctx, group, len(h.procs))
	cancel()
	if err := h.fleet.StopAll(awaitLimit); err != nil {
		h.t.Logf("stopping members: %v", err)
	}
	r := verdict.Check(h.fleet.ByProcess(), h.fleet.Deaths(), h.faults)
	for _, o := range r.Overlaps {
		h.t.Errorf("OVERLAP: %v", o)
	}
	for _, v := range r.Violations {
		h.t.Errorf("%s", v)
	}
	return r
}
