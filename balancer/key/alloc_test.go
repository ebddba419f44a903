package key

import (
	"net/http"
	"net/netip"
	"net/url"
	"testing"

	"github.com/ringlb/ringlb/ring"
)

// TestKeyDoesNotAllocate: extracting a key from a request as a server
// reads it allocates nothing for every source in its common form (a plain
// cookie, header or query value, the URI, the path, the peer's address,
// a trusted peer's X-Forwarded-For whose client entry is canonical, a
// lower-case host, and a combination of those), and neither does hashing
// it. Only values that must be rewritten allocate: a percent-escaped
// query parameter, an IP that is not already in canonical form, a host
// with capitals, and a combined key longer than keyBufSize.
func TestKeyDoesNotAllocate(t *testing.T) {
	u, _ := url.Parse("http://shop.example/item/7?id=42&user=alice")
	r := &http.Request{
		Method:     http.MethodGet,
		URL:        u,
		Host:       "shop.example:8443",
		RequestURI: "/item/7?id=42&user=alice",
		RemoteAddr: "10.0.0.9:5555",
		Header: http.Header{
			"Cookie":          {"theme=dark; session=abc123"},
			"X-User-Id":       {"user-7"},
			"X-Forwarded-For": {"203.0.113.7, 10.0.0.8"},
		},
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	rg, err := ring.New([]ring.Member{{Name: "a", Weight: 1}}, ring.Options{PointsPerWeight: 160})
	if err != nil {
		t.Fatal(err)
	}
	srcs := []Source{
		{Kind: Cookie, Name: "session"},
		{Kind: Header, Name: "X-User-ID"},
		{Kind: Query, Name: "user"},
		{Kind: URI},
		{Kind: Path},
		{Kind: IP},
		{Kind: Host},
		{Kind: Combine, Sources: []Source{{Kind: Host}, {Kind: URI}}},
		{Kind: Combine, Sources: []Source{{Kind: Cookie, Name: "session"}, {Kind: IP}, {Kind: Query, Name: "user"}}},
	}
	for _, tr := range [][]netip.Prefix{nil, trusted} {
		for _, src := range srcs {
			ks, err := New(src, tr, testBodyLimit)
			if err != nil {
				t.Fatal(err)
			}
			v, ok := ks.Value(r)
			if !ok || v == "" {
				t.Fatalf("%v (trusted %v): no key", src, tr)
			}
			if h, ok := ks.Hash(rg, r); !ok || h != rg.Hash(v) {
				t.Fatalf("%v (trusted %v): hash %x, %v; want %x, the hash of %q", src, tr, h, ok, rg.Hash(v), v)
			}
			var sink uint64
			if n := testing.AllocsPerRun(100, func() {
				h, _ := ks.Hash(rg, r)
				sink += h
			}); n != 0 {
				t.Errorf("%v (trusted %v): key %q: %v allocs per request, want 0", src, tr, v, n)
			}
			_ = sink
		}
	}
}
