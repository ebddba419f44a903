package balancer

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/inflight"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/route"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
	"github.com/ringlb/ringlb/ring"
)

// TestUpstreamRequestsAcrossBalancers gives two Balancers (two pools) one
// inflight.Counts and the same upstream, limited to 2 requests in flight:
// one request held through each fills it, so a third, through either,
// gets 503 "upstream busy". URLs that differ only in case or a default
// port written out are one upstream.
func TestUpstreamRequestsAcrossBalancers(t *testing.T) {
	be := newBackend(t, "a")
	release := make(chan struct{})
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-release
		}
		w.Write([]byte("ok"))
	}
	counts := inflight.NewCounts()
	opts := baseOptions(upstreamsOf(t, be))
	opts.Limits = options.Limits{UpstreamRequests: 2}
	opts.Counts = counts
	b1, reg1, f1 := proxy(t, opts)
	_, _, f2 := proxy(t, opts)
	c := &http.Client{Timeout: 20 * time.Second}
	target := mustURL(t, be.srv.URL)

	var wg sync.WaitGroup
	for _, f := range []string{f1.URL, f2.URL} {
		wg.Go(func() {
			if code, _, _ := get(t, c, f+"/block"); code != 200 {
				t.Errorf("held request: %d", code)
			}
		})
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := counts.InFlight(target); n != 2 {
			return fmt.Errorf("%d requests in flight to the upstream, want 2", n)
		}
		return nil
	})
	for _, f := range []string{f1.URL, f2.URL} {
		if code, _, body := get(t, c, f+"/"); code != http.StatusServiceUnavailable || body != "upstream busy\n" {
			t.Errorf("third request through %s: %d %q, want 503 \"upstream busy\\n\"", f, code, body)
		}
	}
	if v := metric(t, reg1, "ringlb_limited_total", "upstream=a"); v != 1 {
		t.Errorf("ringlb_limited_total of the first pool = %v, want 1", v)
	}
	lr := b1.Lookup("k")
	if lr.Chosen != "" || !hasSkip(lr, "a", ring.Busy) {
		t.Errorf("Lookup while busy: chosen %q, skipped %+v; want none and a busy", lr.Chosen, lr.Skipped)
	}

	// The same upstream spelled otherwise is the same count.
	spelled := *target
	spelled.Scheme = "HTTP"
	spelled.Host = target.Host
	if n := counts.InFlight(&spelled); n != 2 {
		t.Errorf("InFlight(%v) = %d, want 2: the same upstream as %v", &spelled, n, target)
	}
	if inflight.Key(mustURL(t, "http://h.example")) != inflight.Key(mustURL(t, "http://H.example:80")) {
		t.Error("http://h.example and http://H.example:80 are counted apart")
	}

	close(release)
	wg.Wait()
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := counts.InFlight(target); n != 0 {
			return fmt.Errorf("%d requests in flight after release, want 0", n)
		}
		return nil
	})
	if code, _, _ := get(t, c, f2.URL+"/"); code != 200 {
		t.Errorf("after release: %d, want 200", code)
	}
}

// TestUpstreamRequestsAcrossPools: two pools of one Router share an
// upstream limited to 1 request in flight; one held through the first
// pool makes the second pool's request for it get 503 "upstream busy".
func TestUpstreamRequestsAcrossPools(t *testing.T) {
	be := newBackend(t, "a")
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the backend's Close in cleanup order
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/one/block" {
			<-release
		}
		w.Write([]byte("ok"))
	}
	rt, err := NewRouter(metrics.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	var pools []*Balancer
	for _, name := range []string{"one", "two"} {
		opts := baseOptions(upstreamsOf(t, be))
		opts.Pool = name
		opts.Limits = options.Limits{UpstreamRequests: 1}
		b, err := rt.NewPool(opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		pools = append(pools, b)
	}
	if err := rt.Install([]route.Route{{PathPrefix: "/one", Pool: "one"}, {PathPrefix: "/two", Pool: "two"}}, pools); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(rt)
	t.Cleanup(front.Close)
	c := &http.Client{Timeout: 20 * time.Second}
	done := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, front.URL+"/one/block")
		done <- code
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := be.hits.Load(); n != 1 {
			return fmt.Errorf("%d requests reached the upstream, want 1", n)
		}
		return nil
	})
	if code, _, body := get(t, c, front.URL+"/two/x"); code != http.StatusServiceUnavailable || body != "upstream busy\n" {
		t.Errorf("pool two while pool one holds the upstream: %d %q, want 503 upstream busy", code, body)
	}
	free()
	if code := <-done; code != 200 {
		t.Errorf("held request: %d", code)
	}
	if code, _, _ := get(t, c, front.URL+"/two/x"); code != 200 {
		t.Errorf("pool two after release: %d, want 200", code)
	}
}
