package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSkipExternalHelper is run by TestSkipExternal in a child process; on
// its own it does nothing.
func TestSkipExternalHelper(t *testing.T) {
	if os.Getenv("RINGLB_SKIP_HELPER") == "" {
		return
	}
	SkipExternal(t, "sometool", "not on PATH")
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
