package member

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"testing"
	"time"
)

func TestParseArgsRoles(t *testing.T) {
	for _, c := range []struct {
		args  []string
		roles []string // nil: the single leader
		bad   bool
	}{
		{args: nil},
		{args: []string{"-roles", "0"}},
		{args: []string{"-roles", "3"}, roles: []string{"0", "1", "2"}},
		{args: []string{"-role", "billing", "-role", "audit"}, roles: []string{"billing", "audit"}},
		{args: []string{"-roles", "2", "-role", "a"}, bad: true},
		{args: []string{"-roles", "-1"}, bad: true},
		{args: []string{"-role", ""}, bad: true},
		{args: []string{"-roles", "x"}, bad: true},
		{args: []string{"-roles", "2", "stray"}, bad: true},
	} {
		t.Run(fmt.Sprint(c.args), func(t *testing.T) {
			var out bytes.Buffer
			o, err := ParseArgs(c.args, &out)
			if c.bad {
				if err == nil || out.Len() == 0 {
					t.Fatalf("ParseArgs(%q) = %+v, %v; want an error, explained on the output", c.args, o, err)
				}
				return
			}
			if err != nil || !slices.Equal(o.Roles, c.roles) || (c.roles == nil && o.Roles != nil) {
				t.Fatalf("ParseArgs(%q): roles %q, %v; want %q", c.args, o.Roles, err, c.roles)
			}
		})
	}
}

func TestParseArgsKeepsOtherFlags(t *testing.T) {
	o, err := ParseArgs([]string{"-kafka", "k:1", "-group", "g", "-name", "n", "-heartbeat-timeout", "2s",
		"-task", "3ms", "-X", "a=b", "-X", "c=d", "-role", "r"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Broker != "k:1" || o.Group != "g" || o.Name != "n" || o.HeartbeatTimeout != 2*time.Second || o.Task != 3*time.Millisecond ||
		!maps.Equal(o.Kafka, map[string]string{"a": "b", "c": "d"}) || !slices.Equal(o.Roles, []string{"r"}) {
		t.Fatalf("ParseArgs: %+v", o)
	}
}
