package main

// The test harness shared by every test that runs binaries (the e2e-tagged
// files use it too, so it carries no build tag): build ringlb and the demo
// upstream once per test process, start them on ports nobody else can take,
// learn where ringlb listens from its log, and wait for conditions by
// polling them.

import (
	"encoding/json"
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

// --- the admin listener ----------------------------------------------------

// adminClient never keeps connections, so the admin listener holds none
// between polls and resource counts are comparable.
var adminClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}

// ringView is GET /debug/ring as the tests read it.
type ringView struct {
	Version   string
	Upstreams []upstreamState
}

// upstreamState is one upstream of /debug/ring.
type upstreamState struct {
	Name      string
	Available bool
	Health    string
	Breaker   string
	Inflight  int
}

func getRing(admin string) (ringView, error) {
	var v ringView
	res, err := adminClient.Get(admin + "/debug/ring")
	if err != nil {
		return v, err
	}
	defer res.Body.Close()
	err = json.NewDecoder(res.Body).Decode(&v)
	return v, err
}

// mustGetRing is getRing failing the test on an error.
func mustGetRing(t *testing.T, admin string) ringView {
	t.Helper()
	v, err := getRing(admin)
	if err != nil {
		t.Fatalf("/debug/ring: %v", err)
	}
	return v
}

func ringState(t *testing.T, admin, name string) upstreamState {
	t.Helper()
	v := mustGetRing(t, admin)
	for _, u := range v.Upstreams {
		if u.Name == name {
			return u
		}
	}
	t.Fatalf("/debug/ring has no %s: %+v", name, v)
	return upstreamState{}
}

// waitState polls /debug/ring until ok accepts name's state.
func waitState(t *testing.T, admin, name string, what string, ok func(upstreamState) bool) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, func() error {
		if st := ringState(t, admin, name); !ok(st) {
			return fmt.Errorf("%s never became %s: %+v", name, what, st)
		}
		return nil
	})
}

func ringVersion(t *testing.T, admin string) string {
	t.Helper()
	return mustGetRing(t, admin).Version
}

// --- ports -----------------------------------------------------------------

// reservePort returns a loopback address whose port is held, until the test
// ends, by a socket that is bound but not listening: dials to it are
// refused and no other socket is given the port, yet a server started on it
// can listen on it, and listen on it again after a crash, while the
// reservation stands. The socket binds without SO_REUSEADDR, so the port
// had nothing else bound, and then sets it: Linux lets a socket with
// SO_REUSEADDR (as Go's listeners have) bind beside sockets that have it
// and do not listen. Elsewhere the test is skipped.
//
// It is for servers that take their address from a flag or a config file
// and do not say which port they got for port 0.
func reservePort(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("reserving a port for another server relies on Linux's SO_REUSEADDR rule; this is %s", runtime.GOOS)
	}
	syscall.ForkLock.RLock() // no child started meanwhile inherits it
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
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
