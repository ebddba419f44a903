package balancer

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/certs/certstest"
	"github.com/ringlb/ringlb/internal/testenv"
)

// A real nginx over TLS with keepalive_timeout 1s as the upstream (the
// issue's repro, with 2s there): a burst of POSTs, an idle pause longer
// than the keep-alive timeout, then POSTs one after another. nginx closes
// its idle connections with a close_notify and a FIN; every POST must
// succeed, and the breaker stay closed.
func TestNginxTLSClosesIdle(t *testing.T) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			testenv.SkipExternal(t, "nginx", "not on PATH or in /usr/sbin (Debian: apt-get install nginx)")
		}
		bin = "/usr/sbin/nginx"
	}
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	certFile, keyFile := ca.Issue(t, certstest.Options{}).Write(t, dir, "tls")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    keepalive_timeout 1s;
    server {
        listen %[2]s ssl;
        ssl_certificate %[3]s;
        ssl_certificate_key %[4]s;
        location / { return 200 "ok"; }
    }
}
`, dir, addr, certFile, keyFile)
	cf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir+"/", "-c", cf, "-e", filepath.Join(dir, "error.log"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		select {
		case <-exited:
			elog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited:\n%s\n%s", out.String(), elog)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return fmt.Errorf("nginx not listening yet: %v", err)
		}
		c.Close()
		return nil
	})
	idleClosingPOSTs(t, mustURL(t, "https://"+addr), ca.Pool(), "nginx", func() {
		time.Sleep(1500 * time.Millisecond) // past keepalive_timeout: nginx closes the idle connections
	})
}
