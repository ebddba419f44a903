package process

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// With pools, a SIGHUP that leaves a pool with discovery as it was still
// resolves its sources at once.
func TestDiscoveryReloadUnchangedPool(t *testing.T) {
	f := ringlbtest.NewDiscoveryFleet(t, 3)
	f.Publish(2)
	other := ringlbtest.NewDiscoveredBackend(t, "other")
	path := ringlbtest.WriteConfig(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
pools:
  a:
    discovery:
      resolver: %s
      interval: 1h
      timeout: 1s
      sources: [{srv: %s}]
  b:
    upstreams: [{name: other, url: %s}]
routes: [{path_prefix: /b, pool: b}, {pool: a}]
`, f.DNS.Addr, ringlbtest.FleetSRV, other.Srv.URL))
	srv := startServer(t, path)
	members := func(n int) func() error {
		return func() error {
			if got := len(srv.rt.Pool("a").Members()); got != n {
				return fmt.Errorf("pool a has %d members, want %d", got, n)
			}
			return nil
		}
	}
	testenv.Eventually(t, 10*time.Second, members(2))
	// A third target: with an interval of an hour only the reload's
	// immediate resolution can find it.
	f.Publish(3)
	if _, problems, err := srv.reload(); err != nil {
		t.Fatal(problems)
	}
	testenv.Eventually(t, 10*time.Second, members(3))
}
