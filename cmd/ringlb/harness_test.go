package main

// The test harness shared by every test that runs binaries (the e2e-tagged
// files use it too, so it carries no build tag): build ringlb and the demo
// upstream once per test process, start them on ports nobody else can take
// (ringlbtest.ReservePort), learn where ringlb listens from its log, and
// wait for conditions by polling them. The helpers the serving process's
// tests use too are in ringlbtest.

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// builds holds one build per package path, made the first time a test
// asks for it, in binDir, which TestMain removes.
var (
	buildMu sync.Mutex
	builds  = map[string]*build{}
	binDir  string
)

type build struct {
	once sync.Once
	path string
	err  error
}

// buildBinary builds the package pkg (relative to this directory) once per
// test process, without -race (the e2e tests measure the binary's memory),
// and returns the binary's path.
func buildBinary(t testing.TB, pkg string) string {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		t.Skipf("no go tool: %v", err)
	}
	buildMu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	buildMu.Unlock()
	b.once.Do(func() {
		buildMu.Lock()
		if binDir == "" {
			binDir, b.err = os.MkdirTemp("", "ringlb-test-bin-")
		}
		dir := binDir
		buildMu.Unlock()
		if b.err != nil {
			return
		}
		b.path = filepath.Join(dir, filepath.Base(filepath.Clean(pkg)))
		if pkg == "." {
			b.path = filepath.Join(dir, "ringlb")
		}
		if out, err := exec.Command(goTool, "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// ringlbBinary is this command, built once per test process.
func ringlbBinary(t testing.TB) string { return buildBinary(t, ".") }

// upstreamBinary is examples/upstream, built once per test process.
func upstreamBinary(t testing.TB) string { return buildBinary(t, "../../examples/upstream") }

// --- processes -------------------------------------------------------------

// proc is a child process; done closes when it has exited.
type proc struct {
	cmd  *exec.Cmd
	logs *testenv.Buffer
	done chan struct{}
	code int
}

func startProc(t *testing.T, path string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(path, args...), logs: &testenv.Buffer{}, done: make(chan struct{})}
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

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startUpstream starts an examples/upstream process named name on addr (a
// port from reservePort) and waits until it answers /healthz.
func startUpstream(t *testing.T, name, addr string) *proc {
	t.Helper()
	p := startProc(t, upstreamBinary(t), "-name", name, "-listen", addr)
	waitHTTP(t, "http://"+addr+"/healthz")
	return p
}

// lbProc is a running ringlb.
type lbProc struct {
	*proc
	proxy, admin string // base URLs
	cfgPath      string
}

// servingLine is the log line ringlb writes once both listeners are bound,
// with the addresses they are bound to.
var servingLine = regexp.MustCompile(`msg="ringlb serving" listen=(\S+) admin_listen=(\S+)`)

// startRinglb runs `ringlb serve -config cfgPath`, the config having listen
// and admin_listen on port 0, and learns the ports it was given from its
// "ringlb serving" log line.
func startRinglb(t *testing.T, cfgPath string) *lbProc {
	t.Helper()
	lb := &lbProc{proc: startProc(t, ringlbBinary(t), "serve", "-config", cfgPath), cfgPath: cfgPath}
	var m []string
	testenv.Eventually(t, 20*time.Second, func() error {
		if m = servingLine.FindStringSubmatch(lb.logs.String()); m != nil {
			return nil
		}
		if lb.exited() {
			t.Fatalf("ringlb exited %d before serving:\n%s", lb.code, lb.logs)
		}
		return fmt.Errorf("ringlb has not logged that it serves:\n%s", lb.logs)
	})
	lb.proxy, lb.admin = "http://"+m[1], "http://"+m[2]
	return lb
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// --- waiting ---------------------------------------------------------------

// waitHTTP polls url until it answers 200.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() error {
		res, err := http.Get(url)
		if err != nil {
			return fmt.Errorf("%s: not answering 200: %v", url, err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("%s: not answering 200: %s", url, res.Status)
		}
		return nil
	})
}
