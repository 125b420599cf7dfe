package kernel

import (
	"testing"
	"time"

	"github.com/goneli/goneli/internal/verdict"
)

// TestDelayNeverReorders checks the delayer's jitter: every delay is within delay ± jitter, both
// ends are reached, and a packet queued later is never released before one queued earlier.
func TestDelayNeverReorders(t *testing.T) {
	d := &delayer{delay: 400 * time.Millisecond, jitter: 100 * time.Millisecond, start: time.Unix(1000, 0)}
	var lastRelease time.Time
	lo, hi := time.Hour, time.Duration(0)
	for at := d.start; at.Before(d.start.Add(5 * time.Second)); at = at.Add(time.Millisecond) {
		delay := d.delayAt(at)
		lo, hi = min(lo, delay), max(hi, delay)
		release := at.Add(delay)
		if release.Before(lastRelease) {
			t.Fatalf("a packet queued at +%v is released at +%v, before one queued a millisecond earlier (+%v)",
				at.Sub(d.start), release.Sub(d.start), lastRelease.Sub(d.start))
		}
		lastRelease = release
	}
	if lo != 300*time.Millisecond || hi != 500*time.Millisecond {
		t.Errorf("delays from %v to %v; want 300ms to 500ms", lo, hi)
	}
	if c := (&delayer{delay: 400 * time.Millisecond}).delayAt(time.Now()); c != 400*time.Millisecond {
		t.Errorf("without jitter the delay is %v", c)
	}
}

// TestChanges checks how leadership changes are counted: a member following another counts, a
// member following itself does not, the count starts from whoever acted last before the window,
// and the time led is that of the spans within it.
func TestChanges(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	span := func(who string, from, to int) verdict.Span { return verdict.Span{Who: who, From: at(from), To: at(to)} }
	spans := []verdict.Span{span("a", 0, 90), span("b", 100, 190), span("b", 200, 290), span("a", 300, 390), span("c", 500, 590)}
	for _, c := range []struct {
		from, to, want int
		led            time.Duration
	}{
		{0, 1000, 3, 450 * time.Millisecond},
		{95, 295, 1, 180 * time.Millisecond}, // a before the window, then b
		{0, 150, 1, 140 * time.Millisecond},
		{250, 450, 1, 130 * time.Millisecond},
		{400, 450, 0, 0}, // a before, nobody within
		{600, 700, 0, 0},
	} {
		if got, led := changes(spans, at(c.from), at(c.to)); got != c.want || led != c.led {
			t.Errorf("changes in [%d ms, %d ms] = %d, led %v; want %d, %v", c.from, c.to, got, led, c.want, c.led)
		}
	}
}
