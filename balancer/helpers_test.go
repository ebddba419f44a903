package balancer

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/internal/testutil/testnet"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/ring"
)

// backend is a test upstream that names itself in X-Backend and its body.
type backend struct {
	name string
	srv  *httptest.Server
	hits atomic.Int64
	// handle, if set, replaces the default answer.
	handle func(w http.ResponseWriter, r *http.Request)
}

func newBackend(t testing.TB, name string) *backend {
	t.Helper()
	be := &backend{name: name}
	be.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		be.hits.Add(1)
		w.Header().Set("X-Backend", be.name)
		if be.handle != nil {
			be.handle(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, be.name)
	}))
	t.Cleanup(be.srv.Close)
	return be
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func upstreamsOf(t testing.TB, bes ...*backend) []options.Upstream {
	var out []options.Upstream
	for _, be := range bes {
		u := mustURL(t, be.srv.URL)
		out = append(out, options.Upstream{Name: be.name, URL: u, Addr: u.Host, Weight: 1})
	}
	return out
}

// deadURL returns an http URL on which nothing listens: dialling it is refused.
func deadURL(t testing.TB) *url.URL {
	t.Helper()
	return mustURL(t, "http://"+testnet.RefusedAddr(t))
}

func baseOptions(ups []options.Upstream) Options {
	return Options{
		UpstreamHeader: "X-Upstream",
		PoolOptions: PoolOptions{
			Upstreams: ups,
			Ring:      options.Ring{PointsPerWeight: 160, LoadFactor: 1.25},
			Hash: options.Hash{
				Key:       []key.Source{{Kind: key.Cookie, Name: "session"}, {Kind: key.Header, Name: "X-User-ID"}, {Kind: key.Query, Name: "user"}, {Kind: key.URI}},
				OnMissing: "random",
			},
			Retries:  1,
			Timeouts: options.Timeouts{Dial: 2 * time.Second, ResponseHeader: 10 * time.Second, IdleConn: 30 * time.Second},
		},
	}
}

// proxy builds a Balancer on a fresh registry and serves it over loopback.
func proxy(t testing.TB, opts Options) (*Balancer, *prometheus.Registry, *httptest.Server) {
	t.Helper()
	reg := metrics.NewRegistry()
	b, err := New(opts, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front := httptest.NewServer(b)
	t.Cleanup(front.Close)
	return b, reg, front
}

// tlsFront serves h over TLS, with HTTP/2 offered by ALPN when h2 is
// set, and returns the server and a client that trusts it (and, with h2,
// speaks HTTP/2 to it).
func tlsFront(t testing.TB, h http.Handler, h2 bool) (*httptest.Server, *http.Client) {
	t.Helper()
	front := httptest.NewUnstartedServer(h)
	front.EnableHTTP2 = h2
	front.StartTLS()
	t.Cleanup(front.Close)
	c := front.Client()
	c.Transport.(*http.Transport).ForceAttemptHTTP2 = h2
	return front, c
}

// get sends a GET to front with the given headers (a "Host" pair sets the
// request's Host) and returns the status,
// the backend that answered (X-Backend) and the body.
func get(t testing.TB, c *http.Client, target string, hdr ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header.Get("X-Backend"), string(body)
}

// metric returns the value of the counter or gauge name with the given
// labels ("k=v" pairs), or -1 when no such series exists.
func metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, l := range labels {
				k, v, _ := strings.Cut(l, "=")
				if !hasLabel(m, k, v) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return -1
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == k && lp.GetValue() == v {
			return true
		}
	}
	return false
}

// keyOwnedBy finds a key whose owner is name.
func keyOwnedBy(t testing.TB, b *Balancer, name string) string {
	t.Helper()
	for i := range 10000 {
		k := fmt.Sprint("k", i)
		if b.Lookup(k).Owner == name {
			return k
		}
	}
	t.Fatalf("no key owned by %s", name)
	return ""
}

// fakeClock is an injectable clock: it moves only when told, and its
// timers run only when the test calls fire, so a test decides whether an
// open period ends on its own or with the next request.
type fakeClock struct {
	base time.Time
	ns   atomic.Int64

	mu     sync.Mutex
	timers []*fakeTimer
}

// fakeTimer is a timer of a fakeClock.
type fakeTimer struct {
	at      int64 // on the clock's ns
	f       func()
	stopped atomic.Bool
}

func (t *fakeTimer) Stop() bool { return !t.stopped.Swap(true) }

func newFakeClock() *fakeClock { return &fakeClock{base: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time          { return c.base.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.ns.Load() + int64(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// fire runs the timers that are due and not stopped, each once, and
// returns how many ran.
func (c *fakeClock) fire() int {
	c.mu.Lock()
	var due []*fakeTimer
	for _, t := range c.timers {
		if t.at <= c.ns.Load() && !t.stopped.Load() {
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	n := 0
	for _, t := range due {
		if t.Stop() {
			t.f()
			n++
		}
	}
	return n
}

// pending returns how many timers are neither stopped nor run.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped.Load() {
			n++
		}
	}
	return n
}

// install makes b read c. Call it before b serves anything.
func (c *fakeClock) install(b *Balancer) { b.clk, b.epoch = c, c.base }

// logBuffer collects log lines for counting.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count returns how many lines carry msg="MSG" and every attr ("k=v").
func (l *logBuffer) count(msg string, attrs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if !strings.Contains(line, fmt.Sprintf("msg=%q", msg)) && !strings.Contains(line, "msg="+msg+" ") {
			continue
		}
		for _, a := range attrs {
			if !strings.Contains(line, " "+a) {
				continue next
			}
		}
		n++
	}
	return n
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// rig is a balancer in front of test backends, with an injected clock
// and captured logs.
type rig struct {
	b      *Balancer
	opts   Options // the options b was built with
	reg    *prometheus.Registry
	front  *httptest.Server
	clk    *fakeClock
	logs   *logBuffer
	bes    map[string]*ctlBackend
	client *http.Client // keeps enough idle connections for serveAll
	// served, when set, gets a value each time ServeHTTP returns.
	served atomic.Pointer[chan struct{}]
}

// ctlBackend is a test upstream whose behaviour the test switches with
// atomics: it answers status (200 by default) with its name in X-Backend,
// and /healthz with healthStatus (200 by default).
type ctlBackend struct {
	name   string
	srv    *httptest.Server
	status atomic.Int32
	health atomic.Int32
	hits   atomic.Int64 // requests other than /healthz
	// passes and fails count /healthz answers; with flap set, probes
	// alternate fail, pass, fail, ...
	passes, fails atomic.Int64
	flap          atomic.Bool
	// probed, when set, gets the number of each probe answered (never
	// blocking: a full channel drops it).
	probed atomic.Pointer[chan int64]
	// hold, when set, makes requests wait for it (or their context).
	hold atomic.Pointer[chan struct{}]
	// arrived, when set, gets a value for each request that arrives.
	arrived atomic.Pointer[chan string]
}

func (be *ctlBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		code := int(be.health.Load())
		if be.flap.Load() && (be.passes.Load()+be.fails.Load())%2 == 0 {
			code = http.StatusServiceUnavailable
		} else if be.flap.Load() {
			code = http.StatusOK
		}
		var n int64
		if code < 400 {
			n = be.passes.Add(1) + be.fails.Load()
		} else {
			n = be.fails.Add(1) + be.passes.Load()
		}
		w.WriteHeader(code)
		if ch := be.probed.Load(); ch != nil {
			select {
			case *ch <- n:
			default:
			}
		}
		return
	}
	be.hits.Add(1)
	if ch := be.arrived.Load(); ch != nil {
		*ch <- r.URL.RawQuery
	}
	if h := be.hold.Load(); h != nil {
		select {
		case <-*h:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("X-Backend", be.name)
	w.WriteHeader(int(be.status.Load()))
	fmt.Fprint(w, be.name)
}

func newCtlBackend(t testing.TB, name string) *ctlBackend {
	be := &ctlBackend{name: name}
	be.status.Store(200)
	be.health.Store(200)
	be.srv = httptest.NewServer(be)
	t.Cleanup(be.srv.Close)
	return be
}

// restart serves be again on the address it had before its server was
// closed, as a crashed process coming back on the same port.
func (be *ctlBackend) restart(t testing.TB) {
	t.Helper()
	addr := be.srv.Listener.Addr().String()
	s := httptest.NewUnstartedServer(be)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s.Listener.Close()
	s.Listener = ln
	s.Start()
	be.srv = s
	t.Cleanup(s.Close)
}

// newRig starts n backends named a, b, c, ... and a balancer over them
// with load_factor 0 (so that placement is exact under concurrency), the
// fake clock and captured logs; mut adjusts the options first.
func newRig(t testing.TB, n int, mut func(*Options)) *rig {
	t.Helper()
	r := &rig{clk: newFakeClock(), logs: &logBuffer{}, bes: map[string]*ctlBackend{}}
	var ups []options.Upstream
	for i := range n {
		name := string(rune('a' + i))
		be := newCtlBackend(t, name)
		r.bes[name] = be
		u := mustURL(t, be.srv.URL)
		ups = append(ups, options.Upstream{Name: name, URL: u, Addr: u.Host, Weight: 1})
	}
	opts := baseOptions(ups)
	opts.Ring.LoadFactor = 0
	opts.Breaker = breaker.Options{ConsecutiveFailures: 5, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 5 * time.Second, MaxOpenTimeout: 60 * time.Second}
	if mut != nil {
		mut(&opts)
	}
	r.reg = metrics.NewRegistry()
	logger := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := New(opts, r.reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	r.clk.install(b) // before any request: nothing reads the clock yet
	r.b, r.opts = b, opts
	t.Cleanup(b.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("balancer log:\n%s", r.logs)
		}
	})
	r.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(r.client.CloseIdleConnections)
	r.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		defer func() { // also when ServeHTTP aborts with http.ErrAbortHandler
			if ch := r.served.Load(); ch != nil {
				*ch <- struct{}{}
			}
		}()
		b.ServeHTTP(w, req)
	}))
	t.Cleanup(r.front.Close)
	return r
}

// get sends GET /?user=key and returns the status and the backend that
// answered ("" for an answer of ringlb's own).
func (r *rig) get(t testing.TB, key string) (int, string) {
	t.Helper()
	code, be, _ := get(t, r.client, r.front.URL+"/?user="+key)
	return code, be
}

func (r *rig) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	return metric(t, r.reg, name, labels...)
}

// keyset is a fixed set of keys and their owners on the full ring.
type keyset struct {
	keys  []string
	owner map[string]string
	by    map[string][]string // owner → keys
}

func newKeyset(b *Balancer, n int) *keyset {
	ks := &keyset{owner: map[string]string{}, by: map[string][]string{}}
	for i := range n {
		k := fmt.Sprintf("key-%d", i)
		o := b.Lookup(k).Owner
		ks.keys = append(ks.keys, k)
		ks.owner[k] = o
		ks.by[o] = append(ks.by[o], k)
	}
	return ks
}

// checkPlacement asserts, through Lookup, that every key of an upstream
// not in out stays with its owner and that every key of an upstream in
// out goes to a survivor, each survivor taking some.
func (ks *keyset) checkPlacement(t testing.TB, b *Balancer, out ...string) {
	t.Helper()
	gone := map[string]bool{}
	for _, o := range out {
		gone[o] = true
	}
	moved, took := 0, map[string]int{}
	for _, k := range ks.keys {
		o, c := ks.owner[k], b.Lookup(k).Chosen
		switch {
		case !gone[o] && c != o:
			moved++
		case gone[o] && (c == "" || gone[c]):
			t.Errorf("key %s of ejected %s went to %q", k, o, c)
		case gone[o]:
			took[c]++
		}
	}
	if moved != 0 {
		t.Errorf("%d keys of available upstreams moved (of %d keys)", moved, len(ks.keys))
	}
	if len(out) > 0 {
		for name := range ks.by {
			if !gone[name] && took[name] == 0 {
				t.Errorf("survivor %s took none of the ejected keys: %v", name, took)
			}
		}
	}
}

// unmoved asserts, through Lookup, that every key not owned by except
// stays with its owner.
func (ks *keyset) unmoved(t testing.TB, b *Balancer, except string) {
	t.Helper()
	moved := 0
	for _, k := range ks.keys {
		if o := ks.owner[k]; o != except && b.Lookup(k).Chosen != o {
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d keys of available upstreams moved", moved)
	}
}

// serveAll GETs every key through the proxy, 16 at a time, and asserts
// that each gets a 200 from its owner or, for a key of an upstream in
// out, from a survivor.
func (r *rig) serveAll(t testing.TB, ks *keyset, out ...string) {
	t.Helper()
	gone := map[string]bool{}
	for _, o := range out {
		gone[o] = true
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	c := r.client
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(ks.keys); i += 16 {
				k := ks.keys[i]
				res, err := c.Get(r.front.URL + "/?user=" + k)
				if err != nil {
					t.Errorf("GET %s: %v", k, err)
					bad.Add(1)
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				got, o := res.Header.Get("X-Backend"), ks.owner[k]
				if res.StatusCode != 200 || (!gone[o] && got != o) || (gone[o] && gone[got]) {
					if bad.Add(1) <= 5 {
						t.Errorf("key %s (owner %s): %d from %q", k, o, res.StatusCode, got)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d of %d keys served wrongly", n, len(ks.keys))
	}
}

// hasSkip reports whether a lookup passed over name for reason.
func hasSkip(lr LookupResult, name string, reason ring.Reason) bool {
	for _, s := range lr.Skipped {
		if s.Name == name && s.Reason == reason {
			return true
		}
	}
	return false
}

// home counts the keys of name that Lookup sends to name.
func (ks *keyset) home(b *Balancer, name string) map[string]bool {
	h := map[string]bool{}
	for _, k := range ks.by[name] {
		if b.Lookup(k).Chosen == name {
			h[k] = true
		}
	}
	return h
}

// status returns the named upstream's entry of b.Status().
func status(t testing.TB, b *Balancer, name string) UpstreamStatus {
	t.Helper()
	for _, u := range b.Status().Upstreams {
		if u.Name == name {
			return u
		}
	}
	t.Fatalf("no upstream %s", name)
	return UpstreamStatus{}
}
