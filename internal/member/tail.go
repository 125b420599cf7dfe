package member

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// Tail is where a parent sends a member process's stderr. It splits the output into lines, keeps
// the last Max of them for a report should the member die, and, if Out is set, copies each line
// to Out with Prefix in front.
type Tail struct {
	Max    int
	Prefix string
	Out    io.Writer
	OutMu  *sync.Mutex // guards Out when the parent writes to it from elsewhere too; may be nil

	mu      sync.Mutex
	partial []byte
	lines   []string
}

// Write implements io.Writer.
func (t *Tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	t.partial = append(t.partial, b...)
	var complete []string
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		complete = append(complete, string(t.partial[:i]))
		t.partial = t.partial[i+1:]
	}
	t.lines = append(t.lines, complete...)
	if len(t.lines) > t.Max {
		t.lines = t.lines[len(t.lines)-t.Max:]
	}
	t.mu.Unlock()

	// Out is written without holding mu, so that Lines never waits for the parent's output lock.
	if t.Out != nil && len(complete) > 0 {
		if t.OutMu != nil {
			t.OutMu.Lock()
			defer t.OutMu.Unlock()
		}
		for _, line := range complete {
			fmt.Fprintf(t.Out, "%s%s\n", t.Prefix, line)
		}
	}
	return len(b), nil
}

// Lines returns the kept lines, oldest first, followed by an unfinished last line if there is one.
func (t *Tail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := append([]string(nil), t.lines...)
	if len(t.partial) > 0 {
		lines = append(lines, string(t.partial))
	}
	return lines
}
