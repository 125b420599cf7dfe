// Package member is a leader-election contender meant to run as its own process, for the demo,
// the chaos suite and the benchmarks. It prints what it does as JSON lines on stdout, stamped with
// the wall clock so that a parent on the same host can merge the lines of several members onto one
// timeline.
//
// Leader work is simulated by a task that runs over and over while the member leads. Each run
// reads the clock, then checks IsLeader, and reports the clock reading as an action only if the
// check passed. A process frozen between the two readings therefore reports nothing for that run,
// so a report always means "IsLeader was true at or after this instant".
package member

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goneli/goneli"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// Line is one JSON line of a member's output.
type Line struct {
	At    int64  `json:"at"`             // Unix nanoseconds when it happened
	Name  string `json:"name"`           // the member's Config.Name
	Event string `json:"event"`          // see the Event* constants
	From  int64  `json:"from,omitempty"` // EventAct: first action of the span, Unix nanoseconds
	To    int64  `json:"to,omitempty"`   // EventAct: last action of the span
	Runs  int64  `json:"runs,omitempty"` // EventAct: task runs in the span
	Info  string `json:"info,omitempty"` // tenure, reason or error text
}

// Events a member reports.
const (
	EventStarted  = "started"  // New returned; the member is contending
	EventAcquired = "acquired" // LeaderAcquired reached the barrier
	EventFenced   = "fenced"   // LeaderFenced reached the barrier
	EventRevoked  = "revoked"  // LeaderRevoked reached the barrier
	EventAct      = "act"      // a span of leader actions, [From, To]; spans of one member never overlap
	EventClosed   = "closed"   // Close returned after SIGTERM or SIGINT
	EventError    = "error"    // a fatal error; the process exits non-zero
)

// Options configure a member.
type Options struct {
	Broker           string
	Group            string
	Topic            string
	Name             string
	HeartbeatTimeout time.Duration
	MinPollInterval  time.Duration
	Task             time.Duration // simulated work per run
	Kafka            map[string]string
	LogLevel         string // goneli's log level on stderr: off, error, warn, info, debug
}

// flushEvery is how often an open span of actions is reported, bounding what a SIGKILL can hide.
const flushEvery = 50 * time.Millisecond

// Main parses args (without the program name) and runs a member until SIGTERM or SIGINT, writing
// lines to stdout. It returns the process exit status.
func Main(args []string) int {
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	var o Options
	var kafkaKV multiFlag
	fs.StringVar(&o.Broker, "kafka", "localhost:9092", "bootstrap servers")
	fs.StringVar(&o.Group, "group", "neli", "leader group ID")
	fs.StringVar(&o.Topic, "topic", "", "leader topic (default: <group>.neli)")
	fs.StringVar(&o.Name, "name", "", "instance name (default: goneli's)")
	fs.DurationVar(&o.HeartbeatTimeout, "heartbeat-timeout", goneli.DefaultHeartbeatTimeout, "lease length")
	fs.DurationVar(&o.MinPollInterval, "min-poll-interval", 0, "poll and heartbeat interval (0: goneli's default for the lease)")
	fs.DurationVar(&o.Task, "task", time.Millisecond, "simulated work per leader task run")
	fs.Var(&kafkaKV, "X", "extra librdkafka setting key=value (repeatable)")
	fs.StringVar(&o.LogLevel, "log-level", "warn", "goneli log level on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Kafka = kafkaKV.m
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	stop := make(chan struct{})
	go func() { <-sig; close(stop) }()
	if err := Run(o, os.Stdout, stop); err != nil {
		return 1
	}
	return 0
}

type multiFlag struct{ m map[string]string }

func (f *multiFlag) String() string { return fmt.Sprint(f.m) }

func (f *multiFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	if f.m == nil {
		f.m = map[string]string{}
	}
	f.m[k] = v
	return nil
}

// Run contends until stop is closed, then closes gracefully. Lines go to out.
func Run(o Options, out io.Writer, stop <-chan struct{}) error {
	w := &writer{enc: json.NewEncoder(out), name: o.Name}
	kc := goneli.KafkaConfigMap{"bootstrap.servers": o.Broker}
	for k, v := range o.Kafka {
		kc[k] = v
	}
	config := goneli.Config{
		KafkaConfig:      kc,
		LeaderGroupID:    o.Group,
		LeaderTopic:      o.Topic,
		Name:             o.Name,
		HeartbeatTimeout: goneli.Duration(o.HeartbeatTimeout),
		Scribe:           stderrScribe(o.LogLevel),
	}
	if o.MinPollInterval > 0 {
		config.MinPollInterval = goneli.Duration(o.MinPollInterval)
	}
	acts := &spans{w: w}
	n, err := goneli.New(config, func(e goneli.Event) {
		switch e := e.(type) {
		case goneli.LeaderAcquired:
			w.write(Line{Event: EventAcquired, Info: e.Tenure})
		case goneli.LeaderFenced:
			acts.flush()
			w.write(Line{Event: EventFenced, Info: e.Reason})
		case goneli.LeaderRevoked:
			acts.flush()
			w.write(Line{Event: EventRevoked, Info: e.Tenure})
		}
	})
	if err != nil {
		w.write(Line{Event: EventError, Info: err.Error()})
		return err
	}
	w.name = config.Name
	if w.name == "" {
		w.name = "member"
	}
	w.write(Line{Event: EventStarted})
	p, err := n.Background(func() {
		t := time.Now()
		if n.IsLeader() {
			acts.act(t)
		}
		if o.Task > 0 {
			time.Sleep(o.Task)
		}
	})
	if err != nil {
		_ = n.Close()
		w.write(Line{Event: EventError, Info: err.Error()})
		return err
	}
	ticker := time.NewTicker(flushEvery)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			p.Close()
			_ = p.Await()
			acts.flush()
			if err := n.Close(); err != nil {
				w.write(Line{Event: EventError, Info: err.Error()})
				return err
			}
			w.write(Line{Event: EventClosed})
			return nil
		case <-ticker.C:
			acts.flush()
			if err := p.Error(); err != nil {
				w.write(Line{Event: EventError, Info: err.Error()})
				_ = n.Close()
				return err
			}
		}
	}
}

type writer struct {
	mu   sync.Mutex
	enc  *json.Encoder
	name string
}

func (w *writer) write(l Line) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.At == 0 {
		l.At = time.Now().UnixNano()
	}
	l.Name = w.name
	_ = w.enc.Encode(l)
}

// spans coalesces actions into reported spans.
type spans struct {
	mu       sync.Mutex
	w        *writer
	from, to time.Time
	runs     int64
}

func (s *spans) act(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == 0 {
		s.from = t
	}
	s.to = t
	s.runs++
}

func (s *spans) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == 0 {
		return
	}
	s.w.write(Line{Event: EventAct, From: s.from.UnixNano(), To: s.to.UnixNano(), Runs: s.runs})
	s.runs = 0
}

func stderrScribe(level string) scribe.Scribe {
	s := scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(func(format string, args ...interface{}) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
	})})
	l := strings.ToLower(level)
	if l != "" {
		l = strings.ToUpper(l[:1]) + l[1:]
	}
	spec, err := scribe.ParseLevelName(l)
	if err != nil {
		spec, _ = scribe.ParseLevelName("Warn")
	}
	s.SetEnabled(spec.Level)
	return s
}
