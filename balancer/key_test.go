package balancer

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"testing"
)

func TestQueryValue(t *testing.T) {
	for _, tc := range []struct {
		raw, v string
		ok     bool
	}{
		{"user=42", "42", true},
		{"a=1&user=x%20y&user=z", "x y", true},
		{"us%65r=a+b", "a b", true},
		{"username=1&user", "", false},
		{"user=&x=1", "", false},
		{"user=%zz&user=ok", "ok", true},
		{"", "", false},
	} {
		v, ok := queryValue(tc.raw, "user")
		if v != tc.v || ok != tc.ok {
			t.Errorf("queryValue(%q) = %q, %v; want %q, %v", tc.raw, v, ok, tc.v, tc.ok)
		}
	}
}

func TestCookieValue(t *testing.T) {
	h := http.Header{"Cookie": {"a=1; session=\x01", "x=2;session=\"s1\"; session=s2"}}
	if v, ok := cookieValue(h, "session"); v != "s1" || !ok {
		t.Errorf("got %q %v", v, ok)
	}
	// The first valid pair decides, empty or not, as http.Request.Cookie.
	h = http.Header{"Cookie": {"a=1; session=", "x=2;session=\"s1\"; session=s2"}}
	if v, ok := cookieValue(h, "session"); v != "" || ok {
		t.Errorf("empty first session cookie: got %q %v, want absent", v, ok)
	}
	if _, ok := cookieValue(h, "none"); ok {
		t.Error("found a missing cookie")
	}
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"untrusted peer ignores XFF", "203.0.113.9:5000", []string{"1.1.1.1"}, "203.0.113.9"},
		{"trusted peer, no XFF", "127.0.0.1:5000", nil, "127.0.0.1"},
		{"first untrusted from the right", "127.0.0.1:5000", []string{"6.6.6.6, 198.51.100.7, 10.0.0.2"}, "198.51.100.7"},
		{"spoofed leftmost over lines", "10.1.1.1:80", []string{"6.6.6.6", "198.51.100.7 , 10.0.0.3"}, "198.51.100.7"},
		{"all trusted: leftmost", "127.0.0.1:1", []string{"10.0.0.5, 10.0.0.6"}, "10.0.0.5"},
		{"garbage is the client", "127.0.0.1:1", []string{"1.2.3.4, nonsense, 10.0.0.1"}, "nonsense"},
		{"v6 peer", "[fd00::1]:443", []string{"2001:db8::5"}, "2001:db8::5"},
		{"mapped v4", "[::ffff:127.0.0.1]:1", []string{"::ffff:198.51.100.8"}, "198.51.100.8"},
	} {
		r := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got, ok := clientIP(r, trusted); got != tc.want || !ok {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	r := &http.Request{RemoteAddr: "127.0.0.1:9", Header: http.Header{"X-Forwarded-For": {"1.2.3.4"}}}
	if got, _ := clientIP(r, nil); got != "127.0.0.1" {
		t.Errorf("no trusted proxies: got %q", got)
	}
}

// TestIPKeyIgnoresSpoofedEntries: behind a trusted proxy, whatever a client
// puts in front of its own X-Forwarded-For entry does not move it.
func TestIPKeyIgnoresSpoofedEntries(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	opts := baseOptions(upstreamsOf(t, bes...))
	opts.Key = []KeySource{{Kind: KeyIP}}
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
	var ups []UpstreamOptions
	for _, hp := range []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3"} {
		u := mustURL(t, "http://"+hp)
		ups = append(ups, UpstreamOptions{Name: "n" + hp, URL: u, Addr: u.Host, Weight: 1})
	}
	opts := baseOptions(ups)
	opts.Placement = "nginx"
	opts.PointsPerWeight = 0
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

// TestHopByHopHeadersAreNoKey: a header the request's Connection header
// lists is removed before the upstream sees it, as are the hop-by-hop
// headers themselves, so none of them gives a key: the key is taken from
// what is forwarded.
func TestHopByHopHeadersAreNoKey(t *testing.T) {
	hdr, _ := newKeyFunc(KeySource{Kind: KeyHeader, Name: "X-User-ID"}, nil)
	ck, _ := newKeyFunc(KeySource{Kind: KeyCookie, Name: "session"}, nil)
	te, _ := newKeyFunc(KeySource{Kind: KeyHeader, Name: "Te"}, nil)
	for _, c := range []struct {
		name string
		f    keyFunc
		h    http.Header
		want string // "" for absent
	}{
		{"header", hdr, http.Header{"X-User-Id": {"alice"}}, "alice"},
		{"header listed in Connection", hdr, http.Header{"X-User-Id": {"alice"}, "Connection": {"keep-alive, x-user-id"}}, ""},
		{"header listed on a second Connection line", hdr, http.Header{"X-User-Id": {"alice"}, "Connection": {"keep-alive", "X-User-ID"}}, ""},
		{"other header listed", hdr, http.Header{"X-User-Id": {"alice"}, "Connection": {"x-user"}}, "alice"},
		{"cookie", ck, http.Header{"Cookie": {"session=s1"}}, "s1"},
		{"Cookie listed in Connection", ck, http.Header{"Cookie": {"session=s1"}, "Connection": {"Cookie"}}, ""},
		{"hop-by-hop header", te, http.Header{"Te": {"trailers"}}, ""},
	} {
		r := &http.Request{Header: c.h, URL: &url.URL{}}
		v, ok := c.f(r)
		if (c.want == "") == ok || v != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, v, ok, c.want)
		}
	}
}
