//go:build unix

package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/state"
)

// measurePage loads the status page in a frame of the width its query
// gives and writes into #out, as JSON, how far the upstreams table and
// its column of the page reach past their box (0: they fit).
const measurePage = `<!doctype html><html><body style="margin:0">
<iframe id="f" src="/" height="900" style="border:0"></iframe><pre id="out"></pre>
<script>
var f = document.getElementById("f");
f.width = new URLSearchParams(location.search).get("width");
f.addEventListener("load", function () {
  setTimeout(function () {
    var d = f.contentDocument, sec = d.querySelector("section.upstreams"), table = d.querySelector("table[id$=upstreams]");
    var cells = table.querySelectorAll("thead th"), last = cells[cells.length - 1];
    document.getElementById("out").textContent = JSON.stringify({
      hidden: sec.scrollWidth - sec.clientWidth,
      past: Math.round(last.getBoundingClientRect().right - sec.getBoundingClientRect().right),
      pageWidth: d.documentElement.scrollWidth - d.documentElement.clientWidth,
      lastColumn: last.textContent
    });
  }, 300);
}, { once: true });
</script></body></html>`

// The status page at a common laptop width (1400 and 1280 px) shows every
// column of the upstreams table: none is clipped behind a scroll, with
// four upstreams of the demo's kind, one of them draining with hold off
// (the longest admin text).
func TestStatusPageFitsItsWidth(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs headless Chromium")
	}
	bin := chromiumPath(t)
	var ups []options.Upstream
	for i := 1; i <= 4; i++ {
		be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		t.Cleanup(be.Close)
		u := mustParse(t, be.URL)
		ups = append(ups, options.Upstream{Name: fmt.Sprintf("app-%d", i), URL: u, Addr: u.Host, Weight: 1})
	}
	reg := metrics.NewRegistry()
	b, err := balancer.New(balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: ups,
			Ring:      options.Ring{PointsPerWeight: 160},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}, OnMissing: options.OnMissingRandom},
			Timeouts:  options.Timeouts{Dial: time.Second},
		},
	}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front := httptest.NewServer(b)
	t.Cleanup(front.Close)
	for i := range 40 {
		req, _ := http.NewRequest(http.MethodGet, front.URL+"/", nil)
		req.Header.Set("X-User-ID", fmt.Sprint(i))
		if res, err := front.Client().Do(req); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	if _, err := b.SetState("app-2", state.Drain); err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewUnstartedServer(nil)
	h := NewHandler(b, reg, nil, Options{Addr: admin.Listener.Addr().String(), Version: "v1.2.3 (revision 0123456789ab, go1.26.0)", Listen: "127.0.0.1:8080", Started: time.Now()})
	admin.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/measure.html" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, measurePage)
			return
		}
		h.ServeHTTP(w, r)
	})
	admin.Start()
	t.Cleanup(admin.Close)

	for _, width := range []int{1400, 1280} {
		dom := runChromium(t, bin, fmt.Sprintf("%s/measure.html?width=%d", admin.URL, width), "--dump-dom", fmt.Sprintf("--window-size=%d,1000", width+40))
		var m struct {
			Hidden, Past, PageWidth int
			LastColumn              string
		}
		if err := json.Unmarshal([]byte(outOf(t, dom)), &m); err != nil {
			t.Fatalf("measure page at %d px: %v in %q", width, err, outOf(t, dom))
		}
		if m.Hidden > 0 || m.Past > 0 || m.PageWidth > 0 {
			t.Errorf("at %d px the upstreams table's last column (%s) is clipped: %d px hidden in its box, its edge %d px past the box, the page %d px too wide",
				width, m.LastColumn, m.Hidden, m.Past, m.PageWidth)
		}
		t.Logf("at %d px: %+v", width, m)
	}
}
