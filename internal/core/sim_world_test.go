package core

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// The simulation (issue 38) runs members made of goneli's own machine (machine.go: the leases, the
// commit gate and every decision the driver makes) and the shell around it (sim_member_test.go)
// against models of librdkafka's group client
// (sim_rdk_test.go, sim_rdk848_test.go) and of Apache Kafka's group coordinator
// (sim_coord_test.go, sim_coord848_test.go), on one virtual clock, under schedules that an
// adversary draws (sim_adversary_test.go), and checks that no two members hold an unexpired lease
// of one role at one instant (sim_oracle_test.go). Everything runs on one goroutine: an event
// queue ordered by (time, sequence) drives it, and every random choice comes from one PCG seeded
// from the schedule's seed, so a seed replays its schedule exactly (TestSimDeterministic). No
// map is iterated where its order could decide anything.

// simEvent is one thing that happens at a true instant; seq orders the events of one instant as
// they were scheduled.
type simEvent struct {
	at  time.Duration
	seq uint64
	fn  func()
	m   *simMember // if set, fn runs in this member's process (simMember.do)
}

// simWorld is one schedule: the clock, the event queue, the random source, and everything that
// lives in it.
type simWorld struct {
	now    time.Duration // true time since the schedule began
	seq    uint64
	events []simEvent // a binary min-heap on (at, seq)
	rng    *rand.Rand
	seed   uint64
	prof   simProfile
	end    time.Duration // the schedule stops here

	trace *simTrace // the timeline, recorded only when a schedule is replayed for a report

	// roles is how many roles every member contends for, roleNames their names as NewRoles takes
	// them (New's single unnamed role when there is one); partition i is role i.
	roles     int
	roleNames []string
	// startMembers is how many members the schedule starts with.
	startMembers int

	coord      simCoordinator
	topic      *simTopic
	members    []*simMember
	coordClock *simClock

	adv     *simAdversary
	oracle  simOracle
	verdict *simVerdict // the first violation found; the schedule stops at it
	// rebalanceAt is when the coordinator last began a rebalance (or bumped the group epoch).
	rebalanceAt time.Duration
	steps       int // events run
}

func newSimWorld(seed uint64, prof simProfile, trace bool) *simWorld {
	// The seeds of a search are consecutive; splitmix64 spreads them over the PCG's state.
	z := seed + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	w := &simWorld{seed: seed, prof: prof, rng: rand.New(rand.NewPCG(z, seed))}
	if trace {
		w.trace = &simTrace{}
	}
	return w
}

// at runs fn at true time t (never earlier than now).
func (w *simWorld) at(t time.Duration, fn func()) {
	if t < w.now {
		t = w.now
	}
	w.seq++
	w.events = append(w.events, simEvent{at: t, seq: w.seq, fn: fn})
	w.up(len(w.events) - 1)
}

// atIn runs fn at true time t in m's process (simMember.at).
func (w *simWorld) atIn(t time.Duration, m *simMember, fn func()) {
	if t < w.now {
		t = w.now
	}
	w.seq++
	w.events = append(w.events, simEvent{at: t, seq: w.seq, fn: fn, m: m})
	w.up(len(w.events) - 1)
}

// after runs fn d of true time from now.
func (w *simWorld) after(d time.Duration, fn func()) {
	w.at(w.now+d, fn)
}

func (w *simWorld) less(i, j int) bool {
	a, b := &w.events[i], &w.events[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (w *simWorld) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !w.less(i, p) {
			return
		}
		w.events[i], w.events[p] = w.events[p], w.events[i]
		i = p
	}
}

func (w *simWorld) down(i int) {
	n := len(w.events)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && w.less(r, l) {
			m = r
		}
		if !w.less(m, i) {
			return
		}
		w.events[i], w.events[m] = w.events[m], w.events[i]
		i = m
	}
}

func (w *simWorld) pop() simEvent {
	e := w.events[0]
	n := len(w.events) - 1
	w.events[0] = w.events[n]
	w.events[n] = simEvent{}
	w.events = w.events[:n]
	if n > 0 {
		w.down(0)
	}
	return e
}

// simMaxSteps bounds a schedule's events: ordinary ones take tens of thousands.
const simMaxSteps = 3_000_000

// run runs events until the schedule ends or a violation is found, checking the oracle after
// each one.
func (w *simWorld) run() {
	for len(w.events) > 0 && w.verdict == nil {
		e := w.pop()
		if e.at > w.end {
			break
		}
		w.now = e.at
		w.steps++
		if e.m != nil {
			e.m.do(e.fn)
		} else {
			e.fn()
		}
		w.oracle.check(w)
		if w.steps > simMaxSteps {
			// A model that keeps scheduling work at one instant: a bug of the simulation's,
			// reported as a violation so that it is seen, with its seed.
			w.verdict = &simVerdict{kind: "runaway", at: w.now, detail: fmt.Sprintf("more than %d events; %d queued", simMaxSteps, len(w.events))}
		}
	}
	if w.verdict == nil {
		w.now = w.end
		w.oracle.finish(w)
	}
}

// chance reports true with probability p.
func (w *simWorld) chance(p float64) bool {
	return w.rng.Float64() < p
}

// between draws a duration uniformly from [lo, hi].
func (w *simWorld) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1))
}

// pick draws an index from weights.
func (w *simWorld) pick(weights ...int) int {
	total := 0
	for _, x := range weights {
		total += x
	}
	r := w.rng.IntN(total)
	for i, x := range weights {
		if r < x {
			return i
		}
		r -= x
	}
	return len(weights) - 1
}

// tracing reports whether the timeline is being recorded; callers test it before formatting.
func (w *simWorld) tracing() bool {
	return w.trace != nil
}

// note records a line of the timeline: the true time, who, and what.
func (w *simWorld) note(who, format string, args ...any) {
	if w.trace == nil {
		return
	}
	w.trace.entries = append(w.trace.entries, simTraceEntry{at: w.now,
		text: fmt.Sprintf("%10.3f ms  %-6s %s", float64(w.now)/float64(time.Millisecond), who, fmt.Sprintf(format, args...))})
}

// simTrace is a schedule's timeline.
type simTrace struct {
	entries []simTraceEntry
}

type simTraceEntry struct {
	at   time.Duration
	text string
}

func (t *simTrace) String() string {
	var b strings.Builder
	for _, e := range t.entries {
		b.WriteString(e.text)
		b.WriteString("\n")
	}
	return b.String()
}

// simClock is the monotonic clock of one process (a member, or the coordinator's broker). Its rate
// differs from true time by ppm parts per million, within the bound the package doc assumes
// (sessionMargin: about 4% of the session).
type simClock struct {
	w    *simWorld
	ppm  int64
	zero time.Time // what it read at true time 0
}

// Now is the clock's reading, for the lease (lease.clock).
func (c *simClock) Now() time.Time {
	return c.zero.Add(c.local(c.w.now))
}

// local is the clock's reading, as a duration since its zero, at true time t.
func (c *simClock) local(t time.Duration) time.Duration {
	return t + time.Duration(int64(t)*c.ppm/1_000_000)
}

// trueAt is the earliest true time at which the clock reads local or more.
func (c *simClock) trueAt(local time.Duration) time.Duration {
	t := time.Duration(int64(local) * 1_000_000 / (1_000_000 + c.ppm))
	for c.local(t) < local {
		t++
	}
	for t > 0 && c.local(t-1) >= local {
		t--
	}
	return t
}

// afterLocal is the true time at which d has passed on the clock from now.
func (c *simClock) afterLocal(d time.Duration) time.Duration {
	return c.trueAt(c.local(c.w.now) + d)
}

// fmtDur renders a duration in milliseconds for the timeline.
func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}
