package verdict

import (
	"fmt"
	"sort"
	"time"

	"github.com/goneli/goneli/internal/member"
)

// LateCommit is a fenced write that committed although its commit call began after a later
// tenure of its role had fenced it at the broker: the broker should have refused it.
type LateCommit struct {
	Who   string // the process whose transaction committed
	Role  string
	Token int64     // its tenure's fencing token
	At    time.Time // when it called CommitTransaction
	// Successor is the process whose later tenure (SuccessorToken) had fenced the role's
	// transactional id at FencedAt, before At.
	Successor      string
	SuccessorToken int64
	FencedAt       time.Time
}

func (c LateCommit) String() string {
	role := ""
	if c.Role != "" {
		role = " of role " + c.Role
	}
	return fmt.Sprintf("%s's commit%s for tenure %d, called at %s, committed %v after %s's tenure %d had fenced it",
		c.Who, role, c.Token, c.At.Format("15:04:05.000000"), c.At.Sub(c.FencedAt), c.Successor, c.SuccessorToken)
}

// fence is the earliest instant at which a tenure is known to have fenced the tenures before it.
type fence struct {
	who   string
	token int64
	at    time.Time
}

// LateCommits finds every committed fenced write (member.EventCommit) whose commit call began
// after a later tenure of its role had initialised its producer, which fences every earlier
// tenure at the broker. A tenure has initialised by its acquired line if the line says so
// (member.Line.Init), and in any case by its own first commit call, since a FencedProducer
// initialises before its tenure's first transaction. All members run on one host, so their wall
// clocks agree. The result is sorted by commit time.
//
// resets are the instants at which the broker lost its state: tokens and producer epochs start
// over there, so a fence only counts against commits up to the next reset. A tenure's token
// belongs to the log in which it acquired (member.Line.Since), which is before a reset that its
// producer's initialisation, or a commit, may come after: its fence and its commits are judged
// with the tenures of that log.
func LateCommits(lines map[string][]member.Line, resets ...time.Time) []LateCommit {
	// Lines are keyed by era, the stretch between two resets, and role.
	type key struct {
		era  int
		role string
	}
	era := func(at time.Time) int {
		n := 0
		for _, r := range resets {
			if !at.Before(r) {
				n++
			}
		}
		return n
	}
	// The era of each line: an acquired line's is that of its tenure's first acquisition (Since);
	// any other line's is that of the process's latest acquired line of the same role and token
	// before it. A process can hold the same token in two eras (tokens start over at a reset), so
	// the token alone does not name the tenure.
	type tenure struct {
		role  string
		token int64
	}
	eras := map[string][]int{} // by process, then by index of the line
	for who, ls := range lines {
		current := map[tenure]int{}
		eras[who] = make([]int, len(ls))
		for i, l := range ls {
			e, ok := current[tenure{l.Role, l.Token}]
			if l.Event == member.EventAcquired {
				since := l.Since
				if since == 0 {
					since = l.At
				}
				e, ok = era(time.Unix(0, since)), true
				current[tenure{l.Role, l.Token}] = e
			}
			if !ok {
				e = era(time.Unix(0, l.At))
			}
			eras[who][i] = e
		}
	}
	fences := map[key]map[int64]fence{} // then by token: the tenure's earliest fence
	note := func(who string, i int, l member.Line) {
		if l.Token == 0 {
			return
		}
		role, token, at := l.Role, l.Token, time.Unix(0, l.At)
		k := key{eras[who][i], role}
		if fences[k] == nil {
			fences[k] = map[int64]fence{}
		}
		if f, ok := fences[k][token]; !ok || at.Before(f.at) {
			fences[k][token] = fence{who: who, token: token, at: at}
		}
	}
	for _, who := range names(lines) {
		for i, l := range lines[who] {
			switch {
			case l.Event == member.EventAcquired && l.Init, l.Event == member.EventCommit:
				note(who, i, l)
			}
		}
	}
	// For each role and token, the earliest fence of any later token: walk the tokens downwards.
	firstLater := map[key]map[int64]fence{}
	for k, byToken := range fences {
		tokens := make([]int64, 0, len(byToken))
		for t := range byToken {
			tokens = append(tokens, t)
		}
		sort.Slice(tokens, func(i, j int) bool { return tokens[i] > tokens[j] })
		firstLater[k] = map[int64]fence{}
		var earliest *fence
		for _, t := range tokens {
			if earliest != nil {
				firstLater[k][t] = *earliest
			}
			if f := byToken[t]; earliest == nil || f.at.Before(earliest.at) {
				earliest = &f
			}
		}
	}
	var out []LateCommit
	for _, who := range names(lines) {
		for i, l := range lines[who] {
			if l.Event != member.EventCommit {
				continue
			}
			at := time.Unix(0, l.At)
			if f, ok := firstLater[key{eras[who][i], l.Role}][l.Token]; ok && at.After(f.at) {
				out = append(out, LateCommit{Who: who, Role: l.Role, Token: l.Token, At: at,
					Successor: f.who, SuccessorToken: f.token, FencedAt: f.at})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}
