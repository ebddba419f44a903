package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/balancer/key"
)

// The demo's hint for a config keyed on a prefix sends a chat body whose
// prefix key is the one the demo names (and looks up).
func TestDemoPrefixKey(t *testing.T) {
	for _, n := range []int{16, 8192} {
		src := key.Source{Kind: key.Prefix, Bytes: n}
		d := demoKeyOf(src)
		flags, path := d.curl("42")
		_, body, ok := strings.Cut(flags, `-d "`)
		if !ok || path != "/" {
			t.Fatalf("curl flags %q, path %q", flags, path)
		}
		body = strings.ReplaceAll(strings.TrimSuffix(strings.TrimSpace(body), `"`), `\"`, `"`)
		spec, err := key.New(src, nil, 65536)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := http.NewRequest(http.MethodPost, "http://proxy/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if got, ok := spec.Value(r); !ok || got != d.key("42") {
			t.Errorf("bytes %d: the body %s keys on %q (%v); the demo says %q", n, body, got, ok, d.key("42"))
		}
	}
}
