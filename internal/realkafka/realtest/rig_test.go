// Package realtest holds goneli's tests on Apache Kafka itself (internal/realkafka): member
// processes, each the test binary run again as an internal/member contender, elect leaders on a
// real broker, and are stopped, killed and frozen while the checker of the chaos suite
// (internal/verdict) watches that no two ever act as leader at one instant.
package realtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/member"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/goneli/goneli/internal/verdict"
	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/goleak"
)

// memberEnv, when set, turns the test binary into a member process.
const memberEnv = "GONELI_REALTEST_MEMBER"

func TestMain(m *testing.M) {
	if os.Getenv(heldEnv) != "" {
		os.Exit(heldWriter())
	}
	member.MainIfChild(memberEnv)
	code := realkafka.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The members' timing: a 1 s lease, a 50 ms pulse, as in the chaos suite.
const (
	lease        = time.Second
	pollInterval = 50 * time.Millisecond
)

// awaitLimit bounds every wait, so that a stuck group fails a test instead of hanging it. It is
// no bound on failover: those are checked against the package doc's Liveness section.
const awaitLimit = 90 * time.Second

// protocol is a group protocol the tests run under.
type protocol struct {
	name string
	args []string // member flags
}

var (
	classic  = protocol{name: "classic"}
	consumer = protocol{name: "consumer", args: []string{"-X", "group.protocol=consumer"}}
)

// eachProtocol runs f under the classic protocol and, where the cluster serves it to librdkafka,
// KIP-848's, on the package's shared cluster with the fast profile.
func eachProtocol(t *testing.T, f func(t *testing.T, c *realkafka.Cluster, p protocol)) {
	eachProtocolOn(t, realkafka.Shared(t, realkafka.Options{}), f)
}

// eachProtocolOn is eachProtocol on cluster c.
func eachProtocolOn(t *testing.T, c *realkafka.Cluster, f func(t *testing.T, c *realkafka.Cluster, p protocol)) {
	for _, p := range []protocol{classic, consumer} {
		t.Run(p.name, func(t *testing.T) {
			if p.name == consumer.name {
				skipWithoutKIP848(t, c)
			}
			f(t, c, p)
		})
	}
}

// skipWithoutKIP848 skips t where the cluster does not serve KIP-848 to librdkafka.
func skipWithoutKIP848(t *testing.T, c *realkafka.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	ok, err := c.KIP848(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skipf("Kafka %s does not serve the consumer group protocol to librdkafka 2.11.1 (Kafka 4.0 and later do)", c.Version())
	}
}

// rig runs member processes of one group on a cluster, and records the faults injected.
type rig struct {
	t        *testing.T
	c        *realkafka.Cluster
	p        protocol
	adm      *kadm.Client
	fleet    *fleet.Fleet
	group    string
	roles    int
	procs    []*fleet.Proc // by slot, the current incarnation
	gen      []int
	faults   []verdict.Fault
	stopping bool
	// bootstrap is the bootstrap.servers of the member in a slot: the cluster's by default.
	bootstrap func(slot int) string
	// proxies, if set, relay each slot's connections (a fault "cut" cuts the slot's).
	proxies []*realkafka.Proxy
	args    []string // more member flags
	env     []string // more environment for the members
	idle    bool     // newRig starts no member (idle)
	// mayResume are the fault kinds after which the leader may lead again itself: those of a
	// broker, which leave every member as able to lead as the leader.
	mayResume map[string]bool
}

// rigOption changes a rig before its members start.
type rigOption func(*rig)

// viaProxies has the member in slot i bootstrap through proxies[i], which a listener of the
// member's own must advertise (realkafka.Proxy), so that a fault "cut" can cut it off.
func viaProxies(proxies []*realkafka.Proxy) rigOption {
	return func(r *rig) {
		r.proxies = proxies
		r.bootstrap = func(slot int) string { return proxies[slot].Addr() }
	}
}

// withArgs adds member flags.
func withArgs(args ...string) rigOption {
	return func(r *rig) { r.args = append(r.args, args...) }
}

var groups struct {
	sync.Map // *testing.T: its group
	n        atomic.Int64
}

// groupName is a group of the test's own, new on a shared cluster even when -count runs the test
// again: the same in every call of one run of a test.
func groupName(t *testing.T) string {
	name := fmt.Sprintf("%s-%d-%d", strings.NewReplacer("/", "-", "=", "-").Replace(t.Name()), os.Getpid(), groups.n.Add(1))
	got, _ := groups.LoadOrStore(t, name)
	t.Cleanup(func() { groups.Delete(t) })
	return got.(string)
}

// admin is an admin client of the cluster, closed when the test ends.
func admin(t *testing.T, c *realkafka.Cluster) *kadm.Client {
	return kadm.NewClient(client(t, c))
}

func newRig(t *testing.T, c *realkafka.Cluster, p protocol, members, roles int, opts ...rigOption) *rig {
	r := &rig{t: t, c: c, p: p, adm: admin(t, c), roles: roles, group: groupName(t)}
	r.bootstrap = func(int) string { return c.Bootstrap() }
	for _, o := range opts {
		o(r)
	}
	r.fleet = fleet.New(fleet.Options{
		OnLine: func(l member.Line) {
			if l.Event == member.EventError && !(r.stopping && strings.Contains(l.Info, goneli.ErrCloseTimeout.Error())) {
				t.Errorf("member %s reported an error: %s", l.Name, l.Info)
			}
		},
		OnExit: func(p *fleet.Proc) {
			if e, _ := p.Exit(); !e.Expected {
				t.Errorf("member %s exited on its own: %v%s", p.Name, e.Status(), r.fleet.Diagnostics())
			}
		},
	})
	r.procs, r.gen = make([]*fleet.Proc, members), make([]int, members)
	t.Cleanup(r.stopAll)
	for slot := range members {
		if !r.idle {
			r.start(slot)
		}
	}
	return r
}

// start runs a new incarnation of the member in slot.
func (r *rig) start(slot int) {
	r.gen[slot]++
	name := fmt.Sprintf("m%d-%d", slot, r.gen[slot])
	args := []string{
		"-kafka", r.bootstrap(slot), "-group", r.group, "-topic", r.group + ".neli", "-name", name,
		"-heartbeat-timeout", lease.String(), "-min-poll-interval", pollInterval.String(),
		"-task", "1ms", "-log-level", "info",
		// Reconnect quickly; the default backoff adds seconds after a broker comes back.
		"-X", "reconnect.backoff.ms=50", "-X", "reconnect.backoff.max.ms=250",
	}
	if r.roles > 0 {
		args = append(args, "-roles", strconv.Itoa(r.roles))
	}
	args = append(args, r.p.args...)
	args = append(args, r.args...)
	// GONELI_REALTEST_MEMBER_ARGS adds member flags, for example "-log-level debug -X debug=cgrp".
	args = append(args, strings.Fields(os.Getenv("GONELI_REALTEST_MEMBER_ARGS"))...)
	spec := fleet.Spec{
		Name: name, Path: os.Args[0], Args: args, Env: append([]string{memberEnv + "=1"}, r.env...),
		// The member ends itself at end of input, should this process die first (member.MainIfChild).
		HoldStdin: true,
	}
	// GONELI_REALTEST_LOGS=<dir> keeps each member's stderr (goneli's log at info, librdkafka's)
	// in <dir>/<group>/<member>.log.
	if dir := os.Getenv("GONELI_REALTEST_LOGS"); dir != "" {
		if err := os.MkdirAll(filepath.Join(dir, r.group), 0o755); err != nil {
			r.t.Fatal(err)
		}
		spec.LogFile = filepath.Join(dir, r.group, name+".log")
	}
	p, err := r.fleet.Start(spec)
	if err != nil {
		r.t.Fatalf("starting member %s: %v", name, err)
	}
	r.procs[slot] = p
}

func (r *rig) stopAll() {
	r.stopping = true
	if err := r.fleet.StopAll(awaitLimit); err != nil {
		r.t.Errorf("stopping the members: %v", err)
	}
	r.fleet.KillAll()
}

// names are the current incarnations, by slot.
func (r *rig) names() []string {
	out := make([]string, len(r.procs))
	for i, p := range r.procs {
		out[i] = p.Name
	}
	return out
}

// awaitAct waits until every role (the single leadership without roles) has been acted for at or
// after since by a process other than notBy, and returns when the last of them first was.
func (r *rig) awaitAct(since time.Time, notBy, what string) time.Time {
	r.t.Helper()
	want := max(r.roles, 1)
	first := map[string]time.Time{}
	_, _, err := r.fleet.WaitFor(0, awaitLimit, what, func(l member.Line) bool {
		if l.Event == member.EventAct && l.Name != notBy && l.To >= since.UnixNano() {
			if _, ok := first[l.Role]; !ok {
				first[l.Role] = time.Unix(0, max(l.From, since.UnixNano()))
			}
		}
		return len(first) == want
	})
	if err != nil {
		r.t.Fatalf("%v (acted for %d of %d roles)", err, len(first), want)
	}
	var last time.Time
	for _, at := range first {
		if at.After(last) {
			last = at
		}
	}
	return last
}

// awaitStable waits until the group has n members and the coordinator has settled their
// assignments: Stable, and under KIP-848 every member at the group's epoch with its target
// assignment reconciled.
func (r *rig) awaitStable(n int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond) // the broker gives no event to await
	defer tick.Stop()
	last := "not described yet"
	for {
		state, err := r.groupState(ctx, n)
		if err == nil && state == "" {
			return
		}
		if ctx.Err() == nil {
			// The last answer before the deadline says how far the group got.
			last = state
			if err != nil {
				last = err.Error()
			}
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("gave up waiting for group %s to settle with %d members: %s%s", r.group, n, last, r.fleet.Diagnostics())
		case <-tick.C:
		}
	}
}

// groupState says how the group falls short of n settled members, or "" if it does not.
func (r *rig) groupState(ctx context.Context, n int) (string, error) {
	unsettled := func(state string, members int) string {
		if state != "Stable" || members != n {
			return fmt.Sprintf("%s with %d members", state, members)
		}
		return ""
	}
	if r.p.name != consumer.name {
		gs, err := r.adm.DescribeGroups(ctx, r.group)
		if err != nil {
			return "", err
		}
		g := gs[r.group]
		return unsettled(g.State, len(g.Members)), g.Err
	}
	gs, err := r.adm.DescribeConsumerGroups(ctx, r.group)
	if err != nil {
		return "", err
	}
	g := gs[r.group]
	if s := unsettled(g.State, len(g.Members)); s != "" || g.Err != nil {
		return s, g.Err
	}
	for _, m := range g.Members {
		if m.MemberEpoch != g.Epoch || !slices.Equal(partitions(m.Assignment), partitions(m.TargetAssignment)) {
			return fmt.Sprintf("member %s at epoch %d of %d, assigned %v of %v", m.ClientID, m.MemberEpoch, g.Epoch,
				partitions(m.Assignment), partitions(m.TargetAssignment)), nil
		}
	}
	return "", nil
}

func partitions(ts kadm.TopicsSet) []string {
	var out []string
	for _, tp := range ts.Sorted() {
		for _, p := range tp.Partitions {
			out = append(out, fmt.Sprintf("%s/%d", tp.Topic, p))
		}
	}
	return out
}

// leader returns the slot of the member that acted last, within the last few reporting intervals,
// or else of the next to act: a member reports its acts every 50 ms, but on a loaded machine its
// line can take longer to arrive (a leader that had not been fenced was taken for none, once in
// six runs of TestElectionStock at a load average of 17).
func (r *rig) leader() int {
	cursor := r.fleet.Cursor()
	if slot := verdict.LastActor(r.fleet.Lines(), r.names(), time.Now().Add(150*time.Millisecond*-1)); slot >= 0 {
		return slot
	}
	l, _, err := r.fleet.WaitFor(cursor, awaitLimit, "a member to act", func(l member.Line) bool {
		return l.Event == member.EventAct && slices.Contains(r.names(), l.Name)
	})
	if err != nil {
		r.t.Fatalf("nobody leads: %v", err)
	}
	return slices.Index(r.names(), l.Name)
}

// timing is the group timing the members run under, as the cluster gives it.
type timing struct {
	heartbeat, session time.Duration
	// assignment is how long a KIP-848 coordinator may hold a new target assignment back:
	// group.consumer.assignment.interval.ms, which Kafka 4.3 added (1 s by default: assignments
	// are computed in batches, off the coordinator's thread); 0 before 4.3 and for classic groups.
	assignment time.Duration
	// rebalance is how long a classic rebalance may wait for members to join: the rebalance
	// timeout, max.poll.interval.ms, which goneli sets to the session timeout or twice the lease,
	// whichever is longer; 0 under KIP-848, whose members keep their assignments across it.
	rebalance time.Duration
	// brokerSession is broker.session.timeout.ms: how long the controller waits for a broker's
	// heartbeat before it fences the broker and moves its partitions' leadership elsewhere.
	brokerSession time.Duration
}

// groupTiming reads what the broker applies: under the classic protocol the session goneli derives
// for the lease, raised to the broker's least (goneli.New raises it so), and the heartbeat interval
// goneli derives (a tenth of the lease); under KIP-848 the broker's own.
func (r *rig) groupTiming() timing {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	md, err := r.adm.BrokerMetadata(ctx)
	if err != nil || len(md.Brokers) == 0 {
		r.t.Fatalf("no brokers in the metadata (%v)", err)
	}
	// Without a broker id the answer holds only the cluster-wide dynamic settings.
	rcs, err := r.adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID)
	if err != nil {
		r.t.Fatal(err)
	}
	lookup := func(key string) (time.Duration, bool) {
		for _, rc := range rcs {
			for _, c := range rc.Configs {
				if c.Key == key && c.Value != nil {
					v, err := strconv.Atoi(*c.Value)
					if err != nil {
						r.t.Fatalf("%s=%q: %v", key, *c.Value, err)
					}
					return time.Duration(v) * time.Millisecond, true
				}
			}
		}
		return 0, false
	}
	ms := func(key string) time.Duration {
		d, ok := lookup(key)
		if !ok {
			r.t.Fatalf("the broker does not describe %s", key)
		}
		return d
	}
	if r.p.name == consumer.name {
		assignment, _ := lookup("group.consumer.assignment.interval.ms")
		return timing{heartbeat: ms("group.consumer.heartbeat.interval.ms"), session: ms("group.consumer.session.timeout.ms"), assignment: assignment,
			brokerSession: ms("broker.session.timeout.ms")}
	}
	session := max(goneli.SessionTimeout(lease), ms("group.min.session.timeout.ms"))
	return timing{heartbeat: lease / 10, session: session, rebalance: max(session, 2*lease), brokerSession: ms("broker.session.timeout.ms")}
}

// inject hits the member in slot with kind and returns the fault as recorded, once another member
// leads (every role is led again).
func (r *rig) inject(kind string, slot int) verdict.Fault {
	r.t.Helper()
	p := r.procs[slot]
	f := verdict.Fault{Kind: kind, Victim: p.Name, WasLeader: true}
	if r.roles > 0 {
		f.Roles = map[string]string{}
		for role, who := range verdict.Leaders(r.fleet.Lines(), time.Now().Add(-150*time.Millisecond)) {
			if who == p.Name {
				f.Roles[role] = who
			}
		}
	}
	var err error
	switch kind {
	case "sigterm":
		f.At = time.Now()
		err = r.fleet.Stop(p, awaitLimit)
	case "sigkill":
		f.At, err = r.fleet.Signal(p, syscall.SIGKILL)
	case "sigstop":
		f.At, err = r.fleet.Signal(p, syscall.SIGSTOP)
	case "cut":
		if r.proxies == nil {
			r.t.Fatal("a cut needs a rig whose members go through proxies (viaProxies)")
		}
		f.At = time.Now()
		r.proxies[slot].Cut()
	default:
		r.t.Fatalf("unknown fault %s", kind)
	}
	if err != nil {
		r.t.Fatalf("%s of %s: %v", kind, p.Name, err)
	}
	f.Healed = r.awaitAct(f.At, p.Name, fmt.Sprintf("a leader other than %s after its %s", p.Name, kind))
	r.faults = append(r.faults, f)
	return f
}

// check stops every member and judges the run: no two members acting for one role at one instant,
// the events of each in order, and every fault failed over within bound(kind).
func (r *rig) check(bound func(kind string) time.Duration) verdict.Report {
	r.t.Helper()
	r.stopAll()
	rep := verdict.Check(r.fleet.ByProcess(), r.fleet.Deaths(), r.faults)
	for _, o := range rep.Overlaps {
		r.t.Errorf("two leaders at once: %v", o)
	}
	for _, v := range rep.Violations {
		r.t.Errorf("events out of order: %s", v)
	}
	for _, f := range rep.Faults {
		r.t.Logf("%s of %s: %s in %v (bound %v)", f.Kind, f.Victim, f.Outcome, f.Failover.Round(time.Millisecond), bound(f.Kind))
		if f.Outcome == verdict.Resumed && r.mayResume[f.Kind] {
			if f.Failover > bound(f.Kind) {
				r.t.Errorf("%s while %s led: it led again in %v, beyond the bound %v", f.Kind, f.Victim, f.Failover, bound(f.Kind))
			}
		} else if f.Outcome != verdict.FailedOver {
			r.t.Errorf("%s of the leader %s: %s, want another member to lead", f.Kind, f.Victim, f.Outcome)
		} else if f.Failover > bound(f.Kind) {
			r.t.Errorf("%s of the leader %s: failed over in %v, beyond the bound %v", f.Kind, f.Victim, f.Failover, bound(f.Kind))
		}
	}
	return rep
}
