// Package ringlbtest holds the helpers that the tests of the ringlb
// command and of its serving process (cmd/ringlb/process) share: config
// files, test upstreams, and readers of the admin listener.
package ringlbtest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Listeners puts both listeners on loopback ports the kernel picks.
const Listeners = "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\n"

// WriteConfig writes a config file into a temporary directory.
func WriteConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ringlb.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Backend answers with its name and can hold requests until released.
type Backend struct {
	*httptest.Server
	Name string
}

// StartBackends starts n backends app-1..app-n; while hold is open, a
// request for /slow waits for it to close.
func StartBackends(t *testing.T, n int, hold <-chan struct{}) []Backend {
	t.Helper()
	var bs []Backend
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("app-%d", i)
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" && hold != nil {
				<-hold
			}
			io.WriteString(w, name)
		}))
		t.Cleanup(s.Close)
		bs = append(bs, Backend{s, name})
	}
	return bs
}

// BackendsYAML is the upstreams block listing bs.
func BackendsYAML(bs []Backend) string {
	var b strings.Builder
	b.WriteString("upstreams:\n")
	for _, s := range bs {
		fmt.Fprintf(&b, "  - name: %s\n    url: %s\n", s.Name, s.URL)
	}
	return b.String()
}

// Get sends a GET with the headers hdr (name, value, ...) and returns the
// status and body; an error fails the test.
func Get(t *testing.T, url string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
