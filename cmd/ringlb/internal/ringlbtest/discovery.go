package ringlbtest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/ringlb/ringlb/internal/testutil/dnstest"
)

// DiscoveredBackend is an upstream that names itself in X-Backend; its
// health check fails while it is sick.
type DiscoveredBackend struct {
	Srv  *httptest.Server
	Name string // the member name it gets: target:port
	sick bool
	mu   sync.Mutex
}

// NewDiscoveredBackend starts a backend whose member name is target:port.
func NewDiscoveredBackend(t *testing.T, target string) *DiscoveredBackend {
	t.Helper()
	be := &DiscoveredBackend{}
	be.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		be.mu.Lock()
		sick, name := be.sick, be.Name
		be.mu.Unlock()
		if r.URL.Path == "/healthz" && sick {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Backend", name)
		io.WriteString(w, name)
	}))
	t.Cleanup(be.Srv.Close)
	_, port, _ := net.SplitHostPort(be.Srv.Listener.Addr().String())
	be.Name = target + ":" + port
	return be
}

// SetSick makes the backend's health check fail (true) or pass.
func (be *DiscoveredBackend) SetSick(sick bool) {
	be.mu.Lock()
	be.sick = sick
	be.mu.Unlock()
}

// DiscoveryFleet is n backends app-I.test behind the SRV record FleetSRV
// of a test DNS server.
type DiscoveryFleet struct {
	DNS      *dnstest.Server
	Backends []*DiscoveredBackend
}

// FleetSRV is the SRV record a DiscoveryFleet answers.
const FleetSRV = "_http._tcp.app.test"

// NewDiscoveryFleet starts n backends, each with its address record.
func NewDiscoveryFleet(t *testing.T, n int) *DiscoveryFleet {
	f := &DiscoveryFleet{DNS: dnstest.New(t)}
	for i := range n {
		host := fmt.Sprintf("app-%d.test", i)
		f.Backends = append(f.Backends, NewDiscoveredBackend(t, host))
		f.DNS.SetAddrs(host, "127.0.0.1")
	}
	return f
}

// Publish answers the SRV record with the first n backends.
func (f *DiscoveryFleet) Publish(n int) {
	var ts []string
	for i, be := range f.Backends[:n] {
		_, port, _ := net.SplitHostPort(be.Srv.Listener.Addr().String())
		ts = append(ts, fmt.Sprintf("app-%d.test.:%s", i, port))
	}
	f.DNS.SetSRV(FleetSRV, ts...)
}

// YAML is a config with the given static upstreams (YAML list items, or
// "" for none) and a discovery block on f's DNS server.
func (f *DiscoveryFleet) YAML(static, extra string) string {
	ups := "upstreams: []\n"
	if static != "" {
		ups = "upstreams:\n" + static
	}
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
hash:
  key: [{header: X-User-ID}]
  on_missing: reject
%s%sdiscovery:
  resolver: %s
  interval: 200ms
  timeout: 150ms
  remove_after: 1h
  sources:
    - srv: %s
`, ups, extra, f.DNS.Addr, FleetSRV)
}
