package process

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// poolsConfig is a config with a sessions pool (backends s) and an assets
// pool (backends a), routed by host and path.
func poolsConfig(s, a []ringlbtest.Backend) string {
	var b strings.Builder
	b.WriteString(ringlbtest.Listeners + "upstream_header: X-Upstream\npools:\n  sessions:\n    hash: {key: [{header: X-User}]}\n    upstreams:\n")
	for _, u := range s {
		fmt.Fprintf(&b, "      - {name: %s, url: %s}\n", u.Name, u.URL)
	}
	b.WriteString("  assets:\n    hash: {key: [uri]}\n    upstreams:\n")
	for _, u := range a {
		fmt.Fprintf(&b, "      - {name: %s, url: %s}\n", u.Name, u.URL)
	}
	b.WriteString(`routes:
  - {host: app.example, path_prefix: /api, pool: sessions}
  - {host: "*.cdn.example", pool: assets}
  - {path_prefix: /static/, pool: assets}
`)
	return b.String()
}

// named starts n backends answering "PREFIX-i".
func named(t *testing.T, prefix string, n int) []ringlbtest.Backend {
	bs := ringlbtest.StartBackends(t, n, nil)
	for i := range bs {
		name := fmt.Sprintf("%s-%d", prefix, i+1)
		bs[i].Name = name
		bs[i].Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) })
	}
	return bs
}

func hostGet(t *testing.T, url, host string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", url, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Requests go to the pool of the first route matching their host and path;
// one no route matches gets 404 and counts in ringlb_no_route_total; every
// per-upstream series names its pool.
func TestServePoolsRoute(t *testing.T) {
	s, a := named(t, "s", 3), named(t, "a", 2)
	r := startServe(t, ringlbtest.WriteConfig(t, poolsConfig(s, a)))
	for _, c := range []struct {
		host, path, pool string
	}{
		{"app.example", "/api", "s"},
		{"APP.example:8080", "/api/users", "s"},
		{"app.example", "/apix", ""},
		{"img.cdn.example", "/logo.png", "a"},
		{"cdn.example", "/logo.png", ""},
		{"other.example", "/static/x.css", "a"},
		{"other.example", "/static", ""},
		{"app.example", "/static/x.css", "a"},
	} {
		code, body := hostGet(t, r.proxy+c.path, c.host, "X-User", "u1")
		switch {
		case c.pool == "" && (code != http.StatusNotFound || body != "no route for this host and path\n"):
			t.Errorf("%s%s: %d %q, want 404 no route", c.host, c.path, code, body)
		case c.pool != "" && (code != 200 || !strings.HasPrefix(body, c.pool+"-")):
			t.Errorf("%s%s: %d %q, want pool %s", c.host, c.path, code, body, c.pool)
		}
	}
	// Affinity within the pool: one key, one upstream.
	_, first := hostGet(t, r.proxy+"/api", "app.example", "X-User", "u7")
	for range 5 {
		if _, got := hostGet(t, r.proxy+"/api/x", "app.example", "X-User", "u7"); got != first {
			t.Fatalf("key u7 went to %s, then %s", first, got)
		}
	}
	_, metrics := ringlbtest.Get(t, r.admin+"/metrics")
	for _, want := range []string{
		"ringlb_no_route_total 3\n",
		`ringlb_upstream_available{pool="sessions",upstream="s-1"} 1`,
		`ringlb_upstream_available{pool="assets",upstream="a-2"} 1`,
		`ringlb_ring_info{pool="assets",version="`,
		`ringlb_ring_info{pool="sessions",version="`,
		`ringlb_no_upstream_total{pool="assets"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// startServer builds the server of the config file at path, without
// listeners (its router is an http.Handler); the test's end closes it.
func startServer(t *testing.T, path string) *server {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(path, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.close)
	return srv
}

// A reload that changes only the assets pool leaves the sessions pool as
// it was: the same balancer, no snapshot installed, the same version. A
// pool the new config drops stops; a new one starts.
func TestReloadOnePool(t *testing.T) {
	s, a := named(t, "s", 3), named(t, "a", 3)
	path := ringlbtest.WriteConfig(t, poolsConfig(s, a[:2]))
	srv := startServer(t, path)
	sess, assets := srv.rt.Pool("sessions"), srv.rt.Pool("assets")
	sv, ss, av := sess.Version(), sess.Snapshots(), assets.Version()

	if err := os.WriteFile(path, []byte(poolsConfig(s, a)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, problems, err := srv.reload(); err != nil {
		t.Fatal(problems)
	}
	if srv.rt.Pool("sessions") != sess || sess.Snapshots() != ss || sess.Version() != sv {
		t.Errorf("sessions after a reload of assets only: snapshots %d → %d, version %s → %s",
			ss, sess.Snapshots(), sv, sess.Version())
	}
	if srv.rt.Pool("assets") != assets || assets.Version() == av {
		t.Errorf("assets: version %s unchanged after adding an upstream", av)
	}

	// Drop assets for a new pool: its families go with it.
	next := strings.Replace(poolsConfig(s, a), "  assets:", "  media:", 1)
	next = strings.ReplaceAll(next, "pool: assets", "pool: media")
	if err := os.WriteFile(path, []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, problems, err := srv.reload(); err != nil {
		t.Fatal(problems)
	}
	if srv.rt.Pool("assets") != nil || srv.rt.Pool("media") == nil || srv.rt.Pool("sessions") != sess || sess.Snapshots() != ss {
		t.Errorf("pools after renaming assets: %v", srv.rt.Pools())
	}
	mfs, err := srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == "assets" {
					t.Errorf("%s still has a series of the removed pool", mf.GetName())
				}
			}
		}
	}
	// A bad reload keeps everything.
	if err := os.WriteFile(path, []byte(next+"  - {pool: nowhere}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, problems, err := srv.reload(); err == nil || len(problems) != 1 || !strings.Contains(problems[0], `routes[3].pool: "nowhere" is not a pool`) {
		t.Errorf("reload to an unknown pool: %v %v", problems, err)
	}
	if srv.rt.Pool("media") == nil || sess.Snapshots() != ss {
		t.Error("a rejected reload changed the pools")
	}
}

// limits.upstream_requests counts an upstream URL's requests across pools:
// with 1 allowed, a request through pool b to the URL pool a is busy on
// gets 503 at once.
func TestLimitsAcrossPools(t *testing.T) {
	hold := make(chan struct{})
	be := ringlbtest.StartBackends(t, 1, hold)[0]
	cfg := ringlbtest.Listeners + "limits: {upstream_requests: 1}\npools:\n" +
		"  a:\n    upstreams: [{name: x, url: " + be.URL + "}]\n" +
		"  b:\n    upstreams: [{name: y, url: " + be.URL + "}]\n" +
		"routes: [{host: a.example, pool: a}, {host: b.example, pool: b}]\n"
	r := startServe(t, ringlbtest.WriteConfig(t, cfg))
	done := make(chan int, 1)
	go func() {
		code, _ := hostGet(t, r.proxy+"/slow", "a.example")
		done <- code
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, m := ringlbtest.Get(t, r.admin+"/metrics"); !strings.Contains(m, `ringlb_upstream_inflight{pool="a",upstream="x"} 1`) {
			return fmt.Errorf("the slow request is not in flight yet")
		}
		return nil
	})
	code, body := hostGet(t, r.proxy+"/", "b.example")
	close(hold)
	if code != http.StatusServiceUnavailable {
		t.Errorf("pool b while pool a holds the URL's one request: %d %q, want 503", code, body)
	}
	if c := <-done; c != 200 {
		t.Errorf("the held request: %d", c)
	}
}

// POST /reload with several pools answers each pool's version twice: in
// "version" as POOL=VERSION in config order, and in "pools" as an object.
func TestReloadAnswerPools(t *testing.T) {
	s, a := named(t, "s", 2), named(t, "a", 3)
	path := ringlbtest.WriteConfig(t, poolsConfig(s, a[:2]))
	r := startServe(t, path)
	if err := os.WriteFile(path, []byte(poolsConfig(s, a)), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := http.Post(r.admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got struct {
		Version string            `json:"version"`
		Pools   map[string]string `json:"pools"`
	}
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil || res.StatusCode != 200 {
		t.Fatalf("POST /reload: %d %v", res.StatusCode, err)
	}
	want := map[string]string{}
	for _, p := range []string{"sessions", "assets"} {
		_, body := ringlbtest.Get(t, r.admin+"/debug/ring?pool="+p)
		var ring struct{ Version string }
		if err := json.Unmarshal([]byte(body), &ring); err != nil || ring.Version == "" {
			t.Fatalf("/debug/ring?pool=%s: %v %s", p, err, body)
		}
		want[p] = ring.Version
	}
	if got.Version != "sessions="+want["sessions"]+" assets="+want["assets"] || !maps.Equal(got.Pools, want) {
		t.Errorf("POST /reload answered %+v, want pools %v", got, want)
	}
}

// threePools is a config of pools one, two and three of three backends
// each, routed by path and hashed on X-User; upstream two-1 has weight w,
// and extra goes at the top level.
func threePools(bs map[string][]ringlbtest.Backend, w float64, extra string) string {
	var b strings.Builder
	b.WriteString(ringlbtest.Listeners + extra + "pools:\n")
	for _, p := range []string{"one", "two", "three"} {
		fmt.Fprintf(&b, "  %s:\n    hash: {key: [{header: X-User}]}\n    upstreams:\n", p)
		for i, u := range bs[p] {
			weight := 1.0
			if p == "two" && i == 0 {
				weight = w
			}
			fmt.Fprintf(&b, "      - {name: %s, url: %s, weight: %g}\n", u.Name, u.URL, weight)
		}
	}
	b.WriteString("routes:\n  - {path_prefix: /one, pool: one}\n  - {path_prefix: /two, pool: two}\n  - {path_prefix: /three, pool: three}\n")
	return b.String()
}

// A reload of many pools builds and compares only the pools whose config
// changed: the changed pool is applied, exactly as a fresh start of the
// new file places its keys, and the others keep their snapshot and
// version; a process setting that every pool takes updates every pool; a
// problem in a pool whose text did not change is reported with its line,
// and a reload after a rejected one applies.
func TestReloadChangesOnlyItsPool(t *testing.T) {
	bs := map[string][]ringlbtest.Backend{"one": named(t, "one", 3), "two": named(t, "two", 3), "three": named(t, "three", 3)}
	path := ringlbtest.WriteConfig(t, threePools(bs, 1, ""))
	start := func(t *testing.T) (*server, string) {
		srv := startServer(t, path)
		front := httptest.NewServer(srv.rt)
		t.Cleanup(front.Close)
		return srv, front.URL
	}
	owners := func(url, pool string) map[string]string {
		m := map[string]string{}
		for i := range 200 {
			key := fmt.Sprint("u", i)
			code, body := hostGet(t, url+"/"+pool, "app.example", "X-User", key)
			if code != 200 {
				t.Fatalf("%s key %s: %d %s", pool, key, code, body)
			}
			m[key] = body
		}
		return m
	}
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv, url := start(t)
	one, two, three := srv.rt.Pool("one"), srv.rt.Pool("two"), srv.rt.Pool("three")
	oneSnaps, oneVersion, twoVersion, threeSnaps := one.Snapshots(), one.Version(), two.Version(), three.Snapshots()
	oneBefore, twoBefore := owners(url, "one"), owners(url, "two")

	write(threePools(bs, 3, ""))
	if _, problems, err := srv.reload(); err != nil {
		t.Fatal(problems)
	}
	if two.Version() == twoVersion {
		t.Errorf("pool two kept version %s after two-1's weight went 1 → 3", twoVersion)
	}
	if one.Snapshots() != oneSnaps || one.Version() != oneVersion || three.Snapshots() != threeSnaps {
		t.Errorf("pools one and three, unchanged, installed %d and %d snapshots", one.Snapshots()-oneSnaps, three.Snapshots()-threeSnaps)
	}
	fresh, freshURL := start(t)
	if v := fresh.rt.Pool("two").Version(); v != two.Version() {
		t.Errorf("pool two after the reload: version %s; a fresh start of the file: %s", two.Version(), v)
	}
	twoAfter, moved := owners(url, "two"), 0
	for key, owner := range owners(freshURL, "two") {
		if twoAfter[key] != owner {
			t.Errorf("key %s goes to %s after the reload, to %s after a fresh start", key, twoAfter[key], owner)
		}
		if twoBefore[key] != owner {
			moved++
			if owner != "two-1" {
				t.Errorf("key %s moved from %s to %s, not to two-1, whose weight grew", key, twoBefore[key], owner)
			}
		}
	}
	if moved == 0 {
		t.Error("no key of pool two moved to two-1, whose weight tripled")
	}
	if got := owners(url, "one"); !reflect.DeepEqual(got, oneBefore) {
		t.Error("keys of pool one moved")
	}

	// A problem where the text did not change: pool three as it was, but
	// no route reaches it. Then a good reload that changes pool one.
	src := strings.Replace(threePools(bs, 3, ""), "  - {path_prefix: /three, pool: three}\n", "", 1)
	write(src)
	line := strings.Count(src[:strings.Index(src, "  three:")], "\n") + 1
	if _, problems, err := srv.reload(); err == nil || len(problems) != 1 || !strings.HasSuffix(problems[0], fmt.Sprintf(`:%d: pools.three: no route reaches pool "three": add a route with pool: three`, line)) {
		t.Errorf("reload without a route to three: %v", problems)
	}
	write(strings.Replace(threePools(bs, 3, ""), "one-1, url", "one-x, url", 1))
	if _, problems, err := srv.reload(); err != nil {
		t.Fatal(problems)
	}
	if one.Version() == oneVersion || one.Snapshots() == oneSnaps || three.Snapshots() != threeSnaps {
		t.Errorf("after a rejected reload, renaming one-1 gave pool one version %s (was %s), pool three %d new snapshots",
			one.Version(), oneVersion, three.Snapshots()-threeSnaps)
	}

	// upstream_header is every pool's: all of them take it.
	write(threePools(bs, 3, "upstream_header: X-Upstream\n"))
	if _, problems, err := srv.reload(); err != nil {
		t.Fatal(problems)
	}
	if three.Snapshots() == threeSnaps {
		t.Error("pool three was not updated for upstream_header")
	}
	req, _ := http.NewRequest("GET", url+"/three", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := resp.Header.Get("X-Upstream"); !strings.HasPrefix(h, "three-") {
		t.Errorf("pool three answers X-Upstream %q after upstream_header was set", h)
	}
}

// A reload that changes only a pool's health block (which the balancer's
// options do not hold) brings that pool's checker to it, and leaves the
// pool's snapshot as it was.
func TestReloadPoolHealthBlock(t *testing.T) {
	var probes sync.Map // path → *atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := probes.LoadOrStore(r.URL.Path, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}))
	t.Cleanup(up.Close)
	other := named(t, "b", 1)
	conf := func(path string) string {
		return ringlbtest.Listeners + "pools:\n  a:\n    health: {path: " + path + ", interval: 100ms, timeout: 90ms}\n" +
			"    upstreams: [{name: a-1, url: " + up.URL + "}]\n" +
			"  b:\n    upstreams: [{name: b-1, url: " + other[0].URL + "}]\n" +
			"routes: [{path_prefix: /b, pool: b}, {pool: a}]\n"
	}
	probed := func(path string) func() error {
		return func() error {
			if n, ok := probes.Load(path); !ok || n.(*atomic.Int64).Load() == 0 {
				return fmt.Errorf("no probe of %s", path)
			}
			return nil
		}
	}
	path := ringlbtest.WriteConfig(t, conf("/one"))
	srv := startServer(t, path)
	a := srv.rt.Pool("a")
	testenv.Eventually(t, 5*time.Second, probed("/one"))
	snaps := a.Snapshots()
	if err := os.WriteFile(path, []byte(conf("/two")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, problems, err := srv.reload(); err != nil {
		t.Fatal(problems)
	}
	testenv.Eventually(t, 5*time.Second, probed("/two"))
	if a.Snapshots() != snaps {
		t.Errorf("pool a installed %d snapshots for a change of its health path", a.Snapshots()-snaps)
	}
}
