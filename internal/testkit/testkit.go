// Package testkit holds test helpers that the core's own tests (package goneli, in the root
// module) and its broker-backed tests (internal/kafkatest/coretest, a module of its own) share. It
// must not import goneli: the core's in-package tests could not import it then.
package testkit

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obsidiandynamics/libstdgo/scribe"
)

// AwaitLimit bounds every wait so that a broken protocol fails the test instead of hanging it. It
// is not a performance assertion.
const AwaitLimit = 30 * time.Second

// Log collects log lines and prints them only if the test fails (or GONELI_TEST_LOG is set).
type Log struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed, and replaced, when a line is added
}

// NewLog returns a Log that prints what it collected when t fails.
func NewLog(t *testing.T) *Log {
	l := &Log{changed: make(chan struct{})}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("GONELI_TEST_LOG") != "" {
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, line := range l.lines {
				t.Log(line)
			}
		}
	})
	return l
}

// Contains reports whether any line logged so far contains s.
func (l *Log) Contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// Await waits until a line logged contains s, for up to limit, and reports whether one did.
func (l *Log) Await(s string, limit time.Duration) bool {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		l.mu.Lock()
		changed := l.changed
		l.mu.Unlock()
		if changed == nil {
			// A Log made without NewLog: it signals from its first line on.
			l.mu.Lock()
			if l.changed == nil {
				l.changed = make(chan struct{})
			}
			changed = l.changed
			l.mu.Unlock()
		}
		if l.Contains(s) {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return l.Contains(s)
		}
	}
}

// Count reports how many lines logged so far contain s.
func (l *Log) Count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// Scribe returns a scribe, debug level enabled, that logs into l.
func (l *Log) Scribe() scribe.Scribe {
	s := scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(func(format string, args ...interface{}) {
		line := time.Now().Format("15:04:05.000 ") + fmt.Sprintf(format, args...)
		l.mu.Lock()
		l.lines = append(l.lines, line)
		if l.changed != nil {
			close(l.changed)
		}
		l.changed = make(chan struct{})
		l.mu.Unlock()
	})})
	s.SetEnabled(scribe.Debug)
	return s
}

// TaskLog records what tasks and barriers did, in one order.
type TaskLog struct {
	mu      sync.Mutex
	entries []string
	changed chan struct{}
}

// NewTaskLog returns an empty TaskLog.
func NewTaskLog() *TaskLog {
	return &TaskLog{changed: make(chan struct{})}
}

// Add appends an entry.
func (l *TaskLog) Add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, fmt.Sprintf(format, args...))
	close(l.changed)
	l.changed = make(chan struct{})
}

// Snapshot returns the entries so far.
func (l *TaskLog) Snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// Await waits until the log has an entry equal to want, and returns its index.
func (l *TaskLog) Await(t *testing.T, want string) int {
	t.Helper()
	return l.AwaitFunc(t, want, func(e string) bool { return e == want })
}

// AwaitFunc waits until the log has an entry that match accepts, and returns its index.
func (l *TaskLog) AwaitFunc(t *testing.T, what string, match func(string) bool) int {
	t.Helper()
	limit := time.NewTimer(AwaitLimit)
	defer limit.Stop()
	for {
		l.mu.Lock()
		i, changed := slices.IndexFunc(l.entries, match), l.changed
		l.mu.Unlock()
		if i >= 0 {
			return i
		}
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("no %s within %v; log: %q", what, AwaitLimit, l.Snapshot())
		}
	}
}

// DirectRequirements returns the sorted paths of the modules that the go.mod at goMod requires
// other than as // indirect.
func DirectRequirements(t *testing.T, goMod string) []string {
	t.Helper()
	data, err := os.ReadFile(goMod)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	inBlock := false
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case inBlock && fields[0] == ")":
			inBlock = false
		case fields[0] == "require" && len(fields) > 1 && fields[1] == "(":
			inBlock = true
		case (inBlock || fields[0] == "require") && !strings.Contains(line, "// indirect"):
			if fields[0] == "require" {
				fields = fields[1:]
			}
			paths = append(paths, fields[0])
		}
	}
	slices.Sort(paths)
	return paths
}

// ListenLocal accepts connections on a loopback port until tb ends, and hands each to answer on a
// goroutine of its own, closing it once answer returns. It returns the port's address.
func ListenLocal(tb testing.TB, answer func(net.Conn)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				answer(c)
			}()
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}
