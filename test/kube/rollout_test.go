package kube

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is a demo upstream at ip:8080 that answers with its address.
func startUpstream(t *testing.T, ip string) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":8080")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, ip)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// ringlbBinary builds ringlb from the main module (the one the replace
// directive names) once per run.
func ringlbBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ringlb-kube-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "ringlb")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/ringlb")
		cmd.Dir = "../.." // the main module, with its own go.sum
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

type ringlb struct {
	proxy, admin string
	logs         *lockedBuf
}

var servingLine = regexp.MustCompile(`msg="ringlb serving" listen=(\S+) admin_listen=(\S+)`)

func startRinglb(t *testing.T, config string) *ringlb {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ringlb.yaml")
	if err := os.WriteFile(p, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	lb := &ringlb{logs: &lockedBuf{}}
	cmd := exec.Command(ringlbBinary(t), "serve", "-config", p)
	cmd.Stdout, cmd.Stderr = lb.logs, lb.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("ringlb's log:\n%s", lb.logs)
		}
	})
	eventually(t, 30*time.Second, func() error {
		if m := servingLine.FindStringSubmatch(lb.logs.String()); m != nil {
			lb.proxy, lb.admin = "http://"+m[1], "http://"+m[2]
			return nil
		}
		select {
		case <-done:
			t.Fatalf("ringlb exited:\n%s", lb.logs)
		default:
		}
		return fmt.Errorf("ringlb not serving yet")
	})
	return lb
}

// eventually retries cond every 50 ms until it returns nil or timeout
// passes; then the test fails with its last error.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type ringView struct {
	Version   string `json:"version"`
	Upstreams []struct {
		Name   string `json:"name"`
		URL    string `json:"url"`
		Absent bool   `json:"absent"`
		State  string `json:"state"`
		Source string `json:"source"`
	} `json:"upstreams"`
	Discovery []struct {
		Source    string `json:"source"`
		Members   int    `json:"members"`
		LastError string `json:"last_error"`
	} `json:"discovery"`
}

func (lb *ringlb) ring(t *testing.T) ringView {
	t.Helper()
	res, err := http.Get(lb.admin + "/debug/ring")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v ringView
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// member waits until the member called name satisfies ok.
func (lb *ringlb) member(t *testing.T, name, what string, ok func(url string, absent bool, state string) bool) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		v := lb.ring(t)
		for _, u := range v.Upstreams {
			if u.Name == name {
				if ok(u.URL, u.Absent, u.State) {
					return nil
				}
				return fmt.Errorf("%s not %s: %+v", name, what, u)
			}
		}
		return fmt.Errorf("%s not on the ring: %+v", name, v)
	})
}

// route sends one request per key and returns, per key, the upstream that
// served it (X-Upstream) and what it answered (its address).
func (lb *ringlb) route(t *testing.T, keys []string) (owner, addr map[string]string, failed int) {
	t.Helper()
	owner, addr = make(map[string]string, len(keys)), make(map[string]string, len(keys))
	c := &http.Client{Timeout: 5 * time.Second}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	for range 8 {
		wg.Go(func() {
			for k := range work {
				req, _ := http.NewRequest(http.MethodGet, lb.proxy+"/", nil)
				req.Header.Set("X-User-ID", k)
				res, err := c.Do(req)
				var body []byte
				if err == nil {
					body, _ = io.ReadAll(res.Body)
					res.Body.Close()
				}
				mu.Lock()
				if err != nil || res.StatusCode != http.StatusOK {
					failed++
				} else {
					owner[k], addr[k] = res.Header.Get("X-Upstream"), string(body)
				}
				mu.Unlock()
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	return owner, addr, failed
}

func keyList(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func name(i int) string { return fmt.Sprintf("app-%d.app.prod.svc.cluster.local:8080", i) }

// The rollout: four pods of a StatefulSet behind a headless Service; one
// is deleted (terminating, still serving: it drains, its held keys stay
// and no new key goes there), then stops serving (only its keys move);
// another is re-created elsewhere under its name (no key moves); then the
// API server dies (membership kept, no request fails).
func TestRollout(t *testing.T) {
	start := time.Now()
	cp := startControlPlane(t)
	cp.createService(t)
	for i, ip := range addrs[:4] {
		startUpstream(t, ip)
		cp.createPod(t, fmt.Sprintf("app-%d", i), ip)
	}
	lb := startRinglb(t, fmt.Sprintf(`listen: 192.0.2.30:0
admin_listen: 127.0.0.1:0
upstream_header: X-Upstream
hash:
  key: [{header: X-User-ID}]
  on_missing: reject
hold:
  idle: 10m
upstreams: []
discovery:
  kubeconfig: %s
  remove_after: 10m
  sources:
    - kubernetes: {service: app, namespace: prod, port: http}
`, cp.kubeconfig))
	eventually(t, 20*time.Second, func() error {
		if v := lb.ring(t); len(v.Upstreams) != 4 || v.Discovery[0].Members != 4 {
			return fmt.Errorf("want 4 members: %+v", v)
		}
		return nil
	})
	version := lb.ring(t).Version
	keys := keyList("user", 400)
	before, _, failed := lb.route(t, keys)
	perOwner := map[string]int{}
	for _, o := range before {
		perOwner[o]++
	}
	if failed != 0 || len(perOwner) != 4 {
		t.Fatalf("%d failed; keys per upstream %v", failed, perOwner)
	}
	t.Logf("keys per upstream: %v", perOwner)

	// 1. app-1 is deleted with a grace period: terminating, still serving.
	cp.deletePod(t, "app-1", 600)
	lb.member(t, name(1), "draining", func(_ string, absent bool, state string) bool { return !absent && state == "drain" })
	after, _, failed := lb.route(t, keys)
	if moved := diff(before, after); failed != 0 || len(moved) != 0 {
		t.Errorf("draining: %d failed, %d keys moved (want 0: they are held): %v", failed, len(moved), moved)
	}
	fresh, _, failed := lb.route(t, keyList("new", 400))
	for k, o := range fresh {
		if o == name(1) {
			t.Errorf("new key %s went to the draining %s", k, o)
		}
	}
	if failed != 0 {
		t.Errorf("%d new keys failed", failed)
	}

	// 2. app-1 stops serving: only its keys move.
	cp.setReady(t, "app-1", false)
	lb.member(t, name(1), "absent", func(_ string, absent bool, _ string) bool { return absent })
	after, _, failed = lb.route(t, keys)
	moved := diff(before, after)
	for k := range moved {
		if before[k] != name(1) {
			t.Errorf("key %s moved from %s, which stayed", k, before[k])
		}
	}
	if failed != 0 || len(moved) != perOwner[name(1)] {
		t.Errorf("not serving: %d failed, %d keys moved, want app-1's %d", failed, len(moved), perOwner[name(1)])
	}
	t.Logf("not serving: %d keys moved, all of them app-1's", len(moved))
	before = after

	// 3. app-2 is re-created with another address under its name.
	startUpstream(t, "192.0.2.22")
	cp.deletePod(t, "app-2", 0)
	cp.createPod(t, "app-2", "192.0.2.22")
	lb.member(t, name(2), "at its new address", func(url string, absent bool, _ string) bool {
		return url == "http://192.0.2.22:8080" && !absent
	})
	after, addr, failed := lb.route(t, keys)
	if moved := diff(before, after); failed != 0 || len(moved) != 0 {
		t.Errorf("readdressed: %d failed, %d keys moved (want 0): %v", failed, len(moved), moved)
	}
	for k, o := range after {
		if o == name(2) && addr[k] != "192.0.2.22" {
			t.Errorf("key %s on app-2 answered by %s, want the new address", k, addr[k])
		}
	}
	if v := lb.ring(t).Version; v != version {
		t.Errorf("ring version %s, want %s unchanged (no member was removed)", v, version)
	}

	// 4. The API server dies: the membership stays, no request fails.
	t.Logf("steps 1-3 took %s", time.Since(start).Round(time.Millisecond))
	stopAt := time.Now()
	cp.stop()
	t.Logf("the API server stopped in %s", time.Since(stopAt).Round(time.Millisecond))
	eventually(t, 30*time.Second, func() error {
		if v := lb.ring(t); v.Discovery[0].LastError == "" {
			return fmt.Errorf("no discovery error shown yet: %+v", v.Discovery)
		}
		return nil
	})
	after, _, failed = lb.route(t, keys)
	if moved := diff(before, after); failed != 0 || len(moved) != 0 {
		t.Errorf("API server down: %d failed, %d keys moved (want 0)", failed, len(moved))
	}
	if v := lb.ring(t); len(v.Upstreams) != 4 || v.Discovery[0].Members != 3 {
		t.Errorf("API server down: members %+v, want the 4 kept (3 present)", v)
	}
	if n := metric(t, lb.admin, `ringlb_discovery_errors_total{source="kubernetes:prod/app:http"}`); n < 1 {
		t.Errorf("ringlb_discovery_errors_total = %v, want > 0", n)
	}
	t.Logf("scenario took %s", time.Since(start).Round(time.Millisecond))
}

// diff returns the keys whose owner differs between a and b.
func diff(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, o := range a {
		if b[k] != o {
			out[k] = o + " -> " + b[k]
		}
	}
	return out
}

func metric(t *testing.T, admin, series string) float64 {
	t.Helper()
	res, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}
