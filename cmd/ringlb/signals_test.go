//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
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
	bs := ringlbtest.StartBackends(t, 1, hold)
	lb := startRinglbArgs(t, "serve", ringlbtest.WriteConfig(t, ringlbtest.Listeners+"shutdown_timeout: 10s\n"+ringlbtest.BackendsYAML(bs)))
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
		_, m := ringlbtest.Get(t, lb.admin+"/metrics")
		if ringlbtest.InflightTotal(m) != 1 {
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

// connectLoop sends GETs to proxy, each on a new connection, one at a
// time, until stop closes, keepGoing says no, or after 5000 attempts. It
// returns how many were made, how many were refused, and the other
// failures.
func connectLoop(proxy string, stop <-chan struct{}, keepGoing func() bool) (attempts, refused int, failures []string) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	for attempts < 5000 {
		select {
		case <-stop:
			return
		default:
		}
		if !keepGoing() {
			return
		}
		attempts++
		res, err := c.Get(proxy + "/")
		if errors.Is(err, syscall.ECONNREFUSED) {
			refused++
			continue
		}
		if err != nil {
			failures = append(failures, err.Error())
			continue
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			failures = append(failures, res.Status)
		}
	}
	return
}

// TestShutdownDelayKeepsAccepting runs the binary with shutdown_delay and
// a client that keeps opening connections after SIGTERM, as a Kubernetes
// Service's clients do while the endpoint's removal propagates: /readyz
// answers 503 at once, yet not one connection is refused during the
// delay, and ringlb then drains and exits 0. Without a delay (the
// control) the same client is refused at once.
func TestShutdownDelayKeepsAccepting(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs ringlb")
	}
	bs := ringlbtest.StartBackends(t, 2, nil)
	const delay = 3 * time.Second
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"delay", delay}, {"no delay", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ringlbtest.WriteConfig(t, ringlbtest.Listeners+fmt.Sprintf("shutdown_delay: %s\nshutdown_timeout: 5s\n", tc.delay)+ringlbtest.BackendsYAML(bs))
			lb := startRinglbArgs(t, "serve", cfg)
			waitHTTP(t, lb.admin+"/readyz")
			if code, body := ringlbtest.Get(t, lb.proxy+"/"); code != http.StatusOK {
				t.Fatalf("before SIGTERM: %d %q", code, body)
			}
			// Stamped before the signal goes: ringlb may start its delay
			// before Signal returns.
			signalled := time.Now()
			if err := lb.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			draining := func() bool { return strings.Contains(lb.logs.String(), "shutting down: draining") }
			stop := make(chan struct{})
			time.AfterFunc(delay/3, func() { close(stop) })
			attempts, refused, failures := connectLoop(lb.proxy, stop, func() bool {
				// Stop when the delay is over (drain began): connections
				// may be refused from then on. Without a delay, go on
				// until refused.
				return tc.delay == 0 || !draining()
			})
			if tc.delay == 0 {
				if refused == 0 {
					t.Errorf("without shutdown_delay: %d connections after SIGTERM, none refused (the control shows nothing)", attempts)
				}
				return
			}
			if attempts < 5 {
				t.Fatalf("only %d connections in the first %s after SIGTERM (drain logged: %v):\n%s", attempts, time.Since(signalled), draining(), lb.logs)
			}
			if refused != 0 || len(failures) != 0 {
				t.Errorf("during shutdown_delay: %d of %d connections refused, other failures %q", refused, attempts, failures)
			}
			// /readyz said 503 during the delay; the admin listener
			// stays up for it until drain.
			if !draining() {
				res, err := ringlbtest.AdminClient.Get(lb.admin + "/readyz")
				if err == nil {
					body, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusServiceUnavailable || string(body) != "shutting down\n" {
						t.Errorf("/readyz during shutdown_delay: %d %q, want 503 shutting down", res.StatusCode, body)
					}
				} else if !draining() {
					t.Errorf("/readyz during shutdown_delay: %v", err)
				}
			}
			select {
			case <-lb.done:
			case <-time.After(delay + 20*time.Second):
				t.Fatalf("ringlb did not exit after the delay:\n%s", lb.logs)
			}
			if lb.code != exitOK {
				t.Errorf("exit %d after SIGTERM, want 0:\n%s", lb.code, lb.logs)
			}
			if d := time.Since(signalled); d < delay {
				t.Errorf("exited %s after SIGTERM, before shutdown_delay (%s) was over", d, delay)
			}
		})
	}
}
