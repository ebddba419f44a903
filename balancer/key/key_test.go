package key

import (
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
	if v, ok := CookieValue(h, "session"); v != "s1" || !ok {
		t.Errorf("got %q %v", v, ok)
	}
	// The first valid pair decides, empty or not, as http.Request.Cookie.
	h = http.Header{"Cookie": {"a=1; session=", "x=2;session=\"s1\"; session=s2"}}
	if v, ok := CookieValue(h, "session"); v != "" || ok {
		t.Errorf("empty first session cookie: got %q %v, want absent", v, ok)
	}
	if _, ok := CookieValue(h, "none"); ok {
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
		if got, ok := ClientIP(r, trusted); got != tc.want || !ok {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	r := &http.Request{RemoteAddr: "127.0.0.1:9", Header: http.Header{"X-Forwarded-For": {"1.2.3.4"}}}
	if got, _ := ClientIP(r, nil); got != "127.0.0.1" {
		t.Errorf("no trusted proxies: got %q", got)
	}
}

// TestHopByHopHeadersAreNoKey: a header the request's Connection header
// lists is removed before the upstream sees it, as are the hop-by-hop
// headers themselves, so none of them gives a key: the key is taken from
// what is forwarded.
func TestHopByHopHeadersAreNoKey(t *testing.T) {
	hdr, _ := newFunc(Source{Kind: Header, Name: "X-User-ID"}, nil, testBodyLimit)
	ck, _ := newFunc(Source{Kind: Cookie, Name: "session"}, nil, testBodyLimit)
	te, _ := newFunc(Source{Kind: Header, Name: "Te"}, nil, testBodyLimit)
	for _, c := range []struct {
		name string
		f    Func
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

// TestHostKey: the host source is the Host lowercased, without port and
// trailing dot (nginx's $host); an IPv6 literal keeps its brackets; no
// host is no
func TestHostKey(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"shop.example", "shop.example"},
		{"Shop.EXAMPLE:8443", "shop.example"},
		{"shop.example.", "shop.example"},
		{"shop.example.:80", "shop.example"},
		{"[::1]:8080", "[::1]"},
		{"[FD00::A]", "[fd00::a]"},
		{"10.0.0.1:80", "10.0.0.1"},
		{"", ""},
		{":80", ""},
	} {
		got, ok := hostKey(&http.Request{Host: tc.host, URL: &url.URL{}})
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("host %q: key %q, %v; want %q", tc.host, got, ok, tc.want)
		}
	}
}

// TestCombineJoinIsInjective: different lists of values never join to the
// same key, NUL and 0x01 bytes (a query value can hold them) included.
func TestCombineJoinIsInjective(t *testing.T) {
	ks, err := New(Source{Kind: Combine, Sources: []Source{{Kind: Query, Name: "a"}, {Kind: Query, Name: "b"}}}, nil, testBodyLimit)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, q := range []string{
		"a=x&b=y", "a=x%00&b=y", "a=x&b=%00y", "a=x%01&b=y", "a=x&b=%01y",
		"a=x%01%02&b=y", "a=x%00%02&b=y", "a=x%01%01&b=y", "a=%00&b=%00", "a=%00%00&b=%01",
	} {
		v, ok := ks.Value(&http.Request{URL: &url.URL{RawQuery: q}})
		if !ok {
			t.Fatalf("%s: absent", q)
		}
		if prev, dup := seen[v]; dup {
			t.Errorf("%s and %s join to the same key %q", prev, q, v)
		}
		seen[v] = q
	}
	if v, _ := ks.Value(&http.Request{URL: &url.URL{RawQuery: "a=x&b=y"}}); v != "x\x00y" {
		t.Errorf("plain values joined as %q, want x\\x00y", v)
	}
}

// testBodyLimit is hash.body_limit's default.
const testBodyLimit = 64 << 10
