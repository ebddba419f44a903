package balancer

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/chat"
)

// TestIPKeyIgnoresSpoofedEntries: behind a trusted proxy, whatever a client
// puts in front of its own X-Forwarded-For entry does not move it.
func TestIPKeyIgnoresSpoofedEntries(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	opts := baseOptions(upstreamsOf(t, bes...))
	opts.Hash.Key = []key.Source{{Kind: key.IP}}
	opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
	b, _, front := proxy(t, opts)
	for i := range 20 {
		client := fmt.Sprintf("198.51.100.%d", i)
		want := b.Lookup(client).Chosen
		for j := range 5 {
			_, got, _ := get(t, front.Client(), front.URL+"/", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d, %s, 10.0.0.%d", j, client, j))
			if got != want {
				t.Fatalf("client %s with spoofed entry %d went to %s, its key belongs to %s", client, j, got, want)
			}
		}
	}
}

func TestNginxPlacementLookup(t *testing.T) {
	var ups []options.Upstream
	for _, hp := range []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3"} {
		u := mustURL(t, "http://"+hp)
		ups = append(ups, options.Upstream{Name: "n" + hp, URL: u, Addr: u.Host, Weight: 1})
	}
	opts := baseOptions(ups)
	opts.Ring.Placement = "nginx"
	opts.Ring.PointsPerWeight = 0
	b, err := New(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lk := b.Lookup("/some/uri")
	if len(lk.Hash) != 8 || lk.Chosen != lk.Owner || len(lk.Preference) != 3 {
		t.Errorf("lookup %+v", lk)
	}
	if st := b.Status(); st.Placement != "nginx" || st.PointsPerWeight != 160 || st.Upstreams[0].Name != "n10.0.0.1:8080" {
		t.Errorf("status %+v", st)
	}
}

// TestAffinityPerSource checks, for each key source, that one key always
// reaches the same upstream and that different keys spread.
func TestAffinityPerSource(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	cases := []struct {
		src key.Source
		req func(front, key string) (string, []string)
	}{
		{key.Source{Kind: key.Cookie, Name: "session"}, func(f, k string) (string, []string) {
			return f + "/x", []string{"Cookie", "other=1; session=" + k}
		}},
		{key.Source{Kind: key.Header, Name: "x-user-id"}, func(f, k string) (string, []string) {
			return f + "/x", []string{"X-User-ID", k}
		}},
		{key.Source{Kind: key.Query, Name: "user"}, func(f, k string) (string, []string) {
			return f + "/x?a=1&user=" + k + "&b=2", nil
		}},
		{key.Source{Kind: key.URI}, func(f, k string) (string, []string) {
			return f + "/p/" + k + "?q=1", nil
		}},
		{key.Source{Kind: key.Path}, func(f, k string) (string, []string) {
			return f + "/p/" + k, nil
		}},
		{key.Source{Kind: key.IP}, func(f, k string) (string, []string) {
			return f + "/x", []string{"X-Forwarded-For", "10.1.0." + k}
		}},
		{key.Source{Kind: key.Host}, func(f, k string) (string, []string) {
			return f + "/x", []string{"Host", "Shop-" + k + ".example:8080"}
		}},
		{key.Source{Kind: key.Combine, Sources: []key.Source{{Kind: key.Host}, {Kind: key.URI}}}, func(f, k string) (string, []string) {
			return f + "/p/" + k, []string{"Host", "shop.example"}
		}},
	}
	for _, tc := range cases {
		t.Run(string(tc.src.Kind), func(t *testing.T) {
			opts := baseOptions(upstreamsOf(t, bes...))
			opts.Hash.Key = []key.Source{tc.src}
			opts.Hash.OnMissing = "reject" // a missing key would show as 400
			opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			_, _, front := proxy(t, opts)
			c := front.Client()
			seen := map[string]bool{}
			for k := range 30 {
				key := fmt.Sprint(k + 1)
				target, hdr := tc.req(front.URL, key)
				_, first, _ := get(t, c, target, hdr...)
				for range 5 {
					code, got, _ := get(t, c, target, hdr...)
					if code != 200 || got != first {
						t.Fatalf("key %s: got %d from %q, first went to %q", key, code, got, first)
					}
				}
				seen[first] = true
			}
			if len(seen) < 2 {
				t.Errorf("30 keys all went to %v", seen)
			}
		})
	}
}

func TestAffinityCookie(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	opts := baseOptions(upstreamsOf(t, bes...))
	opts.Hash.Key = []key.Source{{Kind: key.Header, Name: "X-User-ID"}}
	opts.Hash.OnMissing = "cookie"
	opts.Hash.Cookie.Name = "ringlb_affinity"
	opts.Hash.Cookie.TTL = 24 * time.Hour
	opts.Hash.Cookie.Secure = true
	opts.Hash.Cookie.HTTPOnly = true
	b, _, front := proxy(t, opts)
	c := front.Client()

	res, err := c.Get(front.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	sc := res.Header.Get("Set-Cookie")
	for _, want := range []string{"ringlb_affinity=", "Path=/", "Max-Age=86400", "HttpOnly", "Secure", "SameSite=Lax"} {
		if !strings.Contains(sc, want) {
			t.Errorf("Set-Cookie %q lacks %q", sc, want)
		}
	}
	cookies := res.Cookies()
	if len(cookies) != 1 || len(cookies[0].Value) != 32 {
		t.Fatalf("cookies %v", cookies)
	}
	id := cookies[0].Value
	first := res.Header.Get("X-Backend")
	if want := b.Lookup(id).Chosen; first != want {
		t.Errorf("first request went to %s, the cookie's key belongs to %s", first, want)
	}
	// Later requests carrying the cookie stick, and the cookie beats the
	// header source; no new cookie is set.
	for i := range 20 {
		req, _ := http.NewRequest(http.MethodGet, front.URL+"/", nil)
		req.Header.Set("Cookie", "ringlb_affinity="+id)
		req.Header.Set("X-User-ID", fmt.Sprint("user", i))
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if got := res.Header.Get("X-Backend"); got != first {
			t.Fatalf("request %d with the cookie went to %s, not %s", i, got, first)
		}
		if res.Header.Get("Set-Cookie") != "" {
			t.Fatalf("cookie set again: %q", res.Header.Get("Set-Cookie"))
		}
	}
}

func TestOnMissingReject(t *testing.T) {
	be := newBackend(t, "a")
	opts := baseOptions(upstreamsOf(t, be))
	opts.Hash.Key = []key.Source{{Kind: key.Cookie, Name: "session"}, {Kind: key.Header, Name: "X-User-ID"}}
	opts.Hash.OnMissing = "reject"
	_, _, front := proxy(t, opts)
	code, _, body := get(t, front.Client(), front.URL+"/")
	if code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", code)
	}
	if want := "missing hash key: the request has none of cookie session, header X-User-ID\n"; body != want {
		t.Errorf("body %q, want %q", body, want)
	}
	if be.hits.Load() != 0 {
		t.Error("rejected request reached the upstream")
	}
}

// TestAffinityCookieSurvives1xx: the generated affinity cookie reaches
// the client on the final response when the upstream sends a 103 Early
// Hints first (net/http sends and clears the header map with a 1xx), and
// such a request is still retried elsewhere when its upstream fails
// after the 1xx.
func TestAffinityCookieSurvives1xx(t *testing.T) {
	hints := func(w http.ResponseWriter) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
	}
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		hints(w)
		panic(http.ErrAbortHandler) // a fails after its 1xx
	}
	bb.handle = func(w http.ResponseWriter, r *http.Request) {
		hints(w)
		io.WriteString(w, "b")
	}
	opts := baseOptions(upstreamsOf(t, a, bb))
	opts.Hash.Key = []key.Source{{Kind: key.Header, Name: "X-User-ID"}}
	opts.Hash.OnMissing = "cookie"
	opts.Hash.Cookie.Name = "ringlb_affinity"
	_, _, front := proxy(t, opts)
	c := front.Client()
	for i := 0; i < 50 && a.hits.Load() < 3; i++ {
		res, err := c.Get(front.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("X-Backend") != "b" {
			t.Errorf("request %d: %d from %q, want 200 from b (a's failures retried)", i, res.StatusCode, res.Header.Get("X-Backend"))
		}
		if cs := res.Cookies(); len(cs) != 1 || cs[0].Name != "ringlb_affinity" || len(cs[0].Value) != 32 {
			t.Errorf("request %d: cookies %v, want the affinity cookie", i, cs)
		}
	}
	if a.hits.Load() == 0 {
		t.Fatal("no random key landed on a in 50 requests")
	}
}

// TestCombinePresence: a combine is present only when every part is, and
// then its key is the parts joined, hashed as one; when a part is absent
// the next source in hash.key is tried. Each request must reach the
// upstream that /debug/lookup's placement gives for the key these rules
// say, over keys enough that another rule would show.
func TestCombinePresence(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	opts := baseOptions(upstreamsOf(t, bes...))
	opts.Hash.Key = []key.Source{
		{Kind: key.Combine, Sources: []key.Source{{Kind: key.Header, Name: "X-Tenant"}, {Kind: key.Query, Name: "user"}, {Kind: key.Host}}},
		{Kind: key.Query, Name: "user"},
	}
	opts.Hash.OnMissing = options.OnMissingReject
	b, _, front := proxy(t, opts)
	c := front.Client()
	for k := range 24 {
		tenant, user := fmt.Sprint("t", k), fmt.Sprint("u", k)
		// All three parts: the joined key.
		code, got, _ := get(t, c, front.URL+"/x?user="+user, "X-Tenant", tenant, "Host", "Shop.example:1")
		if want := b.Lookup(tenant + "\x00" + user + "\x00shop.example").Chosen; code != 200 || got != want {
			t.Fatalf("key %d with every part: %d from %q, want %q", k, code, got, want)
		}
		// No tenant: the combine is absent, the query alone keys.
		code, got, _ = get(t, c, front.URL+"/x?user="+user)
		if want := b.Lookup(user).Chosen; code != 200 || got != want {
			t.Fatalf("key %d without X-Tenant: %d from %q, want %q (the user query alone)", k, code, got, want)
		}
	}
	// No user: neither source is present.
	if code, _, _ := get(t, c, front.URL+"/x", "X-Tenant", "t1"); code != http.StatusBadRequest {
		t.Errorf("no user: %d, want 400", code)
	}
	if key, src, ok := b.KeyOf(&http.Request{Host: "h", URL: mustURL(t, "/x?user=u"), Header: http.Header{"X-Tenant": {"t"}}}); !ok || key != "t\x00u\x00h" || src != "combine [header X-Tenant, query user, host]" {
		t.Errorf("KeyOf = %q, %q, %v", key, src, ok)
	}
}

// TestKeyLabel: position says which source gave the key, and keyLabel
// names it in one word, for log lines.
func TestKeyLabel(t *testing.T) {
	u := mustURL(t, "http://a.internal")
	opts := baseOptions([]options.Upstream{{Name: "a", URL: u, Weight: 1}})
	opts.Hash.Key = []key.Source{
		{Kind: key.JSON, Name: "prompt_cache_key"},
		{Kind: key.Combine, Sources: []key.Source{{Kind: key.Host}, {Kind: key.Header, Name: "X-Tenant"}}},
		{Kind: key.Cookie, Name: "session"},
	}
	b, err := New(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := b.snap.Load()
	for _, tc := range []struct {
		r    *http.Request
		want string
	}{
		{chat.Request(`{"prompt_cache_key":"c"}`), "json:prompt_cache_key"},
		{&http.Request{Host: "h", URL: u, Header: http.Header{"X-Tenant": {"t"}}}, "combine:[host,header:X-Tenant]"},
		{&http.Request{URL: u, Header: http.Header{"Cookie": {"session=s"}}}, "cookie:session"},
		{&http.Request{URL: u, Header: http.Header{}}, ""},
	} {
		_, src, _ := b.position(s, &downstream.Writer{}, tc.r)
		if got := s.keyLabel(src); got != tc.want {
			t.Errorf("source %d labelled %q, want %q", src, got, tc.want)
		}
	}
}
