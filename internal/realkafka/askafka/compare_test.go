package askafka

import (
	"fmt"
	"testing"
)

// kcase is one comparison: run does the same to either side and returns what it saw.
type kcase struct {
	name string
	// skip says why the case does not apply to the pair, "" when it does.
	skip func(p *pair) string
	run  func(t *testing.T, p *pair, s *side) *obs
	// argued says why the two may differ so, "" when they may not.
	argued func(p *pair, d difference) string
}

// difference is a field whose values differ between the real broker and AsKafka.
type difference struct{ field, real, as string }

func (d difference) String() string {
	return fmt.Sprintf("%s: Kafka %s, AsKafka %s", d.field, d.real, d.as)
}

// compare runs each case on the real broker and then on AsKafka, and fails the test for each field
// whose values differ unless the case argues the difference, which it logs.
func compare(t *testing.T, p *pair, cases []kcase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.skip != nil {
				if why := c.skip(p); why != "" {
					t.Skip(why)
				}
			}
			real := c.run(t, p, p.real)
			if t.Failed() {
				return
			}
			as := c.run(t, p, p.as)
			t.Logf("%s:%s", p.real.name, real)
			for _, d := range diff(real, as) {
				why := ""
				if c.argued != nil {
					why = c.argued(p, d)
				}
				if why != "" {
					t.Logf("differs, argued: %s (%s)", d, why)
					continue
				}
				t.Errorf("differs: %s", d)
			}
		})
	}
}

// onlyKIP848 skips a case on a cluster that does not serve the consumer group protocol.
func onlyKIP848(p *pair) string {
	if !p.kip848 {
		return "Kafka " + p.release + " does not serve the consumer group protocol (KIP-848) to librdkafka 2.11.1"
	}
	return ""
}

// laterRelease argues a field that only a release after the one AsKafka models can change.
func laterRelease(p *pair, why string) string {
	if p.sameRelease() {
		return ""
	}
	return "Kafka " + p.release + " against AsKafka's " + p.model + ": " + why
}

func TestReconcilingArgued(t *testing.T) {
	for _, c := range []struct {
		real, as string
		argued   bool
	}{
		{"Stable", "Reconciling", true},
		{"Stable type Consumer", "Unknown type Consumer", true}, // librdkafka's form
		{"Stable", "Stable", false},
		{"Empty", "Reconciling", false},
		{"Stable type Consumer", "Unknown type Classic", false},
		{"Reconciling", "Stable", false},
	} {
		if got := reconcilingArgued(difference{"state", c.real, c.as}) != ""; got != c.argued {
			t.Errorf("Kafka %q, AsKafka %q: argued %v, want %v", c.real, c.as, got, c.argued)
		}
	}
}
