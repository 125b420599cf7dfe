package driver

import (
	"sync"
	"time"

	"github.com/obsidiandynamics/libstdgo/scribe"
)

// LogThrottle keeps a broker outage from flooding the logs: each kind of problem is logged at most
// once per interval, with a count of what was held back. The loop and the alarm both log through
// it.
type LogThrottle struct {
	Every time.Duration
	mu    sync.Mutex
	seen  map[string]*throttled
}

type throttled struct {
	last       time.Time
	suppressed int
}

func (t *LogThrottle) Log(logger scribe.Logger, kind, format string, args ...interface{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil {
		t.seen = map[string]*throttled{}
	}
	now := time.Now()
	s := t.seen[kind]
	if s == nil {
		s = &throttled{}
		t.seen[kind] = s
	} else if now.Sub(s.last) < t.Every {
		s.suppressed++
		return
	}
	if s.suppressed > 0 {
		format += " (%d similar suppressed)"
		args = append(args, s.suppressed)
	}
	s.last, s.suppressed = now, 0
	logger(format, args...)
}
