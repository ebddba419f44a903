package process

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// running is a ringlb serving in-process from a config file.
type running struct {
	proxy, admin string // base URLs
	cancel       context.CancelFunc
	done         chan error // what Run returned
}

func startServe(t *testing.T, path string) *running {
	t.Helper()
	return startServeLog(t, path, io.Discard)
}

// startServeLog is startServe with its log written to logs.
func startServeLog(t *testing.T, path string, logs io.Writer) *running {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	logger := slog.New(slog.NewTextHandler(logs, nil))
	go func() {
		r.done <- Run(ctx, Options{Path: path, Config: cfg, Logger: logger, Ready: func(p, a net.Addr) {
			r.proxy, r.admin = "http://"+p.String(), "http://"+a.String()
			close(ready)
		}})
	}()
	select {
	case <-ready:
	case err := <-r.done:
		t.Fatalf("serve exited with %v before listening", err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start")
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) error {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // later stops see it too
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
		return nil
	}
}

func TestServeAffinityAndReload(t *testing.T) {
	bs := ringlbtest.StartBackends(t, 4, nil)
	path := ringlbtest.WriteConfig(t, ringlbtest.Listeners+"hash:\n  key: [header: X-User-ID]\n"+ringlbtest.BackendsYAML(bs[:3]))
	r := startServe(t, path)

	owner := map[string]string{}
	for u := 0; u < 60; u++ {
		id := fmt.Sprint(u)
		code, body := ringlbtest.Get(t, r.proxy+"/", "X-User-ID", id)
		if code != 200 {
			t.Fatalf("user %s: status %d", id, code)
		}
		owner[id] = body
		for k := 0; k < 2; k++ {
			if _, again := ringlbtest.Get(t, r.proxy+"/", "X-User-ID", id); again != body {
				t.Fatalf("user %s moved from %s to %s with nothing changed", id, body, again)
			}
		}
	}

	// A bad reload changes nothing.
	good, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(ringlbtest.Listeners+"upstreams: []\n"), 0o644)
	resp, err := http.Post(r.admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var bad struct{ Errors []string }
	json.NewDecoder(resp.Body).Decode(&bad)
	resp.Body.Close()
	if resp.StatusCode != 400 || len(bad.Errors) == 0 || !strings.Contains(bad.Errors[0], "upstreams") {
		t.Fatalf("bad reload: status %d, errors %q", resp.StatusCode, bad.Errors)
	}
	for id, want := range owner {
		if _, got := ringlbtest.Get(t, r.proxy+"/", "X-User-ID", id); got != want {
			t.Fatalf("after a bad reload user %s moved from %s to %s", id, want, got)
		}
	}

	// Adding a fourth upstream by SIGHUP moves keys only to it.
	os.WriteFile(path, []byte(string(good)+fmt.Sprintf("  - name: %s\n    url: %s\n", bs[3].Name, bs[3].URL)), 0o644)
	before := ringlbtest.RingVersion(t, r.admin)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testenv.Eventually(t, 10*time.Second, func() error {
		if ringlbtest.RingVersion(t, r.admin) == before {
			return errors.New("SIGHUP did not reload")
		}
		return nil
	})
	moved := 0
	for id, was := range owner {
		_, now := ringlbtest.Get(t, r.proxy+"/", "X-User-ID", id)
		if now != was {
			moved++
			if now != "app-4" {
				t.Errorf("user %s moved from %s to %s, not to the newcomer", id, was, now)
			}
		}
	}
	if moved == 0 {
		t.Error("no user moved to the newcomer")
	}
	_, metrics := ringlbtest.Get(t, r.admin+"/metrics")
	for _, want := range []string{`ringlb_config_reloads_total{result="ok"} 1`, `ringlb_config_reloads_total{result="error"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestServeDrainsOnShutdown(t *testing.T) {
	hold := make(chan struct{})
	bs := ringlbtest.StartBackends(t, 2, hold)
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+"shutdown_timeout: 10s\n"+ringlbtest.BackendsYAML(bs)))

	const n = 5
	var wg sync.WaitGroup
	results := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(r.proxy + "/slow")
			if err != nil {
				results <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- fmt.Sprint(resp.StatusCode, " ", string(b))
		}()
	}
	// Wait until all are in flight, then ask ringlb to stop.
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, m := ringlbtest.Get(t, r.admin+"/metrics"); ringlbtest.InflightTotal(m) != n {
			return fmt.Errorf("requests never got in flight:\n%s", m)
		}
		return nil
	})
	r.cancel()
	// Shutdown has begun once the proxy's listener is closed.
	testenv.Eventually(t, 10*time.Second, func() error {
		c, err := net.Dial("tcp", strings.TrimPrefix(r.proxy, "http://"))
		if err != nil {
			return nil
		}
		c.Close()
		return errors.New("the proxy's listener is still open after the stop")
	})
	close(hold)
	wg.Wait()
	close(results)
	for res := range results {
		if !strings.HasPrefix(res, "200 app-") {
			t.Errorf("in-flight request during shutdown: %s", res)
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("serve returned %v, want nil (exit code 0)", err)
	}
}

// TestServeDebugPprof: debug_pprof reaches the admin listener; off (the
// default) /debug/pprof/ is 404 there, and the proxy port never serves it.
func TestServeDebugPprof(t *testing.T) {
	bs := ringlbtest.StartBackends(t, 1, nil)
	for _, on := range []bool{false, true} {
		r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+fmt.Sprintf("debug_pprof: %v\n", on)+ringlbtest.BackendsYAML(bs)))
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		if code, body := ringlbtest.Get(t, r.admin+"/debug/pprof/goroutine?debug=1"); code != want {
			t.Errorf("debug_pprof %v: admin /debug/pprof/goroutine: %d, want %d: %.100s", on, code, want, body)
		}
		if _, body := ringlbtest.Get(t, r.proxy+"/debug/pprof/goroutine?debug=1"); body != "app-1" {
			t.Errorf("debug_pprof %v: the proxy port answered %q itself; want it proxied", on, body)
		}
	}
}

// TestReloadErrorsReadAsWritten: POST /reload's 400 lists each problem as
// `file:line: field: message`, in JSON that a grep can read (no \u003e).
func TestReloadErrorsReadAsWritten(t *testing.T) {
	bs := ringlbtest.StartBackends(t, 1, nil)
	path := ringlbtest.WriteConfig(t, ringlbtest.Listeners+ringlbtest.BackendsYAML(bs))
	r := startServe(t, path)
	os.WriteFile(path, []byte(ringlbtest.Listeners+ringlbtest.BackendsYAML(bs)+"    weight: -2\n"), 0o644)
	resp, err := http.Post(r.admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := path + ":6: upstreams[0].weight: must be > 0, got -2"
	if resp.StatusCode != 400 || !strings.Contains(string(raw), want) {
		t.Errorf("bad reload: %d %s\nwant it to contain %q", resp.StatusCode, raw, want)
	}
}

// A URL with a password never comes back in the reload reply or the log.
func TestReloadRedactsUserInfo(t *testing.T) {
	bs := ringlbtest.StartBackends(t, 1, nil)
	path := ringlbtest.WriteConfig(t, ringlbtest.Listeners+ringlbtest.BackendsYAML(bs))
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		done <- Run(ctx, Options{Path: path, Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Ready: func(_, a net.Addr) { ready <- "http://" + a.String() }})
	}()
	defer func() { cancel(); <-done }()
	admin := <-ready
	os.WriteFile(path, []byte(ringlbtest.Listeners+"upstreams:\n  - name: a\n    url: http://bob:hunter2@127.0.0.1:9\n"), 0o644)
	resp, err := http.Post(admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || strings.Contains(string(raw), "hunter2") || !strings.Contains(string(raw), "http://xxxxx@127.0.0.1:9") {
		t.Errorf("reload reply %d %s", resp.StatusCode, raw)
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("the log shows the password:\n%s", logs.String())
	}
}

// startEchoUpgrade starts an upstream that switches protocols and echoes.
func startEchoUpgrade(t *testing.T) []ringlbtest.Backend {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw)
	}))
	t.Cleanup(s.Close)
	return []ringlbtest.Backend{{Server: s, Name: "ws-1"}}
}

// openTunnel upgrades a connection through ringlb and checks one echo.
func openTunnel(t *testing.T, proxy string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	echo(t, conn, br, "hello")
	return conn, br
}

func echo(t *testing.T, conn net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	io.WriteString(conn, msg)
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo %q: %q, %v", msg, buf, err)
	}
}

// TestServeShutdownWaitsForTunnels: on SIGTERM an open WebSocket tunnel
// (a hijacked connection, which http.Server.Shutdown ignores) keeps
// working and ringlb waits for it, up to shutdown_timeout.
func TestServeShutdownWaitsForTunnels(t *testing.T) {
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+"shutdown_timeout: 20s\n"+ringlbtest.BackendsYAML(startEchoUpgrade(t))))
	conn, br := openTunnel(t, r.proxy)
	r.cancel()
	// A negative check: serve must not return in the next half second.
	select {
	case err := <-r.done:
		r.done <- err
		t.Fatal("serve returned with a tunnel open")
	case <-time.After(500 * time.Millisecond):
	}
	echo(t, conn, br, "still open")
	conn.Close()
	if err := r.stop(t); err != nil {
		t.Errorf("serve returned %v, want nil (exit code 0)", err)
	}
}

// TestServeShutdownCutsTunnelsAtTimeout: a tunnel still open when
// shutdown_timeout runs out is closed, and ringlb exits.
func TestServeShutdownCutsTunnelsAtTimeout(t *testing.T) {
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+"shutdown_timeout: 300ms\n"+ringlbtest.BackendsYAML(startEchoUpgrade(t))))
	conn, br := openTunnel(t, r.proxy)
	r.stop(t)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("read from the tunnel after shutdown: %v, want EOF (closed)", err)
	}
	conn.Close()
}
