//go:build unix

package examples

import (
	"regexp"
	"testing"
)

// TestRollingRestartScript runs examples/rolling-restart.sh, which exits
// non-zero if a request of the background users failed, if a session's
// visit count started over (a session lost), if a new key went to a
// draining upstream, or if an upstream was not drained within 30 s.
func TestRollingRestartScript(t *testing.T) {
	// What varies from run to run: timings, the hold records each upstream
	// had when it was drained, and the background's session and visit
	// counts (the failed and lost counts must read 0 as quoted).
	// The table's columns are aligned, so the spaces go with the number.
	timing := regexp.MustCompile(`\d+\.\ds`)
	held := regexp.MustCompile(`(?m)^(   app-\d) +\d+ +(\S+)$`)
	counts := regexp.MustCompile(`\d+ sessions, \d+ visits`)
	runScript(t, "rolling-restart.sh", "ROLL_PORT_BASE", "OK: rolling restart of 4 upstreams", func(s string) string {
		s = timing.ReplaceAllString(s, "N.Ns")
		s = held.ReplaceAllString(s, "${1} N ${2}")
		return counts.ReplaceAllString(s, "N sessions, N visits")
	})
}
