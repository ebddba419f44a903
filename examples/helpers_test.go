package examples

// Helpers shared by the tests that run the ringlb binary.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
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

// --- ports -----------------------------------------------------------------

// reserve binds a TCP socket to 127.0.0.1:port (0 for any free port)
// without listening, and returns it and its port. It binds without
// SO_REUSEADDR, so it fails if anything else is bound to the port, and
// then sets it: while the socket stays open, dials to the port are refused
// and no other socket is given it, yet a server with SO_REUSEADDR (as Go's
// listeners have) can listen on it. That is Linux's rule.
func reserve(port int) (fd, bound int, err error) {
	syscall.ForkLock.RLock() // no child started meanwhile inherits it
	fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, 0, err
	}
	if err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err == nil {
		err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}
	var sa syscall.Sockaddr
	if err == nil {
		sa, err = syscall.Getsockname(fd)
	}
	if err != nil {
		syscall.Close(fd)
		return -1, 0, err
	}
	return fd, sa.(*syscall.SockaddrInet4).Port, nil
}

// reservePortBase returns a base port p such that p+1 .. p+n are held
// for the rest of the test (see reserve), below Linux's ephemeral range
// (32768 up), for a program that takes consecutive ports from a base.
// Off Linux the test is skipped.
func reservePortBase(t *testing.T, n int) int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("reserving ports for another program relies on Linux's SO_REUSEADDR rule; this is %s", runtime.GOOS)
	}
tries:
	for range 50 {
		base := 20000 + 10*rand.IntN(1200)
		var fds []int
		for p := base + 1; p <= base+n; p++ {
			fd, _, err := reserve(p)
			if err != nil {
				for _, fd := range fds {
					syscall.Close(fd)
				}
				continue tries
			}
			fds = append(fds, fd)
		}
		t.Cleanup(func() {
			for _, fd := range fds {
				syscall.Close(fd)
			}
		})
		return base
	}
	t.Fatalf("no run of %d free loopback ports found", n)
	return 0
}
