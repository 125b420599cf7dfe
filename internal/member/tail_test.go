package member

import (
	"bytes"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestTailKeepsLastLinesAndForwards(t *testing.T) {
	var out bytes.Buffer
	tail := &Tail{Max: 2, Prefix: "[m] ", Out: &out}
	for _, chunk := range []string{"one\ntw", "o\nthree\n", "unfinished"} {
		if n, err := tail.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	if got, want := tail.Lines(), []string{"two", "three", "unfinished"}; !slices.Equal(got, want) {
		t.Fatalf("Lines() = %q, want %q", got, want)
	}
	if got, want := out.String(), "[m] one\n[m] two\n[m] three\n"; got != want {
		t.Fatalf("forwarded %q, want %q", got, want)
	}
}
