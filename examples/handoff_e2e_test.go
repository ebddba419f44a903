//go:build unix

package examples

import (
	"regexp"
	"testing"
)

// TestHandoffScript runs examples/handoff.sh, which exits non-zero unless
// a scale-out without hold restarts the count of every user it moves when
// handoff is off, and of none when it is on (the newcomer fetches the
// count from the upstream the handoff header names).
func TestHandoffScript(t *testing.T) {
	// What varies from run to run: the ports in URLs, and the users the
	// lookup example picks.
	port := regexp.MustCompile(`127\.0\.0\.1:\d+`)
	user := regexp.MustCompile(`key=user\d+`)
	version := regexp.MustCompile(`version [0-9a-f]+`)
	from := regexp.MustCompile(`handoff from app-\d`)
	runScript(t, "handoff.sh", "HANDOFF_PORT_BASE", "OK: handoff: 0 of", func(s string) string {
		s = port.ReplaceAllString(s, "127.0.0.1:PORT")
		s = version.ReplaceAllString(s, "version V")
		s = from.ReplaceAllString(s, "handoff from app-N")
		return user.ReplaceAllString(s, "key=userN")
	})
}
