//go:build unix

package examples

import (
	"regexp"
	"strings"
	"testing"
)

// TestRollingRestartScript runs examples/rolling-restart.sh, which exits
// non-zero if a request of the background users failed, if a session's
// visit count started over (a session lost: one that began on a
// neighbour while an upstream was out included, since nobody pauses
// before ready), if a new key went to a draining upstream, or if an
// upstream was not drained within 30 s. Under on_return home the same
// run loses the sessions that began during a drain, and the script
// fails: the return rule is what keeps them.
func TestRollingRestartScript(t *testing.T) {
	// What varies from run to run: timings, the hold records each upstream
	// had when it was drained, and the background's session and visit
	// counts (the failed and lost counts must read 0 as quoted).
	// The table's columns are aligned, so the spaces go with the number.
	timing := regexp.MustCompile(`\d+\.\ds`)
	held := regexp.MustCompile(`(?m)^(   app-\d) +\d+ +(\S+)$`)
	counts := regexp.MustCompile(`\d+ sessions \(\d+ begun while an upstream was out\), \d+ visits`)
	runScript(t, "rolling-restart.sh", "ROLL_PORT_BASE", "OK: rolling restart of 4 upstreams", func(s string) string {
		s = timing.ReplaceAllString(s, "N.Ns")
		s = held.ReplaceAllString(s, "${1} N ${2}")
		return counts.ReplaceAllString(s, "N sessions (N begun while an upstream was out), N visits")
	})
}

// TestRollingRestartScriptHome: the same run under hold.on_return home,
// where ready sends back every key of the restarted upstream, loses
// sessions, and the script says so.
func TestRollingRestartScriptHome(t *testing.T) {
	out, err := scriptOutput(t, "rolling-restart.sh", "ROLL_PORT_BASE", "ROLL_ON_RETURN=home")
	if err == nil {
		t.Fatalf("rolling-restart.sh under on_return home passed; want sessions lost:\n%s", out)
	}
	if !strings.Contains(out.String(), "sessions lost their count") {
		t.Fatalf("rolling-restart.sh under on_return home failed for another reason (%v):\n%s", err, out)
	}
	t.Logf("under on_return home, as expected:\n%s", out)
}
