package balancer

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
	"github.com/ringlb/ringlb/ring"
)

// These tests eject upstreams that really fail, through the breakers and
// the active checks, and watch keys leave and come home. Time that matters
// to the balancer (open periods, slow start) runs on an injected clock;
// the health checker probes in real time at a short interval, and the
// tests wait for its reports on channels.

// TestBreaker5xxStorm: an upstream that answers 503 to everything while
// its health check passes is ejected by its breaker after exactly
// consecutive_failures responses, which reach the client as they are.
// Only its keys move, spread over the survivors; when it heals, its open
// period ends, and one trial succeeds, every key comes home at once.
func TestBreaker5xxStorm(t *testing.T) {
	r := newRig(t, 4, nil) // consecutive_failures 5, open 5s
	ks := newKeyset(r.b, 2000)
	c := r.bes["c"]
	c.status.Store(http.StatusServiceUnavailable)
	for i, k := range ks.by["c"][:5] {
		if !status(t, r.b, "c").Available {
			t.Fatalf("c ejected after %d failures, want 5", i)
		}
		if code, be := r.get(t, k); code != 503 || be != "c" {
			t.Fatalf("failure %d: %d from %q, want c's own 503 (no retry)", i+1, code, be)
		}
	}
	if st := status(t, r.b, "c"); st.Available || st.Breaker != "open" || st.Health != "up" {
		t.Fatalf("after 5 failures: %+v", st)
	}
	if n := c.hits.Load(); n != 5 {
		t.Errorf("c got %d requests, want 5", n)
	}
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ringlb_ejections_total", []string{"upstream=c", "reason=breaker"}, 1},
		{"ringlb_ejections_total", []string{"upstream=c", "reason=health"}, 0},
		{"ringlb_upstream_available", []string{"upstream=c"}, 0},
		{"ringlb_upstream_available", []string{"upstream=a"}, 1},
		{"ringlb_breaker_state", []string{"upstream=c"}, 2},
		{"ringlb_breaker_state", []string{"upstream=a"}, 0},
	} {
		if v := r.metric(t, m.name, m.labels...); v != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, v, m.want)
		}
	}
	if n := r.logs.count("upstream unavailable", "upstream=c", "cause=breaker"); n != 1 {
		t.Errorf("%d 'upstream unavailable' lines, want 1:\n%s", n, r.logs)
	}
	if lr := r.b.Lookup(ks.by["c"][0]); !hasSkip(lr, "c", ring.BreakerOpen) {
		t.Errorf("lookup of c's key: %+v, want c skipped as breaker_open", lr)
	}
	ks.checkPlacement(t, r.b, "c")
	r.serveAll(t, ks, "c")
	if n := c.hits.Load(); n != 5 {
		t.Errorf("an open breaker let %d requests through", n-5)
	}

	// Healed: nothing reaches c before its open period ends; then the next
	// request for one of its keys is the trial, and it closes the breaker.
	c.status.Store(http.StatusOK)
	r.clk.advance(5*time.Second - 1)
	if lr := r.b.Lookup(ks.by["c"][0]); lr.Chosen == "c" {
		t.Fatal("c offered before its open period ended")
	}
	r.clk.advance(1)
	if code, be := r.get(t, ks.by["c"][0]); code != 200 || be != "c" {
		t.Fatalf("trial: %d from %q", code, be)
	}
	if st := status(t, r.b, "c"); !st.Available || st.Breaker != "closed" {
		t.Fatalf("after the trial: %+v", st)
	}
	ks.checkPlacement(t, r.b) // all home at once: no slow start
	r.serveAll(t, ks)
	if n := r.logs.count("upstream available", "upstream=c", "cause=breaker"); n != 1 {
		t.Errorf("%d 'upstream available' lines, want 1", n)
	}
	if v := r.metric(t, "ringlb_ejections_total", "upstream=c", "reason=breaker"); v != 1 {
		t.Errorf("ejections after recovery: %v", v)
	}
	if v := r.metric(t, "ringlb_upstream_available", "upstream=c"); v != 1 {
		t.Errorf("ringlb_upstream_available{c} = %v", v)
	}
}

// TestBreakerOpenPeriodDoublesCapsAndResets: each consecutive trip doubles
// the open period up to max_open_timeout; a breaker that stayed closed for
// 2 × max_open_timeout starts again from open_timeout.
func TestBreakerOpenPeriodDoublesCapsAndResets(t *testing.T) {
	r := newRig(t, 2, func(o *Options) {
		o.Breaker = breaker.Options{ConsecutiveFailures: 1, FailureStatuses: []int{502}, OpenTimeout: time.Second, MaxOpenTimeout: 4 * time.Second}
	})
	ks := newKeyset(r.b, 200)
	a, key := r.bes["a"], ks.by["a"][0]
	// expectOpen checks that the breaker, tripped just now, keeps a out
	// for exactly d, and leaves the clock at its end.
	expectOpen := func(d time.Duration) {
		t.Helper()
		if st := status(t, r.b, "a"); st.Available || st.Breaker != "open" {
			t.Fatalf("at %v: %+v, want open", r.clk.Now(), st)
		}
		r.clk.advance(d - 1)
		if lr := r.b.Lookup(key); lr.Chosen != "b" || !hasSkip(lr, "a", ring.BreakerOpen) {
			t.Fatalf("1ns before %v: %+v, want a skipped as breaker_open", d, lr)
		}
		r.clk.advance(1)
		if lr := r.b.Lookup(key); lr.Chosen != "a" {
			t.Fatalf("after %v: %+v, want a offered for its trial", d, lr)
		}
	}
	send := func(want int) {
		t.Helper()
		if code, be := r.get(t, key); code != want || be != "a" {
			t.Fatalf("%d from %q, want %d from a", code, be, want)
		}
	}
	a.status.Store(http.StatusBadGateway)
	send(502)
	expectOpen(time.Second)
	send(502) // failed trials: consecutive trips
	expectOpen(2 * time.Second)
	send(502)
	expectOpen(4 * time.Second)
	send(502)
	expectOpen(4 * time.Second) // capped

	a.status.Store(http.StatusOK)
	send(200)
	// Closed for a little less than 2 × max: the next trip still counts as
	// consecutive.
	r.clk.advance(8*time.Second - 1)
	a.status.Store(http.StatusBadGateway)
	send(502)
	expectOpen(4 * time.Second)
	a.status.Store(http.StatusOK)
	send(200)
	// Closed for 2 × max: the doubling starts over.
	r.clk.advance(8 * time.Second)
	a.status.Store(http.StatusBadGateway)
	send(502)
	expectOpen(time.Second)

	// Six trips, five trials (three failed, two succeeded): every real
	// availability transition counted and logged once.
	if v := r.metric(t, "ringlb_ejections_total", "upstream=a", "reason=breaker"); v != 6 {
		t.Errorf("ejections: %v, want 6", v)
	}
	if n := r.logs.count("upstream unavailable", "upstream=a"); n != 6 {
		t.Errorf("%d 'upstream unavailable' lines, want 6", n)
	}
	if n := r.logs.count("upstream available", "upstream=a"); n != 5 {
		t.Errorf("%d 'upstream available' lines, want 5", n)
	}
	if n := r.logs.count("circuit breaker open", "upstream=a"); n != 6 {
		t.Errorf("%d 'circuit breaker open' lines, want 6", n)
	}
}

// TestHalfOpenAdmitsOneTrial: while the trial is in flight every other
// request for the upstream's keys goes clockwise, and /debug/lookup says
// breaker_open.
func TestHalfOpenAdmitsOneTrial(t *testing.T) {
	r := newRig(t, 2, func(o *Options) { o.Breaker.ConsecutiveFailures = 1 })
	ks := newKeyset(r.b, 200)
	a, key := r.bes["a"], ks.by["a"][0]
	a.status.Store(http.StatusBadGateway)
	r.get(t, key)
	a.status.Store(http.StatusOK)
	hold, arrived := make(chan struct{}), make(chan string, 4)
	a.hold.Store(&hold)
	a.arrived.Store(&arrived)
	r.clk.advance(5 * time.Second)

	type answer struct {
		code int
		be   string
		err  error
	}
	trial := make(chan answer, 1)
	go func() {
		res, err := r.client.Get(r.front.URL + "/?user=" + key)
		if err != nil {
			trial <- answer{err: err}
			return
		}
		res.Body.Close()
		trial <- answer{res.StatusCode, res.Header.Get("X-Backend"), nil}
	}()
	<-arrived
	if st := status(t, r.b, "a"); st.Breaker != "half-open" || !st.Available {
		t.Errorf("during the trial: %+v, want half-open (and so available)", st)
	}
	if v := r.metric(t, "ringlb_breaker_state", "upstream=a"); v != 1 {
		t.Errorf("ringlb_breaker_state{a} = %v, want 1", v)
	}
	if lr := r.b.Lookup(key); lr.Chosen != "b" || !hasSkip(lr, "a", ring.BreakerOpen) {
		t.Errorf("lookup during the trial: %+v", lr)
	}
	for range 3 {
		if code, be := r.get(t, key); code != 200 || be != "b" {
			t.Errorf("during the trial: %d from %q, want 200 from b", code, be)
		}
	}
	close(hold)
	if got := <-trial; got.code != 200 || got.be != "a" {
		t.Errorf("trial: %+v", got)
	}
	if n := a.hits.Load(); n != 2 {
		t.Errorf("a got %d requests, want 2 (the failure and the trial)", n)
	}
	if st := status(t, r.b, "a"); st.Breaker != "closed" || r.b.Lookup(key).Chosen != "a" {
		t.Errorf("after the trial: %+v", st)
	}
}

// TestConcurrentTrip: requests racing the trip (admitted while closed, or
// reaching the breaker just after it opened) neither shorten the open
// period nor count as trials: the upstream is ejected once, and every
// request gets either the failing upstream's own answer or a survivor's.
func TestConcurrentTrip(t *testing.T) {
	r := newRig(t, 3, func(o *Options) { o.Breaker.ConsecutiveFailures = 1 })
	ks := newKeyset(r.b, 1000)
	r.bes["c"].status.Store(http.StatusServiceUnavailable)
	own := ks.by["c"]
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				res, err := r.client.Get(r.front.URL + "/?user=" + own[(w*20+i)%len(own)])
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				be := res.Header.Get("X-Backend")
				if !(res.StatusCode == 503 && be == "c") && !(res.StatusCode == 200 && be != "c" && be != "") {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d answers neither c's 503 nor a survivor's 200", n)
	}
	if st := status(t, r.b, "c"); st.Available || st.Breaker != "open" {
		t.Errorf("after the storm: %+v", st)
	}
	if v := r.metric(t, "ringlb_ejections_total", "upstream=c", "reason=breaker"); v != 1 {
		t.Errorf("ejections = %v, want 1", v)
	}
	if n := r.logs.count("upstream available", "upstream=c"); n != 0 {
		t.Errorf("c came back %d times with the clock stopped", n)
	}
	ks.checkPlacement(t, r.b, "c")
}

// TestTrialWaitsForHealthCheck: an upstream whose open period is over gets
// no trial while its health check says down.
func TestTrialWaitsForHealthCheck(t *testing.T) {
	r := newRig(t, 2, func(o *Options) { o.Breaker.ConsecutiveFailures = 1; o.HealthChecks = true })
	ks := newKeyset(r.b, 200)
	a, key := r.bes["a"], ks.by["a"][0]
	a.status.Store(http.StatusBadGateway)
	r.get(t, key)
	r.b.HealthReporter().SetHealthy("a", false, "test")
	a.status.Store(http.StatusOK)
	r.clk.advance(time.Minute)
	if lr := r.b.Lookup(key); lr.Chosen != "b" || !hasSkip(lr, "a", ring.Unhealthy) {
		t.Errorf("lookup: %+v, want a skipped as unhealthy", lr)
	}
	if code, be := r.get(t, key); code != 200 || be != "b" || a.hits.Load() != 1 {
		t.Errorf("%d from %q, a hit %d times: want no trial", code, be, a.hits.Load())
	}
	// Already unavailable: the health verdict is no new ejection.
	if v := r.metric(t, "ringlb_ejections_total", "upstream=a", "reason=health"); v != 0 {
		t.Errorf("ejections{health} = %v", v)
	}
	// Its open period is long over: health up makes it available at once,
	// half-open, with no request needed.
	r.b.HealthReporter().SetHealthy("a", true, "test")
	if st := status(t, r.b, "a"); !st.Available || st.Breaker != "half-open" {
		t.Errorf("health up after the open period: %+v, want available and half-open", st)
	}
	if code, be := r.get(t, key); code != 200 || be != "a" {
		t.Errorf("trial: %d from %q", code, be)
	}
	if st := status(t, r.b, "a"); !st.Available || st.Breaker != "closed" {
		t.Errorf("after the trial: %+v", st)
	}
}

// TestClientGoneIsNotCounted: a client that leaves is neither a failure
// nor a success for the breaker.
func TestClientGoneIsNotCounted(t *testing.T) {
	r := newRig(t, 2, func(o *Options) { o.Breaker.ConsecutiveFailures = 2 })
	ks := newKeyset(r.b, 200)
	a, key := r.bes["a"], ks.by["a"][0]
	served, arrived := make(chan struct{}, 1), make(chan string, 1)
	r.served.Store(&served)
	a.arrived.Store(&arrived)
	gone := func() {
		hold := make(chan struct{})
		a.hold.Store(&hold)
		defer a.hold.Store(nil)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.front.URL+"/?user="+key, nil)
		go func() {
			<-arrived
			cancel()
		}()
		if _, err := r.client.Do(req); err == nil {
			t.Fatal("request survived its cancellation")
		}
		<-served
	}
	fail := func() {
		a.status.Store(http.StatusBadGateway)
		r.get(t, key)
		<-arrived
		<-served
	}
	for range 3 {
		gone()
	}
	br := r.b.ups["a"].br.Load()
	if c := br.Counts(); c.TotalExclusions != 3 || c.ConsecutiveFailures != 0 || c.TotalSuccesses != 0 {
		t.Errorf("counts after three departures: %+v", c)
	}
	if st := status(t, r.b, "a"); st.Breaker != "closed" {
		t.Fatalf("departures tripped the breaker: %+v", st)
	}
	fail()
	gone() // a success here would reset the count
	fail()
	if st := status(t, r.b, "a"); st.Breaker != "open" {
		t.Errorf("failure, departure, failure: %+v, want open", st)
	}
}

// TestCrash: an upstream whose listener closes mid-traffic costs GET
// clients nothing (refused dials go clockwise), is ejected by its breaker,
// and, restarted on the same port, gets exactly its keys back.
func TestCrash(t *testing.T) {
	r := newRig(t, 4, func(o *Options) { o.Breaker.ConsecutiveFailures = 3 })
	ks := newKeyset(r.b, 1000)
	c := r.bes["c"]
	var sent, bad atomic.Int64
	var crash sync.Once
	crashed := make(chan struct{})
	client := r.client
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				for i := w; i < len(ks.keys); i += 8 {
					if sent.Add(1) == 800 {
						crash.Do(func() { c.srv.Close(); close(crashed) })
					}
					k := ks.keys[i]
					res, err := client.Get(r.front.URL + "/?user=" + k)
					if err != nil {
						t.Errorf("round %d: GET %s: %v", round, k, err)
						bad.Add(1)
						continue
					}
					res.Body.Close()
					got, o := res.Header.Get("X-Backend"), ks.owner[k]
					if res.StatusCode != 200 || (o != "c" && got != o) || got == "" {
						if bad.Add(1) <= 5 {
							t.Errorf("round %d: key %s of %s: %d from %q", round, k, o, res.StatusCode, got)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	<-crashed
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed or moved", n, sent.Load())
	}
	if st := status(t, r.b, "c"); st.Available || st.Breaker != "open" {
		t.Fatalf("after the crash: %+v", st)
	}
	if v := r.metric(t, "ringlb_ejections_total", "upstream=c", "reason=breaker"); v != 1 {
		t.Errorf("ejections{c,breaker} = %v", v)
	}
	if v := r.metric(t, "ringlb_retries_total", "upstream=c"); v < 3 {
		t.Errorf("ringlb_retries_total{c} = %v, want >= 3", v)
	}
	ks.checkPlacement(t, r.b, "c")

	c.restart(t)
	r.clk.advance(5 * time.Second)
	if code, be := r.get(t, ks.by["c"][0]); code != 200 || be != "c" {
		t.Fatalf("trial after restart: %d from %q", code, be)
	}
	ks.checkPlacement(t, r.b)
	r.serveAll(t, ks)
	if n := r.logs.count("upstream unavailable", "upstream=c"); n != 1 {
		t.Errorf("%d 'upstream unavailable' lines, want 1", n)
	}
}

// TestHang: an upstream that accepts and never answers costs each GET one
// response_header timeout (then the request goes clockwise) until its
// breaker trips after exactly consecutive_failures of them.
func TestHang(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	hang := mustURL(t, "http://"+ln.Addr().String())
	r := newRig(t, 3, func(o *Options) {
		// Long enough that a healthy upstream under -race on a busy
		// machine never times out (a retry would serve its key elsewhere).
		o.Timeouts.ResponseHeader = 2 * time.Second
		o.Breaker.ConsecutiveFailures = 3
		o.Upstreams[2].URL, o.Upstreams[2].Addr = hang, hang.Host
	})
	ks := newKeyset(r.b, 1000)
	for i, k := range ks.by["c"][:3] {
		if !status(t, r.b, "c").Available {
			t.Fatalf("ejected after %d timeouts", i)
		}
		if code, be := r.get(t, k); code != 200 || be == "c" || be == "" {
			t.Fatalf("GET %d: %d from %q, want 200 from a survivor", i, code, be)
		}
	}
	if st := status(t, r.b, "c"); st.Available || st.Breaker != "open" {
		t.Fatalf("after 3 timeouts: %+v", st)
	}
	start := time.Now()
	r.serveAll(t, ks, "c")
	if n := accepted.Load(); n != 3 {
		t.Errorf("the hung upstream saw %d connections, want 3", n)
	}
	// A margin, not the promise (the connection count above is): 1000
	// requests under -race on a busy 2-core machine have taken 5 s, while
	// one that waited on c would add its 2 s response-header timeout.
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("serving with c ejected took %v", d)
	}
	ks.checkPlacement(t, r.b, "c")
	if v := r.metric(t, "ringlb_ejections_total", "upstream=c", "reason=breaker"); v != 1 {
		t.Errorf("ejections{c,breaker} = %v", v)
	}
}

// TestFailClosed: under on_unavailable fail, failures of an available
// owner answer 502 and feed its breaker, never retried elsewhere; once
// it is ejected its keys get 503, counted, and no other upstream ever
// sees them.
func TestFailClosed(t *testing.T) {
	dead := deadURL(t)
	r := newRig(t, 3, func(o *Options) {
		o.Ring.OnUnavailable = "fail"
		o.Breaker.ConsecutiveFailures = 2
		o.Upstreams[2].URL, o.Upstreams[2].Addr = dead, dead.Host
	})
	ks := newKeyset(r.b, 300)
	key := ks.by["c"][0]
	for i := range 2 {
		code, _, body := get(t, r.client, r.front.URL+"/?user="+key)
		if code != http.StatusBadGateway || !strings.Contains(body, "upstream c failed") {
			t.Fatalf("failure %d: %d %q, want 502", i+1, code, body)
		}
	}
	if st := status(t, r.b, "c"); st.Available || st.Breaker != "open" {
		t.Fatalf("after 2 failures: %+v", st)
	}
	for _, k := range ks.by["c"][:5] {
		code, _, body := get(t, r.client, r.front.URL+"/?user="+k)
		if code != http.StatusServiceUnavailable || body != "upstream c for this key is unavailable\n" {
			t.Errorf("key of the ejected owner: %d %q", code, body)
		}
	}
	if v := r.metric(t, "ringlb_no_upstream_total"); v != 5 {
		t.Errorf("ringlb_no_upstream_total = %v, want 5", v)
	}
	if n := r.bes["a"].hits.Load() + r.bes["b"].hits.Load(); n != 0 {
		t.Errorf("c's keys were served elsewhere %d times", n)
	}
	if lr := r.b.Lookup(key); lr.Chosen != "" {
		t.Errorf("lookup: chosen %q, want none", lr.Chosen)
	}
	for _, k := range append(ks.by["a"][:5], ks.by["b"][:5]...) {
		if code, be := r.get(t, k); code != 200 || be != ks.owner[k] {
			t.Errorf("key %s of %s: %d from %q", k, ks.owner[k], code, be)
		}
	}
}

// TestOpenPeriodEndsWithoutTraffic: on the real clock, a breaker whose
// open period is over shows half-open and its upstream available before
// any request arrives, so /debug/ring, /readyz and the metrics agree with
// /debug/lookup; the next request is the trial, and closes it.
func TestOpenPeriodEndsWithoutTraffic(t *testing.T) {
	r := newRig(t, 2, func(o *Options) {
		o.Breaker.ConsecutiveFailures = 1
		o.Breaker.OpenTimeout = 50 * time.Millisecond
		o.Breaker.MaxOpenTimeout = 50 * time.Millisecond
	})
	r.b.clk = systemClock{} // the timer that ends the period runs on real time
	ks := newKeyset(r.b, 200)
	a, key := r.bes["a"], ks.by["a"][0]
	a.status.Store(http.StatusBadGateway)
	if code, be := r.get(t, key); code != 502 || be != "a" {
		t.Fatalf("failure: %d from %q", code, be)
	}
	if st := status(t, r.b, "a"); st.Available || st.Breaker != "open" {
		t.Fatalf("after the failure: %+v", st)
	}
	a.status.Store(http.StatusOK)
	var st UpstreamStatus
	if !testenv.Poll(5*time.Second, func() bool { st = status(t, r.b, "a"); return st.Breaker == "half-open" && st.Available }) {
		t.Fatalf("open period over, no traffic: %+v, want half-open and available", st)
	}
	if v := r.metric(t, "ringlb_breaker_state", "upstream=a"); v != 1 {
		t.Errorf("ringlb_breaker_state = %v, want 1", v)
	}
	if hits := a.hits.Load(); hits != 1 {
		t.Errorf("a got %d requests before its trial, want 1", hits)
	}
	if code, be := r.get(t, key); code != 200 || be != "a" {
		t.Fatalf("trial: %d from %q", code, be)
	}
	if st := status(t, r.b, "a"); !st.Available || st.Breaker != "closed" {
		t.Errorf("after the trial: %+v", st)
	}
}

// writeDeadlineUpstream serves a large body (size bytes, Content-Length
// set) under a write deadline, as servers with a WriteTimeout or a
// send_timeout do: a reader slower than the deadline gets a cut body.
// stalled gets a value when a write to ringlb failed.
func writeDeadlineUpstream(t *testing.T, name string, deadline time.Duration, size int) (options.Upstream, <-chan struct{}) {
	t.Helper()
	stalled := make(chan struct{}, 16)
	chunk := make([]byte, 64<<10)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				stalled <- struct{}{}
				return
			}
		}
	}))
	srv.Config.WriteTimeout = deadline
	srv.Start()
	t.Cleanup(srv.Close)
	u := mustURL(t, srv.URL)
	return options.Upstream{Name: name, URL: u, Addr: u.Host, Weight: 1}, stalled
}

// TestSlowClientDoesNotChargeUpstream: a client that reads nothing for
// longer than the upstream's write deadline makes the upstream give up
// mid-body. That is the client's doing: the upstream's breaker must not
// count it (else anyone could eject any upstream by choosing its key and
// reading slowly). An upstream that breaks off while ringlb reads
// promptly is still charged.
func TestSlowClientDoesNotChargeUpstream(t *testing.T) {
	const size = 64 << 20 // far more than the socket buffers on the way
	// The deadline is long beside the time ringlb then takes to pass on
	// what the socket buffers hold (a few MiB: up to a few hundred ms on
	// a busy machine under -race), as a real write timeout is.
	a, stalled := writeDeadlineUpstream(t, "a", time.Second, size)
	be := newBackend(t, "b")
	opts := baseOptions(append([]options.Upstream{a}, upstreamsOf(t, be)...))
	opts.Ring.LoadFactor = 0
	opts.Breaker = breaker.Options{ConsecutiveFailures: 1, FailureStatuses: []int{502, 503, 504}, OpenTimeout: time.Minute}
	b, _, front := proxy(t, opts)
	key := keyOwnedBy(t, b, "a")

	for i := range 3 {
		conn, err := net.Dial("tcp", front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET /big?user=%s HTTP/1.1\r\nHost: x\r\n\r\n", key)
		select { // read nothing until the upstream gives up writing
		case <-stalled:
		case <-time.After(20 * time.Second):
			t.Fatal("the upstream never stalled")
		}
		n, _ := io.Copy(io.Discard, conn)
		conn.Close()
		if n >= size {
			t.Fatalf("slow client %d read %d bytes: the body was not cut", i, n)
		}
		if st := status(t, b, "a"); !st.Available || st.Breaker != "closed" {
			t.Fatalf("after slow client %d: %+v, want a available and closed", i, st)
		}
	}
	if lr := b.Lookup(key); lr.Chosen != "a" {
		t.Errorf("a's key goes to %q", lr.Chosen)
	}

	// An upstream that breaks off a body ringlb reads as it comes is
	// charged: its breaker opens.
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000000")
		w.Write(make([]byte, 64<<10))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	res, err := front.Client().Get(front.URL + "/big?user=" + keyOwnedBy(t, b, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, res.Body); err == nil {
		t.Fatal("b's cut body read to the end")
	}
	res.Body.Close()
	if st := status(t, b, "b"); st.Available || st.Breaker != "open" {
		t.Errorf("b broke off mid-body on its own: %+v, want its breaker open", st)
	}
}

// TestLongTrialSettlesOnHead: a half-open trial that is a long response
// (a stream, a download) settles on its head, so the rest of the
// upstream's keys come back at once instead of waiting, skipped, for the
// stream to end; a stream that then breaks off counts as an ordinary
// failure.
func TestLongTrialSettlesOnHead(t *testing.T) {
	a, other := newBackend(t, "a"), newBackend(t, "b")
	var failing atomic.Bool
	failing.Store(true)
	release := make(chan struct{})
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: hello\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			panic(http.ErrAbortHandler) // the stream breaks off
		}
		io.WriteString(w, "a")
	}
	opts := baseOptions(upstreamsOf(t, a, other))
	opts.Ring.LoadFactor = 0
	opts.Ring.OnUnavailable = "fail"
	opts.Breaker = breaker.Options{ConsecutiveFailures: 1, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 50 * time.Millisecond}
	b, _, front := proxy(t, opts)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	keys := []string{}
	for i := 0; len(keys) < 2; i++ {
		if k := fmt.Sprint("k", i); b.Lookup(k).Owner == "a" {
			keys = append(keys, k)
		}
	}
	if code, _, _ := get(t, c, front.URL+"/?user="+keys[0]); code != http.StatusBadGateway {
		t.Fatalf("failure: %d", code)
	}
	failing.Store(false)
	var st UpstreamStatus
	if !testenv.Poll(5*time.Second, func() bool { st = status(t, b, "a"); return st.Breaker == "half-open" }) {
		t.Fatalf("open period never ended: %+v", st)
	}
	res, err := c.Get(front.URL + "/stream?user=" + keys[0]) // the trial: returns with its head
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if st := status(t, b, "a"); !st.Available || st.Breaker != "closed" {
		t.Errorf("trial's head arrived: %+v, want closed", st)
	}
	if code, be, _ := get(t, c, front.URL+"/?user="+keys[1]); code != 200 || be != "a" {
		t.Errorf("another key of a while the trial streams: %d from %q, want 200 from a", code, be)
	}
	close(release)
	if _, err := io.Copy(io.Discard, res.Body); err == nil {
		t.Fatal("the broken stream read to the end")
	}
	// The break counts as an ordinary failure: one is enough here.
	if !testenv.Poll(5*time.Second, func() bool { st = status(t, b, "a"); return st.Breaker == "open" }) {
		t.Fatalf("the stream's break was not counted: %+v", st)
	}
}

// TestOpenPeriodEndsOnItsTimer: the timer set at a trip runs on the
// balancer's clock and ends the open period without traffic (half-open,
// available, nothing sent to the upstream); Close stops the timer of an
// open period still running.
func TestOpenPeriodEndsOnItsTimer(t *testing.T) {
	r := newRig(t, 2, func(o *Options) { o.Breaker.ConsecutiveFailures = 1 })
	ks := newKeyset(r.b, 200)
	a, key := r.bes["a"], ks.by["a"][0]
	a.status.Store(http.StatusBadGateway)
	if code, be := r.get(t, key); code != 502 || be != "a" {
		t.Fatalf("failure: %d from %q", code, be)
	}
	r.clk.advance(5*time.Second - 1)
	if n := r.clk.fire(); n != 0 {
		t.Fatalf("%d timers ran before the open period ended", n)
	}
	if st := status(t, r.b, "a"); st.Available || st.Breaker != "open" {
		t.Fatalf("1ns before the end: %+v, want open", st)
	}
	r.clk.advance(1)
	if n := r.clk.fire(); n != 1 {
		t.Fatalf("%d timers ran at the end of the open period, want 1", n)
	}
	if st := status(t, r.b, "a"); !st.Available || st.Breaker != "half-open" {
		t.Fatalf("open period over, no traffic: %+v, want half-open and available", st)
	}
	if hits := a.hits.Load(); hits != 1 {
		t.Errorf("a got %d requests, want 1", hits)
	}
	if code, be := r.get(t, key); code != 502 || be != "a" { // the trial fails
		t.Fatalf("trial: %d from %q", code, be)
	}
	if st := status(t, r.b, "a"); st.Available || st.Breaker != "open" {
		t.Fatalf("after the failed trial: %+v, want open", st)
	}
	if n := r.clk.pending(); n != 1 {
		t.Fatalf("%d timers pending, want the second open period's", n)
	}
	r.b.Close()
	if n := r.clk.pending(); n != 0 {
		t.Errorf("%d timers still pending after Close", n)
	}
}
