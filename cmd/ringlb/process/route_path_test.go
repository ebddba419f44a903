package process

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/nginxtest"
)

// routePaths are request targets whose path routes must read as nginx's
// locations do, with the verdict for two pools and no catch-all:
// /static/ (assets) and /api (api, whole segments), else 404; 400 for a
// bad encoding, a NUL, or dot segments that climb above the root. Each
// verdict is nginx 1.22's for the equivalent server (see
// TestRoutePathsAsNginx).
var routePaths = []struct{ target, want string }{
	{"/static/a", "assets"},
	// Out of /static/ by dot segments, plain or encoded: nginx 404.
	{"/static/../secret", "404"},
	{"/static/%2e%2e/secret", "404"},
	{"/static/%2E%2E/secret", "404"},
	{"/static/..%2fsecret", "404"},
	{"/static/..%2Fsecret", "404"},
	{"/static/a/../../secret", "404"},
	{"/static/a/..%2f..%2fsecret", "404"},
	{"/static%2f%2e%2e/secret", "404"},
	{"/static/..", "404"},
	{"/static/%2e%2e", "404"},
	{"http://x/static/../secret", "404"},
	// Into /static/ once decoded and cleaned.
	{"/%73tatic/a", "assets"},
	{"/static%2fa", "assets"},
	{"/static%2Fa", "assets"},
	{"//static/a", "assets"},
	{"/static//a", "assets"},
	{"/static/%2F%2Fa", "assets"},
	{"/x/..//static/a", "assets"},
	{"/./static/a", "assets"},
	{"/static/./a", "assets"},
	{"/static/.", "assets"},
	{"/static/%2e", "assets"},
	{"/static/a/..", "assets"},
	{"/static/a/%2e./x", "assets"},
	{"/api/../static/a", "assets"},
	{"http://x/static/a", "assets"},
	// Not dot segments, or decoded once only.
	{"/static/...", "assets"},
	{"/static/.a", "assets"},
	{"/static/a/..;/b", "assets"},
	{"/static/%252e%252e/x", "assets"},
	{"/static/a%3fb", "assets"},
	{"/static/a?x=/../../b", "assets"},
	{"/static", "404"},
	// /api on whole segments.
	{"/api", "api"},
	{"/api/", "api"},
	{"/api/.", "api"},
	{"/api%2f", "api"},
	{"/api/x/..", "api"},
	{"/static/../api", "api"},
	{"/api/..", "404"},
	{"/apix", "404"},
	{"/API", "404"},
	// Above the root, bad encodings, a NUL: nginx 400.
	{"/../static/a", "400"},
	{"/%2e%2e/static/a", "400"},
	{"/static/../../a", "400"},
	{"/a/b/../../../static/x", "400"},
	{"/static/a/%2e%2e/%2e%2e/%2e%2e/x", "400"},
	{"/static/%zz", "400"},
	{"/static/%", "400"},
	{"/static/%2", "400"},
	{"/static/%u002e", "400"},
	{"/static/%00a", "400"},
}

// rawGet sends target as it is in a GET's request line to addr (host:port)
// and returns the status and body.
func rawGet(t *testing.T, addr, target string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// verdict is a response as routePaths state them: the pool that answered
// 200 (the body's first word), else the status.
func verdict(code int, body string) string {
	if code == 200 {
		name, _, _ := strings.Cut(body, " ")
		return name
	}
	return fmt.Sprint(code)
}

// TestRoutePaths: with two pools and no catch-all, routes read the path
// percent-decoded (%2F too), with "//" merged and dot segments removed, so
// /static/../secret and /static/%2e%2e/secret get 404 instead of reaching
// the assets pool; dot segments above the root, a bad encoding and a NUL
// get 400. What a pool's upstream receives is the request target exactly
// as the client sent it.
func TestRoutePaths(t *testing.T) {
	var mu sync.Mutex
	var got []string // request targets the upstreams received
	pool := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, r.RequestURI)
			mu.Unlock()
			io.WriteString(w, name+" "+r.RequestURI)
		}))
		t.Cleanup(s.Close)
		return s
	}
	assets, api := pool("assets"), pool("api")
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+fmt.Sprintf(`pools:
  assets:
    upstreams: [{name: a, url: %s}]
  api:
    upstreams: [{name: b, url: %s}]
routes:
  - {path_prefix: /static/, pool: assets}
  - {path_prefix: /api, pool: api}
`, assets.URL, api.URL)))
	proxy := strings.TrimPrefix(r.proxy, "http://")
	for _, c := range routePaths {
		mu.Lock()
		got = got[:0]
		mu.Unlock()
		code, body := rawGet(t, proxy, c.target)
		if v := verdict(code, body); v != c.want {
			t.Errorf("GET %s: %d %q, want %s", c.target, code, body, c.want)
			continue
		}
		if code != 200 {
			continue
		}
		want := strings.TrimPrefix(c.target, "http://x")
		mu.Lock()
		if len(got) != 1 || got[0] != want {
			t.Errorf("GET %s: the upstream received %q, want %q unchanged", c.target, got, want)
		}
		mu.Unlock()
	}
	// Where ringlb and nginx differ: a raw "#" (no client sends one) ends
	// nginx's path, while for ringlb it is a character of the path, which
	// the upstream receives as %23, so the route sees what the upstream
	// serves.
	mu.Lock()
	got = got[:0]
	mu.Unlock()
	if code, body := rawGet(t, proxy, "/x#/../static/a"); code != 200 || body != "assets /x%23/../static/a" {
		t.Errorf("GET /x#/../static/a: %d %q, want the assets pool given /x%%23/../static/a", code, body)
	}
	if code, _ := rawGet(t, proxy, "/static/a#/../../secret"); code != 404 {
		t.Errorf("GET /static/a#/../../secret: %d, want 404", code)
	}
}

// TestRoutePathsAsNginx runs routePaths through a real nginx whose
// locations are the two routes (/api as "= /api" and "/api/", nginx's
// prefixes not being on whole segments) and a catch-all answering 404:
// nginx's verdicts are the table's, so ringlb's routes pick what nginx's
// locations pick.
func TestRoutePathsAsNginx(t *testing.T) {
	addr := nginxtest.Start(t, func(addr string) string {
		return fmt.Sprintf(`    server {
        listen %s;
        location /static/ { return 200 "assets $uri\n"; }
        location = /api { return 200 "api $uri\n"; }
        location /api/ { return 200 "api $uri\n"; }
        location / { return 404 "none $uri\n"; }
    }
`, addr)
	})
	for _, c := range routePaths {
		code, body := rawGet(t, addr, c.target)
		if v := verdict(code, body); v != c.want {
			t.Errorf("nginx: GET %s: %d %.60q, table says %s", c.target, code, body, c.want)
		}
	}
}
