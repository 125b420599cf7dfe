package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/goneli/goneli/internal/fleet"
	"github.com/goneli/goneli/internal/member"
)

// The rolling upgrade: a group of three members of the old version is replaced one member at a
// time by members of the new version, each step a SIGTERM (Close) of an old member, then the start
// of its replacement, then a pause as a rollout makes (a readiness delay). With priorities the old
// version runs at Config.Priority 1 and the new at 2; without, both at 0. Which member an operator
// or Kubernetes stops first is not up to goneli, so the trials go through the three places the
// initial leader can have in the order of replacement: first, in the middle, last. Counted: the
// changes of leader (a member other than the last leader acquiring), fences (none is expected: a
// rollout is graceful), and the time each change took, from the last act of the old leader to the
// first act of the new one; with priorities also the time from the start of the member that first
// leads of the new version to its first act, which is the settle time plus the hand-over.

// RollingTrial is one rolling upgrade.
type RollingTrial struct {
	HeartbeatTimeoutMs int64 `json:"heartbeat_timeout_ms"`
	Priorities         bool  `json:"priorities"`
	// LeaderReplaced is where in the order of replacement the initial leader came: first, middle
	// or last.
	LeaderReplaced string   `json:"leader_replaced"`
	Leaders        []string `json:"leaders"` // every leader in turn, the initial one first
	Changes        int      `json:"leader_changes"`
	Fences         int      `json:"fences"`
	// GapsMs are, for each change, the old leader's last act -> the new leader's first act.
	GapsMs []float64 `json:"gaps_ms"`
	// NewLeadsMs is, with priorities, the start of the member of the new version that led first ->
	// its first act; 0 if it only led once no old member was left.
	NewLeadsMs float64 `json:"new_version_start_to_lead_ms,omitempty"`
	// NewLeadsAtStep is the step (1 to 3) after whose start the new version first led.
	NewLeadsAtStep int `json:"new_version_leads_at_step"`
}

// rollingOrder is the place of the initial leader in the order of replacement, by trial.
var rollingOrder = []string{"middle", "last", "first"}

// rollingPace is how long each step of the rollout waits after the new member started: twice
// the settle time, so that with priorities the hand-over to the new version falls within the step.
func rollingPace(lease time.Duration) time.Duration {
	return 4 * lease
}

// rolling runs the rolling upgrade trials at lease, with and without priorities.
func (r *runner) rolling(lease time.Duration, trials int) error {
	for _, prio := range []bool{true, false} {
		for n := 1; n <= trials; n++ {
			place := rollingOrder[(n-1)%len(rollingOrder)]
			trial, err := r.rollingTrial(lease, prio, place, n)
			if err != nil {
				return err
			}
			r.rep.Rolling = append(r.rep.Rolling, trial)
		}
	}
	return nil
}

func (r *runner) rollingTrial(lease time.Duration, prio bool, place string, n int) (RollingTrial, error) {
	mode := "plain"
	if prio {
		mode = "prio"
	}
	scenario := fmt.Sprintf("rolling-%s-%s-%d", mode, leaseLabel(lease), n)
	trial := RollingTrial{HeartbeatTimeoutMs: lease.Milliseconds(), Priorities: prio, LeaderReplaced: place}
	priority := func(p int) []string {
		if !prio {
			return nil
		}
		return []string{"--priority", strconv.Itoa(p)}
	}
	err := r.withFleet(scenario, lease, r.e.opts.task, func(f *memberFleet) error {
		f.extra = priority(1)
		var old []string
		for range 3 {
			p, err := f.spawn()
			if err != nil {
				return err
			}
			old = append(old, p.Name)
		}
		leader, err := r.awaitSteady(f, 3, startLimit(3, lease))
		if err != nil {
			return err
		}
		order := slices.DeleteFunc(slices.Clone(old), func(s string) bool { return s == leader })
		switch place {
		case "first":
			order = append([]string{leader}, order...)
		case "middle":
			order = []string{order[0], leader, order[1]}
		default:
			order = append(order, leader)
		}
		from := f.Cursor()
		f.extra = priority(2)
		var fresh []string
		for step, victim := range order {
			p := f.Proc(victim)
			at := f.Cursor()
			f.signal(p, syscall.SIGTERM)
			if _, _, err := f.waitFor(at, trialLimit(lease), victim+" to exit", func(l member.Line) bool {
				return l.Event == fleet.EventExit && l.Name == victim
			}); err != nil {
				return err
			}
			np, err := f.spawn()
			if err != nil {
				return err
			}
			fresh = append(fresh, np.Name)
			started, _, err := f.waitFor(at, startLimit(1, lease), np.Name+" to start", func(l member.Line) bool {
				return l.Event == member.EventStarted && l.Name == np.Name
			})
			if err != nil {
				return err
			}
			// The rollout's readiness delay; with priorities the hand-over falls within it, and
			// the step waits for it to be over should it run late.
			end := time.Unix(0, started.At).Add(rollingPace(lease))
			if prio {
				if _, _, err := f.waitFor(at, trialLimit(lease)+rollingPace(lease), "a member of the new version to act", func(l member.Line) bool {
					return l.Event == member.EventAct && slices.Contains(fresh, l.Name)
				}); err != nil {
					return err
				}
			}
			if trial.NewLeadsAtStep == 0 {
				if name, ok := f.leader(); ok && slices.Contains(fresh, name) {
					trial.NewLeadsAtStep = step + 1
				}
			}
			time.Sleep(time.Until(end))
		}
		if _, err := r.awaitSteady(f, 3, startLimit(1, lease)); err != nil {
			return err
		}
		r.rollingFigures(&trial, f.Lines(), from, leader, fresh)
		return nil
	})
	if err != nil {
		return trial, err
	}
	newLeads := ""
	if trial.NewLeadsMs > 0 {
		newLeads = fmt.Sprintf("; the new version's first leader acted %.0f ms after it started", trial.NewLeadsMs)
	}
	r.printf("%s (leader replaced %s): leaders %v, %d changes, %d fences, gaps %v ms%s",
		scenario, place, trial.Leaders, trial.Changes, trial.Fences, trial.GapsMs, newLeads)
	return trial, nil
}

// rollingFigures fills trial in from the lines of the upgrade, which began at index from with
// initial leading; fresh are the members of the new version.
func (r *runner) rollingFigures(trial *RollingTrial, lines []member.Line, from int, initial string, fresh []string) {
	trial.Leaders = []string{initial}
	started := map[string]int64{}
	var acts []member.Line
	current, last := initial, int64(0)
	for _, l := range lines[:from] {
		if l.Event == member.EventAct && l.Name == initial {
			last = max(last, l.To)
		}
	}
	for _, l := range lines[from:] {
		switch l.Event {
		case member.EventStarted:
			started[l.Name] = l.At
		case member.EventFenced:
			trial.Fences++
		case member.EventAct:
			acts = append(acts, l)
		}
	}
	// Members print their spans as they go; ordered by when they began, the spans of successive
	// leaders follow one another (withFleet checks that none overlap).
	slices.SortStableFunc(acts, func(a, b member.Line) int { return cmp.Compare(a.From, b.From) })
	for _, l := range acts {
		if l.Name == current {
			last = l.To
			continue
		}
		if last != 0 {
			trial.GapsMs = append(trial.GapsMs, ms(time.Duration(l.From-last)))
		}
		trial.Leaders = append(trial.Leaders, l.Name)
		trial.Changes++
		if trial.NewLeadsMs == 0 && trial.Priorities && slices.Contains(fresh, l.Name) && started[l.Name] != 0 {
			trial.NewLeadsMs = ms(time.Duration(l.From - started[l.Name]))
		}
		current, last = l.Name, l.To
	}
}

// printRollingTable writes the rolling upgrade's table.
func printRollingTable(w io.Writer, trials []RollingTrial) {
	if len(trials) == 0 {
		return
	}
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("| Rolling upgrade, 3 members replaced one by one (SIGTERM, then start) | HeartbeatTimeout | leader replaced | leaders | changes | fences | gap per change | new version start -> leads |")
	p("|---|---|---|---|---|---|---|---|")
	for _, t := range trials {
		mode := "no priorities (all 0)"
		if t.Priorities {
			mode = "priorities (old 1, new 2)"
		}
		gaps := "-"
		if len(t.GapsMs) > 0 {
			var s []string
			for _, g := range t.GapsMs {
				s = append(s, msStr(g))
			}
			gaps = fmt.Sprint(s)
		}
		newLeads := "-"
		if t.NewLeadsMs > 0 {
			newLeads = msStr(t.NewLeadsMs)
		}
		p("| %s | %v | %s | %d | %d | %d | %s | %s |", mode, time.Duration(t.HeartbeatTimeoutMs)*time.Millisecond, t.LeaderReplaced,
			len(t.Leaders), t.Changes, t.Fences, gaps, newLeads)
	}
}
