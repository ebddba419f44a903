package balancer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
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
	reg := metrics.NewRegistry()
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
	opts.Timeouts.ResponseHeader = 50 * time.Millisecond
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

func TestMidBodyFailureTruncates(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		// More than the servers buffer, so the headers and a part of the
		// body reach the client before the failure.
		w.Header().Set("Content-Length", "1000000")
		w.Write(make([]byte, 64<<10))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the backend dies mid-body
	}
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	res, err := front.Client().Get(front.URL + "/big")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) || len(body) == 0 || len(body) >= 1000000 {
		t.Fatalf("status %d, %d body bytes, err %v: want 200 and a truncated body", res.StatusCode, len(body), err)
	}
	if n := b.inflight.Load(); n != 0 {
		t.Errorf("in flight after abort: %d", n)
	}
	if v := metric(t, reg, "ringlb_upstream_inflight", "upstream=a"); v != 0 {
		t.Errorf("ringlb_upstream_inflight{a} = %v", v)
	}
}

func TestRetryRefused(t *testing.T) {
	live := newBackend(t, "live")
	ups := upstreamsOf(t, live)
	dead := deadURL(t)
	ups = append(ups, options.Upstream{Name: "dead", URL: dead, Addr: dead.Host, Weight: 1})
	b, reg, front := proxy(t, baseOptions(ups))
	key := keyOwnedBy(t, b, "dead")
	c := front.Client()

	code, got, _ := get(t, c, front.URL+"/", "X-User-ID", key)
	if code != 200 || got != "live" {
		t.Fatalf("GET: %d from %q, want 200 from live", code, got)
	}
	// A refused connection sent nothing, so even a POST with a body moves on.
	res, err := c.Post(front.URL+"/?user="+key, "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("X-Backend") != "live" {
		t.Fatalf("POST: %d from %q", res.StatusCode, res.Header.Get("X-Backend"))
	}
	if v := metric(t, reg, "ringlb_retries_total", "upstream=dead"); v != 2 {
		t.Errorf("ringlb_retries_total{dead} = %v, want 2", v)
	}
	if v := metric(t, reg, "ringlb_requests_total", "upstream=live", "code=200"); v != 2 {
		t.Errorf("ringlb_requests_total{live,200} = %v, want 2", v)
	}

	// Without retries the failure reaches the client as 502.
	opts := baseOptions(ups)
	opts.Retries = 0
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	res, err = c.Get(front.URL + "/?user=" + key)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway || res.Header.Get("X-Upstream") != "dead" {
		t.Errorf("no retries: %d %q (X-Upstream %q), want 502 from dead", res.StatusCode, body, res.Header.Get("X-Upstream"))
	}
}

func TestFailModeNoRetry(t *testing.T) {
	live := newBackend(t, "live")
	ups := upstreamsOf(t, live)
	dead := deadURL(t)
	ups = append(ups, options.Upstream{Name: "dead", URL: dead, Addr: dead.Host, Weight: 1})
	opts := baseOptions(ups)
	opts.Ring.OnUnavailable = "fail"
	opts.Ring.LoadFactor = 0
	b, reg, front := proxy(t, opts)
	key := keyOwnedBy(t, b, "dead")
	if code, _, _ := get(t, front.Client(), front.URL+"/?user="+key); code != http.StatusBadGateway {
		t.Errorf("failure under fail: %d, want 502", code)
	}
	b.HealthReporter().SetHealthy("dead", false, "test")
	code, _, body := get(t, front.Client(), front.URL+"/?user="+key)
	if code != http.StatusServiceUnavailable || body != "upstream dead for this key is unavailable\n" {
		t.Errorf("unavailable owner under fail: %d %q", code, body)
	}
	if v := metric(t, reg, "ringlb_no_upstream_total"); v != 1 {
		t.Errorf("ringlb_no_upstream_total = %v", v)
	}
	if live.hits.Load() != 0 {
		t.Errorf("fail mode served a dead owner's key elsewhere")
	}
}

func TestServerErrorPassedThrough(t *testing.T) {
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	for _, be := range []*backend{a, bb} {
		be.handle = func(w http.ResponseWriter, r *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) }
	}
	_, reg, front := proxy(t, baseOptions(upstreamsOf(t, a, bb)))
	code, _, body := get(t, front.Client(), front.URL+"/?user=u1")
	if code != http.StatusServiceUnavailable || body != "busy\n" {
		t.Errorf("got %d %q, want the upstream's 503", code, body)
	}
	if hits := a.hits.Load() + bb.hits.Load(); hits != 1 {
		t.Errorf("upstreams hit %d times, want 1 (no retry)", hits)
	}
	if v := metric(t, reg, "ringlb_retries_total", "upstream=a") + metric(t, reg, "ringlb_retries_total", "upstream=b"); v != 0 {
		t.Errorf("retries counted: %v", v)
	}
}

func TestNoUpstreamAvailable(t *testing.T) {
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, a, bb)))
	if !b.Ready() {
		t.Fatal("not ready with two healthy upstreams")
	}
	b.HealthReporter().SetHealthy("a", false, "test")
	code, got, _ := get(t, front.Client(), front.URL+"/?user=x")
	if code != 200 || got != "b" {
		t.Fatalf("with a down: %d from %q", code, got)
	}
	b.HealthReporter().SetHealthy("b", false, "test")
	code, _, body := get(t, front.Client(), front.URL+"/?user=x")
	if code != http.StatusServiceUnavailable || body != "no upstream available\n" {
		t.Errorf("all down: %d %q", code, body)
	}
	if b.Ready() {
		t.Error("ready with nothing available")
	}
	if v := metric(t, reg, "ringlb_no_upstream_total"); v != 1 {
		t.Errorf("ringlb_no_upstream_total = %v", v)
	}
	if v := metric(t, reg, "ringlb_upstream_available", "upstream=a"); v != 0 {
		t.Errorf("ringlb_upstream_available{a} = %v", v)
	}
	if v := metric(t, reg, "ringlb_ejections_total", "upstream=a", "reason=health"); v != 1 {
		t.Errorf("ringlb_ejections_total{a,health} = %v", v)
	}
	// Back up: exactly its keys return.
	b.HealthReporter().SetHealthy("a", true, "test")
	key := keyOwnedBy(t, b, "a")
	if _, got, _ := get(t, front.Client(), front.URL+"/?user="+key); got != "a" {
		t.Errorf("a's key went to %q after a came back", got)
	}
}

// TestErrorBodiesNameNoUpstreamWithoutHeader: with upstream_header off,
// 502, 504 and the fail-closed 503 say what happened without naming the
// upstream, and no response carries a header naming it.
func TestErrorBodiesNameNoUpstreamWithoutHeader(t *testing.T) {
	slow := newBackend(t, "slow-secret")
	release := make(chan struct{})
	defer close(release)
	slow.handle = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	dead := deadURL(t)
	ups := append(upstreamsOf(t, slow), options.Upstream{Name: "dead-secret", URL: dead, Addr: dead.Host, Weight: 1})
	opts := baseOptions(ups)
	opts.UpstreamHeader = ""
	opts.Retries = 0
	opts.Ring.LoadFactor = 0
	opts.Ring.OnUnavailable = "fail"
	opts.Timeouts.ResponseHeader = 50 * time.Millisecond
	b, _, front := proxy(t, opts)
	check := func(what string, wantCode int, wantBody string, key string) {
		t.Helper()
		res, err := front.Client().Get(front.URL + "/?user=" + key)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != wantCode || string(body) != wantBody {
			t.Errorf("%s: %d %q, want %d %q", what, res.StatusCode, body, wantCode, wantBody)
		}
		for k, v := range res.Header {
			if strings.Contains(strings.Join(v, ","), "secret") {
				t.Errorf("%s: header %s: %q names the upstream", what, k, v)
			}
		}
	}
	check("refused", http.StatusBadGateway, "bad gateway: the upstream failed\n", keyOwnedBy(t, b, "dead-secret"))
	b.HealthReporter().SetHealthy("dead-secret", false, "test")
	check("owner unavailable", http.StatusServiceUnavailable, "the upstream for this key is unavailable\n", keyOwnedBy(t, b, "dead-secret"))

	opts.Ring.OnUnavailable = "remap"
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	check("timeout", http.StatusGatewayTimeout, "gateway timeout: the upstream timed out\n", keyOwnedBy(t, b, "slow-secret"))
}

// TestConcurrentRequestsKeepTheirOwn: downstream.Writers are reused once
// their request is over, so many requests at once, over HTTP/1.1 on
// plain TCP and over TLS, and HTTP/2, must each get their own status,
// body and request id: the
// upstream echoes what it was sent, and answers some 404, and the client
// checks that the response matches its request (run with -race, this also
// finds a writer still in use when it is handed on).
func TestConcurrentRequestsKeepTheirOwn(t *testing.T) {
	for _, front := range []string{"http1", "http1-tls", "http2"} {
		t.Run(front, func(t *testing.T) {
			bes := []*backend{newBackend(t, "a"), newBackend(t, "b")}
			for _, be := range bes {
				be.handle = func(w http.ResponseWriter, r *http.Request) {
					if strings.HasSuffix(r.URL.Path, "7") {
						w.WriteHeader(http.StatusNotFound)
					}
					fmt.Fprintf(w, "%s %s", r.URL.Path, r.Header.Get("X-Request-Id"))
				}
			}
			opts := baseOptions(upstreamsOf(t, bes...))
			opts.RequestIDHeader = "X-Request-Id"
			opts.Limits = options.Limits{UpstreamRequests: 1024, Send: time.Minute}
			b, err := New(opts, metrics.NewRegistry(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			var srv *httptest.Server
			var c *http.Client
			if front == "http1" {
				srv = httptest.NewServer(b)
				t.Cleanup(srv.Close)
				c = srv.Client()
			} else {
				srv, c = tlsFront(t, b, front == "http2")
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 100 {
						path := fmt.Sprintf("/g%d/r%d", g, i)
						req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
						if i%3 == 0 { // the client's own id is passed on
							req.Header.Set("X-Request-Id", "client-"+path)
						}
						res, err := c.Do(req)
						if err != nil {
							errs <- err
							return
						}
						body, _ := io.ReadAll(res.Body)
						res.Body.Close()
						up, id, _ := strings.Cut(string(body), " ")
						wantCode := http.StatusOK
						if strings.HasSuffix(path, "7") {
							wantCode = http.StatusNotFound
						}
						switch {
						case res.StatusCode != wantCode:
							errs <- fmt.Errorf("%s: status %d, want %d", path, res.StatusCode, wantCode)
						case up != path:
							errs <- fmt.Errorf("%s: the upstream was sent %s", path, up)
						case res.Header.Get("X-Request-Id") != id:
							errs <- fmt.Errorf("%s: response id %q, the upstream saw %q", path, res.Header.Get("X-Request-Id"), id)
						case i%3 == 0 && res.Header.Get("X-Request-Id") != "client-"+path:
							errs <- fmt.Errorf("%s: response id %q, want the client's", path, res.Header.Get("X-Request-Id"))
						case len(res.Header.Get("X-Request-Id")) == 0:
							errs <- fmt.Errorf("%s: no request id on the response", path)
						default:
							continue
						}
						return
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}
