package examples

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// skipExternal is called when a tool an external check needs (nginx,
// Prometheus, Chromium, curl, ...) is missing. It skips the test, or fails
// it when the environment variable CI is true (as strconv.ParseBool reads
// it: CI=true or CI=1; CI=false or unset skips). Each skip is also
// appended, as one tab-separated line "tool, reason, test", to the file
// RINGLB_SKIPPED names, if set: .ci/run reads it to end the test run with
// one line saying which external checks were skipped and why.
func skipExternal(t testing.TB, tool, reason string) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s: %s (CI=%s: external checks must run; install it)", tool, reason, os.Getenv("CI"))
	}
	if path := os.Getenv("RINGLB_SKIPPED"); path != "" {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintf(f, "%s\t%s\t%s\n", tool, reason, t.Name())
			f.Close()
		}
	}
	t.Skipf("external check skipped: %s: %s", tool, reason)
}

// TestSkipExternalHelper is run by TestSkipExternal in a child process; on
// its own it does nothing.
func TestSkipExternalHelper(t *testing.T) {
	if os.Getenv("RINGLB_SKIP_HELPER") == "" {
		return
	}
	skipExternal(t, "sometool", "not on PATH")
}

// TestSkipExternal: a missing tool skips the test and is noted for the
// summary, unless CI is true, where it fails. CI=false skips.
func TestSkipExternal(t *testing.T) {
	for _, tc := range []struct {
		ci   string
		fail bool
	}{{"", false}, {"false", false}, {"0", false}, {"true", true}, {"1", true}} {
		notes := filepath.Join(t.TempDir(), "skipped")
		cmd := exec.Command(os.Args[0], "-test.run=^TestSkipExternalHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "RINGLB_SKIP_HELPER=1", "CI="+tc.ci, "RINGLB_SKIPPED="+notes)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.fail {
			t.Errorf("CI=%q: failed %v, want %v\n%s", tc.ci, failed, tc.fail, out)
		}
		noted, _ := os.ReadFile(notes)
		want := ""
		if !tc.fail {
			want = "sometool\tnot on PATH\tTestSkipExternalHelper\n"
			if !strings.Contains(string(out), "--- SKIP") {
				t.Errorf("CI=%q: not skipped:\n%s", tc.ci, out)
			}
		}
		if string(noted) != want {
			t.Errorf("CI=%q: noted %q, want %q", tc.ci, noted, want)
		}
	}
}
