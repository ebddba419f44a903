package healthcheck

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

// wait bounds every wait for something that should happen.
const wait = 5 * time.Second

// alternate makes an upstream answer 200 after a 500 and 500 otherwise.
const alternate = -1

// upstream is a test target: it answers probes with a status the test sets,
// keeps the statuses it served in order, and lets a test wait for its n-th
// probe.
type upstream struct {
	*httptest.Server
	status atomic.Int32 // a status, or alternate

	// gateAt, if > 0, makes probe number gateAt wait for gate to close.
	gateAt    int
	gate      chan struct{}
	closeGate func()

	mu      sync.Mutex
	served  []int
	waiters map[int][]chan struct{} // by hit count
}

func newUpstream(t *testing.T, status int) *upstream {
	t.Helper()
	u := &upstream{gate: make(chan struct{}), waiters: make(map[int][]chan struct{})}
	u.closeGate = sync.OnceFunc(func() { close(u.gate) })
	u.status.Store(int32(status))
	u.Server = httptest.NewServer(u)
	t.Cleanup(func() { u.closeGate(); u.Close() })
	return u
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	n := len(u.served) + 1
	u.mu.Unlock()
	if n == u.gateAt {
		select {
		case <-u.gate:
		case <-r.Context().Done():
		}
	}
	u.mu.Lock()
	code := int(u.status.Load())
	if code == alternate {
		code = http.StatusInternalServerError
		if len(u.served) > 0 && u.served[len(u.served)-1] == http.StatusInternalServerError {
			code = http.StatusOK
		}
	}
	u.served = append(u.served, code)
	for _, ch := range u.waiters[len(u.served)] {
		close(ch)
	}
	delete(u.waiters, len(u.served))
	u.mu.Unlock()
	w.WriteHeader(code)
	fmt.Fprintln(w, "status", code)
}

// history returns the statuses served so far.
func (u *upstream) history() []int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.served)
}

func (u *upstream) hits() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.served)
}

// waitHits waits until the upstream has answered at least n probes.
func (u *upstream) waitHits(t *testing.T, n int) {
	t.Helper()
	u.mu.Lock()
	if len(u.served) >= n {
		u.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	u.waiters[n] = append(u.waiters[n], ch)
	u.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("%s: %d probes after %v, want %d", u.URL, u.hits(), wait, n)
	}
}

func (u *upstream) target(t *testing.T, name string) Target {
	t.Helper()
	return Target{Name: name, URL: mustURL(t, u.URL)}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// event is one report, with the history of the reported upstream at that
// moment. The prober is blocked in SetHealthy, so no probe of that
// upstream is in flight: the history is exactly the probes it counted.
type event struct {
	name    string
	up      bool
	reason  string
	history []int
}

// recorder is a Reporter that queues events.
type recorder struct {
	ups    map[string]*upstream // read-only once the checker runs
	events chan event
}

func newRecorder(ups map[string]*upstream) *recorder {
	return &recorder{ups: ups, events: make(chan event, 100)}
}

func (r *recorder) SetHealthy(name string, up bool, reason string) {
	ev := event{name: name, up: up, reason: reason}
	if u := r.ups[name]; u != nil {
		ev.history = u.history()
	}
	r.events <- ev
}

func (r *recorder) next(t *testing.T) event {
	t.Helper()
	select {
	case ev := <-r.events:
		return ev
	case <-time.After(wait):
		t.Fatalf("no transition within %v", wait)
		return event{}
	}
}

// none fails if a transition was reported. Call it after waiting for
// enough probes (waitHits): reports come before the next probe is sent.
func (r *recorder) none(t *testing.T) {
	t.Helper()
	select {
	case ev := <-r.events:
		t.Fatalf("unexpected transition %+v", ev)
	default:
	}
}

// run runs c until the test ends, and fails the test if Run does not
// return promptly then.
func run(t *testing.T, c *Checker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(wait):
			t.Errorf("Run did not return within %v of cancel", wait)
		}
	})
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

func fast(rise, fall int) Options {
	return Options{Path: "/healthz", Interval: 10 * time.Millisecond, Timeout: time.Second, Rise: rise, Fall: fall}
}

func TestEjectsAfterExactlyFallAndReadmitsAfterExactlyRise(t *testing.T) {
	a := newUpstream(t, http.StatusInternalServerError)
	rec := newRecorder(map[string]*upstream{"a": a})
	var logs testenv.Buffer
	c := New(fast(2, 3), rec, slog.New(slog.NewTextHandler(&logs, nil)))
	c.Update(fast(2, 3), []Target{a.target(t, "a")})
	if up, known := c.Healthy("a"); !up || !known {
		t.Fatalf("before any probe: Healthy = %v, %v; want up, known", up, known)
	}
	run(t, c)

	ev := rec.next(t)
	if ev.name != "a" || ev.up {
		t.Fatalf("first transition %+v, want a down", ev)
	}
	if want := []int{500, 500, 500}; !slices.Equal(ev.history, want) {
		t.Errorf("down after probes %v, want exactly %v", ev.history, want)
	}
	if want := "3 consecutive failures: status 500, want 200-399"; ev.reason != want {
		t.Errorf("reason %q, want %q", ev.reason, want)
	}
	if up, known := c.Healthy("a"); up || !known {
		t.Errorf("after ejection: Healthy = %v, %v; want down, known", up, known)
	}

	a.status.Store(http.StatusOK)
	ev = rec.next(t)
	if ev.name != "a" || !ev.up {
		t.Fatalf("second transition %+v, want a up", ev)
	}
	if n := len(ev.history); n < 5 || !slices.Equal(ev.history[n-3:], []int{500, 200, 200}) || slices.Contains(ev.history[:n-2], 200) {
		t.Errorf("up after probes %v, want exactly two passes at the end", ev.history)
	}
	if want := "2 consecutive passes"; ev.reason != want {
		t.Errorf("reason %q, want %q", ev.reason, want)
	}
	if up, _ := c.Healthy("a"); !up {
		t.Error("after readmission: Healthy says down")
	}

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 ||
		!strings.Contains(lines[0], `level=WARN msg="health check: upstream down" upstream=a`) ||
		!strings.Contains(lines[0], `reason="3 consecutive failures: status 500, want 200-399"`) ||
		!strings.Contains(lines[1], `level=INFO msg="health check: upstream up" upstream=a`) ||
		!strings.Contains(lines[1], `reason="2 consecutive passes"`) {
		t.Errorf("want one log line per transition, got:\n%s", logs.String())
	}
}

func TestFlappingNeverChangesState(t *testing.T) {
	a := newUpstream(t, alternate)
	rec := newRecorder(map[string]*upstream{"a": a})
	opts := fast(2, 2)
	opts.Interval = 5 * time.Millisecond
	c := New(opts, rec, testLogger(t))
	c.Update(opts, []Target{a.target(t, "a")})
	run(t, c)

	a.waitHits(t, 13) // 12 alternating probes counted
	rec.none(t)
	if up, _ := c.Healthy("a"); !up {
		t.Fatal("flapping ejected a")
	}

	a.status.Store(http.StatusInternalServerError)
	if ev := rec.next(t); ev.up {
		t.Fatalf("got %+v, want a down", ev)
	}
	a.status.Store(alternate)
	a.waitHits(t, a.hits()+13)
	rec.none(t)
	if up, _ := c.Healthy("a"); up {
		t.Fatal("flapping readmitted a")
	}
}

func TestProbeVerdict(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		if code == http.StatusFound {
			http.Redirect(w, r, "/?code=500", code) // must not be followed
			return
		}
		w.WriteHeader(code)
		if r.URL.Query().Has("big") {
			w.Write(bytes.Repeat([]byte("x"), 1<<20)) // more than is drained
		}
	}))
	defer srv.Close()
	base := mustURL(t, srv.URL)

	for _, tc := range []struct {
		path     string
		min, max int
		want     string // "" for a pass
	}{
		{"/?code=200", 0, 0, ""},
		{"/?code=204", 0, 0, ""},
		{"/?code=302", 0, 0, ""},
		{"/?code=399", 0, 0, ""},
		{"/?code=200&big=1", 0, 0, ""},
		{"/?code=400", 0, 0, "status 400, want 200-399"},
		{"/?code=500", 0, 0, "status 500, want 200-399"},
		{"/?code=503", 0, 0, "status 503, want 200-399"},
		{"/?code=404", 0, 0, "status 404, want 200-399"},
		{"/?code=204", 204, 204, ""},
		{"/?code=200", 204, 204, "status 200, want 204-204"},
		{"/?code=503", 500, 503, ""},
		{"/?code=302", 200, 299, "status 302, want 200-299"},
	} {
		c := New(Options{}, nil, nil)
		opts := Options{Path: tc.path, ExpectStatus: StatusRange{tc.min, tc.max}}.withDefaults()
		pass, why := c.probe(context.Background(), &probeConfig{url: probeURL(base, opts.Path).String(), opts: opts})
		if pass != (tc.want == "") || why != tc.want {
			t.Errorf("%s with [%d,%d]: pass %v %q, want %q", tc.path, tc.min, tc.max, pass, why, tc.want)
		}
	}
}

func TestTimeoutIsAFailure(t *testing.T) {
	// A server that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	conns.Go(func() {
		var held []net.Conn
		for {
			conn, err := ln.Accept()
			if err != nil {
				break
			}
			held = append(held, conn)
		}
		for _, conn := range held {
			conn.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); conns.Wait() })

	rec := newRecorder(nil)
	opts := Options{Interval: 20 * time.Millisecond, Timeout: 15 * time.Millisecond, Rise: 2, Fall: 2}
	c := New(opts, rec, testLogger(t))
	c.Update(opts, []Target{{Name: "a", URL: mustURL(t, "http://"+ln.Addr().String())}})
	run(t, c)

	ev := rec.next(t)
	if want := "2 consecutive failures: timeout after 15ms"; ev.up || ev.reason != want {
		t.Fatalf("got %+v, want down with reason %q", ev, want)
	}
}

func TestConnectionRefusedIsAFailure(t *testing.T) {
	addr := testnet.RefusedAddr(t)
	rec := newRecorder(nil)
	opts := fast(1, 1)
	c := New(opts, rec, testLogger(t))
	c.Update(opts, []Target{{Name: "a", URL: mustURL(t, "http://"+addr)}})
	run(t, c)

	ev := rec.next(t)
	if want := "1 consecutive failure: connection refused"; ev.up || ev.reason != want {
		t.Fatalf("got %+v, want down with reason %q", ev, want)
	}
}

func TestProbeRequestAndConnectionReuse(t *testing.T) {
	type seen struct{ method, uri, host, ua, acceptEncoding string }
	reqs := make(chan seen, 100)
	var newConns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs <- seen{r.Method, r.RequestURI, r.Host, r.UserAgent(), r.Header.Get("Accept-Encoding")}
		w.Write(bytes.Repeat([]byte("ok\n"), 300)) // a body that must be drained to reuse the connection
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			newConns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	base := mustURL(t, srv.URL+"/base/path?ignored=1")
	opts := fast(2, 3)
	opts.Path = "/health/deep?full=1"
	c := New(opts, nil, testLogger(t))
	c.Update(opts, []Target{{Name: "a", URL: base}})
	run(t, c)

	for i := range 5 {
		select {
		case got := <-reqs:
			want := seen{"GET", "/health/deep?full=1", base.Host, UserAgent, ""}
			if got != want {
				t.Fatalf("probe %d: server saw %+v, want %+v", i, got, want)
			}
		case <-time.After(wait):
			t.Fatalf("probe %d not seen within %v", i, wait)
		}
	}
	if n := newConns.Load(); n != 1 {
		t.Errorf("5 probes used %d connections, want 1 (kept alive)", n)
	}
}

func TestUpdateKeepsStateAndCounts(t *testing.T) {
	a := newUpstream(t, http.StatusInternalServerError)
	b := newUpstream(t, http.StatusOK)
	c3 := newUpstream(t, http.StatusOK)
	rec := newRecorder(map[string]*upstream{"a": a, "b": b, "c": c3})
	opts := fast(2, 2)
	c := New(opts, rec, testLogger(t))
	c.Update(opts, []Target{a.target(t, "a"), b.target(t, "b")})
	run(t, c)

	if ev := rec.next(t); ev.name != "a" || ev.up {
		t.Fatalf("got %+v, want a down", ev)
	}

	// Only the interval changes for a; b goes, c comes.
	opts.Interval = 15 * time.Millisecond
	c.Update(opts, []Target{a.target(t, "a"), c3.target(t, "c")})
	bHits := b.hits()
	for name, want := range map[string][2]bool{"a": {false, true}, "b": {false, false}, "c": {true, true}} {
		if up, known := c.Healthy(name); up != want[0] || known != want[1] {
			t.Errorf("after Update: Healthy(%s) = %v, %v; want %v, %v", name, up, known, want[0], want[1])
		}
	}
	aHits := a.hits()
	a.waitHits(t, aHits+5)
	c3.waitHits(t, 5)
	rec.none(t) // a stayed down, c stayed up, nothing about b
	// A probe b's prober had sent may reach b after it was cancelled;
	// nothing is sent after Update returns.
	if n := b.hits(); n > bHits+1 {
		t.Errorf("b answered %d probes after its removal", n-bHits)
	}

	a.status.Store(http.StatusOK)
	ev := rec.next(t)
	if ev.name != "a" || !ev.up {
		t.Fatalf("got %+v, want a up", ev)
	}
	if n := len(ev.history); !slices.Equal(ev.history[n-3:], []int{500, 200, 200}) {
		t.Errorf("a up after %v, want after exactly 2 passes", ev.history)
	}
}

func TestUpdateDoesNotRestartProbers(t *testing.T) {
	// a fails; its third probe is held until the test has called Update.
	// A restarted prober would have lost its two failures and eject a only
	// on the fifth probe.
	a := newUpstream(t, http.StatusInternalServerError)
	a.gateAt = 3
	rec := newRecorder(map[string]*upstream{"a": a})
	opts := fast(2, 3)
	opts.Timeout = wait
	c := New(opts, rec, testLogger(t))
	c.Update(opts, []Target{a.target(t, "a")})
	run(t, c)

	a.waitHits(t, 2) // the third is sent or about to be, and held

	opts.Interval = 20 * time.Millisecond
	opts.Rise = 3
	c.Update(opts, []Target{a.target(t, "a")})
	a.closeGate()

	ev := rec.next(t)
	if want := []int{500, 500, 500}; ev.up || !slices.Equal(ev.history, want) {
		t.Fatalf("got %+v, want down after exactly %v", ev, want)
	}
}

func TestNewURLRestartsCountsButKeepsState(t *testing.T) {
	// x fails once at a (a holds any second probe) and moves to b, which
	// fails too. Had the count carried over to the new URL, x would go
	// down after two probes of b; it restarts, so after three. (A probe
	// of a still in flight during Update counts before the restart.)
	a := newUpstream(t, http.StatusInternalServerError)
	a.gateAt = 2
	b := newUpstream(t, http.StatusInternalServerError)
	rec := newRecorder(map[string]*upstream{"x": b})
	opts := fast(2, 3)
	opts.Timeout = wait
	c := New(opts, rec, testLogger(t))
	c.Update(opts, []Target{a.target(t, "x")})
	run(t, c)

	a.waitHits(t, 1)
	c.Update(opts, []Target{b.target(t, "x")})
	a.closeGate()

	ev := rec.next(t)
	if want := []int{500, 500, 500}; ev.up || !slices.Equal(ev.history, want) {
		t.Fatalf("got %+v, want down after exactly %v at the new URL", ev, want)
	}
}

func TestRunStopsEveryGoroutine(t *testing.T) {
	var ups []*upstream
	var targets []Target
	for i := range 5 {
		u := newUpstream(t, http.StatusOK)
		if i == 0 {
			u.status.Store(http.StatusInternalServerError)
		}
		ups = append(ups, u)
		targets = append(targets, u.target(t, fmt.Sprint("u", i)))
	}
	before := runtime.NumGoroutine()

	rec := newRecorder(nil)
	opts := fast(1, 1)
	c := New(opts, rec, testLogger(t))
	c.Update(opts, targets)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	for _, u := range ups {
		u.waitHits(t, 3)
	}
	rec.next(t)
	cancel()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("Run did not return after cancel")
	}

	// After Run: Update records but starts nothing, and Run does not restart.
	c.Update(opts, append(targets, Target{Name: "late", URL: targets[1].URL}))
	if up, known := c.Healthy("late"); !up || !known {
		t.Errorf("Healthy(late) = %v, %v; want up, known", up, known)
	}
	c.Run(context.Background()) // returns at once

	// Connections close asynchronously on both sides: wait, bounded.
	if !testenv.Poll(wait, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before Run:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}

func TestJitter(t *testing.T) {
	const iv = 100 * time.Millisecond
	minF, maxF, minN, maxN := iv, time.Duration(0), 2*iv, time.Duration(0)
	for range 10000 {
		f, n := firstDelay(iv), nextDelay(iv)
		minF, maxF, minN, maxN = min(minF, f), max(maxF, f), min(minN, n), max(maxN, n)
	}
	if minF < 0 || maxF >= iv || maxF-minF < iv/2 {
		t.Errorf("first delays in [%v, %v], want spread over [0, %v)", minF, maxF, iv)
	}
	if minN < 90*time.Millisecond || maxN > 110*time.Millisecond || maxN-minN < 10*time.Millisecond {
		t.Errorf("next delays in [%v, %v], want spread over [90ms, 110ms]", minN, maxN)
	}
}

func TestOptionsDefaults(t *testing.T) {
	got := Options{Path: "ready"}.withDefaults()
	want := Options{Path: "/ready", Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3, ExpectStatus: StatusRange{200, 399}}
	if got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	if got := (Options{}).withDefaults().Path; got != "/healthz" {
		t.Errorf("default path %q", got)
	}
}

func TestProbeURL(t *testing.T) {
	for _, tc := range []struct{ base, path, want string }{
		{"http://h:1", "/healthz", "http://h:1/healthz"},
		{"http://h:1/base/?q=1#f", "/healthz", "http://h:1/healthz"},
		{"https://h/", "/a%2Fb?x=1&y=%20", "https://h/a%2Fb?x=1&y=%20"},
		{"http://u:secret@h", "/ready?", "http://u:secret@h/ready"},
	} {
		if got := probeURL(mustURL(t, tc.base), tc.path).String(); got != tc.want {
			t.Errorf("probeURL(%q, %q) = %q, want %q", tc.base, tc.path, got, tc.want)
		}
	}
	if got := probeURL(mustURL(t, "http://u:secret@h"), "/").Redacted(); strings.Contains(got, "secret") {
		t.Errorf("logged URL %q shows the password", got)
	}
	c := New(Options{}, nil, nil)
	opts := Options{}.withDefaults()
	if pass, why := c.probe(context.Background(), &probeConfig{url: probeURL(nil, opts.Path).String(), opts: opts}); pass || why == "" {
		t.Errorf("nil URL: pass %v %q, want a failure", pass, why)
	} else {
		t.Logf("nil URL fails with %q", why)
	}
}
