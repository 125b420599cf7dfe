package main

import (
	"math"
	"sort"
	"time"

	"github.com/goneli/goneli/internal/member"
)

// Report is everything one run measured; it is written as JSON with --out.
type Report struct {
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	Command    string    `json:"command"`
	Short      bool      `json:"short"`
	Broker     string    `json:"broker"` // "embedded (kfake)" or the --kafka address
	CPUs       int       `json:"cpus"`
	GoVersion  string    `json:"go_version"`
	LoadStart  float64   `json:"load_avg_start"` // one-minute load average before the run
	LoadEnd    float64   `json:"load_avg_end"`
	TrialsPer  int       `json:"trials_per_series"`
	GroupSize  int       `json:"group_size"` // members contending in the failover and fencing trials
	TaskMs     float64   `json:"task_ms"`    // simulated leader work per run in those trials
	CostTaskMs float64   `json:"cost_task_ms"`
	SettleMs   float64   `json:"settle_ms"` // a trial's group was steady at least this long before the fault
	// KafkaVersion is the Apache Kafka version of a run on --kafka real; empty on another broker.
	KafkaVersion string        `json:"kafka_version,omitempty"`
	FirstLeader  []FirstLeader `json:"first_leader"`
	Series       []Series      `json:"series"`
	Cost         []Cost        `json:"cost"`
	// IdleLeader is the cost of a group of GroupSize whose leader's task sleeps IdleTaskMs per run
	// (a leader with nothing to do), where Cost's leaders run the CostTaskMs loop.
	IdleLeader *Cost   `json:"idle_leader,omitempty"`
	IdleTaskMs float64 `json:"idle_task_ms,omitempty"`
	Overlap    Overlap `json:"overlap"`
	// Unprovoked lists leadership changes that happened while no fault was applied.
	Unprovoked []Unprovoked `json:"unprovoked_leadership_changes"`
	// UncutFences lists every time a leader fenced itself without being cut off by the harness.
	UncutFences []UncutFence `json:"fences_without_cut"`
	Timelines   []Timeline   `json:"timelines"`
	// Phases cut graceful handoffs and first elections into the steps of the protocol (embedded
	// broker only).
	Phases []PhaseTrace `json:"phases,omitempty"`
	// Roles is what the roles scenarios measured (--roles-scenarios).
	Roles *RolesReport `json:"roles,omitempty"`
	// Rolling is the rolling upgrade, with and without priorities (rolling.go).
	Rolling []RollingTrial `json:"rolling_upgrade,omitempty"`
	// Load is what the load scenario measured (--load).
	Load *LoadReport `json:"load,omitempty"`
	// Real is what --real-kafka measured on Apache Kafka after this report's run on the embedded
	// broker, in the same process on the same machine (realPass says which scenarios).
	Real *Report `json:"real_kafka,omitempty"`
}

// FirstLeader is how long N freshly started contenders took to elect a leader.
type FirstLeader struct {
	Contenders int `json:"contenders"`
	// Samples of each figure, in milliseconds, one per repetition.
	LaunchToAcquiredMs   []float64 `json:"launch_to_acquired_ms"`    // processes launched -> first `acquired` line
	StartedToAcquiredMs  []float64 `json:"started_to_acquired_ms"`   // the leader's `started` -> its `acquired`
	LaunchToAllStartedMs []float64 `json:"launch_to_all_started_ms"` // processes launched -> every `started` line
	LaunchToAcquired     Stat      `json:"launch_to_acquired"`
	StartedToAcquired    Stat      `json:"started_to_acquired"`
	LaunchToAllStarted   Stat      `json:"launch_to_all_started"`
}

// Series is one figure measured over repeated trials.
type Series struct {
	Name               string `json:"name"`        // see the series* constants
	Description        string `json:"description"` // what is measured, from when to when
	HeartbeatTimeoutMs int64  `json:"heartbeat_timeout_ms"`
	// SessionTimeoutMs is the group session timeout the members derived from the lease. It is
	// recorded because the derivation changes between releases, and the table's "bounded by"
	// column must name the session of the run, not today's (0 in reports that predate it).
	SessionTimeoutMs int64     `json:"session_timeout_ms,omitempty"`
	SamplesMs        []float64 `json:"samples_ms"`
	Stat
}

// Names of the series.
const (
	seriesHandoff      = "graceful-handoff"
	seriesHandoffLeft  = "graceful-leader-closed"
	seriesFailover     = "crash-failover"
	seriesFenceFenced  = "cut-to-fenced"
	seriesFenceLastAct = "cut-to-last-act"
	seriesFenceNext    = "cut-to-successor-act"
	seriesFenceGap     = "leaderless-gap-after-cut"
	seriesCrashGap     = "leaderless-gap-after-crash"
)

// Stat summarises samples in milliseconds.
type Stat struct {
	N      int     `json:"n"`
	Min    float64 `json:"min_ms"`
	Median float64 `json:"median_ms"`
	P90    float64 `json:"p90_ms"`
	Max    float64 `json:"max_ms"`
}

func summarise(samples []float64) Stat {
	if len(samples) == 0 {
		return Stat{}
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	return Stat{N: len(s), Min: s[0], Median: rank(s, 0.5), P90: rank(s, 0.9), Max: s[len(s)-1]}
}

// rank is the nearest-rank percentile of sorted samples.
func rank(sorted []float64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Cost is the steady-state cost of a group of N instances, measured over a window in which
// leadership did not change.
type Cost struct {
	Instances          int     `json:"instances"`
	WindowS            float64 `json:"window_s"`
	LeaderCPUSPerMin   float64 `json:"leader_cpu_s_per_min"`
	FollowerCPUSPerMin float64 `json:"follower_cpu_s_per_min"` // median over followers
	AllCPUSPerMin      float64 `json:"all_members_cpu_s_per_min"`
	// HarnessCPUSPerMin is the broker's and the harness's: this process (the embedded broker, or
	// the counting proxy, and the output readers) and, with --kafka real, the Kafka JVM too, whose
	// part BrokerJVMCPUSPerMin gives.
	HarnessCPUSPerMin   float64 `json:"harness_cpu_s_per_min"`
	BrokerJVMCPUSPerMin float64 `json:"broker_jvm_cpu_s_per_min,omitempty"`
	LeaderRSSMB         float64 `json:"leader_rss_mb"`
	FollowerRSSMB       float64 `json:"follower_rss_mb"` // median
	// Private (anonymous) memory. Most of VmRSS is the binary's text, shared by every process
	// that runs it, and how much of it counts varies with how the page cache holds the file.
	LeaderAnonMB        float64 `json:"leader_anon_mb"`
	FollowerAnonMB      float64 `json:"follower_anon_mb"` // median
	LeaderThreads       int64   `json:"leader_threads"`
	FollowerThreads     int64   `json:"follower_threads"` // median
	HeartbeatsPerS      float64 `json:"heartbeats_per_s"` // leader topic end offset growth
	ProduceBytesPerS    float64 `json:"produce_record_bytes_per_s,omitempty"`
	ProduceRequestsPerS float64 `json:"produce_requests_per_s,omitempty"`
	RequestsPerS        float64 `json:"broker_requests_per_s,omitempty"` // all requests, all members
	// RequestsPerSByKey breaks RequestsPerS down by request name (embedded broker, or --kafka real).
	RequestsPerSByKey   map[string]float64 `json:"broker_requests_per_s_by_key,omitempty"`
	LeaderChanges       int                `json:"leader_changes_in_window"`
	LoadAvgDuringWindow float64            `json:"load_avg_end_of_window"`
}

// Overlap is the result of checking every trial's act spans for two leaders at once.
type Overlap struct {
	SpansChecked int            `json:"spans_checked"`
	Count        int            `json:"count"`
	TotalMs      float64        `json:"total_ms"`
	Instances    []OverlapEvent `json:"instances,omitempty"`
}

// OverlapEvent is one pair of act spans of different members that share an instant.
type OverlapEvent struct {
	Scenario string  `json:"scenario"`
	A        string  `json:"a"`
	B        string  `json:"b"`
	From     int64   `json:"from"`
	To       int64   `json:"to"`
	Ms       float64 `json:"ms"`
}

// Unprovoked is a leadership change in a steady group, with the events around it.
type Unprovoked struct {
	Scenario string        `json:"scenario"`
	Events   []member.Line `json:"events"`
}

// UncutFence is a leader fencing itself although no trial cut it off.
type UncutFence struct {
	Scenario string `json:"scenario"`
	Name     string `json:"name"`
	At       int64  `json:"at"`
	Reason   string `json:"reason"`
}

// Timeline is the log of one trial, for the SVG.
type Timeline struct {
	Title string        `json:"title"`
	T0    int64         `json:"t0"`   // Unix nanoseconds of the fault or signal
	From  int64         `json:"from"` // the window shown, Unix nanoseconds
	To    int64         `json:"to"`
	Lines []member.Line `json:"lines"`
}

func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}
