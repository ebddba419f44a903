//go:build unix

package process

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// TestServeReloadsConfigOnChange: serve reloads its config file when it
// changes on disk, here by a Kubernetes ConfigMap's ..data swap whose new
// file has the old one's size and modification time. A file that does not
// load keeps the old config serving and counts as a failed reload, as with
// SIGHUP, and is not retried until it changes again.
func TestServeReloadsConfigOnChange(t *testing.T) {
	bs := ringlbtest.StartBackends(t, 3, nil)
	// Equal lengths: the upstream lists differ in one digit.
	two := ringlbtest.Listeners + "upstreams:\n" + fmt.Sprintf("  - name: a\n    url: %s\n  - name: b\n    url: %s\n", bs[0].URL, bs[1].URL)
	other := ringlbtest.Listeners + "upstreams:\n" + fmt.Sprintf("  - name: a\n    url: %s\n  - name: c\n    url: %s\n", bs[0].URL, bs[2].URL)
	if len(two) != len(other) {
		t.Fatalf("the two configs differ in length: %d, %d", len(two), len(other))
	}
	cm := ringlbtest.NewConfigMapDir(t, two)
	cfg, err := config.Load(cm.Path)
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	addrs := make(chan [2]string, 1)
	go func() {
		done <- Run(ctx, Options{Path: cm.Path, Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Watch: 20 * time.Millisecond, Ready: func(p, a net.Addr) {
			addrs <- [2]string{"http://" + p.String(), "http://" + a.String()}
		}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve exited: %v", err)
		}
	})
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatalf("serve exited: %v:\n%s", err, &logs)
	}
	proxy, admin := a[0], a[1]
	upstreams := func() string {
		var names []string
		for _, u := range ringlbtest.MustGetRing(t, admin).Upstreams {
			names = append(names, u.Name)
		}
		return strings.Join(names, ",")
	}
	waitUpstreams := func(want string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() error {
			if got := upstreams(); got != want {
				return fmt.Errorf("upstreams %s, want %s after the change on disk:\n%s", got, want, &logs)
			}
			return nil
		})
	}
	if got := upstreams(); got != "a,b" {
		t.Fatalf("upstreams at start: %s", got)
	}

	cm.Update(other)
	waitUpstreams("a,c")

	// A bad file: rejected, the old config serves on.
	cm.Update(strings.Replace(other, "upstreams:", "upstreamz:", 1))
	testenv.Eventually(t, 10*time.Second, func() error {
		if v := ringlbtest.MetricValue(t, admin, `ringlb_config_reloads_total{result="error"}`); v != 1 {
			return fmt.Errorf("failed reloads %v, want 1 after a bad file:\n%s", v, &logs)
		}
		return nil
	})
	if got := upstreams(); got != "a,c" {
		t.Errorf("after a bad file: upstreams %s, want a,c", got)
	}
	if code, body := ringlbtest.Get(t, proxy+"/"); code != 200 || (body != "app-1" && body != "app-3") {
		t.Errorf("after a bad file: %d %q", code, body)
	}
	if !strings.Contains(logs.String(), "upstreamz: unknown field (did you mean upstreams?)") {
		t.Errorf("the bad file's problem is not logged:\n%s", &logs)
	}

	// Fixed: applied.
	cm.Update(two)
	waitUpstreams("a,b")
	if v := ringlbtest.MetricValue(t, admin, `ringlb_config_reloads_total{result="ok"}`); v != 2 {
		t.Errorf("successful reloads %v, want 2 (one per good change)", v)
	}
	if v := ringlbtest.MetricValue(t, admin, `ringlb_config_reloads_total{result="error"}`); v != 1 {
		t.Errorf("failed reloads %v, want 1: a bad file is not retried until it changes", v)
	}
}

// startWatching runs Run on the config at path, looking at it
// every interval, and returns its proxy and admin URLs and its log.
func startWatching(t *testing.T, path string, interval time.Duration) (proxy, admin string, logs *testenv.Buffer) {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs = &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	addrs := make(chan [2]string, 1)
	go func() {
		done <- Run(ctx, Options{Path: path, Config: cfg, Logger: slog.New(slog.NewTextHandler(logs, nil)), Watch: interval, Ready: func(p, a net.Addr) {
			addrs <- [2]string{"http://" + p.String(), "http://" + a.String()}
		}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve exited: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return a[0], a[1], logs
	case err := <-done:
		t.Fatalf("serve exited: %v:\n%s", err, logs)
	}
	return "", "", nil
}

// upstreamNamesOf lists /debug/ring's upstreams, comma-separated.
func upstreamNamesOf(v ringlbtest.RingView) string {
	var names []string
	for _, u := range v.Upstreams {
		names = append(names, u.Name)
	}
	return strings.Join(names, ",")
}

// TestServeWatchWaitsForAWholeFile: a config rewritten in place by a slow
// writer, in two halves with a pause shorter than the watch interval
// between them (`cat > config.yaml` from a pipe, an editor that writes in
// place), is applied once whole and never half-written. The first half is
// itself a valid config, with 2 of the 4 upstreams: the watch used to
// apply it whenever a look fell in the pause (half of each backend's keys
// moved, and hold kept them there). Each rewrite swaps the fourth
// upstream; a poller watches /debug/ring all along for the half's
// membership.
func TestServeWatchWaitsForAWholeFile(t *testing.T) {
	const interval = 200 * time.Millisecond
	const pause = interval * 6 / 10
	bs := ringlbtest.StartBackends(t, 5, nil)
	half := ringlbtest.Listeners + ringlbtest.BackendsYAML(bs[:2])
	rest := func(last ringlbtest.Backend) string {
		return strings.TrimPrefix(ringlbtest.BackendsYAML([]ringlbtest.Backend{bs[2], last}), "upstreams:\n")
	}
	path := ringlbtest.WriteConfig(t, half+rest(bs[3]))
	_, admin, logs := startWatching(t, path, interval)
	if got := upstreamNamesOf(ringlbtest.MustGetRing(t, admin)); got != "app-1,app-2,app-3,app-4" {
		t.Fatalf("upstreams at start: %s", got)
	}

	var mu sync.Mutex
	seen := map[string]int{} // memberships /debug/ring showed, with how often
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if v, err := ringlbtest.GetRing(admin); err == nil {
				mu.Lock()
				seen[upstreamNamesOf(v)]++
				mu.Unlock()
			}
		}
	}()
	defer func() { close(stop); <-polled }()

	rewrites, tries := 0, 0
	for last := 4; rewrites < 4; last = 7 - last { // app-5, app-4, app-5, ...
		if tries++; tries > 10 {
			t.Fatalf("only %d of 10 rewrites paused less than the interval: the machine is too slow for this test", rewrites)
		}
		// Each rewrite starts a quarter interval later in the watch's
		// cycle than the one before (the cycle restarts when a whole file
		// is applied, below), so that the pauses of at least two of the
		// four span a look.
		time.Sleep(time.Duration(tries%4) * interval / 4)
		okBefore := ringlbtest.MetricValue(t, admin, `ringlb_config_reloads_total{result="ok"}`)
		mu.Lock()
		clear(seen)
		mu.Unlock()
		start := time.Now()
		if err := os.WriteFile(path, []byte(half), 0o644); err != nil { // truncates: a rewrite in place
			t.Fatal(err)
		}
		time.Sleep(pause)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(rest(bs[last])); err != nil {
			t.Fatal(err)
		}
		f.Close()
		took := time.Since(start)
		want := fmt.Sprintf("app-1,app-2,app-3,app-%d", last+1)
		testenv.Eventually(t, 10*time.Second, func() error {
			if got := upstreamNamesOf(ringlbtest.MustGetRing(t, admin)); got != want {
				return fmt.Errorf("upstreams %s, want %s once the file is whole:\n%s", got, want, logs)
			}
			return nil
		})
		if took >= interval {
			// The writer paused a whole interval: applying its half was
			// then allowed. Not counted; the membership is back whole.
			t.Logf("rewrite took %v, not less than the %v interval: not counted", took, interval)
			time.Sleep(2 * interval)
			continue
		}
		rewrites++
		time.Sleep(2 * interval) // a look or two after: the whole file stays
		mu.Lock()
		halfSeen := seen["app-1,app-2"]
		mu.Unlock()
		if halfSeen > 0 {
			t.Errorf("rewrite %d (the pause between its halves %v, the interval %v): /debug/ring showed the half-written file's app-1,app-2 %d times",
				rewrites, pause, interval, halfSeen)
		}
		if n := ringlbtest.MetricValue(t, admin, `ringlb_config_reloads_total{result="ok"}`) - okBefore; n != 1 {
			t.Errorf("rewrite %d: %v successful reloads, want 1 (the whole file only)", rewrites, n)
		}
	}
}

// TestServeWatchNoticesModeChange: a change of the file's mode alone is a
// change. A new config put in place unreadable (mode 000, by rename)
// fails with permission denied, unless the test runs as root, who reads
// it anyway; chmod 644, content untouched, then reloads it and it
// serves. Likewise chmod 000 and chmod 644 on a file that served: each is
// a reload. Before, the watch compared size, modification time and inode
// only, so a file that failed with permission denied stayed unapplied
// until its content changed.
func TestServeWatchNoticesModeChange(t *testing.T) {
	const interval = 50 * time.Millisecond
	bs := ringlbtest.StartBackends(t, 2, nil)
	path := ringlbtest.WriteConfig(t, ringlbtest.Listeners+ringlbtest.BackendsYAML(bs[:1]))
	_, admin, logs := startWatching(t, path, interval)
	root := os.Geteuid() == 0
	attempts := func() float64 {
		return ringlbtest.MetricValue(t, admin, `ringlb_config_reloads_total{result="ok"}`) +
			ringlbtest.MetricValue(t, admin, `ringlb_config_reloads_total{result="error"}`)
	}
	waitAttempts := func(n float64, what string) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() error {
			if got := attempts(); got != n {
				return fmt.Errorf("%v reload attempts after %s, want %v:\n%s", got, what, n, logs)
			}
			return nil
		})
	}
	checkUnreadable := func(what string) {
		t.Helper()
		if root {
			return // root reads a file of mode 000
		}
		if v := ringlbtest.MetricValue(t, admin, `ringlb_config_last_reload_success`); v != 0 {
			t.Errorf("ringlb_config_last_reload_success %v after %s, want 0", v, what)
		}
		if !strings.Contains(logs.String(), "permission denied") {
			t.Errorf("%s: no permission denied logged:\n%s", what, logs)
		}
	}
	chmod := func(mode os.FileMode) {
		t.Helper()
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}

	// Two upstreams now, in a file of mode 000 renamed into place.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(ringlbtest.Listeners+ringlbtest.BackendsYAML(bs)), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitAttempts(1, "an unreadable new file")
	checkUnreadable("an unreadable new file")
	chmod(0o644)
	waitAttempts(2, "chmod 644")
	if got := upstreamNamesOf(ringlbtest.MustGetRing(t, admin)); got != "app-1,app-2" {
		t.Errorf("upstreams %s after chmod 644, want app-1,app-2:\n%s", got, logs)
	}

	chmod(0)
	waitAttempts(3, "chmod 000")
	checkUnreadable("chmod 000")
	chmod(0o644)
	waitAttempts(4, "chmod 644 again")
	if v := ringlbtest.MetricValue(t, admin, `ringlb_config_last_reload_success`); v != 1 {
		t.Errorf("ringlb_config_last_reload_success %v after chmod 644, want 1:\n%s", v, logs)
	}
	time.Sleep(4 * interval)
	waitAttempts(4, "no further change") // each change is acted on once
}
