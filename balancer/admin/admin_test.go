package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
)

func setup(t *testing.T, reload ReloadFunc) (*balancer.Balancer, *httptest.Server) {
	t.Helper()
	return setupWith(t, reload, Options{})
}

func setupWith(t *testing.T, reload ReloadFunc, opts Options) (*balancer.Balancer, *httptest.Server) {
	t.Helper()
	var ups []options.Upstream
	for _, n := range []string{"a", "<b>"} {
		u, _ := url.Parse("http://" + strings.Trim(n, "<>") + ".internal:8080")
		ups = append(ups, options.Upstream{Name: n, URL: u, Addr: u.Host, Weight: 1})
	}
	reg := metrics.NewRegistry()
	b, err := balancer.New(balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: ups,
			Ring:      options.Ring{PointsPerWeight: 160, LoadFactor: 1.25},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}},
			Timeouts:  options.Timeouts{Dial: time.Second},
		},
	}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(b, reg, reload, opts))
	t.Cleanup(srv.Close)
	return b, srv
}

func fetch(t *testing.T, method, u string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(body)
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func decode(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	return m
}

func TestDebugRingShape(t *testing.T) {
	b, srv := setup(t, nil)
	code, hdr, body := fetch(t, http.MethodGet, srv.URL+"/debug/ring")
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", code, hdr.Get("Content-Type"))
	}
	m := decode(t, body)
	if got, want := keys(m), []string{"discovery", "load_factor", "placement", "points_per_weight", "upstreams", "version"}; !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	if m["version"] != b.Version() || m["placement"] != "ringlb" || m["points_per_weight"] != 160.0 || m["load_factor"] != 1.25 {
		t.Errorf("ring %v", m)
	}
	if d, ok := m["discovery"].([]any); !ok || len(d) != 0 {
		t.Errorf("discovery %v, want [] without a discovery block", m["discovery"])
	}
	ups := m["upstreams"].([]any)
	if len(ups) != 2 {
		t.Fatalf("upstreams %v", ups)
	}
	u0 := ups[1].(map[string]any) // "a" sorts after "<b>"
	want := []string{"absent", "active_fraction", "available", "breaker", "health", "inflight", "name", "points", "share", "source", "state", "url", "weight"}
	if got := keys(u0); !slices.Equal(got, want) {
		t.Errorf("upstream keys %v, want %v", got, want)
	}
	if u0["name"] != "a" || u0["url"] != "http://a.internal:8080" || u0["points"] != 160.0 || u0["available"] != true ||
		u0["health"] != "up" || u0["breaker"] != "closed" || u0["inflight"] != 0.0 || u0["active_fraction"] != 1.0 ||
		u0["source"] != "static" || u0["absent"] != false || u0["state"] != "ready" {
		t.Errorf("upstream %v", u0)
	}
	if s := u0["share"].(float64) + ups[0].(map[string]any)["share"].(float64); s < 0.999 || s > 1.001 {
		t.Errorf("shares sum to %v", s)
	}
}

func TestDebugLookupShape(t *testing.T) {
	b, srv := setup(t, nil)
	code, _, body := fetch(t, http.MethodGet, srv.URL+"/debug/lookup?key=user-42")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	m := decode(t, body)
	if got, want := keys(m), []string{"chosen", "hash", "held", "key", "key_hash", "owner", "preference", "skipped"}; !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	if m["key_hash"] != m["hash"] {
		t.Errorf("key_hash %v without a salt, want the hash %v", m["key_hash"], m["hash"])
	}
	if m["held"] != nil {
		t.Errorf("held %v with hold off, want null", m["held"])
	}
	if m["key"] != "user-42" || len(m["hash"].(string)) != 16 || m["chosen"] != m["owner"] || len(m["preference"].([]any)) != 2 || len(m["skipped"].([]any)) != 0 {
		t.Errorf("lookup %v", m)
	}
	owner := m["owner"].(string)
	b.HealthReporter().SetHealthy(owner, false, "test")
	m = decode(t, func() string { _, _, s := fetch(t, http.MethodGet, srv.URL+"/debug/lookup?key=user-42"); return s }())
	sk := m["skipped"].([]any)
	if m["chosen"] == owner || m["chosen"] == nil || len(sk) != 1 {
		t.Fatalf("owner down: %v", m)
	}
	if got := keys(sk[0].(map[string]any)); !slices.Equal(got, []string{"name", "reason"}) || sk[0].(map[string]any)["reason"] != "unhealthy" {
		t.Errorf("skipped %v", sk)
	}
	for _, u := range b.Status().Upstreams {
		b.HealthReporter().SetHealthy(u.Name, false, "test")
	}
	m = decode(t, func() string { _, _, s := fetch(t, http.MethodGet, srv.URL+"/debug/lookup?key=user-42"); return s }())
	if v, ok := m["chosen"]; !ok || v != nil {
		t.Errorf("all down: chosen %v (present %v), want null", v, ok)
	}

	code, _, body = fetch(t, http.MethodGet, srv.URL+"/debug/lookup")
	if code != 400 {
		t.Errorf("missing key: %d", code)
	}
	if m := decode(t, body); keys(m)[0] != "error" {
		t.Errorf("missing key body %s", body)
	}
	code, _, body = fetch(t, http.MethodGet, srv.URL+"/debug/lookup?key=")
	if m := decode(t, body); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), "must not be empty") {
		t.Errorf("empty key: %d %s", code, body)
	}
}

func TestHealthAndReady(t *testing.T) {
	b, srv := setup(t, nil)
	if code, _, body := fetch(t, http.MethodGet, srv.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("healthz %d %q", code, body)
	}
	if code, _, _ := fetch(t, http.MethodGet, srv.URL+"/readyz"); code != 200 {
		t.Errorf("readyz %d", code)
	}
	for _, p := range []string{"/healthz", "/readyz"} { // probes that send HEAD
		if code, _, _ := fetch(t, http.MethodHead, srv.URL+p); code != 200 {
			t.Errorf("HEAD %s: %d", p, code)
		}
	}
	b.HealthReporter().SetHealthy("a", false, "test")
	b.HealthReporter().SetHealthy("<b>", false, "test")
	if code, _, _ := fetch(t, http.MethodGet, srv.URL+"/readyz"); code != 503 {
		t.Errorf("readyz with nothing available: %d", code)
	}
	b.HealthReporter().SetHealthy("a", true, "test")
	if code, _, _ := fetch(t, http.MethodGet, srv.URL+"/readyz"); code != 200 {
		t.Errorf("readyz after recovery: %d", code)
	}
}

func TestIndexAndMetrics(t *testing.T) {
	b, srv := setup(t, nil)
	code, _, body := fetch(t, http.MethodGet, srv.URL+"/")
	if code != 200 || !strings.Contains(body, `<path class="arc available"`) || !strings.Contains(body, "&lt;b&gt;") || strings.Contains(body, "<td><b>") || !strings.Contains(body, b.Version()) {
		t.Errorf("index %d:\n%s", code, body)
	}
	code, _, body = fetch(t, http.MethodGet, srv.URL+"/metrics")
	for _, want := range []string{
		`ringlb_ring_info{pool="default",version="` + b.Version() + `"} 1`,
		`ringlb_upstream_available{pool="default",upstream="a"} 1`,
		`ringlb_upstream_inflight{pool="default",upstream="a"} 0`,
		`ringlb_breaker_state{pool="default",upstream="a"} 0`,
		`ringlb_ejections_total{pool="default",reason="breaker",upstream="a"} 0`,
		`ringlb_overflow_total{pool="default",upstream="a"} 0`,
		`ringlb_retries_total{pool="default",upstream="a"} 0`,
		`ringlb_no_upstream_total{pool="default"} 0`,
		`ringlb_hold_keys{pool="default"} 0`,
		`ringlb_held_total{pool="default"} 0`,
		`ringlb_config_reloads_total{result="ok"} 0`,
		`ringlb_config_reloads_total{result="error"} 0`,
		`go_goroutines`,
		`process_`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if code != 200 {
		t.Errorf("metrics %d", code)
	}
}

func TestReload(t *testing.T) {
	fail := false
	var b *balancer.Balancer
	reload := func() ([]PoolVersion, []string, error) { // counts itself, as the command's does
		if fail {
			problems := []string{"config.yaml:14: upstreams[1].weight: must be > 0, got -2", "config.yaml:3: listen: bad"}
			b.RecordReload(false, problems...)
			return nil, problems, errors.New("invalid config")
		}
		b.RecordReload(true)
		return []PoolVersion{{b.Pool(), b.Version()}}, nil, nil
	}
	b, srv := setup(t, reload)
	code, _, body := fetch(t, http.MethodPost, srv.URL+"/reload")
	if m := decode(t, body); code != 200 || !slices.Equal(keys(m), []string{"version"}) || m["version"] != b.Version() {
		t.Errorf("good reload: %d %s", code, body)
	}
	fail = true
	code, _, body = fetch(t, http.MethodPost, srv.URL+"/reload")
	m := decode(t, body)
	if code != 400 || !slices.Equal(keys(m), []string{"errors"}) || len(m["errors"].([]any)) != 2 {
		t.Errorf("bad reload: %d %s", code, body)
	}
	if code, _, _ := fetch(t, http.MethodGet, srv.URL+"/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /reload: %d", code)
	}
	_, _, metrics := fetch(t, http.MethodGet, srv.URL+"/metrics")
	for _, want := range []string{`ringlb_config_reloads_total{result="ok"} 1`, `ringlb_config_reloads_total{result="error"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestPprofOnlyWhenAsked: /debug/pprof/ is 404 by default and serves the
// profiles with Options.Pprof.
func TestPprofOnlyWhenAsked(t *testing.T) {
	paths := []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/heap?debug=1", "/debug/pprof/cmdline"}
	_, off := setup(t, nil)
	for _, p := range paths {
		if code, _, _ := fetch(t, "GET", off.URL+p); code != http.StatusNotFound {
			t.Errorf("pprof off: GET %s: %d, want 404", p, code)
		}
	}
	_, on := setupWith(t, nil, Options{Pprof: true})
	for _, p := range paths {
		if code, _, body := fetch(t, "GET", on.URL+p); code != http.StatusOK {
			t.Errorf("pprof on: GET %s: %d, want 200: %.200s", p, code, body)
		}
	}
	if _, _, body := fetch(t, "GET", on.URL+"/debug/pprof/goroutine?debug=1"); !strings.HasPrefix(body, "goroutine profile: total ") {
		t.Errorf("goroutine profile: %.200s", body)
	}
	// The other routes are unchanged.
	if code, _, _ := fetch(t, "GET", on.URL+"/debug/ring"); code != http.StatusOK {
		t.Errorf("pprof on: /debug/ring: %d", code)
	}
}

// TestAdminRefusesForeignHostAndOrigin: the admin listener answers only
// requests whose Host names it (its address, or a loopback name), so DNS
// rebinding cannot read it from a browser, and refuses a POST from a
// cross-site Origin, so a web page cannot make a browser reload it.
// Probes (/healthz, /readyz) and /metrics answer whatever the Host.
func TestAdminRefusesForeignHostAndOrigin(t *testing.T) {
	reloads := 0
	reload := func() ([]PoolVersion, []string, error) { reloads++; return []PoolVersion{{"default", "v1"}}, nil, nil }
	_, srv := setupWith(t, reload, Options{Addr: "127.0.0.1:9901"})
	do := func(method, path, host, origin string) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		method, path, host, origin string
		want                       int
	}{
		{"GET", "/debug/ring", "127.0.0.1:9901", "", 200},
		{"GET", "/debug/ring", "localhost:9901", "", 200},
		{"GET", "/debug/ring", "LOCALHOST.:9901", "", 200},
		{"GET", "/debug/ring", "rebind.attacker.example:9901", "", 403},
		{"GET", "/debug/lookup?key=k", "rebind.attacker.example:9901", "", 403},
		{"GET", "/", "rebind.attacker.example:9901", "", 403},
		{"GET", "/debug/ring", "127.0.0.1:8080", "", 403},
		{"GET", "/debug/ring", "10.1.2.3:9901", "", 403},
		{"GET", "/healthz", "anything.example", "", 200},
		{"GET", "/readyz", "anything.example", "", 200},
		{"GET", "/metrics", "prometheus-target.example:9901", "", 200},
		{"POST", "/reload", "127.0.0.1:9901", "https://evil.example", 403},
		{"POST", "/reload", "127.0.0.1:9901", "null", 403},
		{"POST", "/reload", "rebind.attacker.example:9901", "", 403},
		{"POST", "/reload", "127.0.0.1:9901", "http://127.0.0.1:9901", 200},
		{"POST", "/reload", "localhost:9901", "", 200},
		// An Origin is the listener's own address, or localhost, with its
		// port: another loopback address or a name under localhost with
		// that port may be another program's.
		{"POST", "/reload", "127.0.0.1:9901", "http://localhost:9901", 200},
		{"POST", "/reload", "127.0.0.1:9901", "http://127.0.0.2:9901", 403},
		{"POST", "/reload", "127.0.0.1:9901", "http://[::1]:9901", 403},
		{"POST", "/reload", "127.0.0.1:9901", "http://evil.localhost:9901", 403},
		{"POST", "/reload", "127.0.0.1:9901", "http://127.0.0.1:9902", 403},
		{"POST", "/reload", "127.0.0.1:9901", "http://127.0.0.1", 403},
		// As a Host they name the listener still (a browser sends the
		// URL's host; no rebinding there).
		{"GET", "/debug/ring", "127.0.0.2:9901", "", 200},
		{"GET", "/debug/ring", "app.localhost:9901", "", 200},
	} {
		if got := do(c.method, c.path, c.host, c.origin); got != c.want {
			t.Errorf("%s %s Host %q Origin %q: %d, want %d", c.method, c.path, c.host, c.origin, got, c.want)
		}
	}
	if reloads != 3 {
		t.Errorf("%d reloads, want the 3 allowed", reloads)
	}
}

// TestAdminOriginByBoundAddress: the Origin a POST may carry follows the
// address the admin listener is bound to: [::1] only when bound there,
// any IP for a wildcard, and admin_listen's name.
func TestAdminOriginByBoundAddress(t *testing.T) {
	reload := func() ([]PoolVersion, []string, error) { return []PoolVersion{{"default", "v1"}}, nil, nil }
	for _, c := range []struct {
		addr, name, origin string
		want               int
	}{
		{"[::1]:9901", "", "http://[::1]:9901", 200},
		{"[::1]:9901", "", "http://localhost:9901", 200},
		{"[::1]:9901", "", "http://127.0.0.1:9901", 403},
		{"[::1]:9901", "", "http://[::2]:9901", 403},
		{"0.0.0.0:9901", "", "http://10.1.2.3:9901", 200},
		{"[::]:9901", "", "http://[2001:db8::7]:9901", 200},
		{"0.0.0.0:9901", "", "http://10.1.2.3:9902", 403},
		{"127.0.0.1:9901", "admin.internal", "https://admin.internal:9901", 200},
		{"127.0.0.1:9901", "admin.internal", "https://x.admin.internal:9901", 403},
	} {
		_, srv := setupWith(t, reload, Options{Addr: c.addr, Name: c.name})
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/reload", nil)
		req.Host = "localhost:9901"
		req.Header.Set("Origin", c.origin)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("bound to %s (name %q), Origin %q: %d, want %d", c.addr, c.name, c.origin, res.StatusCode, c.want)
		}
	}
}
