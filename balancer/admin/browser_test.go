//go:build unix

package admin

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// The status page is checked in a real browser: headless Chromium loads
// it, runs its script (which refreshes from /debug/ring and /metrics and
// answers the lookup box) and dumps the resulting DOM.

// chromiumPath finds Chromium; without it the test is skipped (or fails
// under CI=true, see skipExternal).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.SkipExternal(t, "chromium", "not on PATH: the status page is not checked in a browser (Debian: apt-get install chromium)")
	return ""
}

// runChromium runs headless Chromium on url with extra flags, bounded to
// 60 s, and returns its standard output. Its children (zygote, renderer)
// share its process group, which is killed on timeout.
func runChromium(t *testing.T, bin, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=3000",
		"--enable-logging=stderr", // the page's console, to catch script errors
	}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v (context: %v)\nstderr:\n%s", url, err, ctx.Err(), stderr.Bytes())
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") {
			t.Logf("console: %s", line)
			if strings.Contains(line, "Uncaught") || strings.Contains(line, "Failed to load") {
				t.Errorf("the status page's script failed: %s", line)
			}
		}
	}
	return stdout.String()
}

// element is one start tag of a dumped DOM: its name and attributes.
type element struct {
	tag   string
	attrs map[string]string
}

var (
	startTagRE = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[^\s=>/]+(?:="[^"]*")?)*)\s*/?>`)
	attrRE     = regexp.MustCompile(`([^\s=>/]+)(?:="([^"]*)")?`)
)

// elements returns the start tags named tag in dom whose class attribute
// contains class (any class when class is "").
func elements(dom, tag, class string) []element {
	var out []element
	for _, m := range startTagRE.FindAllStringSubmatch(dom, -1) {
		if m[1] != tag {
			continue
		}
		e := element{tag: m[1], attrs: map[string]string{}}
		for _, a := range attrRE.FindAllStringSubmatch(m[2], -1) {
			e.attrs[a[1]] = html.UnescapeString(a[2])
		}
		if class == "" || hasClass(e, class) {
			out = append(out, e)
		}
	}
	return out
}

func hasClass(e element, class string) bool {
	for _, c := range strings.Fields(e.attrs["class"]) {
		if c == class {
			return true
		}
	}
	return false
}

// arcs returns the ring's arcs by upstream, failing unless there is
// exactly one per upstream.
func arcs(t *testing.T, dom string, names []string) map[string]element {
	t.Helper()
	out := map[string]element{}
	for _, e := range elements(dom, "path", "arc") {
		name := e.attrs["data-upstream"]
		if _, dup := out[name]; dup {
			t.Errorf("two arcs for %q", name)
		}
		out[name] = e
	}
	if len(out) != len(names) {
		t.Errorf("%d arcs %v, want one for each of %v", len(out), keysOf(out), names)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			t.Errorf("no arc for %q", n)
		}
	}
	return out
}

func keysOf[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// rowCell returns the text of the cell data-f=field in the table row of
// upstream name.
func rowCell(t *testing.T, dom, name, field string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr [^>]*data-upstream="` + regexp.QuoteMeta(name) + `"[^>]*>(.*?)</tr>`).FindStringSubmatch(dom)
	if row == nil {
		t.Fatalf("no table row for %q", name)
	}
	cell := regexp.MustCompile(`<(?:td|span)[^>]*data-f="` + field + `"[^>]*>([^<]*)</(?:td|span)>`).FindStringSubmatch(row[1])
	if cell == nil {
		t.Fatalf("row %q has no %s cell: %s", name, field, row[1])
	}
	return html.UnescapeString(cell[1])
}

// lookupLine returns the upstreams named in the lookup result's line id.
func lookupLine(t *testing.T, dom, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<div class="line" id="` + id + `">(.*?)</div>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no lookup line %s in the page: the lookup box did not answer", id)
	}
	return m[1]
}

func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs headless Chromium")
	}
	bin := chromiumPath(t)

	names := []string{"alpha", "bravo", "charlie", "delta"}
	var ups []options.Upstream
	for _, n := range names {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/fail" {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			io.WriteString(w, n+"\n")
		}))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		ups = append(ups, options.Upstream{Name: n, URL: u, Addr: u.Host, Weight: 1})
	}
	reg := metrics.NewRegistry()
	opts := balancer.Options{
		UpstreamHeader: "X-Upstream",
		PoolOptions: balancer.PoolOptions{
			Upstreams: ups,
			Ring:      options.Ring{PointsPerWeight: 160, LoadFactor: 1.25, SlowStart: 10 * time.Minute},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}},
			Retries:   1,
			Timeouts:  options.Timeouts{Dial: time.Second},
		},
	}
	b, err := balancer.New(opts, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	served := map[string]int{} // requests answered, by upstream
	send := func(users int) {
		t.Helper()
		for i := range users {
			req := httptest.NewRequest(http.MethodGet, "http://proxy/", nil)
			req.Header.Set("X-User-ID", fmt.Sprintf("user-%d", i))
			rec := httptest.NewRecorder()
			b.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("proxy answered %d: %s", rec.Code, rec.Body)
			}
			served[rec.Header().Get("X-Upstream")]++
		}
	}
	send(40)
	// One 503 from user-0's upstream: an error on its row.
	failReq := httptest.NewRequest(http.MethodGet, "http://proxy/fail", nil)
	failReq.Header.Set("X-User-ID", "user-0")
	failRec := httptest.NewRecorder()
	b.ServeHTTP(failRec, failReq)
	failed := failRec.Header().Get("X-Upstream")
	if failRec.Code != http.StatusServiceUnavailable || failed == "" {
		t.Fatalf("/fail: %d from %q", failRec.Code, failed)
	}
	served[failed]++

	// afterPage, when set, runs once just after the next status page is
	// served: what it changes only the page's script can show.
	var afterPage atomic.Pointer[func()]
	started := time.Now().Add(-95 * time.Minute)
	h := NewHandler(b, reg, nil, Options{Version: "v9.9.9 (revision 0123456789ab, go1.26.0)", Listen: "127.0.0.1:8080", Started: started})
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == "/" {
			if f := afterPage.Swap(nil); f != nil {
				(*f)()
			}
		}
	}))
	t.Cleanup(admin.Close)

	const key = "user-7"
	owner := b.Lookup(key).Owner
	pageURL := admin.URL + "/?key=" + key

	// 1. Everything up: one coloured arc per upstream, live counts, and
	// the lookup box answering for ?key=.
	dom := runChromium(t, bin, pageURL, "--dump-dom")
	for _, n := range names {
		if !strings.Contains(dom, n) {
			t.Errorf("page lacks upstream %q", n)
		}
	}
	if len(elements(dom, "svg", "")) == 0 || !strings.Contains(dom, `<svg id="ring"`) {
		t.Fatalf("page has no ring <svg>:\n%s", dom)
	}
	for n, arc := range arcs(t, dom, names) {
		if !hasClass(arc, "available") || arc.attrs["fill"] == greyColor {
			t.Errorf("arc of %s: class %q fill %q, want available and coloured", n, arc.attrs["class"], arc.attrs["fill"])
		}
	}
	bodies := elements(dom, "body", "")
	if len(bodies) != 1 || bodies[0].attrs["data-refreshed"] == "" {
		t.Errorf("the page's script never refreshed it (body %v)", bodies)
	}
	if !strings.Contains(dom, `class="live ok"`) {
		t.Errorf("refresh indicator not ok")
	}
	for _, n := range names {
		if got, want := rowCell(t, dom, n, "requests"), fmt.Sprint(served[n]); got != want {
			t.Errorf("%s: requests %s, want %s", n, got, want)
		}
	}
	if got := lookupLine(t, dom, "lookup-owner"); !strings.Contains(got, `data-upstream="`+owner+`"`) {
		t.Errorf("lookup owner line %s, want %s", got, owner)
	}
	if got := lookupLine(t, dom, "lookup-chosen"); !strings.Contains(got, `data-upstream="`+owner+`"`) {
		t.Errorf("lookup chosen line %s, want %s", got, owner)
	}
	// What the process is, and how it keys requests.
	for id, want := range map[string]string{
		"ringlb-version": "v9.9.9 (revision 0123456789ab, go1.26.0)",
		"listen":         "127.0.0.1:8080",
		"key-sources":    "header X-User-ID · on_missing: random",
		"last-reload":    "none since the start",
	} {
		if got := textOf(t, dom, id); got != want {
			t.Errorf("#%s: %q, want %q", id, got, want)
		}
	}
	if got := textOf(t, dom, "uptime"); !regexp.MustCompile(`^1h3[56]m$`).MatchString(got) {
		t.Errorf("uptime %q, want about 1h35m", got)
	}
	// Errors and latency per upstream.
	for _, n := range names {
		want := "0"
		if n == failed {
			want = "1"
		}
		if got := rowCell(t, dom, n, "errors"); got != want {
			t.Errorf("%s: errors %s, want %s", n, got, want)
		}
		if got := rowCell(t, dom, n, "latency"); served[n] > 0 && !regexp.MustCompile(`^\d+(\.\d\d)? ms$`).MatchString(got) {
			t.Errorf("%s: latency %q", n, got)
		}
	}

	// A request described by path and header: the key it yields, and
	// where it goes.
	reqDom := runChromium(t, bin, admin.URL+"/?path=/cart&header="+url.QueryEscape("X-User-ID: "+key), "--dump-dom")
	if got := lookupLine(t, reqDom, "request-key"); !strings.Contains(got, key) || !strings.Contains(got, "from header X-User-ID") {
		t.Errorf("request lookup key line %s, want %s from header X-User-ID", got, key)
	}
	if got := lookupLine(t, reqDom, "request-chosen"); !strings.Contains(got, `data-upstream="`+owner+`"`) {
		t.Errorf("request lookup chosen line %s, want %s", got, owner)
	}
	reqDom = runChromium(t, bin, admin.URL+"/?path=/cart", "--dump-dom")
	if got := lookupLine(t, reqDom, "request-key"); !strings.Contains(got, "none: on_missing random gives a random upstream") {
		t.Errorf("request lookup without a key: %s", got)
	}

	// 2. The key's owner is ejected right after the page is served, and
	// more requests come in: only the script's refresh can show it.
	eject := func() {
		b.HealthReporter().SetHealthy(owner, false, "test")
		send(40)
	}
	afterPage.Store(&eject)
	dom = runChromium(t, bin, pageURL, "--dump-dom")
	if afterPage.Load() != nil {
		t.Fatal("the status page was never served")
	}
	for n, arc := range arcs(t, dom, names) {
		ejected := hasClass(arc, "ejected") && arc.attrs["fill"] == greyColor
		if ejected != (n == owner) {
			t.Errorf("arc of %s: class %q fill %q; only %s should be ejected (grey)", n, arc.attrs["class"], arc.attrs["fill"], owner)
		}
	}
	if got := rowCell(t, dom, owner, "state"); !strings.HasPrefix(got, "ejected") {
		t.Errorf("%s: state %q, want ejected", owner, got)
	}
	for _, n := range names {
		if got, want := rowCell(t, dom, n, "requests"), fmt.Sprint(served[n]); got != want {
			t.Errorf("after ejection, %s: requests %s, want %s", n, got, want)
		}
	}
	chosen := b.Lookup(key).Chosen
	if got := lookupLine(t, dom, "lookup-chosen"); chosen == owner || !strings.Contains(got, `data-upstream="`+chosen+`"`) {
		t.Errorf("lookup chosen line %s, want %s (owner %s ejected)", got, chosen, owner)
	}
	if got := lookupLine(t, dom, "lookup-preference"); !strings.Contains(got, "unhealthy") {
		t.Errorf("lookup preference line %s does not say the owner was skipped as unhealthy", got)
	}

	// 3. Rendered by the server with one upstream ejected and another
	// slow-starting after readmission; then a screenshot to look at.
	var slow string
	for _, n := range names {
		if n != owner {
			slow = n
			break
		}
	}
	b.HealthReporter().SetHealthy(slow, false, "test")
	b.HealthReporter().SetHealthy(slow, true, "test")
	const problem = "c.yaml:7: upstreams[1].weight: must be > 0, got -1"
	b.RecordReload(false, problem)
	dom = runChromium(t, bin, pageURL, "--dump-dom")
	if got := textOf(t, dom, "last-reload"); !strings.HasPrefix(got, "rejected, ") || !strings.Contains(got, "previous config keeps serving") {
		t.Errorf("last reload %q, want rejected", got)
	}
	if !strings.Contains(textOf(t, dom, "reload-problems"), problem) {
		t.Errorf("the rejected reload's problem is not on the page")
	}
	ownerRow := regexp.MustCompile(`(?s)<tr [^>]*data-upstream="` + regexp.QuoteMeta(owner) + `"[^>]*>(.*?)</tr>`).FindString(dom)
	if !regexp.MustCompile(`<div class="why" data-f="why">health: test<br>since <time datetime="[^"]+"[^>]*>\d+s ago</time>`).MatchString(ownerRow) {
		t.Errorf("%s's row does not say why (health: test) and since when it is ejected", owner)
	}
	a := arcs(t, dom, names)
	if !hasClass(a[owner], "ejected") || !hasClass(a[slow], "slow-start") {
		t.Errorf("arcs: %s %q (want ejected), %s %q (want slow-start)", owner, a[owner].attrs["class"], slow, a[slow].attrs["class"])
	}
	for _, e := range elements(dom, "path", "hatch") {
		if want := e.attrs["id"] == "hatch-arc-"+strings.TrimPrefix(a[slow].attrs["id"], "arc-"); (e.attrs["visibility"] == "visible") != want {
			t.Errorf("hatch %s visibility %q", e.attrs["id"], e.attrs["visibility"])
		}
	}
	if got := rowCell(t, dom, slow, "state"); !strings.HasPrefix(got, "slow start") {
		t.Errorf("%s: state %q, want slow start", slow, got)
	}

	// Screenshots at 1x and 2x, to look at (RINGLB_SCREENSHOT_DIR keeps
	// them).
	for _, scale := range []string{"1", "2"} {
		shot := filepath.Join(t.TempDir(), "status.png")
		runChromium(t, bin, pageURL+"&path=/cart&header="+url.QueryEscape("X-User-ID: "+key),
			"--screenshot="+shot, "--window-size=1280,1000", "--hide-scrollbars", "--force-device-scale-factor="+scale)
		png, err := os.ReadFile(shot)
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Fatalf("screenshot %s: %v (%d bytes)", shot, err, len(png))
		}
		if dir := os.Getenv("RINGLB_SCREENSHOT_DIR"); dir != "" {
			keep := filepath.Join(dir, "ringlb-status-"+scale+"x.png")
			if err := os.WriteFile(keep, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot kept in %s", keep)
		}
	}

	// 4. A reload adds an upstream right after the page is served: the
	// script sees the new version and reloads the page, whose ring now has
	// five arcs.
	echo, _ := url.Parse("http://127.0.0.1:1")
	opts.Upstreams = append(opts.Upstreams, options.Upstream{Name: "echo", URL: echo, Addr: echo.Host, Weight: 1})
	var version string
	update := func() {
		if version, err = b.Update(opts); err != nil {
			t.Errorf("Update: %v", err)
		}
	}
	afterPage.Store(&update)
	dom = runChromium(t, bin, pageURL, "--dump-dom")
	if version == "" {
		t.Fatal("the status page was never served")
	}
	arcs(t, dom, append(names, "echo"))
	if bodies := elements(dom, "body", ""); len(bodies) != 1 || bodies[0].attrs["data-version"] != version {
		t.Errorf("after the reload the page shows version %v, want %s", bodies, version)
	}
}

// textOf returns the text of the element with the given id, tags removed
// and white space collapsed. The element must not contain another element
// of its own tag name.
func textOf(t *testing.T, dom, id string) string {
	t.Helper()
	m := regexp.MustCompile(`<([a-z]+)[^>]* id="` + regexp.QuoteMeta(id) + `"[^>]*>`).FindStringSubmatchIndex(dom)
	if m == nil {
		t.Fatalf("no element #%s in the page", id)
	}
	rest := dom[m[1]:]
	end := strings.Index(rest, "</"+dom[m[2]:m[3]]+">")
	if end < 0 {
		t.Fatalf("element #%s is not closed", id)
	}
	text := html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(rest[:end], ""))
	return strings.Join(strings.Fields(text), " ")
}
