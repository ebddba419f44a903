package key

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// fuzzTrusted are the trusted proxies FuzzKeyExtraction's ip source uses.
var fuzzTrusted = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fd00::/8"),
}

// fuzzRemotes are RemoteAddr forms: trusted and untrusted peers, IPv4,
// IPv6, v4-mapped, zoned; the last slot is the fuzzed string itself.
var fuzzRemotes = []string{
	"127.0.0.1:1234", "10.1.2.3:80", "[::1]:443", "[fd00::7]:8080", "[::ffff:10.0.0.1]:9",
	"[fe80::1%eth0]:80", "203.0.113.7:5", "[2001:db8::1]:6", "@", "",
}

// FuzzKeyExtraction feeds every key source requests built from arbitrary
// Cookie lines, header values, raw queries, X-Forwarded-For chains and
// RemoteAddrs (more than a server would let through: control bytes
// included). Each source must not panic, must return a value exactly when
// it says the source is present, no longer than its input, and must agree
// with the standard library's reading of the same input:
// http.Request.Cookie for cookies (its value; empty counting as absent), url.ParseQuery
// for queries (where it succeeds), and, for the ip source, a reference walk
// of X-Forwarded-For written independently. Run it with
//
//	go test ./balancer/key -run '^$' -fuzz FuzzKeyExtraction -fuzztime 60s
func FuzzKeyExtraction(f *testing.F) {
	f.Add("session=abc; other=1", "session", "user-42", "user=42&a=b", "user", "198.51.100.7, 10.0.0.2", uint8(0), "")
	f.Add("a=1; session=\nx=2;session=\"s1\"; session=s2", "session", "", "a=1&user=x%20y&user=z", "user", "6.6.6.6\n198.51.100.7 , 10.0.0.3", uint8(1), "")
	f.Add("session=\"\"; session= v ; session=a\"b", "session", "\x00", "us%65r=a+b", "user", "1.2.3.4, nonsense, 10.0.0.1", uint8(2), "")
	// Regressions: cookieValue read these three unlike net/http (it took a
	// value with non-ASCII bytes once TrimSpace had eaten the U+00A0, missed
	// a name with blanks around it, and took a value with a backslash).
	f.Add("session=caf\xc3\xa9\u00a0; session=ok", "session", "v", "user=%zz&user=ok", "user", "::ffff:198.51.100.8", uint8(3), "")
	f.Add("  session = spaced ;session=x", "session", "v", "user;x=1&user=2", "user", "fe80::1%eth0, fd00::1", uint8(4), "")
	f.Add("session=a\\b; session=\x7f", "session", "v", "=&&=x&user", "user", "10.0.0.5, 10.0.0.6", uint8(5), "")
	f.Add("", "session", "v", "", "user", ",,, ,", uint8(6), "")
	f.Add("sid=1", "sid", "v", "q=%", "q", "1::1:1:1:1:1:1, 2001:db8::1", uint8(7), "")
	f.Add("x", "session", "v", "user=a%00b", "user", "", uint8(9), "[::ffff:127.0.0.1]:1")
	f.Add("x", "session", "v", "user", "user", "203.0.113.1", uint8(9), "[0:0::1]:5")
	f.Add("x", "session", "v", "", "user", "203.0.113.1", uint8(9), "not-an-address")
	f.Add("x", "session", "v", "", "user", "203.0.113.1", uint8(9), "[fd00::1%25lo]:1")
	f.Fuzz(func(t *testing.T, cookie, cookieName, hval, rawQuery, queryName, xff string, remoteSel uint8, remote string) {
		if !isCookieName(cookieName) {
			cookieName = "session" // the config only takes tokens
		}
		if i := int(remoteSel) % len(fuzzRemotes); i < len(fuzzRemotes)-1 {
			remote = fuzzRemotes[i]
		}
		r := &http.Request{
			Method:     "GET",
			URL:        &url.URL{Path: "/p", RawQuery: rawQuery},
			RequestURI: "/p?" + rawQuery,
			RemoteAddr: remote,
			Header: http.Header{
				"Cookie":          strings.Split(cookie, "\n"),
				"X-User-Id":       {hval},
				"X-Forwarded-For": strings.Split(xff, "\n"),
			},
		}
		srcs := []Source{
			{Kind: Cookie, Name: cookieName}, {Kind: Header, Name: "x-user-id"}, {Kind: Query, Name: "user"},
			{Kind: URI}, {Kind: Path}, {Kind: IP},
		}
		if queryName != "" {
			srcs = append(srcs, Source{Kind: Query, Name: queryName})
		}
		for _, src := range srcs {
			f, err := newFunc(src, fuzzTrusted, testBodyLimit)
			if err != nil {
				t.Fatalf("newFunc(%v): %v", src, err)
			}
			v, ok := f(r)
			if ok != (v != "") {
				t.Fatalf("%v: (%q, %v): present exactly when not empty", src, v, ok)
			}
			if n := inputLen(r); len(v) > n {
				t.Fatalf("%v: %d-byte key from %d bytes of input", src, len(v), n)
			}
		}

		// Cookies: as net/http reads them, the first one of that name,
		// empty counting as absent.
		want, wantOK := "", false
		if cookieCount(r.Header) <= 3000 { // beyond it net/http reads none (GODEBUG httpcookiemaxnum)
			if c, err := r.Cookie(cookieName); err == nil {
				want, wantOK = c.Value, c.Value != ""
			}
			if v, ok := CookieValue(r.Header, cookieName); v != want || ok != wantOK {
				t.Fatalf("CookieValue(%q, %q) = %q, %v; net/http reads %q, %v", r.Header["Cookie"], cookieName, v, ok, want, wantOK)
			}
		}

		// Queries: url.ParseQuery's first value, empty counting as absent.
		for _, name := range []string{"user", queryName} {
			if name == "" {
				continue
			}
			if q, err := url.ParseQuery(rawQuery); err == nil {
				want := ""
				if vs := q[name]; len(vs) > 0 {
					want = vs[0]
				}
				if v, ok := queryValue(rawQuery, name); v != want || ok != (want != "") {
					t.Fatalf("queryValue(%q, %q) = %q, %v; url.ParseQuery gives %q", rawQuery, name, v, ok, q[name])
				}
			}
		}

		// The ip source.
		got, ok := ClientIP(r, fuzzTrusted)
		ap, err := netip.ParseAddrPort(remote)
		if err != nil {
			if got != remote || ok != (remote != "") {
				t.Fatalf("RemoteAddr %q is not ip:port: got %q, %v; want it whole", remote, got, ok)
			}
			return
		}
		if !ok {
			t.Fatalf("RemoteAddr %q: no key", remote)
		}
		if want := refClientIP(ap.Addr(), r.Header["X-Forwarded-For"]); got != want.s && !(want.ip.IsValid() && parsesTo(got, want.ip)) {
			t.Fatalf("ClientIP(RemoteAddr %q, X-Forwarded-For %q) = %q; want %q", remote, r.Header["X-Forwarded-For"], got, want.s)
		}
	})
}

// ipResult is what the ip source should return: a canonical address
// (ip valid; any spelling of it will do) or a verbatim entry s.
type ipResult struct {
	ip netip.Addr
	s  string
}

// refClientIP is the ip source's contract, spelled out differently from
// clientIP: split every X-Forwarded-For line into entries, walk them from
// the right, return the first one that is not a trusted address (verbatim
// when it is not an address at all); if all are trusted, the leftmost; if
// there are none, or the peer is not trusted, the peer.
func refClientIP(peer netip.Addr, lines []string) ipResult {
	canon := func(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }
	peer = canon(peer)
	if !trustedRef(peer) {
		return ipResult{ip: peer, s: peer.String()}
	}
	var entries []string
	for _, l := range lines {
		for _, e := range strings.Split(l, ",") {
			if e = strings.TrimSpace(e); e != "" {
				entries = append(entries, e)
			}
		}
	}
	for i := len(entries) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(entries[i])
		if err != nil {
			return ipResult{s: entries[i]}
		}
		if a = canon(a); !trustedRef(a) {
			return ipResult{ip: a, s: a.String()}
		}
	}
	if len(entries) > 0 {
		a := canon(netip.MustParseAddr(entries[0]))
		return ipResult{ip: a, s: a.String()}
	}
	return ipResult{ip: peer, s: peer.String()}
}

func trustedRef(a netip.Addr) bool {
	for _, p := range fuzzTrusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func parsesTo(s string, a netip.Addr) bool {
	b, err := netip.ParseAddr(s)
	return err == nil && b == a
}

// inputLen bounds any key a source may take from r: every byte the request
// carries, plus one for an IPv6 address whose canonical form spells out a
// single zero group its input left out.
func inputLen(r *http.Request) int {
	n := len(r.RemoteAddr) + len(r.RequestURI) + 1
	for _, vs := range r.Header {
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

func cookieCount(h http.Header) int {
	n := 0
	for _, l := range h["Cookie"] {
		n += strings.Count(l, ";") + 1
	}
	return n
}

// isCookieName reports whether s is an RFC 9110 token, as the config
// requires of cookie names.
func isCookieName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || c <= ' ' || c == 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
