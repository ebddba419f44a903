package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/redistest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// With hold on, /debug/lookup's "held" names the upstream a key in use is
// held on after a membership change (null for a key never served), and
// the status page shows the held keys and the held share of requests.
func TestHoldLookupAndStatus(t *testing.T) {
	var ups []options.Upstream
	for _, n := range []string{"a", "b", "c", "d"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, n) }))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		ups = append(ups, options.Upstream{Name: n, URL: u, Addr: u.Host, Weight: 1})
	}
	opts := balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: ups[:3],
			Ring:      options.Ring{PointsPerWeight: 160},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}, OnMissing: options.OnMissingReject},
			Timeouts:  options.Timeouts{Dial: time.Second},
			Hold:      hold.Options{Idle: time.Hour, MaxKeys: 1000},
		},
	}
	reg := metrics.NewRegistry()
	b, err := balancer.New(opts, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front := httptest.NewServer(b)
	t.Cleanup(front.Close)
	admin := httptest.NewServer(NewHandler(b, reg, nil, Options{}))
	t.Cleanup(admin.Close)

	served := map[string]string{}
	for i := range 100 {
		k := fmt.Sprint("user-", i)
		req, _ := http.NewRequest(http.MethodGet, front.URL, nil)
		req.Header.Set("X-User-ID", k)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		served[k] = string(body)
	}
	opts.Upstreams = ups
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	moved := ""
	for k, where := range served {
		_, _, body := fetch(t, http.MethodGet, admin.URL+"/debug/lookup?key="+k)
		m := decode(t, body)
		if m["held"] != where {
			t.Fatalf("key %s served by %s: held %v", k, where, m["held"])
		}
		if m["owner"] == "d" {
			moved = k
		}
	}
	if moved == "" {
		t.Fatal("no key moves to d")
	}
	_, _, body := fetch(t, http.MethodGet, admin.URL+"/debug/lookup?key=never-seen")
	if m := decode(t, body); m["held"] != nil {
		t.Errorf("a key never served: held %v, want null", m["held"])
	}

	// One request for the moved key: held, 1 of 101 requests.
	req, _ := http.NewRequest(http.MethodGet, front.URL, nil)
	req.Header.Set("X-User-ID", moved)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	_, _, page := fetch(t, http.MethodGet, admin.URL+"/")
	line := regexp.MustCompile(`<dd id="hold">(.*?)</dd>`).FindStringSubmatch(page)
	if line == nil || regexp.MustCompile(`<[^>]*>`).ReplaceAllString(line[1], "") != "idle 1h0m0s · 100 keys held · 1.0% of requests held" {
		t.Errorf("status page hold line %q", line)
	}
}

// With hold.share on, the status page says where the store is, whether it
// answers, and what went through it; a store that stops answering shows.
func TestHoldShareStatus(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	_, front, admin := serveKeyed(t, options.OnMissingReject, hold.Options{Idle: time.Hour, MaxKeys: 1000,
		Share: share.Options{Redis: srv.URL(), Prefix: "st:", Timeout: 2 * time.Second}}, "a")
	get := func(k string) {
		req, _ := http.NewRequest(http.MethodGet, front.URL, nil)
		req.Header.Set("X-User-ID", k)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	shareLine := func() string {
		_, _, page := fetch(t, http.MethodGet, admin.URL+"/")
		m := regexp.MustCompile(`<dd id="hold-share">(.*?)</dd>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no hold share line on the status page")
		}
		return regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], "")
	}
	get("user-1")
	get("user-2")
	testenv.Eventually(t, 20*time.Second, func() error {
		if l, want := shareLine(), srv.Addr()+" · reachable · lookups 0 found, 2 none, 0 failed · 2 written, 0 queued, 0 dropped"; l != want {
			return fmt.Errorf("hold share line %q, want %q", l, want)
		}
		return nil
	})
	srv.Stop()
	get("user-3")
	if l := shareLine(); !regexp.MustCompile(`^127\.0\.0\.1:\d+ · unreachable, retrying .* · lookups 0 found, 2 none, 1 failed · `).MatchString(l) {
		t.Errorf("hold share line with the store down: %q", l)
	}
}
