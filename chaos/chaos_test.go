package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/goneli/goneli/internal/member"
	"github.com/goneli/goneli/internal/verdict"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
)

// memberEnv, when set, turns the test binary into a member process (internal/member).
const memberEnv = "GONELI_CHAOS_MEMBER"

func TestMain(m *testing.M) {
	member.MainIfChild(memberEnv)
	goleak.VerifyTestMain(m)
}

// Timing of the members: a 1 s lease gives a 1.25 s session timeout (goneli.SessionTimeout) and a
// 100 ms group heartbeat.
const (
	lease        = time.Second
	pollInterval = 50 * time.Millisecond
)

var session = goneli.SessionTimeout(lease)

// The group the members contend in, and its leader topic.
const (
	group = "chaos"
	topic = group + ".neli"
	// writesTopic is where the members' leader tasks write through their FencedProducers.
	writesTopic = group + ".writes"
)

// writesOn reports whether the members write through FencedProducers and every trial checks what
// was committed (checkWrites); CHAOS_WRITES=0 turns it off.
func writesOn() bool { return os.Getenv("CHAOS_WRITES") != "0" }

// awaitLimit bounds every wait for the group to recover. Under the race detector on two shared
// cores a failover takes a few seconds; this much longer wait only turns a stuck group into a
// failure instead of a hang.
const awaitLimit = 60 * time.Second

// The fault kinds. Each is injected into a running group, lasts a random time, and is undone.
const (
	kindTerm      = "sigterm"    // graceful stop, then a new process
	kindKill      = "sigkill"    // crash, then a new process
	kindStopShort = "stop-short" // SIGSTOP for less than the session timeout, then SIGCONT
	kindStopLong  = "stop-long"  // SIGSTOP for longer than the session timeout, then SIGCONT
	kindStopEdge  = "stop-edge"  // SIGSTOP for about the session timeout: resumes as it is expelled
	kindBlackhole = "blackhole"  // the member's connections deliver nothing, both ways
	kindRefuse    = "refuse"     // the member's connections are reset and new ones refused
	kindStall     = "stall"      // every produce request (only the leader produces) is held
	kindRestart   = "restart"    // the broker stops and a new one starts on the same port and data
	kindSlow      = "slow"       // everything the member sends is delayed
	kindWipe      = "wipe"       // the broker restarts on the same port having lost all its data
	kindNoRejoin  = "no-rejoin"  // the leader's rejoin requests fail while a follower restarts
)

// Fault kinds of a cluster of several brokers (CHAOS_BROKERS=3). With several brokers, restart and
// wipe still restart the whole cluster at once: every node stops, and as many start on the same
// ports, with the same data or none.
const (
	kindCoordMove = "coord-move"      // the group's coordinator moves to another broker, all stay up
	kindPartMove  = "part-move"       // the leader topic's partition(s) of the leader move to another broker
	kindBrokerCut = "broker-cut"      // one broker is cut off from every contender; the others are not
	kindNodeLeave = "node-leave"      // one broker leaves the cluster, resetting its connections, and comes back
	kindRolling   = "rolling-restart" // node-leave of every broker in turn
	kindLeaveCut  = "leave-cut"       // a follower leaves, and the coordinator is cut off at that instant
)

// singleKinds are the kinds of a one-broker cluster, and the default mix there.
var singleKinds = []string{kindTerm, kindKill, kindStopShort, kindStopLong, kindStopEdge, kindBlackhole, kindRefuse, kindStall, kindRestart, kindSlow, kindWipe, kindNoRejoin}

// brokerKinds need two brokers or more.
var brokerKinds = []string{kindCoordMove, kindPartMove, kindBrokerCut, kindNodeLeave, kindRolling, kindLeaveCut}

// allKinds is every kind CHAOS_KINDS may name.
var allKinds = append(slices.Clone(singleKinds), brokerKinds...)

// outOfBrokerMix are the kinds left out of the default mix with several brokers, and why: each
// stops elections for longer than the suite waits (a minute), though none breaks mutual exclusion.
// CHAOS_KINDS still runs them. It is empty today.
//
// coord-move, node-leave and rolling-restart were here until the group check stopped reusing a
// handle whose cached coordinator had gone stale (TestGroupCheckAfterCoordinatorMoves); wipe was
// here until goneli replaced the producer and consumer handles that keep a recreated partition's
// old leader epoch (librdkafka #4898, TestLeaderTopicRecreated).
var outOfBrokerMix = map[string]string{}

// defaultKinds is what the suite draws from unless CHAOS_KINDS says otherwise: every kind that
// runs on the cluster's number of brokers, but those of outOfBrokerMix with several.
func defaultKinds(brokers int) []string {
	if brokers < 2 {
		return singleKinds
	}
	var mix []string
	for _, k := range allKinds {
		if _, left := outOfBrokerMix[k]; !left {
			mix = append(mix, k)
		}
	}
	return mix
}

// shortExtra is how many random faults the default (CI) run adds to one of each kind. The run
// takes about 3 s per fault.
const shortExtra = 3

// settings are read from the environment; see docs/chaos.md.
type settings struct {
	seed    uint64
	trials  int
	faults  int // per trial; 0 means one of each kind, in random order
	members int
	brokers int // nodes of the embedded cluster
	roles   int // numbered roles per member (goneli.NewRoles); 0 means the single leader of New
	// priorities, if set (CHAOS_PRIORITIES), are the members' Config.Priority: slot i first runs
	// with priorities[i mod len], and every restart draws one of them at random.
	priorities []int
	extra      int // random faults the short run (faults == 0) adds to one of each kind
	kinds      []string
	logDir     string
	// duration, if set (CHAOS_DURATION, as in `make soak`), replaces trials: trials start until it
	// has passed.
	duration time.Duration
	// real runs the members against Apache Kafka itself (TestChaosReal, real_test.go) instead of
	// the embedded cluster.
	real bool
}

// readSettings reads the settings of TestChaos, or with real of TestChaosReal, which runs on 3
// nodes by default and draws from realKinds.
func readSettings(t *testing.T, real bool) settings {
	s := settings{trials: 1, members: 4, brokers: 1, extra: shortExtra, seed: uint64(time.Now().UnixNano()), real: real}
	if real {
		s.brokers = 3
	}
	num := func(key string, into *int) {
		if v := os.Getenv(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a non-negative number", key, v)
			}
			*into = n
		}
	}
	num("CHAOS_TRIALS", &s.trials)
	num("CHAOS_FAULTS", &s.faults)
	num("CHAOS_MEMBERS", &s.members)
	num("CHAOS_ROLES", &s.roles)
	num("CHAOS_BROKERS", &s.brokers)
	if s.brokers < 1 {
		t.Fatalf("CHAOS_BROKERS=%d: need at least 1", s.brokers)
	}
	allowed := allKinds
	s.kinds = defaultKinds(s.brokers)
	if real {
		if s.brokers < 2 {
			t.Fatalf("CHAOS_BROKERS=%d: the broker faults on real Kafka need several nodes", s.brokers)
		}
		s.kinds, allowed = realKinds, realKinds
	}
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want an unsigned number", v)
		}
		s.seed = n
	}
	s.kinds = kindsFromEnv(t, s.kinds, allowed, s.brokers)
	if v := os.Getenv("CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("CHAOS_DURATION=%q: want a positive duration such as 1h", v)
		}
		s.duration = d
	}
	if v := os.Getenv("CHAOS_PRIORITIES"); v != "" {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < goneli.MinPriority || n > goneli.MaxPriority {
				t.Fatalf("CHAOS_PRIORITIES=%q: want a comma-separated list of priorities, %d to %d", v, goneli.MinPriority, goneli.MaxPriority)
			}
			s.priorities = append(s.priorities, n)
		}
	}
	s.logDir = os.Getenv("CHAOS_LOGDIR")
	if s.members < 2 {
		t.Fatalf("CHAOS_MEMBERS=%d: need at least 2", s.members)
	}
	return s
}

// kindsFromEnv returns the kinds CHAOS_KINDS names, each of which must be one of allowed, or def
// if it is unset.
func kindsFromEnv(t *testing.T, def, allowed []string, brokers int) []string {
	v := os.Getenv("CHAOS_KINDS")
	if v == "" {
		return def
	}
	var kinds []string
	for _, k := range strings.Split(v, ",") {
		if !slices.Contains(allowed, k) {
			t.Fatalf("CHAOS_KINDS: unknown kind %q; kinds are %v", k, allowed)
		}
		if brokers < 2 && slices.Contains(brokerKinds, k) {
			t.Fatalf("CHAOS_KINDS: %s needs several brokers (CHAOS_BROKERS=3)", k)
		}
		kinds = append(kinds, k)
	}
	return kinds
}

// TestChaos runs trials of random faults against a group of member processes and fails on any
// instant at which two of them acted as leader. By default it runs one short trial: one fault of
// each default kind and shortExtra more; CHAOS_FAULTS and CHAOS_TRIALS (or CHAOS_DURATION) make
// it longer.
func TestChaos(t *testing.T) {
	s := readSettings(t, false)
	trials := fmt.Sprintf("%d trial(s)", s.trials)
	if s.duration > 0 {
		trials = fmt.Sprintf("trials for %v", s.duration)
	}
	t.Logf("chaos: seed %d (replay the fault schedule with CHAOS_SEED=%d), %s, %d broker(s), %d members, %s, kinds %v",
		s.seed, s.seed, trials, s.brokers, s.members, s.mode(), s.kinds)
	if s.brokers > 1 {
		for _, k := range allKinds {
			if why, left := outOfBrokerMix[k]; left && !slices.Contains(s.kinds, k) {
				t.Logf("chaos: %s is not drawn with several brokers (CHAOS_KINDS can name it): %s", k, why)
			}
		}
	}
	runTrials(t, s)
}

// rolesShortKinds are the faults of the short roles run that TestChaosRoles adds to CI: three aimed
// at one member, which then leads several roles at once, and two that hit every leader. Few
// enough to keep `go test ./chaos/` within two minutes.
var rolesShortKinds = []string{kindKill, kindTerm, kindStopLong, kindStall, kindRestart}

// TestChaosRoles is the short CI run in roles mode: one trial of 4 members (CHAOS_MEMBERS)
// contending for rolesShortRoles numbered roles each, two or so per member, with one fault of
// each of rolesShortKinds (CHAOS_KINDS), some 20 to 30 s. It is skipped when CHAOS_ROLES is set
// (TestChaos then runs every kind in roles mode) and in -short mode.
func TestChaosRoles(t *testing.T) {
	runShort(t, "roles", "CHAOS_ROLES", rolesShortKinds, func(s *settings) { s.roles = rolesShortRoles })
}

// brokersShortKinds are the faults of the short three-broker run that TestChaosBrokers adds to CI:
// the coordinator moving, cut off and going away in a rolling restart, and the cut around a
// LeaveGroup. part-move (always unaffected so far) and node-leave (one step of rolling-restart)
// run in `make chaos` with CHAOS_BROKERS=3.
var brokersShortKinds = []string{kindCoordMove, kindBrokerCut, kindRolling, kindLeaveCut}

// brokersShort is the cluster size of TestChaosBrokers.
const brokersShort = 3

// TestChaosBrokers is the short CI run on a cluster of brokersShort embedded brokers: one trial,
// single leader, one fault of each of brokersShortKinds (CHAOS_KINDS), some 20 s. It is skipped
// when CHAOS_BROKERS is set (TestChaos then runs on that many brokers) and in -short mode.
func TestChaosBrokers(t *testing.T) {
	runShort(t, "brokers", "CHAOS_BROKERS", brokersShortKinds, func(s *settings) { s.brokers = brokersShort })
}

// runShort runs one short trial of one fault of each of kinds (or of CHAOS_KINDS) in the mode that
// set makes. It is skipped in -short mode and when the environment variable that puts TestChaos
// itself in that mode (skipEnv) is set.
func runShort(t *testing.T, name, skipEnv string, kinds []string, set func(*settings)) {
	if os.Getenv(skipEnv) != "" {
		t.Skipf("%s is set: TestChaos runs in that mode", skipEnv)
	}
	if testing.Short() {
		t.Skip("-short")
	}
	s := readSettings(t, false)
	s.trials, s.faults, s.extra = 1, 0, 0
	set(&s)
	if os.Getenv("CHAOS_KINDS") == "" {
		s.kinds = kinds
	}
	t.Logf("chaos %s: seed %d (replay with CHAOS_SEED=%d), %d broker(s), %d members, %s, kinds %v",
		name, s.seed, s.seed, s.brokers, s.members, s.mode(), s.kinds)
	runTrials(t, s)
}

// rolesShortRoles is how many roles TestChaosRoles gives each member: twice the default number of
// members, so that every member leads several roles and every fault aimed at one hits several.
const rolesShortRoles = 8

// runTrials runs s.trials trials and prints the summary.
func runTrials(t *testing.T, s settings) {
	sum := Summary{Brokers: s.brokers, Kafka: s.kafka()}
	start := time.Now()
	for i := 0; s.duration == 0 && i < s.trials || s.duration > 0 && time.Since(start) < s.duration; i++ {
		sum.Trials++
		seed := s.seed + uint64(i)
		// A failed trial does not stop the others: their figures still count, and a second
		// failure is worth knowing about.
		t.Run(fmt.Sprintf("trial%d_seed%d", i, seed), func(t *testing.T) {
			sum.Reports = append(sum.Reports, runTrial(t, s, seed))
		})
	}
	sum.LibrdkafkaAborts = int(librdkafkaAborts.Swap(0))
	sum.WritesChecked = writesOn()
	sum.CommittedWrites, sum.InterleavedWrites = int(committedWrites.Swap(0)), int(interleavedWrites.Swap(0))
	var out bytes.Buffer
	sum.Print(&out)
	t.Logf("chaos: seed %d\n%s", s.seed, out.String())
	if os.Getenv("CHAOS_SUMMARY") != "" {
		if err := os.WriteFile(os.Getenv("CHAOS_SUMMARY"), out.Bytes(), 0o644); err != nil {
			t.Errorf("writing summary: %v", err)
		}
	}
	// The docs publish runs only through this page, so that no figure is copied by hand.
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		// CHAOS_REPORT, CHAOS_SUMMARY and CHAOS_LOGDIR only say where output goes.
		run := RunInfo{Seed: s.seed, Commit: GitCommit(), Settings: Settings("CHAOS_", "CHAOS_REPORT", "CHAOS_SUMMARY", "CHAOS_LOGDIR"), Date: start}
		if err := sum.AppendMarkdown(path, run); err != nil {
			t.Errorf("writing report: %v", err)
		}
	}
}

// committedWrites and interleavedWrites count, over the trials under way, the records that the
// members' FencedProducers committed and those of them that followed a record of a later tenure
// of their role (checkWrites).
var committedWrites, interleavedWrites atomic.Int32

// librdkafkaAborts counts the known aborts of the trials under way (only one run of trials is
// under way at a time).
var librdkafkaAborts atomic.Int32

// librdkafkaAbort is what librdkafka 2.11.1 prints as it aborts the process when a
// coordinator-bound admin request (goneli's group check, DescribeConsumerGroups) cannot be sent
// because the coordinator's connection just dropped: the error path frees the request's state
// and then uses it (confluentinc/librdkafka#4605, fix proposed in #5397, not released). Broker
// restarts and cuts of the coordinator in the three-broker mix hit it now and then, until goneli
// stopped asking librdkafka for that request (internal/sidechan).
const librdkafkaAbort = "rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed"

// knownAbort reports whether the member whose log is at path ended with librdkafkaAbort. The
// group survives it like any crash, but a user's service would have died: it is counted in the
// summary and fails the trial, like any other unexpected exit.
func knownAbort(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	b = b[max(len(b)-4096, 0):]
	return strings.Contains(string(b), librdkafkaAbort)
}

// mode describes the leadership the members contend for.
func (s settings) mode() string {
	mode := "single leader"
	if s.roles > 0 {
		mode = fmt.Sprintf("%d roles each", s.roles)
	}
	if len(s.priorities) > 0 {
		mode += fmt.Sprintf(", priorities %v", s.priorities)
	}
	return mode
}

// harness is one trial: a cluster, a group of member processes, and the record of what they said.
// Only the test goroutine uses it; the fleet's callbacks only report failures.
type harness struct {
	t      *testing.T
	rng    *rand.Rand
	dir    string            // logs
	data   string            // cluster data directory, kept across restarts
	nodes  int               // brokers in the cluster
	ports  []int             // by node ID, kept across restarts and across a node leaving and coming back
	broker *kafkatest.Broker // the embedded cluster; nil on real Kafka
	// real is the Apache Kafka cluster the members run against instead (TestChaosReal); nil on
	// the embedded one.
	real *realCluster
	// limit bounds each wait for the group to recover after a fault: awaitLimit, or longer on
	// real Kafka, where a broker's crash holds the group back by a broker session and more.
	limit  time.Duration
	stall  atomic.Pointer[chan struct{}] // non-nil while produce requests are held
	noJoin atomic.Pointer[string]        // member ID prefix whose JoinGroup requests fail
	// leaveCut, while set, cuts a broker off as the coordinator handles a member's LeaveGroup.
	leaveCut atomic.Pointer[leaveCut]

	roles []string // the members' roles; nil for the single leader
	// priorities are settings.priorities; priority is each member's, by name.
	priorities []int
	priority   map[string]int
	// stuckClose names the members stopped while the group's rebalance waits for a member that
	// cannot rejoin (no-rejoin): their Close may run into its bound and report ErrCloseTimeout,
	// as the Close doc says of a close that lands in a rebalance that lasts its full timeout.
	stuckClose sync.Map
	// stopping is set for the final stop of every member: one stopped while the group still
	// rebalances after the last fault (waiting out a killed member's session, say) may report
	// ErrCloseTimeout for the same reason.
	stopping atomic.Bool
	fleet    *fleet.Fleet
	procs    []*fleet.Proc // by slot; the current incarnation
	gen      []int         // incarnations started per slot
	faults   []verdict.Fault
}

func runTrial(t *testing.T, s settings, seed uint64) verdict.Report {
	h := &harness{
		t:     t,
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes: s.brokers,
		limit: awaitLimit,
	}
	if s.roles > 0 {
		h.roles = goneli.Shards(s.roles)
	}
	h.priorities, h.priority = s.priorities, map[string]int{}
	h.fleet = fleet.New(fleet.Options{
		OnLine: func(l member.Line) {
			if l.Event == member.EventError {
				if _, stuck := h.stuckClose.Load(l.Name); (stuck || h.stopping.Load()) && strings.Contains(l.Info, goneli.ErrCloseTimeout.Error()) {
					t.Logf("member %s, stopped while the group rebalanced, reported: %s", l.Name, l.Info)
					return
				}
				t.Errorf("member %s reported an error: %s", l.Name, l.Info)
			}
		},
		OnExit: func(p *fleet.Proc) {
			if e, _ := p.Exit(); !e.Expected {
				if knownAbort(h.logFile(p.Name)) {
					librdkafkaAborts.Add(1)
					t.Errorf("member %s was aborted by librdkafka's admin use-after-free (confluentinc/librdkafka#4605; see %s)", p.Name, h.logFile(p.Name))
					return
				}
				t.Errorf("member %s exited on its own: %v (see %s)", p.Name, e.Status(), h.logFile(p.Name))
			}
		},
	})
	t.Logf("trial seed %d", seed)
	h.dir = s.logDir
	keep := h.dir != ""
	if h.dir == "" {
		var err error
		if h.dir, err = os.MkdirTemp("", "goneli-chaos-"); err != nil {
			t.Fatal(err)
		}
	} else {
		h.dir = filepath.Join(h.dir, fmt.Sprintf("seed%d", seed))
		if err := os.MkdirAll(h.dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() || keep {
			t.Logf("member logs and timeline kept in %s", h.dir)
		} else {
			_ = os.RemoveAll(h.dir)
		}
	})
	if s.real {
		// The cluster, its proxies and its admin client close when the trial ends, after the
		// members (t.Cleanup runs last what it was given first).
		h.startReal(s.members)
		h.limit = realAwaitLimit
	} else {
		h.data = filepath.Join(h.dir, "broker-data")
		h.startBroker()
		t.Cleanup(func() {
			h.releaseStall()
			h.broker.Close()
		})
	}
	h.procs = make([]*fleet.Proc, s.members)
	h.gen = make([]int, s.members)
	for slot := range s.members {
		h.start(slot)
	}
	t.Cleanup(h.stopAll)
	h.awaitAct(time.Now(), "a first leader")

	var plan []string
	if s.faults > 0 {
		plan = make([]string, s.faults)
		for i := range plan {
			plan[i] = s.kinds[h.rng.IntN(len(s.kinds))]
		}
	} else {
		// The short run: every kind once, plus a few more at random, in random order.
		plan = append([]string(nil), s.kinds...)
		for range s.extra {
			plan = append(plan, s.kinds[h.rng.IntN(len(s.kinds))])
		}
		h.rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	}
	for i, kind := range plan {
		// Let the group run for a while, sometimes not even long enough to settle.
		h.sleep(200*time.Millisecond, 2500*time.Millisecond)
		f := h.inject(kind)
		h.faults = append(h.faults, f)
		t.Logf("fault %d/%d %s: victim %s (leader %v) %s, healed after %v%s",
			i+1, len(plan), f.Kind, f.Victim, f.WasLeader, f.Detail, f.Healed.Sub(f.At).Round(time.Millisecond), rolesHit(f))
		h.awaitAct(f.Healed, "a leader after "+f.Kind)
		if t.Failed() {
			break
		}
	}
	h.awaitSettled()
	h.stopping.Store(true)
	h.stopAll()
	if writesOn() {
		h.checkWrites()
	}
	r := verdict.Check(h.fleet.ByProcess(), h.fleet.Deaths(), h.faults)
	h.writeTimeline(r.LateCommits)
	for _, o := range r.Overlaps {
		t.Errorf("OVERLAP: %v", o)
	}
	for _, v := range r.Violations {
		t.Errorf("%s", v)
	}
	for i, c := range r.LateCommits {
		if i == 10 {
			// A tenure that goes on committing when it should not does so every write interval.
			t.Errorf("LATE COMMIT: and %d more (the summary lists them all)", len(r.LateCommits)-i)
			break
		}
		t.Errorf("LATE COMMIT: %v", c)
	}
	h.scanLogs()
	return r
}

func (h *harness) sleep(lo, hi time.Duration) time.Duration {
	d := lo + time.Duration(h.rng.Int64N(int64(hi-lo)+1))
	time.Sleep(d)
	return d
}

func (h *harness) startBroker(extra ...kfake.Opt) {
	opts := append([]kfake.Opt{kfake.DataDir(h.data)}, extra...)
	if writesOn() {
		// Seeded only into a fresh data directory: a restarted broker keeps what it had.
		opts = append(opts, kfake.SeedTopics(1, writesTopic))
	}
	if h.ports != nil {
		// Node i comes back on its old port: the members' bootstrap list and the addresses
		// librdkafka learnt from metadata stay right.
		opts = append(opts, kfake.Ports(h.ports...))
	} else {
		opts = append(opts, kfake.NumBrokers(h.nodes))
	}
	var b *kafkatest.Broker
	var err error
	// The old listener's port can take a moment to become free again.
	for range 100 {
		if b, err = kafkatest.Start(opts...); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		h.t.Fatalf("starting broker: %v", err)
	}
	if h.ports == nil {
		for _, a := range b.Addrs {
			_, p, _ := net.SplitHostPort(a)
			port, _ := strconv.Atoi(p)
			h.ports = append(h.ports, port)
		}
	}
	// Only the leader produces, so holding produce requests holds exactly the leader's heartbeats.
	b.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		if ch := h.stall.Load(); ch != nil {
			b.SleepControl(func() { <-*ch })
		}
		return nil, nil, false
	})
	// kfake builds member IDs as client.id + "-" + a UUID, so a member's rejoins can be recognised.
	b.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		jr := req.(*kmsg.JoinGroupRequest)
		if prefix := h.noJoin.Load(); prefix != nil && jr.MemberID != "" && strings.HasPrefix(jr.MemberID, *prefix) {
			resp := jr.ResponseKind().(*kmsg.JoinGroupResponse)
			resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
			return resp, nil, true
		}
		return nil, nil, false
	})
	// A LeaveGroup begins a rebalance. Cutting the coordinator off on the cluster's own loop, before
	// the request is handled, keeps every other member from hearing of that rebalance from it.
	b.ControlKey(int16(kmsg.LeaveGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		lc := h.leaveCut.Load()
		if lc == nil {
			return nil, nil, false
		}
		lr := req.(*kmsg.LeaveGroupRequest)
		ids := []string{lr.MemberID}
		for _, m := range lr.Members {
			ids = append(ids, m.MemberID)
		}
		for _, id := range ids {
			if strings.HasPrefix(id, lc.prefix) && h.leaveCut.CompareAndSwap(lc, nil) {
				b.Net.CutBroker(lc.addr, kafkatest.Refuse)
				lc.at <- time.Now()
				break
			}
		}
		return nil, nil, false
	})
	h.broker = b
}

// leaveCut is a broker cut that waits for a member's LeaveGroup.
type leaveCut struct {
	prefix string         // member IDs of the leaving member begin with this
	addr   string         // the broker to cut off
	at     chan time.Time // receives when the cut began; buffered
}

func (h *harness) releaseStall() {
	if ch := h.stall.Swap(nil); ch != nil {
		close(*ch)
	}
}

// start runs a new incarnation of the member in slot.
func (h *harness) start(slot int) {
	h.gen[slot]++
	name := fmt.Sprintf("m%d-%d", slot, h.gen[slot])
	args := []string{
		"-kafka", h.memberBootstrap(slot), "-group", group, "-topic", topic, "-name", name,
		"-heartbeat-timeout", lease.String(), "-min-poll-interval", pollInterval.String(),
		"-task", "1ms", "-log-level", "info",
		// Reconnect quickly after cuts and broker restarts; the default backoff adds seconds.
		"-X", "reconnect.backoff.ms=50", "-X", "reconnect.backoff.max.ms=250",
	}
	if len(h.roles) > 0 {
		args = append(args, "-roles", strconv.Itoa(len(h.roles)))
	}
	if writesOn() {
		args = append(args, "-writes", writesTopic)
	}
	if len(h.priorities) > 0 {
		// A slot starts with its own priority; a restart draws one, as an upgrade or a
		// rollback would change it.
		p := h.priorities[slot%len(h.priorities)]
		if h.gen[slot] > 1 {
			p = h.priorities[h.rng.IntN(len(h.priorities))]
		}
		h.priority[name] = p
		args = append(args, "-priority", strconv.Itoa(p))
	}
	// CHAOS_MEMBER_ARGS adds member flags, for example "-log-level debug -X debug=cgrp".
	args = append(args, strings.Fields(os.Getenv("CHAOS_MEMBER_ARGS"))...)
	p, err := h.fleet.Start(fleet.Spec{
		Name: name, Path: os.Args[0], Args: args, Env: []string{memberEnv + "=1"},
		// The member ends itself at end of input, should this process die first (see TestMain).
		HoldStdin: true,
		LogFile:   h.logFile(name),
	})
	if err != nil {
		h.t.Fatalf("starting member %s: %v", name, err)
	}
	h.procs[slot] = p
}

func (h *harness) logFile(name string) string { return filepath.Join(h.dir, name+".log") }

// clientID is the client.id of the member called name, which carries its priority.
func (h *harness) clientID(name string) string { return goneli.ClientID(name, h.priority[name]) }

// addr is node id's address.
func (h *harness) addr(id int32) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(h.ports[id]))
}

// bootstrap lists every node, so that a member started while one is away still finds the cluster.
func (h *harness) bootstrap() string {
	if h.real != nil {
		return h.real.c.Bootstrap()
	}
	addrs := make([]string, len(h.ports))
	for i := range h.ports {
		addrs[i] = h.addr(int32(i))
	}
	return strings.Join(addrs, ",")
}

// awaitAct waits until some member acts at or after since; with roles, until every role has been
// acted for at or after since.
func (h *harness) awaitAct(since time.Time, what string) {
	h.t.Helper()
	acted := map[string]bool{}
	want := max(len(h.roles), 1)
	_, _, err := h.fleet.WaitFor(0, h.limit, what, func(l member.Line) bool {
		if l.Event == member.EventAct && l.To >= since.UnixNano() {
			acted[l.Role] = true
		}
		return len(acted) == want
	})
	if err != nil {
		h.t.Errorf("not every role was led within %v, waiting for %s: acted for %v of %d", h.limit, what, acted, want)
	}
}

// recent is how long ago a member's last action may be for it to count as leading.
const recent = 150 * time.Millisecond

// leader returns the slot whose member acted most recently, if that was within the last few
// reporting intervals, or -1. With roles, it is the member that leads the most roles (a random
// one of those that lead most).
func (h *harness) leader() int {
	if len(h.roles) > 0 {
		slot, _ := h.busiest()
		return slot
	}
	names := make([]string, len(h.procs))
	for slot, p := range h.procs {
		names[slot] = p.Name
	}
	return verdict.LastActor(h.fleet.Lines(), names, time.Now().Add(-recent))
}

// led returns who leads each role now, judged by the members' recent actions.
func (h *harness) led() map[string]string {
	return verdict.Leaders(h.fleet.Lines(), time.Now().Add(-recent))
}

// busiest returns the slot of the member that leads the most roles now, chosen at random among
// equals, and its roles; -1 if nobody leads.
func (h *harness) busiest() (int, map[string]string) {
	by := map[string]map[string]string{}
	for role, who := range h.led() {
		if by[who] == nil {
			by[who] = map[string]string{}
		}
		by[who][role] = who
	}
	best, ties := -1, 0
	for slot, p := range h.procs {
		n := len(by[p.Name])
		switch {
		case n == 0:
		case best < 0 || n > len(by[h.procs[best].Name]):
			best, ties = slot, 1
		case n == len(by[h.procs[best].Name]):
			// Reservoir sampling keeps every one of the equals equally likely.
			if ties++; h.rng.IntN(ties) == 0 {
				best = slot
			}
		}
	}
	if best < 0 {
		return -1, nil
	}
	return best, by[h.procs[best].Name]
}

// rolesOf returns the roles the member in slot leads now.
func (h *harness) rolesOf(slot int) map[string]string {
	out := map[string]string{}
	for role, who := range h.led() {
		if who == h.procs[slot].Name {
			out[role] = who
		}
	}
	return out
}

// victim picks the leader most of the time, since faults of the leader are what can break mutual
// exclusion, and a follower otherwise. With roles the leader is the member that leads the most
// roles, so that one fault hits several leaderships at once.
func (h *harness) victim() (int, bool) {
	l := h.leader()
	if l >= 0 && h.rng.IntN(5) > 0 {
		return l, true
	}
	slot := h.rng.IntN(len(h.procs))
	if len(h.roles) > 0 {
		return slot, len(h.rolesOf(slot)) > 0
	}
	return slot, slot == l
}

// awaitSettled waits, for at most a few session timeouts, until every member is in a stable group.
// A member stopped while the group still rebalances after the last fault (one that rejoins after
// it was expelled, say) may have its Close land in that rebalance and run into its bound: the Close
// doc allows that (ErrCloseTimeout), but the suite reports every member error.
func (h *harness) awaitSettled() {
	ctx, cancel := context.WithTimeout(context.Background(), 4*session)
	defer cancel()
	if h.real != nil {
		h.real.awaitStable(ctx, len(h.procs))
		return
	}
	_, _ = h.broker.WaitGroupStable(ctx, group, len(h.procs))
}

func (h *harness) inject(kind string) verdict.Fault {
	f := verdict.Fault{Kind: kind, Reset: kind == kindWipe}
	var slot int
	switch kind {
	case kindStall, kindRestart, kindWipe, kindNoRejoin, kindCoordMove, kindPartMove, kindBrokerCut, kindNodeLeave, kindRolling,
		kindBrokerKill, kindBrokerRestart, kindBrokerPause:
		// Broker-side faults hit whoever leads.
		slot = h.leader()
		f.WasLeader = slot >= 0
	default:
		slot, f.WasLeader = h.victim()
	}
	var p *fleet.Proc
	if slot >= 0 {
		p = h.procs[slot]
		f.Victim = p.Name
	}
	if len(h.roles) > 0 {
		// Faults of the broker hit every leader; the others, the roles the victim leads.
		switch {
		case kind == kindStall || kind == kindRestart || kind == kindWipe || slices.Contains(brokerKinds, kind) && kind != kindPartMove ||
			slices.Contains(realBrokerKinds, kind):
			f.Roles = h.led()
		case slot >= 0:
			f.Roles = h.rolesOf(slot)
		}
		f.WasLeader = slot >= 0 && len(h.rolesOf(slot)) > 0
	}
	clientID := h.clientID(f.Victim)
	f.At = time.Now()
	switch kind {
	case kindTerm, kindKill:
		if kind == kindKill {
			h.signal(p, syscall.SIGKILL)
			<-p.Done()
		} else if err := h.fleet.Stop(p, awaitLimit); err != nil {
			h.t.Error(err)
		} else if e, _ := p.Exit(); e.Err != nil {
			h.t.Errorf("%s exited with %v after SIGTERM; want a clean Close", p.Name, e.Err)
		}
		f.Detail = fmt.Sprintf("exited after %v, restarted after %v", time.Since(f.At).Round(time.Millisecond),
			h.sleep(0, time.Second).Round(time.Millisecond))
		h.start(slot)
	case kindStopShort, kindStopLong, kindStopEdge:
		lo, hi := 200*time.Millisecond, session-300*time.Millisecond
		switch kind {
		case kindStopLong:
			lo, hi = session+500*time.Millisecond, 3*session
		case kindStopEdge:
			// The process wakes up while the coordinator is about to expel it, or just has: its
			// first commits race the expulsion.
			lo, hi = session-300*time.Millisecond, session+300*time.Millisecond
		}
		h.signal(p, syscall.SIGSTOP)
		f.Detail = fmt.Sprintf("stopped for %v", h.sleep(lo, hi).Round(time.Millisecond))
		h.signal(p, syscall.SIGCONT)
	case kindBlackhole, kindRefuse:
		if h.real != nil {
			// Only blackhole is drawn on real Kafka (realKinds): the members' proxies cut silently.
			h.real.cutMember(slot)
			f.Detail = fmt.Sprintf("cut for %v", h.sleep(300*time.Millisecond, 5*time.Second).Round(time.Millisecond))
			h.real.healMember(slot)
			break
		}
		h.broker.Net.Cut(clientID, map[string]kafkatest.Fault{kindBlackhole: kafkatest.Blackhole, kindRefuse: kafkatest.Refuse}[kind])
		f.Detail = fmt.Sprintf("cut for %v", h.sleep(300*time.Millisecond, 5*time.Second).Round(time.Millisecond))
		h.broker.Net.Heal(clientID)
	case kindSlow:
		delay := time.Duration(10+h.rng.IntN(400)) * time.Millisecond
		h.broker.Net.Slow(clientID, delay)
		f.Detail = fmt.Sprintf("slowed by %v for %v", delay, h.sleep(time.Second, 5*time.Second).Round(time.Millisecond))
		h.broker.Net.Heal(clientID)
	case kindNoRejoin:
		// A rebalance the leader cannot rejoin: the coordinator expels it after the rebalance
		// timeout (max.poll.interval.ms, twice the lease) although its commits and group
		// heartbeats go on being answered until then.
		if p == nil {
			f.Detail = "no leader to block"
			break
		}
		prefix := clientID + "-"
		h.noJoin.Store(&prefix)
		other := (slot + 1 + h.rng.IntN(len(h.procs)-1)) % len(h.procs)
		q := h.procs[other]
		h.stuckClose.Store(q.Name, true)
		if err := h.fleet.Stop(q, awaitLimit); err != nil {
			h.t.Error(err)
		}
		h.start(other)
		f.Detail = fmt.Sprintf("restarted %s, rejoins refused for %v", q.Name, h.sleep(session+500*time.Millisecond, 2*session).Round(time.Millisecond))
		h.noJoin.Store(nil)
	case kindStall:
		ch := make(chan struct{})
		h.stall.Store(&ch)
		f.Detail = fmt.Sprintf("produce held for %v", h.sleep(300*time.Millisecond, 4*time.Second).Round(time.Millisecond))
		h.releaseStall()
	case kindRestart, kindWipe:
		h.broker.Close()
		// The broker keeps topics, offsets and group generations on disk, as Kafka does, but
		// forgets the members and their sessions, which Kafka would keep. Staying down for longer
		// than a lease keeps the fault within goneli's assumptions: no lease granted by the old
		// broker can still be running when the new one assigns partition 0.
		down := h.sleep(lease+200*time.Millisecond, 3*time.Second)
		if kind == kindWipe {
			// Offsets, groups and the log are gone. The leader topic is created afresh, empty, as
			// an operator would, with a partition per role: goneli creates it (or adds partitions)
			// only in New and NewRoles, so without it the running members would wait for it for
			// ever (see docs/safety.md, Liveness), and a role without its partition would never be led.
			if err := os.RemoveAll(h.data); err != nil {
				h.t.Fatal(err)
			}
			h.startBroker(kfake.SeedTopics(int32(max(len(h.roles), 1)), topic))
		} else {
			h.startBroker()
		}
		f.Detail = fmt.Sprintf("down for %v", down.Round(time.Millisecond))
	case kindCoordMove:
		if h.real != nil {
			f.Detail = h.real.moveCoordinator()
			break
		}
		f.Detail = h.moveCoordinator()
	case kindPartMove:
		if h.real != nil {
			f.Detail = h.real.movePartitions(h.partsOf(f.Roles))
			break
		}
		f.Detail = h.movePartitions(f.Roles)
	case kindBrokerKill, kindBrokerRestart, kindBrokerPause:
		f.Detail = h.nodeFault(kind, h.target())
	case kindBrokerCut:
		if h.real != nil {
			id := h.target()
			what := h.describe(id)
			h.real.cutNode(id)
			f.Detail = fmt.Sprintf("%s black-holed for %v", what, h.sleep(300*time.Millisecond, 5*time.Second).Round(time.Millisecond))
			h.real.healNode(id)
			break
		}
		id := h.target()
		cut := []kafkatest.Fault{kafkatest.Blackhole, kafkatest.Refuse}[h.rng.IntN(2)]
		what := h.describe(id)
		h.broker.Net.CutBroker(h.addr(id), cut)
		f.Detail = fmt.Sprintf("%s %s for %v", what, map[kafkatest.Fault]string{kafkatest.Blackhole: "black-holed", kafkatest.Refuse: "refusing"}[cut],
			h.sleep(300*time.Millisecond, 5*time.Second).Round(time.Millisecond))
		h.broker.Net.HealBroker(h.addr(id))
	case kindNodeLeave:
		f.Detail = h.leaveAndReturn(h.target(), 300*time.Millisecond, 3*time.Second)
	case kindLeaveCut:
		f.Detail = h.leaveCutFault(slot)
	case kindRolling:
		var steps []string
		for i, id := range h.rng.Perm(h.nodes) {
			if i > 0 {
				// A pause between brokers, sometimes too short for the group to have settled.
				steps = append(steps, fmt.Sprintf("after %v", h.sleep(200*time.Millisecond, 2*time.Second).Round(time.Millisecond)))
			}
			steps = append(steps, h.leaveAndReturn(int32(id), 300*time.Millisecond, 1500*time.Millisecond))
		}
		f.Detail = strings.Join(steps, "; ")
	}
	f.Healed = time.Now()
	return f
}

// leaveCutFault stops a follower of the leader in slot gracefully, so that its LeaveGroup begins a
// rebalance, and cuts the coordinator off from every contender as the coordinator handles it, for
// 1.5-2.3 s: around the rebalance timeout (2 s). The others learn of the rebalance only when the
// cut heals, as librdkafka sends the commits it deferred while the coordinator was away.
func (h *harness) leaveCutFault(slot int) string {
	other := h.rng.IntN(len(h.procs))
	if slot >= 0 {
		other = (slot + 1 + h.rng.IntN(len(h.procs)-1)) % len(h.procs)
	}
	q := h.procs[other]
	coord := h.coordinator()
	lc := &leaveCut{prefix: h.clientID(q.Name) + "-", addr: h.addr(coord), at: make(chan time.Time, 1)}
	h.leaveCut.Store(lc)
	// Its Close may run into its bound while the coordinator is away.
	h.stuckClose.Store(q.Name, true)
	h.signal(q, syscall.SIGTERM)
	var at time.Time
	select {
	case at = <-lc.at:
	case <-q.Done():
	case <-time.After(awaitLimit):
	}
	h.leaveCut.Store(nil)
	if at.IsZero() {
		select {
		case at = <-lc.at:
		default:
		}
	}
	d := h.rng.Int64N(int64(800*time.Millisecond)+1) + int64(1500*time.Millisecond)
	// Stop only waits for the exit here, killing a member that hangs; SIGTERM was sent already.
	if err := h.fleet.Stop(q, awaitLimit); err != nil {
		h.t.Error(err)
	}
	h.start(other)
	if at.IsZero() {
		// A cut that began just now, too late to be reported, must not outlive the fault.
		h.broker.Net.HealBroker(lc.addr)
		return fmt.Sprintf("%s left without a LeaveGroup reaching node %d; no cut", q.Name, coord)
	}
	time.Sleep(time.Until(at.Add(time.Duration(d))))
	h.broker.Net.HealBroker(lc.addr)
	return fmt.Sprintf("%s left; coordinator node %d refusing for %v from its LeaveGroup", q.Name, coord, time.Duration(d).Round(time.Millisecond))
}

// coordinator is the node that coordinates the group now.
func (h *harness) coordinator() int32 {
	if h.real != nil {
		return h.real.coordinator()
	}
	return h.broker.CoordinatorFor(group)
}

// leaders are the nodes that lead the leader topic's partitions now, by partition (-1: none known).
func (h *harness) leaders() []int32 {
	if h.real != nil {
		return h.real.leaders(topic, h.partitions())
	}
	out := make([]int32, h.partitions())
	for p := range out {
		out[p] = h.broker.LeaderFor(topic, int32(p))
	}
	return out
}

// partitions are the leader topic's partitions: one per role, or partition 0.
func (h *harness) partitions() int { return max(len(h.roles), 1) }

// describe names node id and what it does for the group: "node 1 (coordinator, partition 0)".
func (h *harness) describe(id int32) string {
	var does []string
	if h.coordinator() == id {
		does = append(does, "coordinator")
	}
	var parts []string
	for p, l := range h.leaders() {
		if l == id {
			parts = append(parts, strconv.Itoa(p))
		}
	}
	if len(parts) > 0 {
		does = append(does, "partition "+strings.Join(parts, ","))
	}
	if len(does) == 0 {
		does = append(does, "neither coordinator nor leader topic partition")
	}
	return fmt.Sprintf("node %d (%s)", id, strings.Join(does, ", "))
}

// target picks the node a broker fault hits: the group's coordinator, the leader of partition 0,
// or any node, each a third of the time.
func (h *harness) target() int32 {
	switch h.rng.IntN(3) {
	case 0:
		return h.coordinator()
	case 1:
		if l := h.leaders()[0]; l >= 0 {
			return l
		}
	}
	return int32(h.rng.IntN(h.nodes))
}

// other picks a node other than id.
func (h *harness) other(id int32) int32 {
	return (id + 1 + int32(h.rng.IntN(h.nodes-1))) % int32(h.nodes)
}

// moveCoordinator rehashes the cluster's coordinators until the group's lands on another node.
// kfake keeps one copy of the group's state for the whole cluster, so the move loses nothing; the
// members learn of it from NOT_COORDINATOR answers on the old node.
func (h *harness) moveCoordinator() string {
	from := h.coordinator()
	to := from
	// Each rehash moves the group with probability (nodes-1)/nodes.
	for i := 0; to == from && i < 100; i++ {
		h.broker.RehashCoordinators()
		to = h.coordinator()
	}
	return fmt.Sprintf("coordinator node %d -> %d", from, to)
}

// movePartitions moves the partition of each of roles (partition 0 for the single leader, or if
// nobody leads) to another node. Produce and fetch requests on the old node are then answered
// NOT_LEADER_OR_FOLLOWER.
func (h *harness) movePartitions(roles map[string]string) string {
	var moves []string
	for _, p := range h.partsOf(roles) {
		from := h.broker.LeaderFor(topic, p)
		to := h.other(from)
		if err := h.broker.MoveTopicPartition(topic, p, to); err != nil {
			h.t.Fatalf("moving partition %d to node %d: %v", p, to, err)
		}
		moves = append(moves, fmt.Sprintf("partition %d node %d -> %d", p, from, to))
	}
	return strings.Join(moves, ", ")
}

// partsOf are the leader topic's partitions of roles, in order: partition 0 for the single leader,
// or if nobody leads.
func (h *harness) partsOf(roles map[string]string) []int32 {
	if len(roles) == 0 {
		return []int32{0}
	}
	var parts []int32
	for role := range roles {
		parts = append(parts, int32(slices.Index(h.roles, role)))
	}
	slices.Sort(parts)
	return parts
}

// leaveAndReturn takes node id out of the cluster for a random time in [lo, hi], then brings it
// back as the same node on the same port, and describes what happened.
//
// kfake's RemoveNode closes the node's listener and reassigns every partition leader, and the
// group's coordinator, among the nodes left, but leaves the node's open connections working: a
// broker that goes away resets them, so the Netem does. AddNode reassigns every partition leader
// again. The group's state is the cluster's, not the node's, so nothing the node coordinated is
// lost, as with Kafka, where the new coordinator reads the group back from __consumer_offsets.
func (h *harness) leaveAndReturn(id int32, lo, hi time.Duration) string {
	what := h.describe(id)
	if err := h.broker.RemoveNode(id); err != nil {
		h.t.Fatalf("removing node %d: %v", id, err)
	}
	h.broker.Net.CutBroker(h.addr(id), kafkatest.Refuse)
	after := fmt.Sprintf("coordinator %d, partition 0 on %d", h.coordinator(), h.broker.LeaderFor(topic, 0))
	down := h.sleep(lo, hi)
	h.broker.Net.HealBroker(h.addr(id))
	var err error
	// The old listener's port can take a moment to become free again.
	for range 100 {
		if _, _, err = h.broker.AddNode(id, h.ports[id]); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		h.t.Fatalf("bringing node %d back on port %d: %v", id, h.ports[id], err)
	}
	return fmt.Sprintf("%s left for %v (then %s)", what, down.Round(time.Millisecond), after)
}

// rolesHit renders the roles a fault hit, for logs: " roles=0:m1-1,2:m1-1", or nothing.
func rolesHit(f verdict.Fault) string {
	if len(f.Roles) == 0 {
		return ""
	}
	roles := slices.Collect(maps.Keys(f.Roles))
	verdict.SortRoles(roles)
	parts := make([]string, len(roles))
	for i, r := range roles {
		parts[i] = r + ":" + f.Roles[r]
	}
	return " roles=" + strings.Join(parts, ",")
}

func (h *harness) signal(p *fleet.Proc, sig syscall.Signal) {
	if _, err := h.fleet.Signal(p, sig); err != nil {
		h.t.Error(err)
	}
}

// stopAll stops every member gracefully and waits for it, killing any that hangs.
func (h *harness) stopAll() {
	if err := h.fleet.StopAll(awaitLimit); err != nil {
		h.t.Error(err)
	}
}

// writeTimeline saves every line and fault, merged by time, for reading after a failure.
func (h *harness) writeTimeline(late []verdict.LateCommit) {
	type entry struct {
		at   int64
		text string
	}
	var all []entry
	for _, l := range h.fleet.Lines() {
		if l.Event == member.EventCommit {
			// One per transaction would swamp the timeline; the late ones are listed below.
			continue
		}
		b, _ := json.Marshal(l)
		at := l.At
		if l.Event == member.EventAct {
			at = l.From
		}
		all = append(all, entry{at, l.Name + " " + string(b)})
	}
	for _, c := range late {
		all = append(all, entry{c.At.UnixNano(), "LATE COMMIT " + c.String()})
	}
	for _, f := range h.faults {
		all = append(all, entry{f.At.UnixNano(), fmt.Sprintf("FAULT %s victim=%s leader=%v %s%s", f.Kind, f.Victim, f.WasLeader, f.Detail, rolesHit(f))})
		all = append(all, entry{f.Healed.UnixNano(), fmt.Sprintf("HEALED %s victim=%s", f.Kind, f.Victim)})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at < all[j].at })
	var b strings.Builder
	for _, e := range all {
		fmt.Fprintf(&b, "%s %s\n", time.Unix(0, e.at).Format("15:04:05.000000"), e.text)
	}
	_ = os.WriteFile(filepath.Join(h.dir, "timeline.txt"), []byte(b.String()), 0o644)
}

// scanLogs fails the trial on a data race or panic reported by any member.
func (h *harness) scanLogs() {
	files, _ := filepath.Glob(filepath.Join(h.dir, "*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
			if bytes.Contains(b, []byte(bad)) {
				h.t.Errorf("%s contains %q", f, bad)
			}
		}
	}
}

// checkWrites reads what the members' leader tasks committed to writesTopic, as a read_committed
// consumer, and counts the records that follow a record of a later tenure of their role: fenced
// writes promise none. Tokens strictly increase from tenure to tenure of a role, so in the
// partition's order each role's tokens must never go down.
func (h *harness) checkWrites() {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": h.bootstrap(), "group.id": group + ".writes-check",
		"isolation.level": "read_committed", "enable.partition.eof": true, "enable.auto.commit": false,
		"enable.metrics.push": false, "log_level": 3})
	if err != nil {
		h.t.Fatalf("write check: %v", err)
	}
	defer c.Close()
	wt := writesTopic
	if err := c.Assign([]kafka.TopicPartition{{Topic: &wt, Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		h.t.Fatalf("write check: %v", err)
	}
	var order verdict.WriteOrder
	limit := time.Now().Add(awaitLimit)
	for time.Now().Before(limit) {
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			var w member.WriteRecord
			if err := json.Unmarshal(e.Value, &w); err != nil {
				h.t.Errorf("write check: record at offset %v: %v", e.TopicPartition.Offset, err)
				continue
			}
			if !order.Add(int64(e.TopicPartition.Offset), w) {
				h.t.Errorf("INTERLEAVED WRITE: %v", order.Interleaved[len(order.Interleaved)-1])
			}
		case kafka.PartitionEOF:
			// At the last stable offset: everything committed has been read.
			n, bad := order.Records, len(order.Interleaved)
			h.t.Logf("write check: %d committed records, %d interleaved", n, bad)
			committedWrites.Add(int32(n))
			interleavedWrites.Add(int32(bad))
			return
		case kafka.Error:
			h.t.Logf("write check: %v", e)
		}
	}
	h.t.Errorf("write check: no end of %s within %v (%d records read)", writesTopic, awaitLimit, order.Records)
}
