package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/goneli/goneli/internal/member"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The phase trace: when the embedded broker received each request that takes part in an election,
// tied to the member that sent it, so that a handoff or a first election can be cut into phases.
// Group requests carry a member id, which kfake builds from the client.id ("goneli-" and the
// member's name); heartbeat records carry the member's name as their key. Fetches and group
// descriptions carry neither and are traced by group or topic only.

// traced is one request the broker received.
type traced struct {
	at     time.Time
	key    int16
	member string // the member id (group requests) or record key (Produce); empty if unknown
	group  string // group requests and DescribeGroups
}

// tracer keeps the requests of interest while on; the cost figures are measured with it off.
type tracer struct {
	mu      sync.Mutex
	on      bool
	entries []traced
}

func (t *tracer) start() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on, t.entries = true, nil
}

// stop ends the trace and returns what it kept.
func (t *tracer) stop() []traced {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.entries
	t.on, t.entries = false, nil
	return out
}

func (t *tracer) observe(req kmsg.Request) {
	t.mu.Lock()
	on := t.on
	t.mu.Unlock()
	if !on {
		return
	}
	now := time.Now()
	var found []traced
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		found = append(found, traced{member: r.MemberID, group: r.Group})
	case *kmsg.SyncGroupRequest:
		found = append(found, traced{member: r.MemberID, group: r.Group})
	case *kmsg.OffsetCommitRequest:
		found = append(found, traced{member: r.MemberID, group: r.Group})
	case *kmsg.HeartbeatRequest:
		found = append(found, traced{member: r.MemberID, group: r.Group})
	case *kmsg.LeaveGroupRequest:
		found = append(found, traced{member: r.MemberID, group: r.Group})
		for _, m := range r.Members {
			found = append(found, traced{member: m.MemberID, group: r.Group})
		}
	case *kmsg.DescribeGroupsRequest:
		for _, g := range r.Groups {
			found = append(found, traced{group: g})
		}
	case *kmsg.ProduceRequest:
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				for _, key := range recordKeys(p.Records) {
					found = append(found, traced{member: key})
				}
			}
		}
	default:
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on {
		return
	}
	for _, f := range found {
		f.at, f.key = now, req.Key()
		t.entries = append(t.entries, f)
	}
}

// recordKeys returns the keys of the records in an uncompressed record batch (goneli's producers
// do not compress).
func recordKeys(raw []byte) []string {
	var keys []string
	for len(raw) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			return keys
		}
		size := int(b.Length) + 12 // the batch length excludes the offset and the length fields
		if size <= 12 || size > len(raw) {
			return keys
		}
		raw = raw[size:]
		if b.Attributes&0x07 != 0 {
			continue
		}
		recs := b.Records
		for range b.NumRecords {
			var r kmsg.Record
			length, n := kbin.Varint(recs)
			if n <= 0 || int(length)+n > len(recs) {
				break
			}
			if r.ReadFrom(recs[:int(length)+n]) != nil {
				break
			}
			keys = append(keys, string(r.Key))
			recs = recs[int(length)+n:]
		}
	}
	return keys
}

// Phases of an election, in the order they happen.
const (
	phaseClosed    = "leader's Close returned"
	phaseMarker    = "leader's release marker produced"
	phaseLeave     = "LeaveGroup of the leader"
	phaseHeard     = "another member's next group heartbeat"
	phaseRejoin    = "first JoinGroup of another member"
	phaseJoined    = "successor's JoinGroup"
	phaseSynced    = "successor's SyncGroup (assignment)"
	phaseProduced  = "successor's first heartbeat produced"
	phaseChecked   = "group check (DescribeGroups)"
	phaseCommitted = "successor's heartbeat offset commit"
	phaseAcquired  = "successor's LeaderAcquired"
	phaseAct       = "successor's first act"
)

var handoffPhases = []string{phaseClosed, phaseMarker, phaseLeave, phaseHeard, phaseRejoin, phaseJoined, phaseSynced, phaseProduced,
	phaseChecked, phaseCommitted, phaseAcquired, phaseAct}

var firstPhases = []string{phaseJoined, phaseSynced, phaseProduced, phaseChecked, phaseCommitted, phaseAcquired, phaseAct}

// PhaseTrace is the median time of each phase of one kind of election, from its start (the
// leader's SIGTERM for a handoff, the launch of the processes for a first election).
type PhaseTrace struct {
	Name               string               `json:"name"`
	HeartbeatTimeoutMs int64                `json:"heartbeat_timeout_ms"`
	Phases             []string             `json:"phases"`
	SamplesMs          map[string][]float64 `json:"samples_ms"` // by phase; a trial that lacks a phase adds none
	MedianMs           map[string]float64   `json:"median_ms"`
	// Checks counts, per trial, the group descriptions (DescribeGroups) sent from the successor's
	// assignment to its acquisition: more than one means that a check came back inconclusive and
	// was made again.
	Checks []int `json:"group_checks,omitempty"`
}

func newPhaseTrace(name string, lease time.Duration, phases []string) *PhaseTrace {
	return &PhaseTrace{Name: name, HeartbeatTimeoutMs: lease.Milliseconds(), Phases: phases,
		SamplesMs: map[string][]float64{}, MedianMs: map[string]float64{}}
}

// add cuts one election into phases: old is the leader that left ("" for a first election), next
// the member that acted after t0, lines what the members reported.
func (p *PhaseTrace) add(entries []traced, lines []member.Line, group, old string, next member.Line, t0 time.Time) {
	since := func(at time.Time) float64 { return ms(at.Sub(t0)) }
	of := func(name string) func(traced) bool {
		prefix := "goneli-" + name + "-"
		return func(e traced) bool { return e.member == name || strings.HasPrefix(e.member, prefix) }
	}
	first := func(from time.Time, key kmsg.Key, pred func(traced) bool) (time.Time, bool) {
		for _, e := range entries {
			if e.key == int16(key) && !e.at.Before(from) && pred(e) {
				return e.at, true
			}
		}
		return time.Time{}, false
	}
	inGroup := func(e traced) bool { return e.group == group }
	record := func(phase string, at time.Time, ok bool) {
		if ok {
			p.SamplesMs[phase] = append(p.SamplesMs[phase], since(at))
		}
	}
	succ := of(next.Name)
	from := t0
	if old != "" {
		for _, l := range lines {
			if l.Name == old && l.Event == member.EventClosed && l.At >= t0.UnixNano() {
				record(phaseClosed, time.Unix(0, l.At), true)
				break
			}
		}
		marker, ok := first(t0, kmsg.Produce, func(e traced) bool { return e.member == old })
		record(phaseMarker, marker, ok)
		leave, ok := first(t0, kmsg.LeaveGroup, of(old))
		record(phaseLeave, leave, ok)
		if ok {
			from = leave
			heard, ok := first(from, kmsg.Heartbeat, func(e traced) bool { return inGroup(e) && !of(old)(e) })
			record(phaseHeard, heard, ok)
			rejoin, ok := first(from, kmsg.JoinGroup, func(e traced) bool { return inGroup(e) && !of(old)(e) })
			record(phaseRejoin, rejoin, ok)
		}
	}
	joined, ok := first(from, kmsg.JoinGroup, succ)
	record(phaseJoined, joined, ok)
	produced, okProduced := first(from, kmsg.Produce, func(e traced) bool { return e.member == next.Name })
	// The assignment that counts is the last one the successor asked for before its first heartbeat.
	var synced time.Time
	for _, e := range entries {
		if e.key == int16(kmsg.SyncGroup) && !e.at.Before(from) && succ(e) && (!okProduced || e.at.Before(produced)) {
			synced = e.at
		}
	}
	record(phaseSynced, synced, !synced.IsZero())
	record(phaseProduced, produced, okProduced)
	if !synced.IsZero() {
		checked, ok := first(synced, kmsg.DescribeGroups, inGroup)
		record(phaseChecked, checked, ok)
		checks := 0
		for _, e := range entries {
			if e.key == int16(kmsg.DescribeGroups) && !e.at.Before(synced) && inGroup(e) && (next.From == 0 || e.at.UnixNano() <= next.From) {
				checks++
			}
		}
		p.Checks = append(p.Checks, checks)
	}
	if okProduced {
		committed, ok := first(produced, kmsg.OffsetCommit, succ)
		record(phaseCommitted, committed, ok)
	}
	for _, l := range lines {
		if l.Name == next.Name && l.Event == member.EventAcquired && l.At >= t0.UnixNano() {
			record(phaseAcquired, time.Unix(0, l.At), true)
			break
		}
	}
	record(phaseAct, time.Unix(0, next.From), next.From != 0)
}

// summarise fills in the medians.
func (p *PhaseTrace) summarise() {
	for phase, s := range p.SamplesMs {
		p.MedianMs[phase] = summarise(s).Median
	}
}

// printPhases renders the phase traces as one Markdown table per trace.
func printPhases(w func(format string, args ...any), traces []PhaseTrace) {
	for _, t := range traces {
		lease := time.Duration(t.HeartbeatTimeoutMs) * time.Millisecond
		w("")
		w("| %s, HeartbeatTimeout %v: phase | trials | median since start | median step | p90 since start |", t.Name, lease)
		w("|---|---|---|---|---|")
		// Phases are listed in protocol order; the step is the difference of the medians, which
		// is what the phase adds in a typical trial.
		prev := 0.0
		for _, ph := range t.Phases {
			m, ok := t.MedianMs[ph]
			if !ok {
				continue
			}
			step := ""
			if ph != phaseClosed {
				step = fmt.Sprintf("%+.0f ms", m-prev)
				prev = m
			}
			// The p90 column shows in which phase the slower trials lose their time.
			w("| %s | %d | %.0f ms | %s | %s |", ph, len(t.SamplesMs[ph]), m, step, msStr(summarise(t.SamplesMs[ph]).P90))
		}
		if len(t.Checks) > 0 {
			var c []float64
			for _, n := range t.Checks {
				c = append(c, float64(n))
			}
			s := summarise(c)
			w("")
			w("Group checks from the assignment to the first act: median %.0f, max %.0f per trial.", s.Median, s.Max)
		}
	}
}
