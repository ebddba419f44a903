package balancer

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// jsonLog is an access log in JSON to a buffer, and its lines parsed.
type jsonLog struct {
	buf testenv.Buffer
	l   *accesslog.Logger
}

func newJSONLog(t *testing.T) *jsonLog {
	jl := &jsonLog{}
	l, err := accesslog.New(accesslog.JSON, "", &jl.buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	jl.l = l
	return jl
}

func (jl *jsonLog) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(jl.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// The access log says why each request went where it went: the owner, a
// retry after a refused connection (with its cause), a skip for maint, a
// 503 with nowhere to go, a 400 with no key; key source and hash (never
// the key); the request id generated, sent upstream and returned; and the
// trace id of traceparent, which passes through unchanged.
func TestAccessLogDecisions(t *testing.T) {
	a, c := newBackend(t, "a"), newBackend(t, "b")
	var gotID, gotTrace string
	for _, be := range []*backend{a, c} {
		be.handle = func(w http.ResponseWriter, r *http.Request) {
			gotID, gotTrace = r.Header.Get("X-Request-Id"), r.Header.Get("Traceparent")
			w.Write([]byte("ok"))
		}
	}
	jl := newJSONLog(t)
	ups := upstreamsOf(t, a, c)
	ups = append(ups, options.Upstream{Name: "dead", URL: deadURL(t), Weight: 1})
	opts := baseOptions(ups)
	opts.Ring.LoadFactor = 0
	opts.Hash.Key = []key.Source{{Kind: key.Header, Name: "X-User-ID"}}
	opts.Hash.OnMissing = options.OnMissingReject
	opts.AccessLog = jl.l
	opts.RequestIDHeader = "X-Request-Id"
	b, _, front := proxy(t, opts)

	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ownedBy := func(name string) string { return keyOwnedBy(t, b, name) }
	kA, kDead := ownedBy("a"), ownedBy("dead")

	req, _ := http.NewRequest(http.MethodGet, front.URL+"/x?y=1", nil)
	req.Header.Set("X-User-ID", kA)
	req.Header.Set("Traceparent", tp)
	res, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if gotTrace != tp {
		t.Errorf("upstream got traceparent %q", gotTrace)
	}
	if len(gotID) != 32 || res.Header.Get("X-Request-Id") != gotID {
		t.Errorf("request id: upstream %q, response %q", gotID, res.Header.Get("X-Request-Id"))
	}
	firstID := gotID
	get(t, front.Client(), front.URL+"/", "X-User-ID", kDead, "X-Request-Id", "client-id-7")
	if gotID != "client-id-7" {
		t.Errorf("a client's request id reached the upstream as %q", gotID)
	}
	if _, err := b.SetState("a", state.Maint); err != nil {
		t.Fatal(err)
	}
	get(t, front.Client(), front.URL+"/", "X-User-ID", kA)
	get(t, front.Client(), front.URL+"/") // no key: 400

	lines := jl.lines(t)
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), jl.buf.String())
	}
	check := func(i int, want map[string]any) {
		t.Helper()
		for k, v := range want {
			if lines[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v\n%v", i+1, k, lines[i][k], v, lines[i])
			}
		}
	}
	check(0, map[string]any{"decision": "owner", "upstream": "a", "status": 200.0, "attempts": 1.0, "key_source": "header:X-User-ID",
		"key_hash": b.Lookup(kA).Hash, "request_id": firstID, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
		"uri": "/x?y=1", "pool": "default", "cause": "", "method": "GET", "protocol": "HTTP/1.1"})
	check(1, map[string]any{"decision": "retry", "attempts": 2.0, "cause": "refused", "status": 200.0, "request_id": "client-id-7"})
	if lines[1]["upstream"] == "dead" {
		t.Errorf("retry logged on the dead upstream")
	}
	check(2, map[string]any{"decision": "next", "status": 200.0}) // its owner a skipped: the next upstream served
	if sk, _ := lines[2]["skipped"].([]any); len(sk) == 0 || sk[0].(map[string]any)["name"] != "a" || sk[0].(map[string]any)["reason"] != "maint" {
		t.Errorf("skipped = %v, want a: maint first", lines[2]["skipped"])
	}
	check(3, map[string]any{"decision": "rejected", "status": 400.0, "key_source": "", "key_hash": "", "upstream": ""})
	if strings.Contains(jl.buf.String(), kA) {
		t.Error("the log holds a raw key")
	}
	for _, l := range lines {
		if l["duration"].(float64) <= 0 {
			t.Errorf("duration %v", l["duration"])
		}
	}
	if lines[0]["upstream_ttfb"].(float64) <= 0 || lines[0]["bytes_sent"] != 2.0 {
		t.Errorf("ttfb %v, bytes_sent %v", lines[0]["upstream_ttfb"], lines[0]["bytes_sent"])
	}
}

// Over HTTP/2 too, traceparent and tracestate pass through unchanged and
// the trace id is logged; the request id comes back.
func TestAccessLogHTTP2Trace(t *testing.T) {
	be := newBackend(t, "a")
	var got http.Header
	be.handle = func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }
	jl := newJSONLog(t)
	opts := baseOptions(upstreamsOf(t, be))
	opts.AccessLog, opts.RequestIDHeader = jl.l, "X-Request-Id"
	b, err := New(opts, metrics.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front, c := tlsFront(t, b, true)
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/", nil)
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	req.Header.Set("Tracestate", "congo=t61rcWkgMzE")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.ProtoMajor != 2 {
		t.Fatalf("client spoke %s", res.Proto)
	}
	if got.Get("Traceparent") != req.Header.Get("Traceparent") || got.Get("Tracestate") != "congo=t61rcWkgMzE" {
		t.Errorf("upstream got traceparent %q tracestate %q", got.Get("Traceparent"), got.Get("Tracestate"))
	}
	if res.Header.Get("X-Request-Id") == "" || res.Header.Get("X-Request-Id") != got.Get("X-Request-Id") {
		t.Errorf("request id: response %q, upstream %q", res.Header.Get("X-Request-Id"), got.Get("X-Request-Id"))
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if !strings.Contains(jl.buf.String(), `"trace_id":"0af7651916cd43dd8448eb211c80319c"`) || !strings.Contains(jl.buf.String(), `"protocol":"HTTP/2.0"`) {
			return errString(jl.buf.String())
		}
		return nil
	})
}

type errString string

func (e errString) Error() string { return "log: " + string(e) }

// TestRequestIDsMade: a request without an id gets one made for it: 32
// lower-case hex digits, the same upstream and on the response, different
// for every request; one the client sent with an empty value, or longer
// than 128 bytes, or not printable ASCII, is replaced;
// an id the upstream set on its response is left as it is. Over HTTP/1.1
// and HTTP/2 alike; the response's header map holds the id once, under
// the canonical name over HTTP/1.1 and under the lower-case name HTTP/2
// sends (so its server does not lower-case it anew for every response),
// and never under both.
func TestRequestIDsMade(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "http2"}[h2], func(t *testing.T) { testRequestIDsMade(t, h2) })
	}
}

func testRequestIDsMade(t *testing.T, h2 bool) {
	be := newBackend(t, "a")
	var mu sync.Mutex
	var upID string
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upID = r.Header.Get("X-Request-Id")
		mu.Unlock()
		if r.URL.Path == "/own" {
			w.Header().Set("X-Request-Id", "upstream-id")
		}
		w.Write([]byte("ok"))
	}
	opts := baseOptions(upstreamsOf(t, be))
	opts.RequestIDHeader = "X-Request-Id"
	b, err := New(opts, metrics.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	var keys []string // the id's keys in the header map as the head went out
	front, c := tlsFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.ServeHTTP(&headSpy{ResponseWriter: w, keys: &keys, mu: &mu}, r)
	}), h2)
	wantKey := "X-Request-Id"
	if h2 {
		wantKey = "x-request-id"
	}
	do := func(path string, hdr ...string) (up, res string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, front.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		r, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.ProtoMajor != map[bool]int{false: 1, true: 2}[h2] {
			t.Fatalf("client spoke %s", r.Proto)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(keys) != 1 || (keys[0] != wantKey && r.Header.Get("X-Request-Id") != "upstream-id") {
			t.Errorf("%s: the id went out under %q; want once, as %q", path, keys, wantKey)
		}
		return upID, r.Header.Get("X-Request-Id")
	}
	isHex := func(s string) bool {
		for _, c := range s {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return len(s) == 32
	}
	seen := map[string]bool{}
	for i := range 50 {
		up, res := do("/")
		if !isHex(up) || res != up || seen[up] {
			t.Fatalf("request %d: upstream got id %q, response %q (seen before: %v)", i, up, res, seen[up])
		}
		seen[up] = true
	}
	if up, res := do("/", "X-Request-Id", ""); !isHex(up) || res != up {
		t.Errorf("empty id sent: upstream %q, response %q; want one made", up, res)
	}
	// A client's id is kept when it is 1-128 bytes of printable ASCII;
	// any other is replaced, as a missing one.
	long := strings.Repeat("0123456789abcdef", 8)
	for _, tc := range []struct {
		id   string
		kept bool
	}{
		{long, true},
		{"id with spaces, \"quotes\" & {json}: ok~", true},
		{long + "x", false},
		{strings.Repeat("x", 4000), false},
		{"caf\u00e9", false},
		{"a\tb", false},
	} {
		up, res := do("/", "X-Request-Id", tc.id)
		switch {
		case tc.kept && (up != tc.id || res != tc.id):
			t.Errorf("%d-byte id %.40q: upstream %.40q, response %.40q; want it kept", len(tc.id), tc.id, up, res)
		case !tc.kept && (!isHex(up) || res != up):
			t.Errorf("%d-byte id %.40q: upstream %.40q, response %.40q; want one made instead", len(tc.id), tc.id, up, res)
		}
	}
	if up, res := do("/own"); !isHex(up) || res != "upstream-id" {
		t.Errorf("upstream's own id: upstream got %q, response %q; want the upstream's kept", up, res)
	}
}

// headSpy records, as the head is written, the header map's keys that
// name the request id, in any case.
type headSpy struct {
	http.ResponseWriter
	mu    *sync.Mutex
	keys  *[]string
	wrote bool
}

func (s *headSpy) WriteHeader(code int) {
	if code >= 200 && !s.wrote {
		s.wrote = true
		s.mu.Lock()
		*s.keys = (*s.keys)[:0]
		for k := range s.Header() {
			if strings.EqualFold(k, "X-Request-Id") {
				*s.keys = append(*s.keys, k)
			}
		}
		s.mu.Unlock()
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *headSpy) Write(p []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return s.ResponseWriter.Write(p)
}

func (s *headSpy) Flush() { http.NewResponseController(s.ResponseWriter).Flush() }

// TestRequestIDOwnsItsBytes: a made request id is a string of its own,
// not a view of memory inside the downstream.Writer. HTTP/2's header
// compression tables (the client connection's, and an HTTP/2 upstream's)
// keep the values they encode for as long as the connection lives; an id
// that pointed into the Writer kept every Writer of the
// connection alive with it.
func TestRequestIDOwnsItsBytes(t *testing.T) {
	s := &snapshot{settings: settings{requestID: "X-Request-Id", requestIDH2: "x-request-id"}}
	for _, major := range []int{1, 2} {
		rw := &downstream.Writer{}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.ProtoMajor = major
		requestID(s, rw, r)
		id := rw.RequestID()
		if len(id) != 32 {
			t.Fatalf("HTTP/%d: made id %q, want 32 hex digits", major, id)
		}
		p := uintptr(unsafe.Pointer(unsafe.StringData(id)))
		lo := uintptr(unsafe.Pointer(rw))
		if p >= lo && p < lo+unsafe.Sizeof(*rw) {
			t.Errorf("HTTP/%d: the id's bytes lie inside the Writer (%#x in [%#x, %#x))", major, p, lo, lo+unsafe.Sizeof(*rw))
		}
		if got := r.Header.Get("X-Request-Id"); got != id {
			t.Errorf("HTTP/%d: the request carries %q, the response writer %q", major, got, id)
		}
		// The request's value must not alias the Writer either:
		// a recycled one is cleared and then serves another request.
		v := uintptr(unsafe.Pointer(&r.Header["X-Request-Id"][0]))
		if v >= lo && v < lo+unsafe.Sizeof(*rw) {
			t.Errorf("HTTP/%d: the request's value lies inside the Writer", major)
		}
		rw.Recycle()
		if got := r.Header.Get("X-Request-Id"); got != id {
			t.Errorf("HTTP/%d: after the Writer was recycled the request carries %q, want %q", major, got, id)
		}
	}
}

// TestAccessLogCombinedRequestSpaces: over HTTP/2 a client can put spaces
// in the method and the path, which HTTP/1.1's request line cannot hold;
// the combined format's "$request" escapes them (\x20), so it is always
// three space-separated parts, as log parsers read it.
func TestAccessLogCombinedRequestSpaces(t *testing.T) {
	be := newBackend(t, "a")
	var logBuf testenv.Buffer
	l, err := accesslog.New(accesslog.Combined, "", &logBuf, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := baseOptions(upstreamsOf(t, be))
	opts.AccessLog = l
	b, err := New(opts, metrics.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front, c := tlsFront(t, b, true)
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/a HTTP/1.1", `"GET /a\x20HTTP/1.1 HTTP/2.0"`},
		{"GET /forged", "/b c", `"GET\x20/forged /b\x20c HTTP/2.0"`},
	} {
		before := len(logBuf.String())
		status, _ := h2Exchange(t, front, c, ":method", tc.method, ":scheme", "https", ":authority", "front", ":path", tc.path)
		var line string
		testenv.Eventually(t, 5*time.Second, func() error {
			if line = logBuf.String()[before:]; line == "" {
				return errString("no line yet")
			}
			return nil
		})
		if !strings.Contains(line, "] "+tc.want+" ") {
			t.Errorf("%q %q (status %s): logged\n%s\nwant the request as %s", tc.method, tc.path, status, line, tc.want)
		}
	}
}
