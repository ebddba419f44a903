package balancer

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestClientGoneCounts499 checks that a client leaving mid-request frees
// the in-flight slot, is not retried and is counted as 499.
func TestClientGoneCounts499(t *testing.T) {
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	arrived := make(chan struct{}, 1)
	for _, be := range []*backend{a, bb} {
		be.handle = func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-r.Context().Done()
		}
	}
	reg := NewRegistry()
	b, err := New(baseOptions(upstreamsOf(t, a, bb)), reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done) // ServeHTTP aborts the departed client's connection
		b.ServeHTTP(w, r)
	}))
	defer front.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/?user=gone", nil)
	go func() {
		<-arrived
		cancel()
	}()
	if _, err := front.Client().Do(req); err == nil {
		t.Fatal("request survived its cancellation")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not return")
	}
	owner := b.Lookup("gone").Chosen
	if v := metric(t, reg, "ringlb_requests_total", "upstream="+owner, "code=499"); v != 1 {
		t.Errorf("ringlb_requests_total{%s,499} = %v", owner, v)
	}
	if v := metric(t, reg, "ringlb_retries_total", "upstream="+owner); v != 0 {
		t.Errorf("a departed client was retried")
	}
	if n := b.inflight.Load(); n != 0 {
		t.Errorf("in flight: %d", n)
	}
}

func TestResponseHeaderTimeoutIs504(t *testing.T) {
	be := newBackend(t, "slow")
	release := make(chan struct{})
	defer close(release)
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	opts := baseOptions(upstreamsOf(t, be))
	opts.ResponseHeaderTimeout = 50 * time.Millisecond
	_, reg, front := proxy(t, opts)
	code, _, body := get(t, front.Client(), front.URL+"/")
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "timed out") {
		t.Errorf("got %d %q, want 504", code, body)
	}
	if v := metric(t, reg, "ringlb_requests_total", "upstream=slow", "code=504"); v != 1 {
		t.Errorf("ringlb_requests_total{slow,504} = %v", v)
	}
}

// TestRetryAfterBytesSent: once the request went out, only a bodiless
// GET, HEAD or OPTIONS moves on; a POST gets 502.
func TestRetryAfterBytesSent(t *testing.T) {
	flaky, good := newBackend(t, "flaky"), newBackend(t, "good")
	flaky.handle = func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		panic(http.ErrAbortHandler) // drop the connection without answering
	}
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, flaky, good)))
	key := keyOwnedBy(t, b, "flaky")
	c := front.Client()
	if code, got, _ := get(t, c, front.URL+"/?user="+key); code != 200 || got != "good" {
		t.Errorf("GET: %d from %q, want 200 from good", code, got)
	}
	res, err := c.Post(front.URL+"/?user="+key, "text/plain", strings.NewReader("not idempotent"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway || good.hits.Load() != 1 {
		t.Errorf("POST: %d, good hit %d times; want 502 and no retry", res.StatusCode, good.hits.Load())
	}
	if v := metric(t, reg, "ringlb_retries_total", "upstream=flaky"); v != 1 {
		t.Errorf("ringlb_retries_total{flaky} = %v, want 1", v)
	}
}

// TestReloadChangesURL: an upstream keeps its name (and its keys) while
// its URL changes; traffic follows the new URL.
func TestReloadChangesURL(t *testing.T) {
	old, moved := newBackend(t, "old"), newBackend(t, "moved")
	opts := baseOptions(upstreamsOf(t, old))
	opts.Upstreams[0].Name = "app"
	b, _, front := proxy(t, opts)
	v1 := b.Version()
	if _, got, _ := get(t, front.Client(), front.URL+"/"); got != "old" {
		t.Fatalf("before: %q", got)
	}
	opts.Upstreams = upstreamsOf(t, moved)
	opts.Upstreams[0].Name = "app"
	v2, err := b.Update(opts)
	if err != nil {
		t.Fatal(err)
	}
	if v1 != v2 {
		t.Errorf("version changed with the URL only: %s → %s", v1, v2)
	}
	if _, got, _ := get(t, front.Client(), front.URL+"/"); got != "moved" {
		t.Errorf("after: %q", got)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	good := baseOptions(upstreamsOf(t, newBackend(t, "a")))
	reg := NewRegistry()
	for name, mut := range map[string]func(*Options){
		"no upstreams":   func(o *Options) { o.Upstreams = nil },
		"unknown key":    func(o *Options) { o.Key = []KeySource{{Kind: "body"}} },
		"nameless query": func(o *Options) { o.Key = []KeySource{{Kind: KeyQuery}} },
		"load factor":    func(o *Options) { o.LoadFactor = 0.5 },
		"on_missing":     func(o *Options) { o.OnMissing = "guess" },
		"cookie name":    func(o *Options) { o.OnMissing = "cookie"; o.CookieName = "" },
		"on_unavailable": func(o *Options) { o.OnUnavailable = "panic" },
		"weight":         func(o *Options) { o.Upstreams = []UpstreamOptions{{Name: "a", URL: o.Upstreams[0].URL, Weight: -1}} },
		"url":            func(o *Options) { o.Upstreams = []UpstreamOptions{{Name: "a", URL: mustURL(t, "/rel"), Weight: 1}} },
		"duplicate": func(o *Options) {
			o.Upstreams = append(o.Upstreams, o.Upstreams[0])
		},
	} {
		o := good
		mut(&o)
		if _, err := New(o, reg, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Failed attempts registered nothing: the registry is still free.
	if _, err := New(good, reg, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := New(good, reg, nil); err == nil {
		t.Error("a second balancer on the same registry was accepted")
	}
}

// TestUpgradeMismatchIsTheClients: a client asks to upgrade to a token
// list ("websocket, foo") and the upstream, as common WebSocket servers
// do, answers 101 with one of them; ReverseProxy refuses the switch. The
// client asked for it: the upstream's breaker does not count it, the
// request is not retried elsewhere, and the upstream connection is
// closed at once rather than held until a garbage collection.
func TestUpgradeMismatchIsTheClients(t *testing.T) {
	a, other := newBackend(t, "a"), newBackend(t, "b")
	closed := make(chan struct{}, 8)
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := brw.ReadByte(); errors.Is(err, io.EOF) {
			closed <- struct{}{} // ringlb let go of the connection
		}
	}
	opts := baseOptions(upstreamsOf(t, a, other))
	opts.LoadFactor = 0
	opts.Breaker = BreakerOptions{ConsecutiveFailures: 1, FailureStatuses: []int{502, 503, 504}, OpenTimeout: time.Minute}
	b, reg, front := proxy(t, opts)
	key := keyOwnedBy(t, b, "a")
	for i := range 3 {
		req, _ := http.NewRequest(http.MethodGet, front.URL+"/ws?user="+key, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket, foo")
		res, err := front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadGateway {
			t.Errorf("request %d: %d, want 502", i, res.StatusCode)
		}
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("request %d: the upstream connection is still open", i)
		}
	}
	if st := status(t, b, "a"); !st.Available || st.Breaker != "closed" {
		t.Errorf("a: %+v, want available and closed", st)
	}
	if n := other.hits.Load(); n != 0 {
		t.Errorf("retried on b %d times", n)
	}
	if v := metric(t, reg, "ringlb_retries_total", "upstream=a"); v != 0 {
		t.Errorf("ringlb_retries_total{a} = %v", v)
	}
}

// TestReplacedTransportClosesReturnedConns: a reload that rebuilds the
// transport (new timeouts) closes the old one's idle connections, and
// again once its last request is done, so connections that requests in
// flight give back (here a retry's) do not linger until idle_conn.
func TestReplacedTransportClosesReturnedConns(t *testing.T) {
	a := newBackend(t, "a")
	var open atomic.Int64 // b's open connections
	bb := &backend{name: "b"}
	bb.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bb.hits.Add(1)
		io.WriteString(w, "b")
	}))
	bb.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	bb.srv.Start()
	t.Cleanup(bb.srv.Close)
	arrived, release := make(chan struct{}), make(chan struct{})
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		panic(http.ErrAbortHandler) // no response: the GET goes on to b
	}
	opts := baseOptions(upstreamsOf(t, a, bb))
	opts.LoadFactor = 0
	opts.IdleConnTimeout = time.Minute
	b, _, front := proxy(t, opts)
	key := keyOwnedBy(t, b, "a")
	done := make(chan int)
	go func() {
		res, err := front.Client().Get(front.URL + "/?user=" + key)
		if err != nil {
			done <- 0
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		done <- res.StatusCode
	}()
	<-arrived
	opts.IdleConnTimeout = 2 * time.Minute // a new transport
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	close(release)
	if code := <-done; code != 200 || bb.hits.Load() != 1 {
		t.Fatalf("retry on b: %d, b hit %d times", code, bb.hits.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to b still open in the replaced transport", open.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReadTimeoutCutsSilentBody: an upstream that sends its head and a
// few bytes, then nothing, is cut after timeouts.read: the client sees a
// truncated response and the upstream's breaker counts a failure. A body
// whose reads never wait that long is not cut, however long it takes.
func TestReadTimeoutCutsSilentBody(t *testing.T) {
	a := newBackend(t, "a")
	stop := make(chan struct{})
	defer close(stop)
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		if r.URL.Path == "/trickle" { // a byte every 40ms: never silent for 200ms
			for range 20 {
				w.Write([]byte("x"))
				w.(http.Flusher).Flush()
				time.Sleep(40 * time.Millisecond)
			}
			w.Write(make([]byte, 980))
			return
		}
		w.Write([]byte("0123456789"))
		w.(http.Flusher).Flush()
		select { // stall
		case <-stop:
		case <-r.Context().Done():
		}
	}
	opts := baseOptions(upstreamsOf(t, a))
	opts.ReadTimeout = 200 * time.Millisecond
	opts.Breaker = BreakerOptions{ConsecutiveFailures: 2, FailureStatuses: []int{502, 503, 504}, OpenTimeout: time.Minute}
	b, _, front := proxy(t, opts)
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Get(front.URL + "/trickle")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || len(body) != 1000 {
		t.Fatalf("trickling body: %d bytes, %v; want all 1000", len(body), err)
	}
	res, err = c.Get(front.URL + "/stall")
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) || string(body) != "0123456789" {
		t.Fatalf("silent body: %d, %q, %v; want 200 cut after 10 bytes", res.StatusCode, body, err)
	}
	if st := status(t, b, "a"); st.Breaker != "closed" {
		t.Fatalf("after one failure: %+v", st)
	}
	c.Get(front.URL + "/stall") // the second failure in a row opens it
	if st := status(t, b, "a"); st.Breaker != "open" {
		t.Errorf("two silent bodies: %+v, want the breaker open", st)
	}
}
