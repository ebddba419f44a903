package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/route"
	"github.com/ringlb/ringlb/balancer/state"
)

// setupPools serves the admin handler of a router with pools sessions
// (upstreams a, b) and assets (a, c), routed by host and path.
func setupPools(t *testing.T) (*balancer.Router, *httptest.Server) {
	t.Helper()
	rt, reg, _ := poolsRouter(t)
	srv := httptest.NewServer(NewRouterHandler(rt, reg, nil, Options{}))
	t.Cleanup(srv.Close)
	return rt, srv
}

// poolsRouter is setupPools' router and registry, and the options of a
// pool of that router with upstreams names (http://NAME.internal:8080).
func poolsRouter(t *testing.T) (*balancer.Router, *prometheus.Registry, func(pool string, names ...string) balancer.Options) {
	t.Helper()
	reg := metrics.NewRegistry()
	rt, err := balancer.NewRouter(reg)
	if err != nil {
		t.Fatal(err)
	}
	optsOf := func(pool string, names ...string) balancer.Options {
		var ups []options.Upstream
		for _, n := range names {
			u, _ := url.Parse("http://" + n + ".internal:8080")
			ups = append(ups, options.Upstream{Name: n, URL: u, Addr: u.Host, Weight: 1})
		}
		return balancer.Options{
			Pool: pool,
			PoolOptions: balancer.PoolOptions{
				Upstreams: ups,
				Ring:      options.Ring{PointsPerWeight: 160},
				Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}},
				Timeouts:  options.Timeouts{Dial: time.Second},
			},
		}
	}
	mk := func(pool string, names ...string) *balancer.Balancer {
		b, err := rt.NewPool(optsOf(pool, names...), nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s, a := mk("sessions", "a", "b"), mk("assets", "a", "c")
	if err := rt.Install([]route.Route{{Host: "*.cdn.example", Pool: "assets"}, {PathPrefix: "/static/", Pool: "assets"}, {Pool: "sessions"}},
		[]*balancer.Balancer{s, a}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return rt, reg, optsOf
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
		// Routes read the path as the proxy does: decoded, dot segments
		// removed (the query escapes the path's own %).
		{"/debug/lookup?path=/%2573tatic/app.css&header=X-User-ID:%20u2", 200, `"pool": "assets"`},
		{"/debug/lookup?path=/static/..%252Fsecret&header=X-User-ID:%20u2", 200, `"pool": "sessions"`},
		{"/debug/lookup?path=/static/../../secret", 400, `climb above the root; the proxy answers such a request 400`},
		{"/debug/lookup?path=/static/%25zz", 400, `path: parse`},
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
	if u, _ := rt.Pool("sessions").UpstreamState("a"); u.State != state.Ready {
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

// The status page with several pools: the routes come first, then one
// section per pool, each with its own upstreams, ring, version and
// buttons posting to its pool; its request lookup form takes a host, a
// path and a key, and what it asks names the pool the routes pick.
func TestStatusPagePools(t *testing.T) {
	rt, srv := setupPools(t)
	code, _, body := fetch(t, http.MethodGet, srv.URL+"/")
	if code != 200 {
		t.Fatalf("GET /: %d", code)
	}
	routes := strings.Index(body, `<table id="routes">`)
	sections := regexp.MustCompile(`<section class="pool" id="pool-[a-z]+" data-pool="([a-z]+)" data-id="([^"]*)" data-version="([^"]*)"`).FindAllStringSubmatchIndex(body, -1)
	if routes < 0 || len(sections) != 2 || sections[0][0] < routes {
		t.Fatalf("routes table at %d, %d sections %v: want the routes, then two sections", routes, len(sections), sections)
	}
	for i, want := range []struct {
		pool, has, hasNot string
	}{{"sessions", "b", "c"}, {"assets", "c", "b"}} {
		m, end := sections[i], strings.Index(body, "</main>")
		if i+1 < len(sections) {
			end = sections[i+1][0]
		}
		sec, pool, id, version := body[m[0]:end], body[m[2]:m[3]], body[m[4]:m[5]], body[m[6]:m[7]]
		b := rt.Pool(want.pool)
		if pool != want.pool || version != b.Version() {
			t.Errorf("section %d: pool %s version %s, want %s %s", i, pool, version, want.pool, b.Version())
		}
		for _, s := range []string{
			`<svg id="` + id + `ring"`,
			`id="` + id + `arc-0" data-upstream="a"`,
			`<tr class="up available" id="` + id + `row-0" data-upstream="a">`,
			`action="pools/` + want.pool + `/upstreams/a/maint"`,
			`action="pools/` + want.pool + `/upstreams/` + want.has + `/drain"`,
			`<table id="` + id + `hotkeys">`,
			`<dd id="` + id + `key-sources">header X-User-ID · on_missing: random</dd>`,
		} {
			if !strings.Contains(sec, s) {
				t.Errorf("section of %s lacks %s", want.pool, s)
			}
		}
		if strings.Contains(sec, `data-upstream="`+want.hasNot+`"`) {
			t.Errorf("section of %s shows %s", want.pool, want.hasNot)
		}
	}
	if n := strings.Count(body, `id="request-form"`); n != 1 {
		t.Errorf("%d request forms, want 1", n)
	}

	// The lookup form, as a browser without JavaScript sends it: every
	// field, the empty ones too.
	form := regexp.MustCompile(`(?s)<form id="request-form" method="get" action="([^"]+)".*?</form>`).FindStringSubmatch(body)
	if form == nil {
		t.Fatal("no request lookup form")
	}
	var fields []string
	for _, m := range regexp.MustCompile(`name="([a-z]+)"`).FindAllStringSubmatch(form[0], -1) {
		fields = append(fields, m[1])
	}
	if !slices.Equal(fields, []string{"host", "path", "key", "header", "cookie"}) {
		t.Errorf("lookup form fields %v", fields)
	}
	submit := func(host, path, key, header string) map[string]any {
		t.Helper()
		q := url.Values{"host": {host}, "path": {path}, "key": {key}, "header": {header}, "cookie": {""}}
		code, _, body := fetch(t, http.MethodGet, srv.URL+"/"+form[1]+"?"+q.Encode())
		if code != 200 {
			t.Fatalf("lookup form host %q path %q key %q: %d %s", host, path, key, code, body)
		}
		return decode(t, body)
	}
	for _, c := range []struct {
		host, path, key, header, pool, ownerOf string
	}{
		{"img.cdn.example", "/x", "u1", "", "assets", "u1"},
		{"app.example", "/static/a.css", "u2", "", "assets", "u2"},
		{"app.example", "/cart", "u3", "", "sessions", "u3"},
		{"app.example", "/cart", "", "X-User-ID: u4", "sessions", "u4"},
		{"", "/static/b.css", "", "X-User-ID: u5", "assets", "u5"},
	} {
		m := submit(c.host, c.path, c.key, c.header)
		if want := rt.Pool(c.pool).Lookup(c.ownerOf).Owner; m["pool"] != c.pool || m["owner"] != want || m["key"] != c.ownerOf {
			t.Errorf("host %q path %q key %q header %q: %v, want pool %s owner %s", c.host, c.path, c.key, c.header, m, c.pool, want)
		}
	}

	// One pool's view: its section only, under the same routes.
	code, _, body = fetch(t, http.MethodGet, srv.URL+"/?pool=assets")
	if code != 200 || strings.Count(body, `<section class="pool"`) != 1 || !strings.Contains(body, `data-pool="assets"`) ||
		!strings.Contains(body, `<table id="routes">`) || !strings.Contains(body, `data-pool-shown="assets"`) {
		t.Errorf("/?pool=assets: %d, want the assets section alone", code)
	}
}
