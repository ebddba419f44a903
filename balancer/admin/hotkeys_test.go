package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
)

// /debug/hotkeys lists the hottest keys by hash, with their owner and
// where they went, and /debug/lookup?hash= places one of them.
func TestHotKeysEndpoint(t *testing.T) {
	b, front, admin := serveKeyed(t, options.OnMissingRandom, hold.Options{}, "a", "b", "c")

	send := func(k string) {
		req, _ := http.NewRequest(http.MethodGet, front.URL, nil)
		if k != "" {
			req.Header.Set("X-User-ID", k)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	for i := range 40 {
		send("hot")
		if i%2 == 0 {
			send(fmt.Sprint("warm-", i%4))
		}
		send("") // no key: random, not counted
	}
	code, _, body := fetch(t, http.MethodGet, admin.URL+"/debug/hotkeys")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	m := decode(t, body)
	keys, _ := m["keys"].([]any)
	if m["window_seconds"] == nil || m["requests"] != 60.0 || len(keys) != 3 {
		t.Fatalf("hotkeys %s", body)
	}
	top := keys[0].(map[string]any)
	lk := b.Lookup("hot")
	if top["hash"] != lk.Hash || top["requests"] != 40.0 || top["share"] != 40.0/60 || top["owner"] != lk.Owner || top["chosen"] != lk.Chosen {
		t.Errorf("hottest %v; lookup of hot: %+v", top, lk)
	}
	for _, f := range []string{"hash", "requests", "share", "owner", "chosen"} {
		if _, ok := top[f]; !ok {
			t.Errorf("hot key lacks %q: %v", f, top)
		}
	}
	_, _, body = fetch(t, http.MethodGet, admin.URL+"/debug/lookup?hash="+lk.Hash)
	if l := decode(t, body); l["key"] != nil || l["hash"] != lk.Hash || l["owner"] != lk.Owner || l["chosen"] != lk.Chosen {
		t.Errorf("lookup by hash: %s", body)
	}
	for _, bad := range []string{"/debug/lookup?hash=zz", "/debug/hotkeys?window=last"} {
		if code, _, body := fetch(t, http.MethodGet, admin.URL+bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
	if code, _, body := fetch(t, http.MethodGet, admin.URL+"/debug/hotkeys?window=previous"); code != http.StatusOK || decode(t, body)["requests"] != 0.0 {
		t.Errorf("previous window: %d %s", code, body)
	}
}

// With hash.salt_file, /debug/hotkeys lists salted key hashes, the status
// page's links place them through /debug/lookup?hash=, and /debug/lookup
// shows the ring position as "hash" and the salted one as "key_hash".
func TestHotKeysSalted(t *testing.T) {
	b, front, admin := serveKeyedWith(t, func(o *balancer.Options) { o.Hash.Salt = []byte("fleet-salt-0123456789") }, "a", "b", "c")
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, front.URL, nil)
		req.Header.Set("X-User-ID", "4242")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	lk := b.Lookup("4242")
	if lk.KeyHash == lk.Hash || len(lk.KeyHash) != 16 {
		t.Fatalf("lookup of 4242: hash %s, key_hash %s; want a salted key_hash", lk.Hash, lk.KeyHash)
	}
	_, _, body := fetch(t, http.MethodGet, admin.URL+"/debug/hotkeys")
	keys, _ := decode(t, body)["keys"].([]any)
	if len(keys) != 1 || keys[0].(map[string]any)["hash"] != lk.KeyHash {
		t.Fatalf("hotkeys %s; want the one key as %s", body, lk.KeyHash)
	}
	_, _, page := fetch(t, http.MethodGet, admin.URL+"/")
	if !strings.Contains(page, "hash="+lk.KeyHash) || strings.Contains(page, lk.Hash) {
		t.Errorf("status page: no link to hash=%s, or the ring position %s shown", lk.KeyHash, lk.Hash)
	}
	code, _, body := fetch(t, http.MethodGet, admin.URL+"/debug/lookup?hash="+lk.KeyHash)
	if l := decode(t, body); code != http.StatusOK || l["key"] != nil || l["hash"] != lk.Hash || l["key_hash"] != lk.KeyHash || l["owner"] != lk.Owner {
		t.Errorf("lookup by the salted hash: %d %s", code, body)
	}
	_, _, body = fetch(t, http.MethodGet, admin.URL+"/debug/lookup?key=4242")
	if l := decode(t, body); l["hash"] != lk.Hash || l["key_hash"] != lk.KeyHash {
		t.Errorf("lookup by key: %s", body)
	}
	if code, _, body := fetch(t, http.MethodGet, admin.URL+"/debug/lookup?hash="+lk.Hash); code != http.StatusNotFound || !strings.Contains(body, "salt_file") {
		t.Errorf("lookup by the ring position with a salt: %d %s; want 404 saying why", code, body)
	}
}

// The status page lists the hottest keys with their owner and where they went.
func TestHotKeysOnStatusPage(t *testing.T) {
	b, front, admin := serveKeyed(t, options.OnMissingRandom, hold.Options{}, "a")
	_, _, page := fetch(t, http.MethodGet, admin.URL+"/")
	if !strings.Contains(page, "no keyed request in this window yet") {
		t.Error("empty hot keys table not said")
	}
	req, _ := http.NewRequest(http.MethodGet, front.URL, nil)
	req.Header.Set("X-User-ID", "k")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	_, _, page = fetch(t, http.MethodGet, admin.URL+"/")
	row := regexp.MustCompile(`<tr><td><a [^>]*data-hash="([0-9a-f]{16})"><code>[0-9a-f]+</code></a></td><td class="n">1</td><td class="n">100.0%</td><td>a</td><td>a</td></tr>`).FindStringSubmatch(page)
	if row == nil || row[1] != b.Lookup("k").Hash {
		t.Errorf("no hot key row for k in the status page")
	}
}

// serveKeyed serves a balancer keyed on X-User-ID over upstreams that
// answer their own name, with its admin handler, on loopback.
func serveKeyed(t *testing.T, onMissing options.OnMissing, hold hold.Options, names ...string) (b *balancer.Balancer, front, admin *httptest.Server) {
	t.Helper()
	return serveKeyedWith(t, func(o *balancer.Options) { o.Hash.OnMissing, o.Hold = onMissing, hold }, names...)
}

// serveKeyedWith is serveKeyed with the options as mut leaves them.
func serveKeyedWith(t *testing.T, mut func(*balancer.Options), names ...string) (b *balancer.Balancer, front, admin *httptest.Server) {
	t.Helper()
	var ups []options.Upstream
	for _, n := range names {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, n) }))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		ups = append(ups, options.Upstream{Name: n, URL: u, Addr: u.Host, Weight: 1})
	}
	opts := balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: ups,
			Ring:      options.Ring{PointsPerWeight: 160},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}},
			Timeouts:  options.Timeouts{Dial: time.Second},
		},
	}
	mut(&opts)
	reg := metrics.NewRegistry()
	b, err := balancer.New(opts, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front = httptest.NewServer(b)
	t.Cleanup(front.Close)
	admin = httptest.NewServer(NewHandler(b, reg, nil, Options{}))
	t.Cleanup(admin.Close)
	return b, front, admin
}
