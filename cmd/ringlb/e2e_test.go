package main

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// TestEndToEndKillAndReturn runs the real binaries: four examples/upstream
// processes behind a ringlb process with active checks and breakers. One
// client sends GETs for 200 keys throughout while one upstream is killed
// with SIGKILL and later restarted on its port. It asserts that no GET
// that started after the kill fails (refused dials go clockwise), that no
// key of another upstream ever moves, and that once ringlb readmits the
// upstream every one of its keys is home.
//
// It builds both binaries, so -short skips it.
func TestEndToEndKillAndReturn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries; skipped with -short")
	}
	names := []string{"app-1", "app-2", "app-3", "app-4"}
	addr := map[string]string{}
	procs := map[string]*proc{}
	config := `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream_header: X-Upstream
hash:
  key: [query: user]
ring:
  load_factor: 0
health:
  path: /healthz
  interval: 200ms
  timeout: 190ms
  rise: 2
  fall: 2
breaker:
  consecutive_failures: 5
  open_timeout: 1s
  max_open_timeout: 2s
retries: 1
timeouts:
  dial: 1s
upstreams:
`
	for _, name := range names {
		addr[name] = ringlbtest.ReservePort(t)
		config += fmt.Sprintf("  - name: %s\n    url: http://%s\n", name, addr[name])
		procs[name] = startUpstream(t, name, addr[name])
	}
	lb := startRinglb(t, ringlbtest.WriteConfig(t, config))
	proxyURL, adminURL := lb.proxy, lb.admin
	waitHTTP(t, adminURL+"/readyz")
	defer func() {
		if t.Failed() {
			t.Logf("ringlb log:\n%s", lb.logs.String())
		}
	}()

	client := &http.Client{Timeout: 10 * time.Second}
	// send GETs key and returns the upstream that answered, or an error.
	send := func(key string) (string, error) {
		res, err := client.Get(proxyURL + "/?user=" + key)
		if err != nil {
			return "", err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return "", fmt.Errorf("status %d", res.StatusCode)
		}
		return res.Header.Get("X-Upstream"), nil
	}
	keys := make([]string, 200)
	owner := map[string]string{}
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
		got, err := send(keys[i])
		if err != nil {
			t.Fatalf("before the kill: %s: %v", keys[i], err)
		}
		owner[keys[i]] = got
	}
	victim := "app-3"
	var victimKeys int
	for _, o := range owner {
		if o == victim {
			victimKeys++
		}
	}
	if victimKeys == 0 {
		t.Fatalf("%s owns none of the keys: %v", victim, owner)
	}

	// The client loop: one GET at a time, every key in turn, until told
	// to stop. Each answer is checked as it comes.
	var (
		rmu                  sync.Mutex
		sent, inWindow       int
		failedAfter, moved   int
		notHome              int
		killedAt, readmitted time.Time
	)
	stop, stopped := make(chan struct{}), make(chan struct{})
	var stopOnce sync.Once
	halt := func() {
		stopOnce.Do(func() { close(stop) })
		<-stopped
	}
	t.Cleanup(halt) // also when a check below gives up
	go func() {
		defer close(stopped)
		for {
			for _, k := range keys {
				select {
				case <-stop:
					return
				default:
				}
				began := time.Now()
				got, err := send(k)
				rmu.Lock()
				sent++
				o := owner[k]
				switch {
				case err != nil && !killedAt.IsZero() && began.Before(killedAt):
					inWindow++ // in flight when the upstream died
				case err != nil:
					failedAfter++
					t.Errorf("GET %s: %v", k, err)
				case o != victim && got != o:
					moved++
					t.Errorf("key %s of %s served by %s", k, o, got)
				case o == victim && !readmitted.IsZero() && began.After(readmitted) && got != victim:
					notHome++
					t.Errorf("key %s of %s served by %s after readmission", k, o, got)
				}
				rmu.Unlock()
			}
		}
	}()
	// waitSent waits until the loop has sent n more GETs.
	waitSent := func(n int) {
		t.Helper()
		rmu.Lock()
		goal := sent + n
		rmu.Unlock()
		testenv.Eventually(t, 20*time.Second, func() error {
			rmu.Lock()
			defer rmu.Unlock()
			if sent < goal {
				return fmt.Errorf("the client loop stalled")
			}
			return nil
		})
	}
	waitSent(300)
	rmu.Lock()
	killedAt = time.Now()
	rmu.Unlock()
	if err := procs[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[victim].done
	// Traffic goes on while ringlb notices: refused dials go clockwise.
	testenv.Eventually(t, 20*time.Second, func() error {
		if ringlbtest.RingState(t, adminURL, victim).Available {
			return fmt.Errorf("%s never ejected", victim)
		}
		return nil
	})
	waitSent(len(keys))

	// On its port, which stayed reserved: nothing else can have taken it.
	startProc(t, upstreamBinary(t), "-name", victim, "-listen", addr[victim])
	// The loop's traffic also gives the breaker its trial.
	testenv.Eventually(t, 20*time.Second, func() error {
		if st := ringlbtest.RingState(t, adminURL, victim); !st.Available {
			return fmt.Errorf("%s never readmitted: %+v", victim, st)
		}
		return nil
	})
	rmu.Lock()
	readmitted = time.Now()
	rmu.Unlock()
	waitSent(2 * len(keys))
	halt()
	if failedAfter > 0 || moved > 0 || notHome > 0 {
		t.Errorf("%d GETs failed after the kill, %d answers moved, %d keys of %s not home after readmission",
			failedAfter, moved, notHome, victim)
	}
	t.Logf("%d GETs for %d keys (%d of %s); %d failed while in flight at the kill", sent, len(keys), victimKeys, victim, inWindow)
}
