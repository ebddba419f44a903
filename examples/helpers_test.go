package examples

// Helpers shared by the tests that run the ringlb binary.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// ringlbBinary builds ./cmd/ringlb once per test run (plain go build, so
// the binary carries the checkout's VCS stamp) and returns its path.
func ringlbBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "ringlb-examples-")
		if binErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binPath = filepath.Join(binDir, "ringlb")
		build := exec.CommandContext(ctx, goTool(t), "build", "-o", binPath, "./cmd/ringlb")
		build.Dir = repoRoot
		if out, err := build.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/ringlb: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
