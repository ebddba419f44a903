//go:build e2e

package main

// Reliability under faults and load (issue 7): the real ringlb binary in
// front of real upstream processes (examples/upstream) and in-process fault
// upstreams on loopback, a steady client load during every scenario, and
// the proxy's goroutines, file descriptors and memory checked afterwards.
//
//	go test -tags e2e -race -run Faults -v ./cmd/ringlb/
//
// Every subtest adds a row to the table logged at the end (RELIABILITY.md
// quotes one run of it).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// faultRow is one line of the reliability table.
type faultRow struct {
	scenario, injected, clients, eject, readmit, keys, resources string
}

// TestFaults runs every scenario as a subtest against freshly started
// processes and logs the table of what it measured.
func TestFaults(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Go raises its own soft limit at start but gives children the
	// original one back, unless the program calls Setrlimit itself: do,
	// so the ringlb child inherits the raised limit.
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	e := &faultEnv{}
	// Build before the clock starts.
	ringlbBinary(t)
	upstreamBinary(t)
	began := time.Now()
	for _, fc := range faultCases() {
		t.Run(fc.name, func(t *testing.T) { e.add(runFaultCase(t, fc)) })
	}
	t.Run("keepalive-5000", func(t *testing.T) {
		if lim.Cur < 5000+1024 {
			t.Skipf("RLIMIT_NOFILE is %d; 5000 connections need more", lim.Cur)
		}
		e.add(stressKeepAlive(t, 5000))
	})
	t.Run("reload-storm", func(t *testing.T) { e.add(stressReloads(t, 50)) })
	t.Run("sigterm", func(t *testing.T) { e.add(stressSigterm(t)) })
	t.Run("bulk-1GiB", func(t *testing.T) { e.add(bulkTransfer(t, 1<<30)) })
	t.Run("json-key-1GiB", func(t *testing.T) { e.add(jsonKeyUpload(t, 1<<30)) })

	var b strings.Builder
	b.WriteString("| scenario | injected | what clients saw | eject | readmit | keys | resources after |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range e.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.scenario, r.injected, r.clients, r.eject, r.readmit, r.keys, r.resources)
	}
	t.Logf("reliability table (%s, %s):\n%s", time.Now().UTC().Format(time.RFC3339), time.Since(began).Round(time.Second), b.String())
}

type faultEnv struct {
	mu   sync.Mutex
	rows []faultRow
}

func (e *faultEnv) add(r faultRow) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rows = append(e.rows, r)
}

// faultsConfig is the config every scenario runs with, before upstreams:
// health every 100 ms, fall 2 rise 2; breakers trip after 5 failures and
// stay open 500 ms (doubling to 2 s); idle upstream connections close
// after 1 s so resources settle quickly.
const faultsConfig = `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
debug_pprof: true
shutdown_timeout: 10s
upstream_header: X-Upstream
hash:
  key: [query: user]
ring:
  load_factor: 0
%s
breaker:
  consecutive_failures: 5
  open_timeout: 500ms
  max_open_timeout: 2s
retries: 1
timeouts:
  dial: 500ms
  response_header: 2s
  idle_conn: 1s
upstreams:
`

const faultsHealth = `health:
  path: /healthz
  interval: 100ms
  timeout: 90ms
  rise: 2
  fall: 2`

func upstreamsBlock(names []string, addrs map[string]string, weights map[string]int) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "  - name: %s\n    url: http://%s\n", n, addrs[n])
		if w := weights[n]; w != 0 {
			fmt.Fprintf(&b, "    weight: %d\n", w)
		}
	}
	return b.String()
}

// startLB writes the config (health: faultsHealth or "") and starts ringlb.
func startLB(t *testing.T, health string, ups string) *lbProc {
	t.Helper()
	lb := startRinglb(t, ringlbtest.WriteConfig(t, fmt.Sprintf(faultsConfig, health)+ups))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ringlb log:\n%s", lastLines(lb.logs.String(), 60))
		}
	})
	return lb
}

func adminGet(t *testing.T, u string) string {
	t.Helper()
	res, err := ringlbtest.AdminClient.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", u, res.StatusCode, b)
	}
	return string(b)
}

// owners asks /debug/lookup for each key's owner (availability ignored).
func owners(t *testing.T, admin string, keys []string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		var v struct{ Owner string }
		if err := json.Unmarshal([]byte(adminGet(t, admin+"/debug/lookup?key="+url.QueryEscape(k))), &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v.Owner
	}
	return out
}

// --- resources ---------------------------------------------------------------

type resUsage struct{ goroutines, fds int }

func (u resUsage) String() string { return fmt.Sprintf("%d goroutines, %d fds", u.goroutines, u.fds) }

func measure(t *testing.T, lb *lbProc) resUsage {
	t.Helper()
	body := adminGet(t, lb.admin+"/debug/pprof/goroutine?debug=1")
	first, _, _ := strings.Cut(body, "\n")
	n, err := strconv.Atoi(strings.TrimPrefix(first, "goroutine profile: total "))
	if err != nil {
		t.Fatalf("goroutine profile: %q", first)
	}
	return resUsage{n, fdCount(t, lb.cmd.Process.Pid)}
}

// upstreamConns counts the client connections ringlb keeps open to
// upstreams: the goroutines reading them (net/http's persistConn.readLoop)
// in its goroutine profile, whose records read "N @ ..." then the stack.
func upstreamConns(t *testing.T, lb *lbProc) int {
	t.Helper()
	// Outbound connections are the established TCP sockets of ringlb's
	// whose local port is neither of its listeners'. They are counted
	// from /proc, not from goroutines: HTTP/1.1 upstream connections run
	// no goroutine of their own.
	own := map[string]bool{}
	for _, base := range []string{lb.proxy, lb.admin} {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(u.Port())
		own[fmt.Sprintf("%04X", port)] = true
	}
	pid := lb.cmd.Process.Pid
	inodes := map[string]bool{}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "01" || !inodes[f[9]] { // 01: ESTABLISHED
				continue
			}
			if _, lport, ok := strings.Cut(f[1], ":"); ok && !own[lport] {
				n++
			}
		}
	}
	return n
}

func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// procStatus returns a /proc/PID/status field in KiB (VmHWM, VmRSS).
func procStatus(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// settle closes the clients' idle connections and waits up to 6 s (idle
// upstream connections close after 1 s) for the proxy's goroutines and
// descriptors to come back to base (after 2.5 s, within a slack of 4),
// and reports what it saw; it fails the test if they never do.
func settle(t *testing.T, lb *lbProc, base resUsage, clients ...*http.Client) string {
	t.Helper()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	// Exactly the baseline is the goal; within slack is accepted once
	// idle upstream connections have had time to close.
	const slack = 4
	start := time.Now()
	var now resUsage
	settled := testenv.Poll(6*time.Second, func() bool {
		now = measure(t, lb)
		if now.goroutines <= base.goroutines && now.fds <= base.fds {
			return true
		}
		within := now.goroutines <= base.goroutines+slack && now.fds <= base.fds+slack
		return within && time.Since(start) > 2500*time.Millisecond
	})
	if !settled {
		t.Errorf("resources did not return to baseline: before %v, after %v", base, now)
	}
	return fmt.Sprintf("goroutines %d→%d, fds %d→%d (%.1fs)", base.goroutines, now.goroutines, base.fds, now.fds,
		time.Since(start).Seconds())
}

// --- client load ---------------------------------------------------------------

// result is one client request as the client saw it.
type result struct {
	key          string
	began, ended time.Time
	upstream     string // X-Upstream
	kind         string // "" for a complete 200; else what went wrong
}

// truncatedLooking is the kind of a 200 whose body read completely but
// holds the bytes of a response that was cut mid-body: a defect.
const truncatedLooking = "complete-looking 200 with a truncated body"

type load struct {
	client *http.Client
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    []result
}

// startLoad runs workers goroutines of GETs over keys, each request with a
// 5 s timeout, until stop.
func startLoad(proxy string, keys []string, workers int) *load {
	l := &load{
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: workers}},
		stop:   make(chan struct{}),
	}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := w * len(keys) / workers; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				r := l.get(proxy, keys[i%len(keys)])
				l.mu.Lock()
				l.res = append(l.res, r)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) get(proxy, key string) result {
	r := result{key: key, began: time.Now()}
	res, err := l.client.Get(proxy + "/?user=" + url.QueryEscape(key))
	if err != nil {
		r.kind = "transport: " + errKind(err)
		r.ended = time.Now()
		return r
	}
	r.upstream = res.Header.Get("X-Upstream")
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	r.ended = time.Now()
	switch {
	case err != nil:
		r.kind = fmt.Sprintf("%d with truncated body: %s", res.StatusCode, errKind(err))
	case res.StatusCode != 200:
		r.kind = fmt.Sprintf("status %d", res.StatusCode)
	case strings.Contains(string(body), partialMarker):
		r.kind = truncatedLooking
	}
	return r
}

// halt stops the load and returns every result.
func (l *load) halt() []result {
	close(l.stop)
	l.wg.Wait()
	return l.res
}

func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, io.EOF):
		return "EOF"
	}
	return err.Error()
}

func keysN(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return keys
}

// --- ring poller -----------------------------------------------------------------

type ringEvent struct {
	at                    time.Time
	name                  string
	available             bool
	health, breaker, desc string
}

// poller reads /debug/ring every 50 ms and records each upstream's
// changes of state.
type poller struct {
	stop, done chan struct{}
	mu         sync.Mutex
	events     []ringEvent
}

func startPoller(admin string) *poller {
	p := &poller{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		last := map[string]string{}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			v, err := ringlbtest.GetRing(admin)
			if err == nil {
				at := time.Now()
				p.mu.Lock()
				for _, u := range v.Upstreams {
					d := fmt.Sprintf("available=%v health=%s breaker=%s", u.Available, u.Health, u.Breaker)
					if last[u.Name] != d {
						last[u.Name] = d
						p.events = append(p.events, ringEvent{at, u.Name, u.Available, u.Health, u.Breaker, d})
					}
				}
				p.mu.Unlock()
			}
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *poller) halt() {
	close(p.stop)
	<-p.done
}

// first returns the first event for name at or after since that ok accepts.
func (p *poller) first(name string, since time.Time, ok func(ringEvent) bool) (ringEvent, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.events {
		if e.name == name && !e.at.Before(since) && ok(e) {
			return e, true
		}
	}
	return ringEvent{}, false
}

// waitFor polls p until first finds an event, or gives up after d.
func (p *poller) waitFor(name string, since time.Time, d time.Duration, ok func(ringEvent) bool) (e ringEvent, found bool) {
	testenv.Poll(d, func() bool {
		e, found = p.first(name, since, ok)
		return found
	})
	return e, found
}

// last returns name's last event before t.
func (p *poller) last(name string, t time.Time) (ringEvent, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.events) - 1; i >= 0; i-- {
		if e := p.events[i]; e.name == name && e.at.Before(t) {
			return e, true
		}
	}
	return ringEvent{}, false
}

func (p *poller) count(name string, ok func(ringEvent) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.events {
		if e.name == name && ok(e) {
			n++
		}
	}
	return n
}

func unavailable(e ringEvent) bool { return !e.available }
func available(e ringEvent) bool   { return e.available }

// --- in-process fault upstream ---------------------------------------------------

// Modes of a faultUpstream.
const (
	modeNormal = iota
	modeHang   // read the request, never answer
	modeSlow   // answer requests (not /healthz) after slowDelay
	modeReset  // send headers and part of the body, then RST
)

const (
	slowDelay     = 1200 * time.Millisecond
	partialMarker = "PARTIAL-BODY-"
)

// faultUpstream is an upstream served from the test process whose
// behaviour switches at run time. /slow always answers after slowDelay.
type faultUpstream struct {
	name   string
	addr   string
	srv    *http.Server
	mode   atomic.Int32
	hits   atomic.Int64
	resets atomic.Int64

	mu      sync.Mutex
	release chan struct{} // closed when a hang ends
}

func startFaultUpstream(t *testing.T, name string) *faultUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &faultUpstream{name: name, addr: ln.Addr().String(), release: make(chan struct{})}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(ln)
	t.Cleanup(func() {
		f.setMode(modeNormal)
		f.srv.Close()
	})
	return f
}

func (f *faultUpstream) setMode(m int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode.Load() == modeHang && m != modeHang {
		close(f.release)
		f.release = make(chan struct{})
	}
	f.mode.Store(m)
}

func (f *faultUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	mode := f.mode.Load()
	health := r.URL.Path == "/healthz"
	switch {
	case mode == modeHang:
		f.mu.Lock()
		rel := f.release
		f.mu.Unlock()
		select {
		case <-rel:
		case <-r.Context().Done():
		}
		return
	case (mode == modeSlow && !health) || r.URL.Path == "/slow":
		select {
		case <-time.After(slowDelay):
		case <-r.Context().Done():
			return
		}
	case mode == modeReset && !health:
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		// Every other response is chunked: then only the missing last
		// chunk tells the client it was cut.
		if f.resets.Add(1)%2 == 1 {
			fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", 1<<20)
			brw.WriteString(partialMarker + strings.Repeat("x", 4096))
		} else {
			io.WriteString(brw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
			fmt.Fprintf(brw, "%x\r\n%s\r\n", len(partialMarker)+4096, partialMarker+strings.Repeat("x", 4096))
		}
		brw.Flush()
		// Part of the fault, not a wait for the test: the reset comes
		// 20 ms after the headers, time for the proxy to have passed them
		// on, as when an upstream dies mid-body.
		time.Sleep(20 * time.Millisecond)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // Close sends RST
		}
		c.Close()
		return
	}
	if health {
		io.WriteString(w, "ok\n")
		return
	}
	fmt.Fprintf(w, "user %s on %s\n", r.URL.Query().Get("user"), f.name)
}

// --- fault scenarios -------------------------------------------------------------

// victim is the upstream a scenario breaks: app-3, an examples/upstream
// process or an in-process faultUpstream.
type victim struct {
	t    *testing.T
	name string
	addr string
	demo *proc
	fu   *faultUpstream
	stop chan struct{} // flapping
	wg   sync.WaitGroup
}

// post sends a control request to a demo upstream; it may run on the
// flapping goroutine, so a failure is an Errorf.
func (v *victim) post(path string) {
	res, err := ringlbtest.AdminClient.Post("http://"+v.addr+path, "", nil)
	if err != nil {
		v.t.Errorf("POST %s: %v", path, err)
		return
	}
	res.Body.Close()
}

type faultCase struct {
	name, injected string
	inProcess      bool // victim is a faultUpstream (else an examples/upstream process)
	absent         bool // victim is not running when ringlb starts
	expectEject    bool
	hold           time.Duration // how long the fault lasts after ejection (or injection)
	inject, heal   func(v *victim)
	// allowed says whether a failed request for one of the victim's keys
	// is an expected consequence of the fault.
	allowed func(r result, injected, healed time.Time) bool
}

func none(result, time.Time, time.Time) bool { return false }

func faultCases() []faultCase {
	return []faultCase{
		{
			name: "crash", injected: "kill -9 of app-3 under load; restarted on its port after 1 s",
			expectEject: true, hold: time.Second,
			inject: func(v *victim) { v.demo.kill() },
			heal:   func(v *victim) { v.demo = startUpstream(v.t, v.name, v.addr) },
			// Requests in flight to it when it died may fail; later ones
			// are refused at dial and retried clockwise.
			allowed: func(r result, inj, _ time.Time) bool { return r.began.Before(inj) },
		},
		{
			name: "hang", injected: "app-3 accepts, reads the request and never answers (health checks too), 2 s",
			inProcess: true, expectEject: true, hold: 2 * time.Second,
			inject:  func(v *victim) { v.fu.setMode(modeHang) },
			heal:    func(v *victim) { v.fu.setMode(modeNormal) },
			allowed: none,
		},
		{
			name: "slow", injected: "app-3 answers requests after 1.2 s (response_header timeout 2 s; health checks fast), 3 s",
			inProcess: true, hold: 3 * time.Second,
			inject:  func(v *victim) { v.fu.setMode(modeSlow) },
			heal:    func(v *victim) { v.fu.setMode(modeNormal) },
			allowed: none,
		},
		{
			name: "reset-mid-body", injected: "app-3 sends 200 with Content-Length 1 MiB (or chunked), 4 KiB of body, then RST (health checks pass), 2 s",
			inProcess: true, expectEject: true, hold: 2 * time.Second,
			inject: func(v *victim) { v.fu.setMode(modeReset) },
			heal:   func(v *victim) { v.fu.setMode(modeNormal) },
			allowed: func(r result, inj, healed time.Time) bool {
				return strings.HasPrefix(r.kind, "200 with truncated body") && r.ended.After(inj) && r.began.Before(healed)
			},
		},
		{
			name: "5xx-storm", injected: "app-3 answers every request 503 (POST /_demo/fail?requests=1; health checks pass), 2 s",
			expectEject: true, hold: 2 * time.Second,
			inject: func(v *victim) { v.post("/_demo/fail?requests=1") },
			heal:   func(v *victim) { v.post("/_demo/recover") },
			allowed: func(r result, inj, healed time.Time) bool {
				return r.kind == "status 503" && r.ended.After(inj) && r.began.Before(healed)
			},
		},
		{
			name: "flapping-health", injected: "app-3's health check toggles fail/pass every 250 ms for 3 s (requests always served)",
			expectEject: true, hold: 3 * time.Second,
			inject: func(v *victim) {
				v.stop = make(chan struct{})
				v.wg.Add(1)
				go func() {
					defer v.wg.Done()
					for fail := true; ; fail = !fail {
						if fail {
							v.post("/_demo/fail?health=1")
						} else {
							v.post("/_demo/recover")
						}
						select {
						case <-v.stop:
							return
						case <-time.After(250 * time.Millisecond):
						}
					}
				}()
			},
			heal: func(v *victim) {
				close(v.stop)
				v.wg.Wait()
				v.post("/_demo/recover")
			},
			allowed: none,
		},
		{
			name: "returning", injected: "app-3 is down when ringlb starts (refused dials), started 2 s after the load begins",
			absent: true, expectEject: true,
			inject:  func(*victim) {},
			heal:    func(v *victim) { v.demo = startUpstream(v.t, v.name, v.addr) },
			allowed: none,
		},
	}
}

// runFaultCase starts app-1..app-4 (app-3 the victim) and ringlb, runs a
// load of 4 workers over 300 keys, injects the fault, heals it, and checks
// what the clients saw against the rules: a healthy upstream's keys never
// move or fail; the victim's keys are home once it is readmitted; its
// failures are the ones the fault explains; resources return to baseline.
func runFaultCase(t *testing.T, fc faultCase) faultRow {
	names := []string{"app-1", "app-2", "app-3", "app-4"}
	const vname = "app-3"
	addrs := map[string]string{}
	v := &victim{t: t, name: vname}
	for _, n := range names {
		switch {
		case n != vname:
			addrs[n] = ringlbtest.ReservePort(t)
			startUpstream(t, n, addrs[n])
		case fc.inProcess:
			v.fu = startFaultUpstream(t, n)
			addrs[n] = v.fu.addr
		case !fc.absent:
			addrs[n] = ringlbtest.ReservePort(t)
			v.demo = startUpstream(t, n, addrs[n])
		default:
			// Reserved and not listening: dials are refused until it starts.
			addrs[n] = ringlbtest.ReservePort(t)
		}
	}
	v.addr = addrs[vname]
	lb := startLB(t, faultsHealth, upstreamsBlock(names, addrs, nil))
	waitHTTP(t, lb.admin+"/readyz")
	if !fc.absent {
		ringlbtest.WaitState(t, lb.admin, vname, "available", func(s ringlbtest.UpstreamState) bool { return s.Available && s.Health == "up" })
	}
	keys := keysN("user", 300)
	own := owners(t, lb.admin, keys)
	victimKeys := 0
	for _, o := range own {
		if o == vname {
			victimKeys++
		}
	}
	if victimKeys == 0 {
		t.Fatalf("%s owns none of the keys", vname)
	}
	base := measure(t, lb)

	p := startPoller(lb.admin)
	l := startLoad(lb.proxy, keys, 4)
	loadStart := time.Now()
	// The sleeps below are the scenario's timeline (a second of load
	// before the fault, the fault held for fc.hold, a second after the
	// fix), not waits for a state: each state is polled for.
	time.Sleep(time.Second)

	injected := time.Now()
	fc.inject(v)
	wait := 15 * time.Second
	if !fc.expectEject {
		time.Sleep(fc.hold)
		wait = 0
	}
	var ejectAt time.Time
	ejectDesc := "none"
	if ev, ok := p.waitFor(vname, loadStart, wait, unavailable); ok {
		ejectAt = ev.at
		ejectDesc = ev.desc
	}
	switch {
	case fc.expectEject && ejectAt.IsZero():
		t.Errorf("%s was never ejected", vname)
	case fc.absent:
		time.Sleep(2*time.Second - time.Since(loadStart))
	case fc.expectEject:
		time.Sleep(fc.hold)
	}
	healed := time.Now()
	fc.heal(v)
	var readmitAt time.Time
	readmitDesc := ""
	if !ejectAt.IsZero() {
		if last, ok := p.last(vname, healed); ok && last.available {
			// Flapping: it was back in when the flapping stopped.
			readmitAt, readmitDesc = healed, fmt.Sprintf("already in at the fix (readmitted %s before it)", healed.Sub(last.at).Round(time.Millisecond))
		} else if ev, ok := p.waitFor(vname, healed, 20*time.Second, available); ok {
			readmitAt, readmitDesc = ev.at, ev.at.Sub(healed).Round(time.Millisecond).String()+" after the fix"
		} else {
			t.Errorf("%s never readmitted", vname)
		}
	}
	time.Sleep(time.Second)
	res := l.halt()
	p.halt()
	// A health verdict under way when the fault stopped (a failed probe
	// counted just before the fix) can eject the victim once more after
	// it; its keys are home from its last readmission on.
	if e, ok := p.last(vname, time.Now()); ok && !readmitAt.IsZero() && e.at.After(readmitAt) {
		if !e.available {
			t.Errorf("%s ejected again after the fix and never readmitted: %s", vname, e.desc)
		}
		readmitAt = e.at
		readmitDesc += fmt.Sprintf("; ejected once more, back %s after the fix", e.at.Sub(healed).Round(time.Millisecond))
	}

	// What the clients saw.
	var (
		fails          = map[string]int{}
		unexplained    []result
		moved, notHome int
		movedKeys      = map[string]bool{}
		notHomeKeys    = map[string]bool{}
		healthyFailed  int
		victimLat      []time.Duration
	)
	for _, r := range res {
		o := own[r.key]
		if r.kind != "" {
			fails[r.kind]++
		}
		switch {
		case r.kind == truncatedLooking:
			unexplained = append(unexplained, r)
		case o != vname && r.kind != "":
			healthyFailed++
			unexplained = append(unexplained, r)
		case o != vname && r.upstream != o:
			moved++
			movedKeys[r.key] = true
			if moved <= 5 {
				t.Errorf("key %s of healthy %s served by %s", r.key, o, r.upstream)
			}
		case o == vname && r.kind != "" && !fc.allowed(r, injected, healed):
			unexplained = append(unexplained, r)
		case o == vname && r.kind == "" && !readmitAt.IsZero() && r.began.After(readmitAt) && r.upstream != vname:
			notHome++
			notHomeKeys[r.key] = true
			if notHome <= 5 {
				t.Errorf("key %s of %s served by %s after readmission", r.key, vname, r.upstream)
			}
		}
		if o == vname && r.ended.After(injected) && r.began.Before(healed) {
			victimLat = append(victimLat, r.ended.Sub(r.began))
		}
	}
	for i, r := range unexplained {
		if i == 5 {
			t.Errorf("... %d more", len(unexplained)-5)
			break
		}
		t.Errorf("unexpected failure: key %s (owner %s) began %s after injection: %s", r.key, own[r.key], r.began.Sub(injected).Round(time.Millisecond), r.kind)
	}
	for _, n := range names {
		if n == vname {
			continue
		}
		if c := p.count(n, unavailable); c > 0 {
			t.Errorf("healthy %s was ejected %d times", n, c)
		}
	}
	if fc.name == "slow" && !ejectAt.IsZero() {
		t.Errorf("slow upstream ejected: %s", ejectDesc)
	}
	resources := settle(t, lb, base, l.client)

	failed := 0
	for _, n := range fails {
		failed += n
	}
	clients := fmt.Sprintf("%d GETs, %d failed", len(res), failed)
	if failed > 0 {
		var kinds []string
		for k, n := range fails {
			kinds = append(kinds, fmt.Sprintf("%d× %s", n, k))
		}
		slices.Sort(kinds)
		clients += " (" + strings.Join(kinds, ", ") + ")"
	}
	if len(victimLat) > 0 {
		slices.Sort(victimLat)
		clients += fmt.Sprintf("; app-3's keys during the fault: p50 %s, max %s",
			victimLat[len(victimLat)/2].Round(time.Millisecond), victimLat[len(victimLat)-1].Round(time.Millisecond))
	}
	row := faultRow{
		scenario: fc.name,
		injected: fc.injected,
		clients:  clients,
		eject:    "not ejected",
		readmit:  "—",
		keys: fmt.Sprintf("healthy upstreams' %d keys: %d moved, %d failed; app-3's %d keys: %d not home after readmission",
			len(keys)-victimKeys, len(movedKeys), healthyFailed, victimKeys, len(notHomeKeys)),
		resources: resources,
	}
	if !ejectAt.IsZero() {
		from := injected
		if fc.absent {
			from = loadStart
		}
		row.eject = fmt.Sprintf("%s (%s)", ejectAt.Sub(from).Round(time.Millisecond), ejectReason(ejectDesc))
		if fc.name == "flapping-health" {
			row.eject += fmt.Sprintf("; %d ejections while flapping", p.count(vname, unavailable))
		}
	}
	if readmitDesc != "" {
		row.readmit = readmitDesc
	}
	if fc.absent && !ejectAt.IsZero() && !ejectAt.After(loadStart.Add(60*time.Millisecond)) {
		row.eject = "down before the load began (" + ejectReason(ejectDesc) + ")"
	}
	// A clean stop: SIGTERM, exit 0.
	lb.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-lb.done:
		if lb.code != 0 {
			t.Errorf("ringlb exited %d after SIGTERM", lb.code)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("ringlb did not exit after SIGTERM")
	}
	p.mu.Lock()
	for _, ev := range p.events {
		if ev.name == vname {
			t.Logf("%s at %+6dms from injection, %+6dms from the fix: %s", vname, ev.at.Sub(injected).Milliseconds(), ev.at.Sub(healed).Milliseconds(), ev.desc)
		}
	}
	p.mu.Unlock()
	t.Logf("%+v", row)
	return row
}

func ejectReason(desc string) string {
	switch {
	case strings.Contains(desc, "health=down") && strings.Contains(desc, "breaker=open"):
		return "health and breaker"
	case strings.Contains(desc, "health=down"):
		return "health"
	case strings.Contains(desc, "breaker=open"):
		return "breaker"
	}
	return desc
}

// --- proxy-side stress -------------------------------------------------------------

// startFleet starts n examples/upstream processes and a ringlb in front
// with the given health block ("" for none).
func startFleet(t *testing.T, n int, health string) (*lbProc, []string, map[string]string) {
	t.Helper()
	addrs := map[string]string{}
	var names []string
	for i := range n {
		name := fmt.Sprintf("app-%d", i+1)
		names = append(names, name)
		addrs[name] = ringlbtest.ReservePort(t)
		startUpstream(t, name, addrs[name])
	}
	lb := startLB(t, health, upstreamsBlock(names, addrs, nil))
	waitHTTP(t, lb.admin+"/readyz")
	return lb, names, addrs
}

func failures(res []result) (int, string) {
	kinds := map[string]int{}
	n := 0
	for _, r := range res {
		if r.kind != "" {
			n++
			kinds[r.kind]++
		}
	}
	if n == 0 {
		return 0, ""
	}
	var ks []string
	for k, c := range kinds {
		ks = append(ks, fmt.Sprintf("%d× %s", c, k))
	}
	slices.Sort(ks)
	return n, " (" + strings.Join(ks, ", ") + ")"
}

// stressKeepAlive holds n keep-alive client connections open on the proxy
// while a load runs: every connection gets an answer, twice.
func stressKeepAlive(t *testing.T, n int) faultRow {
	lb, _, _ := startFleet(t, 3, "")
	base := measure(t, lb)
	l := startLoad(lb.proxy, keysN("user", 300), 4)
	addr := strings.TrimPrefix(lb.proxy, "http://")

	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	// round sends one GET on every connection (dialling it first if
	// needed) from 64 workers and counts the 200s.
	round := func(dial bool) (ok int, errs []string) {
		var mu sync.Mutex
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					err := func() error {
						if dial {
							c, err := net.DialTimeout("tcp", addr, 10*time.Second)
							if err != nil {
								return err
							}
							conns[i], readers[i] = c, bufio.NewReader(c)
						}
						c := conns[i]
						if c == nil {
							return errors.New("not connected")
						}
						c.SetDeadline(time.Now().Add(20 * time.Second))
						if _, err := fmt.Fprintf(c, "GET /?user=conn-%d HTTP/1.1\r\nHost: ringlb\r\n\r\n", i); err != nil {
							return err
						}
						res, err := http.ReadResponse(readers[i], nil)
						if err != nil {
							return err
						}
						_, err = io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if err != nil {
							return err
						}
						if res.StatusCode != 200 || res.Close {
							return fmt.Errorf("status %d, close %v", res.StatusCode, res.Close)
						}
						return nil
					}()
					mu.Lock()
					if err == nil {
						ok++
					} else if len(errs) < 5 {
						errs = append(errs, fmt.Sprintf("conn %d: %v", i, err))
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return ok, errs
	}
	t0 := time.Now()
	ok1, errs := round(true)
	if ok1 != n {
		t.Errorf("first round: %d of %d connections answered: %v", ok1, n, errs)
	}
	held := measure(t, lb)
	if held.fds < base.fds+n {
		t.Errorf("ringlb holds %d fds with %d client connections open (baseline %d)", held.fds, n, base.fds)
	}
	ok2, errs := round(false)
	if ok2 != n {
		t.Errorf("second round on the same connections: %d of %d answered: %v", ok2, n, errs)
	}
	took := time.Since(t0)
	res := l.halt()
	for i, c := range conns {
		if c != nil {
			c.Close()
			conns[i] = nil
		}
	}
	nf, kinds := failures(res)
	if nf > 0 {
		t.Errorf("load: %d of %d failed%s", nf, len(res), kinds)
	}
	resources := settle(t, lb, base, l.client)
	return faultRow{
		scenario: fmt.Sprintf("keepalive-%d", n),
		injected: fmt.Sprintf("%d keep-alive client connections opened and held (64 at a time), one GET each, then a second GET on each", n),
		clients: fmt.Sprintf("%d/%d then %d/%d connections answered 200 (%s); held: %v; background load %d GETs, %d failed%s",
			ok1, n, ok2, n, took.Round(100*time.Millisecond), held, len(res), nf, kinds),
		eject: "—", readmit: "—", keys: "—",
		resources: resources,
	}
}

// stressReloads sends n POST /reload during a load, alternating a good
// config (two memberships in turn) and a bad one.
func stressReloads(t *testing.T, n int) faultRow {
	lb, names, addrs := startFleet(t, 3, faultsHealth)
	// The first probes have run: the health checker keeps a connection
	// to each upstream, part of the baseline.
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := upstreamConns(t, lb); n < len(names) {
			return fmt.Errorf("ringlb holds %d upstream connections, want the health checker's %d", n, len(names))
		}
		return nil
	})
	base := measure(t, lb)
	orig, err := os.ReadFile(lb.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(orig), "upstreams:\n")
	noHealth := strings.Replace(head, faultsHealth, "", 1)
	// Good configs in turn: a weight change, back, health checks off
	// (the checker stops), back on (it starts again).
	good := []string{
		head + "upstreams:\n" + upstreamsBlock(names, addrs, map[string]int{"app-3": 2}),
		head + "upstreams:\n" + upstreamsBlock(names, addrs, nil),
		noHealth + "upstreams:\n" + upstreamsBlock(names, addrs, map[string]int{"app-3": 2}),
		head + "upstreams:\n" + upstreamsBlock(names, addrs, nil),
	}
	bad := []string{
		head + "upstreams:\n" + upstreamsBlock(names, addrs, map[string]int{"app-1": -1}), // weight
		head + "upstreams:\n" + upstreamsBlock(names, addrs, nil) + "    wieght: 1\n",     // unknown field
	}
	l := startLoad(lb.proxy, keysN("user", 300), 4)
	// The storm's timeline: 300 ms of load before it, reloads 20 ms
	// apart, 300 ms of load after it.
	time.Sleep(300 * time.Millisecond)
	var okN, badN, unexpected int
	var lastGood string
	versions := map[string]bool{}
	for i := range n {
		src := bad[(i/2)%len(bad)]
		isGood := i%2 == 0
		if isGood {
			src = good[(i/2)%len(good)]
		}
		tmp := lb.cfgPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, lb.cfgPath); err != nil {
			t.Fatal(err)
		}
		res, err := ringlbtest.AdminClient.Post(lb.admin+"/reload", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Version string
			Errors  []string
		}
		json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		switch {
		case isGood && res.StatusCode == 200:
			okN++
			lastGood = body.Version
			versions[body.Version] = true
		case !isGood && res.StatusCode == 400 && len(body.Errors) > 0:
			badN++
		default:
			unexpected++
			t.Errorf("reload %d (good %v): %d %+v", i, isGood, res.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	res := l.halt()
	v, err := ringlbtest.GetRing(lb.admin)
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != lastGood {
		t.Errorf("/debug/ring version %s, want the last good reload's %s", v.Version, lastGood)
	}
	if len(versions) != 2 {
		t.Errorf("good reloads gave versions %v, want 2 distinct", versions)
	}
	nf, kinds := failures(res)
	if nf > 0 {
		t.Errorf("load: %d of %d failed%s", nf, len(res), kinds)
	}
	resources := settle(t, lb, base, l.client)
	return faultRow{
		scenario: fmt.Sprintf("reload-storm-%d", n),
		injected: fmt.Sprintf("%d POST /reload, 20 ms apart, alternating good configs (app-3 weight 2 / 1, health checks off / on) and bad ones (weight -1; unknown field)", n),
		clients:  fmt.Sprintf("%d GETs, %d failed%s; reloads: %d ok, %d rejected with 400, %d unexpected", len(res), nf, kinds, okN, badN, unexpected),
		eject:    "—", readmit: "—",
		keys:      fmt.Sprintf("version after = last good reload's (%s): %v", lastGood, v.Version == lastGood),
		resources: resources,
	}
}

// stressSigterm sends SIGTERM while slow requests are in flight under
// load: they complete with 200 and ringlb exits 0.
func stressSigterm(t *testing.T) faultRow {
	names := []string{"app-1", "app-2", "app-3"}
	addrs := map[string]string{}
	for _, n := range names {
		addrs[n] = startFaultUpstream(t, n).addr
	}
	lb := startLB(t, "", upstreamsBlock(names, addrs, nil))
	waitHTTP(t, lb.admin+"/readyz")
	l := startLoad(lb.proxy, keysN("user", 300), 4)
	time.Sleep(500 * time.Millisecond) // the scenario: SIGTERM comes under half a second of load

	const slowN = 20
	type slowRes struct {
		code int
		body string
		err  error
	}
	slowc := make(chan slowRes, slowN)
	var started atomic.Int64
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	for i := range slowN {
		go func() {
			started.Add(1)
			res, err := client.Get(fmt.Sprintf("%s/slow?user=slow-%d", lb.proxy, i))
			if err != nil {
				slowc <- slowRes{err: err}
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			slowc <- slowRes{res.StatusCode, string(b), err}
		}()
	}
	// Wait until every slow request is in flight at an upstream.
	testenv.Eventually(t, 10*time.Second, func() error {
		v, err := ringlbtest.GetRing(lb.admin)
		inflight := 0
		if err == nil {
			for _, u := range v.Upstreams {
				inflight += u.Inflight
			}
		}
		if inflight < slowN {
			return fmt.Errorf("only %d requests in flight", inflight)
		}
		return nil
	})
	termAt := time.Now()
	lb.cmd.Process.Signal(syscall.SIGTERM)
	okSlow := 0
	for range slowN {
		r := <-slowc
		if r.err != nil || r.code != 200 || !strings.HasPrefix(r.body, "user slow-") {
			t.Errorf("slow request in flight at SIGTERM: %d %q %v", r.code, r.body, r.err)
		} else {
			okSlow++
		}
	}
	var exitIn time.Duration
	select {
	case <-lb.done:
		exitIn = time.Since(termAt)
		if lb.code != 0 {
			t.Errorf("ringlb exited %d after SIGTERM", lb.code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("ringlb did not exit after SIGTERM")
	}
	res := l.halt()
	// A request counts as begun before SIGTERM when the client started
	// it before the signal, unless its dial was refused after it: that
	// one never reached ringlb (the client's clock starts before it takes
	// or dials a connection, and on a busy machine the listener can close
	// in between).
	var before, after []result
	for _, r := range res {
		if r.began.Before(termAt) && !(r.kind == "transport: connection refused" && r.ended.After(termAt)) {
			before = append(before, r)
		} else {
			after = append(after, r)
		}
	}
	nb, kb := failures(before)
	if nb > 0 {
		t.Errorf("load requests begun before SIGTERM: %d failed%s", nb, kb)
	}
	na, ka := failures(after)
	return faultRow{
		scenario: "sigterm",
		injected: fmt.Sprintf("SIGTERM to ringlb with %d slow (1.2 s) requests in flight under load", slowN),
		clients: fmt.Sprintf("%d/%d in-flight slow requests completed 200; load begun before SIGTERM: %d GETs, %d failed%s; begun after: %d GETs, %d failed%s (listener closed, expected)",
			okSlow, slowN, len(before), nb, kb, len(after), na, ka),
		eject: "—", readmit: "—", keys: "—",
		resources: fmt.Sprintf("exit code %d, %s after SIGTERM", lb.code, exitIn.Round(10*time.Millisecond)),
	}
}

// --- large bodies ----------------------------------------------------------------

// bulkUpstream generates GET /bulk?n=N bytes and discards POST /bulk
// bodies, answering how many bytes it read; neither buffers.
type bulkUpstream struct{ addr string }

func startBulkUpstream(t *testing.T) *bulkUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	chunk := []byte(strings.Repeat("0123456789abcdef", 4096)) // 64 KiB
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			io.WriteString(w, "ok\n")
		case r.Method == http.MethodPost:
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			fmt.Fprintf(w, "%d", n)
		default:
			n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			for n > 0 {
				k := min(n, int64(len(chunk)))
				if _, err := w.Write(chunk[:k]); err != nil {
					return
				}
				n -= k
			}
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &bulkUpstream{addr: ln.Addr().String()}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// bulkTransfer streams size bytes down and then up through the proxy and
// checks the proxy's peak RSS stays under 64 MiB.
func bulkTransfer(t *testing.T, size int64) faultRow {
	bu := startBulkUpstream(t)
	lb := startLB(t, "", upstreamsBlock([]string{"bulk"}, map[string]string{"bulk": bu.addr}, nil))
	waitHTTP(t, lb.admin+"/readyz")
	base := measure(t, lb)
	hwm0 := procStatus(t, lb.cmd.Process.Pid, "VmHWM")
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}

	t0 := time.Now()
	res, err := client.Get(fmt.Sprintf("%s/bulk?user=big&n=%d", lb.proxy, size))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	down := time.Since(t0)
	if err != nil || got != size || res.StatusCode != 200 {
		t.Errorf("download: %d, %d of %d bytes, %v", res.StatusCode, got, size, err)
	}

	t0 = time.Now()
	req, _ := http.NewRequest(http.MethodPost, lb.proxy+"/bulk?user=big", io.LimitReader(zeros{}, size))
	req.ContentLength = size
	res, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	up := time.Since(t0)
	if res.StatusCode != 200 || string(body) != strconv.FormatInt(size, 10) {
		t.Errorf("upload: %d %q, want the upstream to have read %d bytes", res.StatusCode, body, size)
	}
	hwm := procStatus(t, lb.cmd.Process.Pid, "VmHWM")
	if hwm > 64<<10 {
		t.Errorf("ringlb's peak RSS (VmHWM) reached %d KiB, over 64 MiB", hwm)
	}
	resources := settle(t, lb, base, client)
	mibps := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
	return faultRow{
		scenario: "bulk-1GiB",
		injected: fmt.Sprintf("%d MiB download then %d MiB upload through the proxy (upstream generates/discards without buffering)", size>>20, size>>20),
		clients: fmt.Sprintf("download %s (%.0f MiB/s), upload %s (%.0f MiB/s), byte counts exact",
			down.Round(10*time.Millisecond), mibps(down), up.Round(10*time.Millisecond), mibps(up)),
		eject: "—", readmit: "—", keys: "—",
		resources: fmt.Sprintf("VmHWM %.1f MiB before, %.1f MiB after (limit 64 MiB); %s", float64(hwm0)/1024, float64(hwm)/1024, resources),
	}
}
