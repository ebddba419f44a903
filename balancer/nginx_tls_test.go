package balancer

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	u := mustURL(t, "https://"+addr)
	opts := baseOptions([]UpstreamOptions{{Name: "nginx", URL: u, Addr: u.Host, Weight: 1}})
	opts.UpstreamTLS.RootCAs = ca.Pool()
	opts.Breaker = BreakerOptions{ConsecutiveFailures: 3, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 5 * time.Second, MaxOpenTimeout: 60 * time.Second}
	_, _, front := proxy(t, opts)
	post := func() int {
		res, err := http.Post(front.URL+"/p", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	codes := make(chan int, 8)
	for range 8 {
		go func() { codes <- post() }()
	}
	for range 8 {
		if c := <-codes; c != 200 {
			t.Errorf("burst: status %d", c)
		}
	}
	time.Sleep(1500 * time.Millisecond) // past keepalive_timeout: nginx closes the idle connections
	var got []int
	for range 8 {
		got = append(got, post())
	}
	for _, c := range got {
		if c != 200 {
			t.Fatalf("POSTs after nginx closed its idle connections: %v, want all 200", got)
		}
	}
}
