package admin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/route"
)

// arcPath draws each run of owned samples as one closed annular sector,
// and the sectors of all members together cover the band exactly once.
func TestArcPath(t *testing.T) {
	owners := []int{1, 1, 0, 0, 0, 1, 2, 1}
	sub := regexp.MustCompile(`M(\S+) (\S+) A(\S+) (\S+) 0 ([01]) 1 (\S+) (\S+) L(\S+) (\S+) A(\S+) (\S+) 0 ([01]) 0 (\S+) (\S+) Z`)
	for member, runs := range map[int]int{0: 1, 1: 3, 2: 1, 3: 0} {
		p := arcPath(owners, member)
		got := sub.FindAllStringSubmatch(p, -1)
		if len(got) != runs || (runs == 0) != (p == "") {
			t.Errorf("member %d: %d sectors in %q, want %d", member, len(got), p, runs)
		}
	}
	// Sample 2 starts at 90° (3 o'clock): member 0's run [2, 5) starts on
	// the outer edge at (C + R, C) and its inner edge ends at (C + r, C).
	m := sub.FindStringSubmatch(arcPath(owners, 0))
	f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	outer, inner := ringRadius+ringWidth/2, ringRadius-ringWidth/2
	if f(m[1]) != ringCentre+outer || f(m[2]) != ringCentre || f(m[13]) != ringCentre+inner || f(m[14]) != ringCentre {
		t.Errorf("member 0's sector %q does not start at 3 o'clock", m[0])
	}
	if m[5] != "0" { // 135°: the small arc
		t.Errorf("member 0's sector %q: large-arc flag %s, want 0", m[0], m[5])
	}
	// The whole circle is two halves (an arc cannot end where it starts).
	if got := sub.FindAllString(arcPath([]int{4, 4, 4, 4}, 4), -1); len(got) != 2 {
		t.Errorf("a member owning everything: %q", got)
	}
}

// TestStatusPageRendered checks the page as the server renders it, before
// any script runs: one arc per upstream, greyed when ejected, names
// escaped, and nothing loaded from elsewhere.
func TestStatusPageRendered(t *testing.T) {
	b, srv := setup(t, nil)
	b.HealthReporter().SetHealthy("a", false, "test")
	code, hdr, body := fetch(t, http.MethodGet, srv.URL+"/?key=%3Cscript%3E")
	if code != 200 || hdr.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %s", code, hdr.Get("Content-Type"))
	}
	arcs := regexp.MustCompile(`<path class="arc ([a-z-]+)" id="arc-\d+" data-upstream="([^"]*)"[^>]* fill="([^"]*)"`).FindAllStringSubmatch(body, -1)
	if len(arcs) != 2 {
		t.Fatalf("%d arcs, want 2:\n%s", len(arcs), body)
	}
	for _, a := range arcs {
		state, name, stroke := a[1], a[2], a[3]
		switch name {
		case "a":
			if state != "ejected" || stroke != greyColor {
				t.Errorf("ejected a: class %q stroke %q", state, stroke)
			}
		case "&lt;b&gt;":
			if state != "available" || stroke == greyColor {
				t.Errorf("<b>: class %q stroke %q", state, stroke)
			}
		default:
			t.Errorf("arc for %q", name)
		}
	}
	if !strings.Contains(body, "ejected (health)") || !strings.Contains(body, "1 of 2 upstreams available") {
		t.Errorf("the page does not say a is ejected:\n%s", body)
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, `value="<script>"`) || !strings.Contains(body, `value="&lt;script&gt;"`) {
		t.Errorf("?key= is not escaped into the lookup box")
	}
	for _, external := range []string{"<link", " src=", `href="http`, `href="//`, "@import"} {
		if strings.Contains(body, external) {
			t.Errorf("the page loads something from elsewhere (%q); it must be self-contained", external)
		}
	}
}

// TestStatusTemplateParses parses status.html and renders it as GET /
// does, for one pool and for several, all of them and one (?pool=). The
// template is parsed on the first request for the page (statusTmpl) and
// html/template escapes it on the first execution, so a template that
// does not parse or escape has to fail here rather than in a request.
func TestStatusTemplateParses(t *testing.T) {
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("status.html: %v", r)
			}
		}()
		statusTmpl()
	}()
	if t.Failed() {
		return
	}
	_, one := setup(t, nil)
	_, several := setupPools(t)
	for _, u := range []string{one.URL + "/", several.URL + "/", several.URL + "/?pool=assets"} {
		code, _, body := fetch(t, http.MethodGet, u)
		if code != 200 || strings.Contains(body, "<!-- status page:") || !strings.HasSuffix(strings.TrimSpace(body), "</html>") {
			t.Errorf("GET %s: %d, page ends %q", u, code, body[max(0, len(body)-200):])
		}
	}
}

// TestStatusTemplateNotParsedAtInit runs this test binary again with
// GODEBUG=inittrace=1 and reads what the package's initialisation
// allocated: parsing status.html there (as ringlb once did) kept ~125 KB
// live from the start of every process, marked by every GC cycle.
func TestStatusTemplateNotParsedAtInit(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -test.run=^$: %v\n%s", exe, err, out)
	}
	m := regexp.MustCompile(`(?m)^init github\.com/ringlb/ringlb/balancer/admin @.*, (\d+) bytes, \d+ allocs$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no inittrace line for this package in:\n%s", out)
	}
	// The test files' own package variables (two regexps) take ~10 KB.
	n, _ := strconv.Atoi(string(m[1]))
	t.Logf("initialising balancer/admin: %d bytes", n)
	if n > 32<<10 {
		t.Errorf("initialising balancer/admin allocates %d bytes; is the status page parsed at init again?", n)
	}
}

// BenchmarkStatusPagePools renders GET / of 50 pools of 20 upstreams,
// every pool in its section; bytes/page is the page's size. A regression
// in either is the multi-pool page's cost (see multiSamples).
func BenchmarkStatusPagePools(b *testing.B) {
	reg := metrics.NewRegistry()
	rt, err := balancer.NewRouter(reg)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	var pools []*balancer.Balancer
	var routes []route.Route
	for p := range 50 {
		var ups []options.Upstream
		for i := range 20 {
			u, _ := url.Parse(fmt.Sprintf("http://10.0.%d.%d:8080", p, i))
			ups = append(ups, options.Upstream{Name: fmt.Sprintf("app-%d", i), URL: u, Addr: u.Host, Weight: 1})
		}
		pb, err := rt.NewPool(balancer.Options{
			Pool: fmt.Sprintf("pool-%d", p),
			PoolOptions: balancer.PoolOptions{
				Upstreams: ups,
				Ring:      options.Ring{PointsPerWeight: 160},
				Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}},
			},
		}, nil)
		if err != nil {
			b.Fatal(err)
		}
		pools = append(pools, pb)
		routes = append(routes, route.Route{Host: fmt.Sprintf("s%d.example", p), Pool: pb.Pool()})
	}
	if err := rt.Install(routes, pools); err != nil {
		b.Fatal(err)
	}
	h := NewRouterHandler(rt, reg, nil, Options{})
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	size := 0
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `id="pool-pool-49"`) {
			b.Fatalf("GET /: %d", rec.Code)
		}
		size = rec.Body.Len()
		if f := os.Getenv("PAGE"); f != "" {
			os.WriteFile(f, rec.Body.Bytes(), 0o644)
		}
	}
	b.ReportMetric(float64(size), "bytes/page")
}
