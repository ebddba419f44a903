//go:build unix

package examples

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testenv"
)

// TestHoldScript runs examples/hold.sh, which exits non-zero if a user in
// use moved when an upstream was added, if a new user did not follow the
// new ring, if an idle user stayed held, or if a request of the background
// load failed.
func TestHoldScript(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the hold demo builds ringlb and runs processes")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipExternal(t, tool, "not on PATH")
		}
	}
	goBin := goTool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, "bash", "hold.sh")
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(goBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		fmt.Sprintf("HOLD_PORT_BASE=%d", reservePortBase(t, 9)),
		"TMPDIR="+t.TempDir(),
	)
	// On timeout the script gets SIGTERM and cleans up after itself;
	// startGroup's cleanup kills whatever is left.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	p := startGroup(t, cmd)
	<-p.done
	if err := p.err; err != nil {
		t.Fatalf("bash examples/hold.sh: %v (after %v; context: %v)\n%s", err, time.Since(start).Round(time.Millisecond), ctx.Err(), out.Bytes())
	}
	if !strings.Contains(out.String(), "OK: users in use stayed") {
		t.Fatalf("hold.sh exited 0 without saying OK:\n%s", out.Bytes())
	}
	// The README quotes lines of its output: they must be real (the
	// count of background requests aside, and trailing blanks).
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)`bash examples/hold.sh`.*?\n```\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README quotes no hold.sh output")
	}
	norm := func(s string) string {
		s = regexp.MustCompile(`\d+ requests answered`).ReplaceAllString(s, "N requests answered")
		return regexp.MustCompile(`(?m)[ \t]+$`).ReplaceAllString(s, "")
	}
	got := norm(out.String())
	for _, line := range strings.Split(norm(string(m[1])), "\n") {
		if line != "" && !strings.Contains(got, line+"\n") {
			t.Errorf("README quotes %q; hold.sh printed no such line", line)
		}
	}
	t.Logf("hold.sh passed in %v:\n%s", time.Since(start).Round(time.Millisecond), out.Bytes())
}
