package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
)

// setupPools serves the admin handler of a router with pools sessions
// (upstreams a, b) and assets (a, c), routed by path.
func setupPools(t *testing.T) (*balancer.Router, *httptest.Server) {
	t.Helper()
	reg := balancer.NewRegistry()
	rt, err := balancer.NewRouter(reg)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(pool string, names ...string) *balancer.Balancer {
		var ups []balancer.UpstreamOptions
		for _, n := range names {
			u, _ := url.Parse("http://" + n + ".internal:8080")
			ups = append(ups, balancer.UpstreamOptions{Name: n, URL: u, Addr: u.Host, Weight: 1})
		}
		b, err := rt.NewPool(balancer.Options{
			Pool: pool, Upstreams: ups, Ring: balancer.RingOptions{PointsPerWeight: 160},
			Hash:     balancer.HashOptions{Key: []balancer.KeySource{{Kind: balancer.KeyHeader, Name: "X-User-ID"}}},
			Timeouts: balancer.TimeoutOptions{Dial: time.Second},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s, a := mk("sessions", "a", "b"), mk("assets", "a", "c")
	if err := rt.Install([]balancer.Route{{Host: "*.cdn.example", Pool: "assets"}, {PathPrefix: "/static/", Pool: "assets"}, {Pool: "sessions"}},
		[]*balancer.Balancer{s, a}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	srv := httptest.NewServer(NewRouterHandler(rt, reg, nil, Options{}))
	t.Cleanup(srv.Close)
	return rt, srv
}

func TestAdminPools(t *testing.T) {
	rt, srv := setupPools(t)
	for _, c := range []struct {
		path string
		code int
		want string // in the body
	}{
		{"/debug/ring", 400, "pool=NAME is required with several pools: sessions, assets"},
		{"/debug/ring?pool=nope", 404, `no pool \"nope\"`},
		{"/debug/ring?pool=assets", 200, `"name": "c"`},
		{"/debug/lookup?key=k1", 400, "host= and path="},
		{"/debug/lookup?pool=sessions&key=k1", 200, `"owner": "` + rt.Pool("sessions").Lookup("k1").Owner + `"`},
		{"/debug/lookup?host=img.cdn.example&path=/x&header=X-User-ID:%20u1", 200, `"owner": "` + rt.Pool("assets").Lookup("u1").Owner + `"`},
		{"/debug/lookup?path=/static/app.css&header=X-User-ID:%20u2", 200, `"owner": "` + rt.Pool("assets").Lookup("u2").Owner + `"`},
		{"/upstreams/a", 409, "is in pools assets, sessions: use /pools/POOL/upstreams/a"},
		{"/pools/assets/upstreams/c", 200, `"name": "c"`},
		{"/pools/sessions/upstreams/c", 404, `no upstream \"c\"`},
		{"/readyz", 200, "ready"},
	} {
		code, _, body := fetch(t, http.MethodGet, srv.URL+c.path)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %s\nwant %d with %s", c.path, code, body, c.code, c.want)
		}
	}
	code, _, body := fetch(t, http.MethodGet, srv.URL+"/upstreams")
	var ups struct {
		Pools map[string][]upstreamStateJSON `json:"pools"`
	}
	if err := json.Unmarshal([]byte(body), &ups); err != nil || code != 200 || len(ups.Pools["sessions"]) != 2 || len(ups.Pools["assets"]) != 2 {
		t.Errorf("/upstreams: %d %s", code, body)
	}
	code, _, body = fetch(t, http.MethodPost, srv.URL+"/pools/assets/upstreams/a/drain")
	if code != 200 || !strings.Contains(body, `"state": "drain"`) {
		t.Errorf("drain assets/a: %d %s", code, body)
	}
	if u, _ := rt.Pool("sessions").UpstreamState("a"); u.State != balancer.StateReady {
		t.Errorf("draining assets/a changed sessions/a to %s", u.State)
	}

	// The status page: the routes table, every pool, one pool's view.
	code, _, body = fetch(t, http.MethodGet, srv.URL+"/")
	for _, want := range []string{`<table id="routes">`, `*.cdn.example`, `href="?pool=assets"`, `pool sessions`, `id="req-host"`, `action="pools/sessions/upstreams/b/drain"`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("status page lacks %s", want)
		}
	}
	code, _, body = fetch(t, http.MethodGet, srv.URL+"/?pool=assets")
	if code != 200 || !strings.Contains(body, "pool assets") || !strings.Contains(body, `data-upstream="c"`) || strings.Contains(body, `data-upstream="b"`) {
		t.Errorf("status page of assets: %d", code)
	}
	if code, _, _ = fetch(t, http.MethodGet, srv.URL+"/?pool=nope"); code != 404 {
		t.Errorf("status page of an unknown pool: %d", code)
	}
}

// /readyz is 503 as soon as one pool with members has no available
// upstream, though the other pool still has all of its.
func TestAdminPoolsReadyz(t *testing.T) {
	rt, srv := setupPools(t)
	hr := rt.Pool("assets").HealthReporter()
	hr.SetHealthy("a", false, "test")
	if code, _, body := fetch(t, http.MethodGet, srv.URL+"/readyz"); code != 200 {
		t.Errorf("one assets upstream down: %d %s", code, body)
	}
	hr.SetHealthy("c", false, "test")
	if code, _, body := fetch(t, http.MethodGet, srv.URL+"/readyz"); code != 503 || body != "no upstream available in pool assets\n" {
		t.Errorf("every assets upstream down, sessions up: %d %q", code, body)
	}
	hr.SetHealthy("c", true, "")
	if code, _, body := fetch(t, http.MethodGet, srv.URL+"/readyz"); code != 200 {
		t.Errorf("assets back: %d %s", code, body)
	}
}
