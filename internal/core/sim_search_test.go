package core

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// simSchedule runs the schedule of seed under prof; with trace set it records the timeline.
func simSchedule(seed uint64, prof simProfile, trace bool) *simWorld {
	w := newSimWorld(seed, prof, trace)
	w.adv = newSimAdversary(w)
	w.adv.plan()
	w.run()
	return w
}

// simSearch searches n schedules of one profile, seeds base to base+n-1, on workers goroutines
// (each schedule on one goroutine, on its own: the parallelism is across schedules only).
type simSearch struct {
	prof        simProfile
	base        uint64
	n           int64
	workers     int
	stopAtFirst bool          // stop at the first violation
	limit       time.Duration // stop after this much wall time, if not 0
}

// simFinding is a violating schedule.
type simFinding struct {
	seed    uint64
	index   int64
	verdict simVerdict
	after   time.Duration // wall time from the search's start
}

type simSearchResult struct {
	prof               simProfile
	schedules          int64
	elapsed            time.Duration
	overlaps, liveness int64
	handOvers          int64        // successors that led while a voluntary hand-over's barrier still ran
	runaways           int64        // schedules the model could not finish: bugs of the simulation
	findings           []simFinding // the first few, in the order found
	first              *simFinding  // the first overlap
	// mechanisms counts the overlaps by mechanism, with the first seed of each.
	mechanisms map[string]*simMechanism
	steps      int64
	simulated  time.Duration
	failovers  []time.Duration
}

const simKeepFindings = 20

// simMechanism is how often a search found one mechanism of overlap, and its first finding.
type simMechanism struct {
	count int64
	first simFinding
}

func (s simSearch) run() simSearchResult {
	if s.workers <= 0 {
		s.workers = runtime.GOMAXPROCS(0)
	}
	res := simSearchResult{prof: s.prof}
	var next, done atomic.Int64
	var stop atomic.Bool
	var mu sync.Mutex
	start := time.Now()
	var wg sync.WaitGroup
	for range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var steps int64
			var simulated time.Duration
			var failovers []time.Duration
			for !stop.Load() {
				i := next.Add(1) - 1
				if i >= s.n {
					break
				}
				if s.limit > 0 && i%64 == 0 && time.Since(start) > s.limit {
					stop.Store(true)
					break
				}
				seed := s.base + uint64(i)
				w := simSchedule(seed, s.prof, false)
				done.Add(1)
				steps += int64(w.steps)
				simulated += w.now
				if len(failovers) < 10000 {
					failovers = append(failovers, w.oracle.failovers...)
				}
				if v := w.verdict; v != nil {
					f := simFinding{seed: seed, index: i, verdict: *v, after: time.Since(start)}
					mu.Lock()
					if v.kind == "overlap" {
						res.overlaps++
						if res.mechanisms == nil {
							res.mechanisms = map[string]*simMechanism{}
						}
						if mc := res.mechanisms[v.mechanism]; mc == nil {
							res.mechanisms[v.mechanism] = &simMechanism{count: 1, first: f}
						} else {
							mc.count++
							if f.index < mc.first.index {
								mc.first = f
							}
						}
						if res.first == nil || f.index < res.first.index {
							first := f
							res.first = &first
						}
					} else if v.kind == "liveness" {
						res.liveness++
					} else if v.kind == "hand-over" {
						res.handOvers++
					} else {
						res.runaways++
					}
					if len(res.findings) < simKeepFindings {
						res.findings = append(res.findings, f)
					}
					mu.Unlock()
					if s.stopAtFirst && (v.kind == "overlap" || v.kind == "hand-over") {
						stop.Store(true)
					}
				}
			}
			mu.Lock()
			res.steps += steps
			res.simulated += simulated
			res.failovers = append(res.failovers, failovers...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.schedules = done.Load()
	res.elapsed = time.Since(start)
	return res
}

// simReport replays seed with the timeline recorded and renders what happened: the profile, the
// plan, the verdict, and the timeline from a while before the violation.
func simReport(seed uint64, prof simProfile) (string, *simVerdict) {
	w := simSchedule(seed, prof, true)
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, profile %s; %d roles, %d members at the start\n", seed, prof, w.roles, w.startMembers)
	if v := w.verdict; v != nil {
		fmt.Fprintf(&b, "%s at %s: %s", strings.ToUpper(v.kind), fmtDur(v.at), v.detail)
		if v.kind == "overlap" {
			fmt.Fprintf(&b, " (overlap %s, unless cut short; mechanism: %s)", fmtDur(v.overlap), v.mechanism)
		}
		b.WriteString("\n")
	} else {
		b.WriteString("no violation\n")
	}
	fmt.Fprintf(&b, "faults:%s\n", w.adv.describe())
	from := time.Duration(0)
	if w.verdict != nil {
		from = w.verdict.at - 2*prof.maxPoll - 2*prof.ht
	}
	fmt.Fprintf(&b, "timeline from %s (true time; ppm is each clock's rate):\n", fmtDur(max(from, 0)))
	// A line that repeats the one before it but for the time (librdkafka sending a commit again
	// at every tick, say) is counted rather than printed.
	var last string
	var repeats int
	var until time.Duration
	flush := func() {
		if repeats > 0 {
			fmt.Fprintf(&b, "%28s(and %d more times, the last at %s)\n", "", repeats, fmtDur(until))
		}
		repeats = 0
	}
	for _, l := range w.trace.entries {
		if l.at < from {
			continue
		}
		if body := l.text[simTimeColumns:]; body == last {
			repeats, until = repeats+1, l.at
			continue
		} else {
			last = body
		}
		flush()
		b.WriteString(l.text)
		b.WriteString("\n")
	}
	flush()
	return b.String(), w.verdict
}

// simTimeColumns is the width of a timeline line's time.
const simTimeColumns = 15

// simSummary renders a search's result as a line.
func (r simSearchResult) summary() string {
	rate := float64(r.schedules) / r.elapsed.Seconds()
	s := fmt.Sprintf("%s: %d schedules in %v (%.0f/s, %.1f simulated hours, %d events), %d overlaps, %d hand-over violations, %d liveness violations, %d runaways",
		r.prof.name, r.schedules, r.elapsed.Round(time.Millisecond), rate, r.simulated.Hours(), r.steps, r.overlaps, r.handOvers, r.liveness, r.runaways)
	if r.first != nil {
		s += fmt.Sprintf("; first overlap at schedule %d after %v (seed %d)", r.first.index+1, r.first.after.Round(time.Millisecond), r.first.seed)
	}
	if n := len(r.failovers); n > 0 {
		f := slices.Clone(r.failovers)
		slices.Sort(f)
		s += fmt.Sprintf("; failover after the leader's crash (%d watched): median %s, 99th percentile %s, max %s (bound %s)",
			n, fmtDur(f[n/2]), fmtDur(f[n*99/100]), fmtDur(f[n-1]), fmtDur(r.prof.liveness))
	}
	for _, name := range r.mechanismNames() {
		mc := r.mechanisms[name]
		s += fmt.Sprintf("\n    %d overlaps by %s, the first at schedule %d after %v (seed %d)", mc.count, name, mc.first.index+1,
			mc.first.after.Round(time.Millisecond), mc.first.seed)
	}
	return s
}

// mechanismNames lists the mechanisms found, sorted.
func (r simSearchResult) mechanismNames() []string {
	var names []string
	for name := range r.mechanisms {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
