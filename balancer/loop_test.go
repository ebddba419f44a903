package balancer

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/balancer/forward"
)

// TestCDNLoopHeader checks what the upstream sees in CDN-Loop: this
// process's entry after the client's, joined into one value, and that
// another process's entry (another ringlb, a CDN) passes while this
// process's own gets 508 without reaching the upstream.
func TestCDNLoopHeader(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Join(r.Header["Cdn-Loop"], "|")))
	}
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	tok := forward.LoopToken()
	if !strings.HasPrefix(tok, "ringlb-") || len(tok) != len("ringlb-")+16 {
		t.Fatalf("LoopToken() = %q, want ringlb- and 16 hex digits", tok)
	}
	for _, tc := range []struct {
		sent []string
		want string
	}{
		{nil, tok},
		{[]string{"cdn.example; v=1"}, "cdn.example; v=1, " + tok},
		{[]string{"a", "b, ringlb-0000000000000000"}, "a, b, ringlb-0000000000000000, " + tok},
		{[]string{tok + "x"}, tok + "x, " + tok}, // a longer token is not ours
	} {
		var hdr []string
		for _, v := range tc.sent {
			hdr = append(hdr, "CDN-Loop", v)
		}
		code, _, body := get(t, http.DefaultClient, front.URL+"/", hdr...)
		if code != 200 || body != tc.want {
			t.Errorf("sent %q: %d, upstream saw %q, want %q", tc.sent, code, body, tc.want)
		}
	}
	hits := be.hits.Load()
	for _, v := range []string{tok, "cdn.example, " + tok + "; v=2", " " + tok + " "} {
		code, _, body := get(t, http.DefaultClient, front.URL+"/", "CDN-Loop", v)
		if code != http.StatusLoopDetected || body != "loop detected\n" {
			t.Errorf("sent %q: %d %q, want 508 \"loop detected\\n\"", v, code, body)
		}
	}
	if n := be.hits.Load() - hits; n != 0 {
		t.Errorf("the upstream got %d looped requests, want 0", n)
	}
}
