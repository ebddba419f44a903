//go:build unix

package admin

import (
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/state"
)

// pressPage is served beside the status page, on the admin listener's own
// origin: it loads the page in a frame, answers its confirmation with
// confirm (true or false), presses the button for state on upstream (in
// the section of pool, if given), then waits for the page's POST (if it
// makes one) to be answered and shown in the row, and writes what it saw
// into #out as JSON.
const pressPage = `<!doctype html><html><body>
<iframe id="f" src="/" width="1200" height="800"></iframe><pre id="out"></pre>
<script>
var q = new URLSearchParams(location.search);
var f = document.getElementById("f");
f.addEventListener("load", function () {
  try { run(); } catch (e) { document.getElementById("out").textContent = "error " + e; }
}, { once: true });
function run() {
  var w = f.contentWindow, d = f.contentDocument, asked = [];
  w.confirm = function (text) { asked.push(text); return q.get("confirm") === "yes"; };
  // The page's POST, when it makes one: the row changes once it is answered.
  var fetch0 = w.fetch, posted = null;
  w.fetch = function (url, opts) {
    var p = fetch0.call(w, url, opts);
    // Settled once the answer's body is in (the page renders the row
    // from the body), not at its headers.
    if (opts && opts.method === "POST") posted = p.then(function (r) { return r.clone().text(); });
    return p;
  };
  // With pool=, the row in that pool's section of a page of several.
  var sel = (q.get("pool") ? 'section[data-pool="' + q.get("pool") + '"] ' : "") + 'tr[data-upstream="' + q.get("upstream") + '"]';
  var before = d.querySelector(sel + ' [data-f="admin"]').textContent;
  d.querySelector(sel + ' button[value="' + q.get("state") + '"]').click();
  var tries = 0;
  function finish() {
    var cell = d.querySelector(sel + ' [data-f="admin"]').textContent;
    if (posted && cell === before && ++tries < 100) {
      setTimeout(finish, 20);
      return;
    }
    var disabled = [];
    d.querySelectorAll(sel + " button").forEach(function (b) { if (b.disabled) disabled.push(b.value); });
    document.getElementById("out").textContent = JSON.stringify({
      asked: asked, before: before, after: cell, disabled: disabled,
      rowClass: d.querySelector(sel).className, live: d.getElementById("live").textContent
    });
  }
  if (posted) posted.then(function () { setTimeout(finish, 0); }, finish);
  else setTimeout(finish, 200);
}
</script></body></html>`

// foreignPage, served from another origin, tries to drain an upstream
// with a cross-site POST, as a hostile page a user visits would.
const foreignPage = `<!doctype html><html><body><pre id="out">pending</pre><script>
fetch(new URLSearchParams(location.search).get("target"), { method: "POST", mode: "no-cors" })
  .then(function () { document.getElementById("out").textContent = "sent"; },
        function (e) { document.getElementById("out").textContent = "error " + e; });
</script></body></html>`

// pressResult is what pressPage writes.
type pressResult struct {
	Asked    []string `json:"asked"`
	Before   string   `json:"before"`
	After    string   `json:"after"`
	Disabled []string `json:"disabled"`
	RowClass string   `json:"rowClass"`
	Live     string   `json:"live"`
}

func outOf(t *testing.T, dom string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<pre id="out">(.*?)</pre>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no #out in the page:\n%s", dom)
	}
	return html.UnescapeString(m[1])
}

// startPressAdmin serves the admin handler newHandler returns for the
// listener's own Opts.Addr, with pressPage at /press.html. afterPage, if
// not nil, is run (once, then cleared) just after a status page is served.
func startPressAdmin(t *testing.T, newHandler func(Options) http.Handler, afterPage *atomic.Pointer[func()]) *httptest.Server {
	t.Helper()
	admin := httptest.NewUnstartedServer(nil)
	h := newHandler(Options{Addr: admin.Listener.Addr().String()})
	admin.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/press.html" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, pressPage)
			return
		}
		h.ServeHTTP(w, r)
		if r.URL.Path == "/" && afterPage != nil {
			if f := afterPage.Swap(nil); f != nil {
				(*f)()
			}
		}
	})
	admin.Start()
	t.Cleanup(admin.Close)
	return admin
}

// press loads pressURL (pressPage with its query) and returns what it saw.
func press(t *testing.T, bin, pressURL string) pressResult {
	t.Helper()
	dom := runChromium(t, bin, pressURL, "--dump-dom")
	var res pressResult
	if err := json.Unmarshal([]byte(outOf(t, dom)), &res); err != nil {
		t.Fatalf("press page: %v in %q\n%s", err, outOf(t, dom), dom)
	}
	return res
}

// The status page's Drain / Maint / Ready buttons in a real browser: a
// press asks first; answered yes, the upstream's state changes (on the
// server and in the row, whose buttons follow); answered no, nothing
// changes. A page of another origin cannot drain an upstream.
func TestStatusPageStateButtonsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs headless Chromium")
	}
	bin := chromiumPath(t)
	var ups []options.Upstream
	for _, n := range []string{"alpha", "bravo", "charlie"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, n) }))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		ups = append(ups, options.Upstream{Name: n, URL: u, Addr: u.Host, Weight: 1})
	}
	reg := metrics.NewRegistry()
	b, err := balancer.New(balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: ups,
			Ring:      options.Ring{PointsPerWeight: 160},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}},
			Timeouts:  options.Timeouts{Dial: time.Second},
			Hold:      hold.Options{Idle: time.Hour, MaxKeys: 100},
		},
	}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	admin := startPressAdmin(t, func(opts Options) http.Handler { return NewHandler(b, reg, nil, opts) }, nil)
	press := func(upstream, state, confirm string) pressResult {
		t.Helper()
		return press(t, bin, admin.URL+"/press.html?upstream="+upstream+"&state="+state+"&confirm="+confirm)
	}

	// Answered no: nothing changes.
	res := press("bravo", "maint", "no")
	if len(res.Asked) != 1 || !regexp.MustCompile(`^Put bravo in maint\?`).MatchString(res.Asked[0]) {
		t.Errorf("maint asked %q", res.Asked)
	}
	if st, _ := b.UpstreamState("bravo"); st.State != state.Ready || res.After != "ready" {
		t.Errorf("declined maint: state %v, row says %q", st.State, res.After)
	}

	// Answered yes: bravo drains, and the row says so.
	res = press("bravo", "drain", "yes")
	if len(res.Asked) != 1 || !regexp.MustCompile(`^Drain bravo\? It takes no new keys`).MatchString(res.Asked[0]) {
		t.Errorf("drain asked %q", res.Asked)
	}
	if st, _ := b.UpstreamState("bravo"); st.State != state.Drain {
		t.Errorf("after pressing Drain: state %v", st.State)
	}
	if res.Before != "ready" || res.After != "drain (drained)" || len(res.Disabled) != 1 || res.Disabled[0] != "drain" ||
		!regexp.MustCompile(`\badmin-drain\b`).MatchString(res.RowClass) {
		t.Errorf("after pressing Drain the row shows %+v", res)
	}
	// Rendered by the server in that state, and Ready brings it back.
	res = press("bravo", "ready", "yes")
	if st, _ := b.UpstreamState("bravo"); st.State != state.Ready || res.Before != "drain (drained)" || res.After != "ready" {
		t.Errorf("after pressing Ready: state %v, row %+v", st.State, res)
	}

	// Another origin's page: its POST is refused.
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, foreignPage)
	}))
	t.Cleanup(foreign.Close)
	dom := runChromium(t, bin, foreign.URL+"/?target="+url.QueryEscape(admin.URL+"/upstreams/charlie/drain"), "--dump-dom")
	if out := outOf(t, dom); out == "pending" {
		t.Errorf("the foreign page's request did not complete: %q", out)
	}
	if st, _ := b.UpstreamState("charlie"); st.State != state.Ready {
		t.Errorf("a foreign page drained charlie: %v", st.State)
	}
}
