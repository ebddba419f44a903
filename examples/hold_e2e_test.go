//go:build unix

package examples

import (
	"regexp"
	"testing"
)

// TestHoldScript runs examples/hold.sh, which exits non-zero if a user in
// use moved when an upstream was added, if a new user did not follow the
// new ring, if an idle user stayed held, or if a request of the background
// load failed.
func TestHoldScript(t *testing.T) {
	// The count of background requests varies, and trailing blanks.
	count := regexp.MustCompile(`\d+ requests answered`)
	blanks := regexp.MustCompile(`(?m)[ \t]+$`)
	runScript(t, "hold.sh", "HOLD_PORT_BASE", "OK: users in use stayed", func(s string) string {
		return blanks.ReplaceAllString(count.ReplaceAllString(s, "N requests answered"), "")
	})
}
