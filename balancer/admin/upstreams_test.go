package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/state"
)

// stateProxy serves a Balancer with hold on in front of real backends a,
// b and c, and its admin handler (answering Host 127.0.0.1:9901).
func stateProxy(t *testing.T) (*balancer.Balancer, *httptest.Server, *httptest.Server) {
	t.Helper()
	var ups []options.Upstream
	for _, n := range []string{"a", "b", "c"} {
		be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Backend", n)
			io.WriteString(w, n)
		}))
		t.Cleanup(be.Close)
		u := mustParse(t, be.URL)
		ups = append(ups, options.Upstream{Name: n, URL: u, Addr: u.Host, Weight: 1})
	}
	reg := metrics.NewRegistry()
	b, err := balancer.New(balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: ups,
			Ring:      options.Ring{PointsPerWeight: 160},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}, OnMissing: options.OnMissingReject},
			Timeouts:  options.Timeouts{Dial: time.Second},
			Hold:      hold.Options{Idle: time.Hour, MaxKeys: 1000},
		},
	}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front := httptest.NewServer(b)
	t.Cleanup(front.Close)
	adm := httptest.NewServer(NewHandler(b, reg, nil, Options{Addr: "127.0.0.1:9901"}))
	t.Cleanup(adm.Close)
	return b, front, adm
}

// call sends method path to the admin server with Host 127.0.0.1:9901
// (and origin, if any) and returns the status and the body.
func call(t *testing.T, adm *httptest.Server, method, path, origin string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, adm.URL+path, nil)
	req.Host = "127.0.0.1:9901"
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return res.StatusCode, string(body)
}

// The admin API: the list's shape and fields, one upstream, the three
// POSTs (and what they do to requests), and its errors: 404 for an
// unknown name, 400 for another state word, 405 for a GET of a state
// route, 403 for a foreign Host or Origin.
func TestUpstreamsAPI(t *testing.T) {
	b, front, adm := stateProxy(t)

	// Serve one key per upstream, so each holds one.
	owned := map[string]string{}
	for i := 0; len(owned) < 3 && i < 1000; i++ {
		k := "user-" + string(rune('A'+i%26)) + strings.Repeat("x", i/26)
		if o := b.Lookup(k).Owner; owned[o] == "" {
			owned[o] = k
			req, _ := http.NewRequest(http.MethodGet, front.URL+"/", nil)
			req.Header.Set("X-User-ID", k)
			res, err := front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}

	code, body := call(t, adm, http.MethodGet, "/upstreams", "")
	if code != http.StatusOK {
		t.Fatalf("GET /upstreams: %d %s", code, body)
	}
	top := decode(t, body)
	if got := keys(top); !slices.Equal(got, []string{"pools"}) {
		t.Fatalf("top-level keys %v", got)
	}
	pools := top["pools"].(map[string]any)
	if got := keys(pools); !slices.Equal(got, []string{"default"}) {
		t.Fatalf("pools %v", got)
	}
	list := pools["default"].([]any)
	if len(list) != 3 {
		t.Fatalf("%d upstreams: %s", len(list), body)
	}
	want := []string{"available", "drained", "held_keys", "hold", "inflight", "name", "source", "state", "tunnels"}
	for i, x := range list {
		u := x.(map[string]any)
		if got := keys(u); !slices.Equal(got, want) {
			t.Errorf("upstream keys %v, want %v", got, want)
		}
		if u["name"] != []string{"a", "b", "c"}[i] || u["state"] != "ready" || u["available"] != true ||
			u["held_keys"] != 1.0 || u["inflight"] != 0.0 || u["tunnels"] != 0.0 || u["drained"] != false || u["source"] != "static" || u["hold"] != true {
			t.Errorf("upstream %v", u)
		}
	}

	code, body = call(t, adm, http.MethodGet, "/upstreams/b", "")
	if u := decode(t, body); code != 200 || u["name"] != "b" || u["state"] != "ready" {
		t.Errorf("GET /upstreams/b: %d %s", code, body)
	}

	// drain: the held key stays, not drained while it is held.
	code, body = call(t, adm, http.MethodPost, "/upstreams/b/drain", "")
	if u := decode(t, body); code != 200 || u["state"] != "drain" || u["held_keys"] != 1.0 || u["drained"] != false {
		t.Errorf("POST /upstreams/b/drain: %d %s", code, body)
	}
	if lr := b.Lookup(owned["b"]); lr.Held != "b" {
		t.Errorf("b's held key after drain: %+v", lr)
	}
	// maint: the held key leaves too; ready brings it home.
	code, body = call(t, adm, http.MethodPost, "/upstreams/b/maint", "http://127.0.0.1:9901")
	if u := decode(t, body); code != 200 || u["state"] != "maint" {
		t.Errorf("POST /upstreams/b/maint (same Origin): %d %s", code, body)
	}
	if lr := b.Lookup(owned["b"]); lr.Chosen == "b" || lr.Held != "" {
		t.Errorf("b's key in maint: %+v", lr)
	}
	code, body = call(t, adm, http.MethodPost, "/upstreams/b/ready", "")
	if u := decode(t, body); code != 200 || u["state"] != "ready" {
		t.Errorf("POST /upstreams/b/ready: %d %s", code, body)
	}
	if lr := b.Lookup(owned["b"]); lr.Chosen != "b" {
		t.Errorf("b's key after ready: %+v", lr)
	}
	code, body = call(t, adm, http.MethodGet, "/debug/ring", "")
	if !strings.Contains(body, `"state": "ready"`) || code != 200 {
		t.Errorf("/debug/ring: %d %s", code, body)
	}

	for _, c := range []struct {
		method, path, origin string
		want                 int
		says                 string
	}{
		{http.MethodGet, "/upstreams/nope", "", 404, `no upstream \"nope\"`},
		{http.MethodPost, "/upstreams/nope/drain", "", 404, `no upstream \"nope\"`},
		{http.MethodPost, "/upstreams/b/disable", "", 400, `state \"disable\" is not drain, maint or ready`},
		{http.MethodPost, "/upstreams/b/Drain", "", 400, "is not drain, maint or ready"},
		{http.MethodPost, "/upstreams/b/drain", "https://evil.example", 403, "cross-site request refused"},
		{http.MethodPost, "/upstreams/b/drain", "null", 403, "cross-site request refused"},
	} {
		code, body := call(t, adm, c.method, c.path, c.origin)
		if code != c.want || !strings.Contains(body, c.says) {
			t.Errorf("%s %s Origin %q: %d %s, want %d saying %s", c.method, c.path, c.origin, code, body, c.want, c.says)
		}
	}
	// A foreign Host, as DNS rebinding would send.
	req, _ := http.NewRequest(http.MethodPost, adm.URL+"/upstreams/b/drain", nil)
	req.Host = "rebind.attacker.example:9901"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("POST with a foreign Host: %d", res.StatusCode)
	}
	req, _ = http.NewRequest(http.MethodGet, adm.URL+"/upstreams/b/drain", nil)
	req.Host = "127.0.0.1:9901"
	if res, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET of a state route: %d, want 405", res.StatusCode)
	}
	if u, _ := b.UpstreamState("b"); u.State != state.Ready {
		t.Errorf("refused requests changed b's state to %v", u.State)
	}
}

// Names with characters a client escapes are found.
func TestUpstreamsAPIEscapedName(t *testing.T) {
	u := mustParse(t, "http://[::1]:8080")
	reg := metrics.NewRegistry()
	b, err := balancer.New(balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: []options.Upstream{{Name: "[::1]:8080", URL: u, Addr: u.Host, Weight: 1}},
			Ring:      options.Ring{PointsPerWeight: 160},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.URI}}},
		},
	}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	adm := httptest.NewServer(NewHandler(b, reg, nil, Options{}))
	t.Cleanup(adm.Close)
	code, body := call(t, adm, http.MethodPost, "/upstreams/%5B::1%5D:8080/drain", "")
	if u := decode(t, body); code != 200 || u["name"] != "[::1]:8080" || u["state"] != "drain" {
		t.Errorf("%d %s", code, body)
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
