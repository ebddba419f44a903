package balancer

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/certstest"
	"github.com/ringlb/ringlb/internal/testutil/nginxtest"
)

// A real nginx over TLS with keepalive_timeout 1s as the upstream (the
// issue's repro, with 2s there): a burst of POSTs, an idle pause longer
// than the keep-alive timeout, then POSTs one after another. nginx closes
// its idle connections with a close_notify and a FIN; every POST must
// succeed, and the breaker stay closed.
func TestNginxTLSClosesIdle(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	certFile, keyFile := ca.Issue(t, certstest.Options{}).Write(t, dir, "tls")
	addr := nginxtest.Start(t, func(addr string) string {
		return fmt.Sprintf(`    keepalive_timeout 1s;
    server {
        listen %s ssl;
        ssl_certificate %s;
        ssl_certificate_key %s;
        location / { return 200 "ok"; }
    }
`, addr, certFile, keyFile)
	})
	idleClosingPOSTs(t, mustURL(t, "https://"+addr), ca.Pool(), "nginx", func() {
		time.Sleep(1500 * time.Millisecond) // past keepalive_timeout: nginx closes the idle connections
	})
}
