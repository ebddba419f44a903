//go:build unix

package admin

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// The status page of several pools in a real browser: pressing Drain in
// the second pool's section drains that pool's upstream and not the
// same-named one of the first pool; a reload that changes only the second
// pool's ring reloads the page; the request lookup names the pool the
// routes pick.
func TestStatusPagePoolsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs headless Chromium")
	}
	bin := chromiumPath(t)
	rt, reg, optsOf := poolsRouter(t)
	// afterPage, when set, runs once just after the next status page is
	// served: what it changes only the page's script can show.
	var afterPage atomic.Pointer[func()]
	admin := startPressAdmin(t, func(opts Options) http.Handler { return NewRouterHandler(rt, reg, nil, opts) }, &afterPage)

	// Drain a in assets, the second section; sessions has an a too.
	res := press(t, bin, admin.URL+"/press.html?pool=assets&upstream=a&state=drain&confirm=yes")
	// The live line says what was pressed, unless a periodic refresh
	// that was under way wrote its own line over it since.
	// Hold is off in these pools: the row and the question say that the
	// drain keeps no key in use.
	if len(res.Asked) != 1 || !strings.Contains(res.Asked[0], "Hold is off") || res.Before != "ready" || res.After != "drain (hold off: keys in use not kept)" ||
		!(strings.Contains(res.Live, "assets/a: drain") || strings.HasPrefix(res.Live, "live ·")) {
		t.Errorf("after pressing Drain on assets/a the row shows %+v", res)
	}
	_, _, body := fetch(t, http.MethodGet, admin.URL+"/upstreams")
	var ups struct {
		Pools map[string][]upstreamStateJSON `json:"pools"`
	}
	if err := json.Unmarshal([]byte(body), &ups); err != nil {
		t.Fatal(err)
	}
	for pool, want := range map[string]string{"assets": "drain", "sessions": "ready"} {
		for _, u := range ups.Pools[pool] {
			if u.Name == "a" && u.State != want {
				t.Errorf("after pressing Drain on assets/a: %s/a is %s, want %s", pool, u.State, want)
			}
		}
	}

	// Only assets changes, right after the page is served: the page
	// reloads and shows assets' new ring; the lookup of ?host=&key= names
	// assets and its owner.
	sessions := rt.Pool("sessions").Version()
	var version string
	update := func() {
		var err error
		if version, err = rt.Pool("assets").Update(optsOf("assets", "a", "c", "d")); err != nil {
			t.Errorf("Update: %v", err)
		}
	}
	afterPage.Store(&update)
	dom := runChromium(t, bin, admin.URL+"/?host=img.cdn.example&key=u1", "--dump-dom")
	if version == "" {
		t.Fatal("the status page was never served")
	}
	got := map[string]string{}
	for _, e := range elements(dom, "section", "pool") {
		got[e.attrs["data-pool"]] = e.attrs["data-version"]
	}
	if got["assets"] != version || got["sessions"] != sessions {
		t.Errorf("after assets changed the page shows versions %v, want assets %s, sessions %s", got, version, sessions)
	}
	if !strings.Contains(dom, `id="p1-arc-2" data-upstream="d"`) {
		t.Errorf("the reloaded page has no arc for assets' new upstream d")
	}
	if bodies := elements(dom, "body", ""); len(bodies) != 1 || bodies[0].attrs["data-refreshed"] == "" {
		t.Errorf("the page's script never refreshed it (body %v)", bodies)
	}
	if got := lookupLine(t, dom, "request-pool"); !strings.Contains(got, ">assets</a>") {
		t.Errorf("request lookup pool line %s, want assets", got)
	}
	owner := rt.Pool("assets").Lookup("u1").Owner
	if got := lookupLine(t, dom, "request-owner"); !strings.Contains(got, `data-upstream="`+owner+`"`) {
		t.Errorf("request lookup owner line %s, want %s", got, owner)
	}
}
