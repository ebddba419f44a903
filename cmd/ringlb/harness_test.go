package main

// Running the ringlb and demo upstream binaries, for the end-to-end tests.

import (
	"bytes"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildBins builds ringlb (without -race: its memory is measured) and the
// demo upstream.
func buildBins(t *testing.T) (string, string) {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir := t.TempDir()
	bin := func(name, pkg string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command(goTool, "build", "-o", out, pkg)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		return out
	}
	return bin("ringlb", "."), bin("upstream", "../../examples/upstream")
}

// --- processes -------------------------------------------------------------

// proc is a child process; done closes when it has exited.
type proc struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
	code int
}

func startProc(t *testing.T, path string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(path, args...), logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func startDemo(t *testing.T, bin, name, addr string) *proc {
	t.Helper()
	p := startProc(t, bin, "-name", name, "-listen", addr)
	waitHTTP(t, "http://"+addr+"/healthz")
	return p
}

// lbProc is a running ringlb.
type lbProc struct {
	*proc
	proxy, admin string // base URLs
	cfgPath      string
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// waitHTTP polls url until it answers 200.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get(url)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not answering 200: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers (child
// processes' output copiers).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
