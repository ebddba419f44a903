package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// serve writes a JSON access log to a file, and on SIGUSR1 (logrotate's
// postrotate) reopens it: lines before go to the moved file, lines after
// to the new one. A reload that changes the format takes effect.
func TestAccessLogFileAndSIGUSR1(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	cfg := filepath.Join(dir, "ringlb.yaml")
	write := func(format string) {
		data := fmt.Sprintf("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\naccess_log: {format: %s, path: access.log}\nhash: {key: [header: X-User-ID]}\nupstreams:\n  - {name: app-1, url: %s}\n", format, up.URL)
		if err := os.WriteFile(cfg, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("json")
	lb := startRinglb(t, cfg)
	send := func(user string) {
		req, _ := http.NewRequest(http.MethodGet, lb.proxy+"/", nil)
		req.Header.Set("X-User-ID", user)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	lines := func(p string) []string {
		b, _ := os.ReadFile(p)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	send("u1")
	send("u2")
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := len(lines(logPath)); n != 2 {
			return fmt.Errorf("%d lines", n)
		}
		return nil
	})
	for _, l := range lines(logPath) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["upstream"] != "app-1" || m["decision"] != "owner" {
			t.Fatalf("line %q: %v", l, err)
		}
	}
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := lb.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(lb.logs.String(), "access log reopened") {
			return fmt.Errorf("no reopen line:\n%s", lb.logs)
		}
		return nil
	})
	send("u3")
	testenv.Eventually(t, 10*time.Second, func() error {
		if n, m := len(lines(logPath+".1")), len(lines(logPath)); n != 2 || m != 1 || lines(logPath)[0] == "" {
			return fmt.Errorf("moved file %d lines, new file %d", n, m)
		}
		return nil
	})
	write("combined")
	if err := lb.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		send("u4")
		if l := lines(logPath); !strings.Contains(l[len(l)-1], `"GET / HTTP/1.1" 200`) {
			return fmt.Errorf("last line %q", l[len(l)-1])
		}
		return nil
	})
}
