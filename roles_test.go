package goneli

import (
	"errors"
	"strings"
	"testing"
)

// A role name travels in heartbeats, logs and `neli` environment variables; a control character
// there (a NUL once made two role lists share a group digest) is refused up front.
func TestNewRolesRefusesControlCharacters(t *testing.T) {
	for _, bad := range []string{"a\x00b", "tab\there", "line\n", "del\x7f", "c1\u0085"} {
		r, err := NewRoles(Config{}, []string{"ok", bad})
		if r != nil {
			_ = r.Close()
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "roles[1]" {
			t.Fatalf("NewRoles with role %q = %v, want a ConfigError for roles[1]", bad, err)
		}
		if !strings.Contains(err.Error(), "control character") {
			t.Errorf("NewRoles with role %q: %q does not say what is allowed", bad, err)
		}
	}
}
