package healthcheck

import (
	"testing"
	"time"
)

// eventually polls cond every few milliseconds until it holds or timeout
// passes; it reports whether cond held. The caller fails with its own
// message, naming the state it waited for.
func eventually(t testing.TB, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
