//go:build unix

package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testenv"
)

// startRinglbArgs runs the ringlb binary with args (a serve command line
// whose config has listen and admin_listen on port 0) and learns its
// addresses from the "ringlb serving" line, as startRinglb does.
func startRinglbArgs(t *testing.T, args ...string) *lbProc {
	t.Helper()
	lb := &lbProc{proc: startProc(t, ringlbBinary(t), args...)}
	var m []string
	testenv.Eventually(t, 20*time.Second, func() error {
		if m = servingLine.FindStringSubmatch(lb.logs.String()); m != nil {
			return nil
		}
		if lb.exited() {
			t.Fatalf("ringlb %q exited %d before serving:\n%s", args, lb.code, lb.logs)
		}
		return fmt.Errorf("ringlb has not logged that it serves:\n%s", lb.logs)
	})
	lb.proxy, lb.admin = "http://"+m[1], "http://"+m[2]
	return lb
}

// TestSIGQUITShutsDownGracefully runs the binary as `ringlb serve FILE`
// (the config as the positional argument) and sends it SIGQUIT with a
// request in flight: as with SIGTERM, the request finishes and ringlb
// exits 0, where Go's default would dump goroutines and exit 2.
func TestSIGQUITShutsDownGracefully(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs ringlb")
	}
	hold := make(chan struct{})
	bs := startBackends(t, 1, hold)
	lb := startRinglbArgs(t, "serve", writeConfig(t, listenersYAML+"shutdown_timeout: 10s\n"+backendsYAML(bs)))
	waitHTTP(t, lb.admin+"/readyz")

	result := make(chan string, 1)
	go func() {
		res, err := http.Get(lb.proxy + "/slow")
		if err != nil {
			result <- err.Error()
			return
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		result <- fmt.Sprint(res.StatusCode, " ", string(body))
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		_, m := get(t, lb.admin+"/metrics")
		if inflightTotal(m) != 1 {
			return fmt.Errorf("the request never got in flight")
		}
		return nil
	})
	if err := lb.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(lb.logs.String(), "shutting down") {
			return fmt.Errorf("no shutdown logged after SIGQUIT:\n%s", lb.logs)
		}
		return nil
	})
	close(hold)
	if got := <-result; got != "200 app-1" {
		t.Errorf("the request in flight at SIGQUIT got %q, want 200 app-1", got)
	}
	select {
	case <-lb.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("ringlb did not exit after SIGQUIT:\n%s", lb.logs)
	}
	if lb.code != exitOK || strings.Contains(lb.logs.String(), "goroutine ") {
		t.Errorf("after SIGQUIT: exit %d, want 0 without a goroutine dump:\n%s", lb.code, lb.logs)
	}
}
