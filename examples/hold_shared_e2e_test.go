//go:build unix

package examples

import (
	"os/exec"
	"regexp"
	"testing"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// TestHoldSharedScript runs examples/hold-shared.sh, which exits non-zero
// if a user in use moved when an upstream was added on three replicas
// sharing their hold records through a redis-server, or if a request of
// the background load failed.
func TestHoldSharedScript(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.SkipExternal(t, "redis-server", "not on PATH (Debian: apt-get install redis-server)")
	}
	// Counts that vary from run to run, and trailing blanks.
	count := regexp.MustCompile(`\d+ requests answered`)
	lookups := regexp.MustCompile(`all replicas: \d+`)
	blanks := regexp.MustCompile(`(?m)[ \t]+$`)
	runScript(t, "hold-shared.sh", "SHARE_PORT_BASE", "OK: users in use stayed", func(s string) string {
		s = lookups.ReplaceAllString(count.ReplaceAllString(s, "N requests answered"), "all replicas: N")
		return blanks.ReplaceAllString(s, "")
	})
}
