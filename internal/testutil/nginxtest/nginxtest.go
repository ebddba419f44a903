// Package nginxtest runs a real nginx (Debian's nginx package) for tests:
// one process per Start, in the foreground with no master process, on a
// free loopback port, its files in the test's temporary directory, killed
// by PID when the test ends.
package nginxtest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// Binary returns the nginx to run: the one on PATH, else Debian's
// /usr/sbin/nginx (non-root PATHs often lack /usr/sbin). Without either
// the test is skipped, or fails under CI (testenv.SkipExternal).
func Binary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	testenv.SkipExternal(t, "nginx", "not on PATH or in /usr/sbin (Debian: apt-get install nginx)")
	return ""
}

// Start runs nginx with an http block made of http(addr): the directives
// and server blocks inside `http { }`, for a free loopback addr that its
// server should listen on. It returns addr once nginx accepts connections
// there. A port taken between choosing it and nginx binding it is chosen
// again, twice at most.
func Start(t testing.TB, http func(addr string) string) string {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	// -e moves the startup error log into dir (nginx >= 1.19.5); older
	// nginx only warns that it cannot open its default log.
	help, _ := exec.Command(bin, "-h").CombinedOutput()
	hasE := bytes.Contains(help, []byte("-e filename"))
	for attempt := 0; ; attempt++ {
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
%[2]s}
`, dir, http(addr))
		cf := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"-p", dir + "/", "-c", cf}
		if hasE {
			args = append(args, "-e", filepath.Join(dir, "error.log"))
		}
		cmd := exec.Command(bin, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Error("nginx did not exit after kill")
			}
		}
		if listening(addr, exited) {
			t.Cleanup(stop)
			return addr
		}
		stop()
		elog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		if attempt < 2 && bytes.Contains(elog, []byte("Address already in use")) {
			continue // lost the race for the free port
		}
		t.Fatalf("nginx did not start:\n%s\n%s\nconfig:\n%s", out.String(), elog, conf)
	}
}

// listening waits up to 10 s for addr to accept a connection, and gives
// up at once when nginx exits.
func listening(addr string, exited <-chan struct{}) bool {
	deadline := time.After(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			select {
			case <-exited: // someone else's listener: nginx lost the port
				return false
			case <-time.After(50 * time.Millisecond):
				return true
			}
		}
		select {
		case <-exited:
			return false
		case <-deadline:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}
