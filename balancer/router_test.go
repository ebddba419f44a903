package balancer

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/route"
)

// newRouter builds a Router over pools (each opts.Pool names its pool) and
// routes, serving it over loopback.
func newRouter(t testing.TB, routes []route.Route, pools ...Options) (*Router, *httptest.Server) {
	t.Helper()
	reg := metrics.NewRegistry()
	rt, err := NewRouter(reg)
	if err != nil {
		t.Fatal(err)
	}
	var bs []*Balancer
	for _, o := range pools {
		b, err := rt.NewPool(o, nil)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	if err := rt.Install(routes, bs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	front := httptest.NewServer(rt)
	t.Cleanup(front.Close)
	return rt, front
}

func TestRouteMatch(t *testing.T) {
	routes := []route.Route{
		{Host: "App.Example", PathPrefix: "/api", Pool: "api"},
		{Host: "*.cdn.example", Pool: "cdn"},
		{PathPrefix: "/static/", Pool: "static"},
		{Host: "app.example", PathPrefix: "/api/v2", Pool: "never"}, // shadowed: first match wins
		{Host: "::1", Pool: "v6"},
		{Host: "exact.example", Pool: "exact"},
	}
	var pools []Options
	for _, p := range []string{"api", "cdn", "static", "never", "v6", "exact"} {
		o := baseOptions([]options.Upstream{{Name: "x", URL: mustURL(t, "http://127.0.0.1:1"), Weight: 1}})
		o.Pool = p
		pools = append(pools, o)
	}
	rt, _ := newRouter(t, routes, pools...)
	for _, c := range []struct{ host, path, want string }{
		{"app.example", "/api", "api"},
		{"APP.EXAMPLE:8443", "/api/", "api"},
		{"app.example.", "/api/v2/x", "api"},
		{"app.example", "/apix", ""},
		{"app.example", "/", ""},
		{"a.cdn.example", "/x", "cdn"},
		{"A.B.CDN.example:80", "/", "cdn"},
		{"cdn.example", "/x", ""},
		{"xcdn.example", "/x", ""},
		{"any", "/static/a.css", "static"},
		{"any", "/static/", "static"},
		{"any", "/static", ""},
		{"[::1]:8080", "/", "v6"},
		{"exact.example", "/anything", "exact"},
		{"exact.example.org", "/", ""},
		{"", "/static/x", "static"},
	} {
		got := ""
		if b, _ := rt.Match(c.host, c.path); b != nil {
			got = b.Pool()
		}
		if got != c.want {
			t.Errorf("Match(%q, %q) = %q, want %q", c.host, c.path, got, c.want)
		}
	}
	if got := rt.Routes(); len(got) != len(routes) || got[0].Host != "app.example" || got[1].Host != "*.cdn.example" {
		t.Errorf("Routes() = %+v", got)
	}
}

// Over HTTP: each pool's upstreams get its requests, an unmatched request
// gets 404 counted in ringlb_no_route_total, and two pools with equal
// memberships place every key alike.
func TestRouterServeHTTP(t *testing.T) {
	a1, a2, b1, b2 := newBackend(t, "x"), newBackend(t, "y"), newBackend(t, "x"), newBackend(t, "y")
	pa, pb := baseOptions(upstreamsOf(t, a1, a2)), baseOptions(upstreamsOf(t, b1, b2))
	pa.Pool, pb.Pool = "a", "b"
	reg := metrics.NewRegistry()
	rt, err := NewRouter(reg)
	if err != nil {
		t.Fatal(err)
	}
	ba, err := rt.NewPool(pa, nil)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := rt.NewPool(pb, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Install([]route.Route{{PathPrefix: "/a", Pool: "a"}, {PathPrefix: "/b", Pool: "b"}}, []*Balancer{ba, bb}); err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	front := httptest.NewServer(rt)
	defer front.Close()
	if ba.Version() != bb.Version() {
		t.Errorf("equal memberships, versions %s and %s", ba.Version(), bb.Version())
	}
	for i := range 40 {
		key := fmt.Sprint("user-", i)
		_, inA, _ := get(t, front.Client(), front.URL+"/a/x", "X-User-ID", key)
		_, inB, _ := get(t, front.Client(), front.URL+"/b/x", "X-User-ID", key)
		if inA != inB || inA != ba.Lookup(key).Owner {
			t.Errorf("key %s: pool a sent it to %s, pool b to %s", key, inA, inB)
		}
	}
	if a1.hits.Load()+a2.hits.Load() != 40 || b1.hits.Load()+b2.hits.Load() != 40 {
		t.Errorf("hits: a %d+%d, b %d+%d", a1.hits.Load(), a2.hits.Load(), b1.hits.Load(), b2.hits.Load())
	}
	code, _, body := get(t, front.Client(), front.URL+"/c")
	if code != http.StatusNotFound || body != "no route for this host and path\n" {
		t.Errorf("unrouted: %d %q", code, body)
	}
	if v := metric(t, reg, "ringlb_no_route_total"); v != 1 {
		t.Errorf("ringlb_no_route_total = %v", v)
	}
	if v := metric(t, reg, "ringlb_requests_total", "pool=b", "upstream=x", "code=200"); v < 1 {
		t.Errorf("ringlb_requests_total{pool=b,upstream=x} = %v", v)
	}
	if !rt.Ready() {
		t.Error("not ready with every upstream up")
	}
	if ba.counts != bb.counts || ba.counts != rt.counts {
		t.Error("the pools do not count upstream requests together (limits.upstream_requests)")
	}
	// Remove drops a pool's series.
	if err := rt.Install([]route.Route{{Pool: "a"}}, []*Balancer{ba}); err != nil {
		t.Fatal(err)
	}
	rt.Remove(bb)
	if v := metric(t, reg, "ringlb_requests_total", "pool=b"); v != -1 {
		t.Errorf("removed pool b still has requests_total: %v", v)
	}
}

// benchRoutes is n host routes of which the request matches the last.
func benchRoutes(tb testing.TB, n int) (*Router, string) {
	var routes []route.Route
	o := baseOptions([]options.Upstream{{Name: "x", URL: mustURL(tb, "http://127.0.0.1:1"), Weight: 1}})
	o.Pool = "p"
	for i := range n - 1 {
		host := fmt.Sprintf("service-%d.example.com", i)
		if i%3 == 0 {
			host = fmt.Sprintf("*.zone-%d.example.com", i)
		}
		routes = append(routes, route.Route{Host: host, PathPrefix: fmt.Sprintf("/v%d", i), Pool: "p"})
	}
	routes = append(routes, route.Route{Host: "shop.example.com", PathPrefix: "/api", Pool: "p"})
	rt, err := NewRouter(nil)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := rt.NewPool(o, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Close)
	if err := rt.Install(routes, []*Balancer{b}); err != nil {
		tb.Fatal(err)
	}
	return rt, "Shop.Example.com:8080"
}

// BenchmarkRouteMatch walks 100 routes (host and path prefix, a third of
// them wildcards) to match the last: the worst case. It must report 0
// allocs/op.
func BenchmarkRouteMatch(b *testing.B) {
	rt, host := benchRoutes(b, 100)
	b.ReportAllocs()
	for b.Loop() {
		if p, _ := rt.Match(host, "/api/cart"); p == nil {
			b.Fatal("no match")
		}
	}
}

func TestRouteMatchAllocs(t *testing.T) {
	rt, host := benchRoutes(t, 100)
	if n := testing.AllocsPerRun(100, func() { rt.Match(host, "/api/cart") }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
}

// BenchmarkRouteMatchDotSegments is BenchmarkRouteMatch for a path with a
// dot segment to remove: the one copy RoutePath makes.
func BenchmarkRouteMatchDotSegments(b *testing.B) {
	rt, host := benchRoutes(b, 100)
	b.ReportAllocs()
	for b.Loop() {
		if p, _ := rt.Match(host, "/x/../api/cart"); p == nil {
			b.Fatal("no match")
		}
	}
}

// A path with nothing to clean is not copied; Match refuses what RoutePath
// refuses.
func TestRoutePathAllocs(t *testing.T) {
	for _, p := range []string{"/api/cart", "/.well-known/acme-challenge/x", "/static/v1.2/app.js", "/"} {
		if n := testing.AllocsPerRun(100, func() { route.Path(p) }); n != 0 {
			t.Errorf("route.Path(%q) allocates %v times", p, n)
		}
	}
	rt, host := benchRoutes(t, 100)
	if b, err := rt.Match(host, "/x/../api/cart"); b == nil || err != nil {
		t.Errorf("Match(/x/../api/cart) = %v, %v", b, err)
	}
	if b, err := rt.Match(host, "/../api/cart"); b != nil || err != route.ErrPathAboveRoot {
		t.Errorf("Match(/../api/cart) = %v, %v; want nil, ErrPathAboveRoot", b, err)
	}
}
