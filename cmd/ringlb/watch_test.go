//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// configMapDir lays out a directory as the kubelet mounts a ConfigMap:
// config.yaml is a symlink to ..data/config.yaml, ..data a symlink to a
// timestamped directory holding the data. update swaps ..data to a new
// directory in one rename, as the kubelet does.
type configMapDir struct {
	t    *testing.T
	dir  string
	gen  int
	path string // dir/config.yaml, what ringlb is given
}

func newConfigMapDir(t *testing.T, body string) *configMapDir {
	d := &configMapDir{t: t, dir: t.TempDir()}
	d.path = filepath.Join(d.dir, "config.yaml")
	d.update(body)
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), d.path); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *configMapDir) update(body string) {
	d.t.Helper()
	d.gen++
	ts := fmt.Sprintf("..2026_12_01_09_00_%02d.%d", d.gen, d.gen)
	if err := os.Mkdir(filepath.Join(d.dir, ts), 0o755); err != nil {
		d.t.Fatal(err)
	}
	// Same size and modification time in every generation: only the
	// swap tells them apart.
	f := filepath.Join(d.dir, ts, "config.yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		d.t.Fatal(err)
	}
	mtime := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	if err := os.Chtimes(f, mtime, mtime); err != nil {
		d.t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

// TestServeReloadsConfigOnChange: serve reloads its config file when it
// changes on disk, here by a Kubernetes ConfigMap's ..data swap whose new
// file has the old one's size and modification time. A file that does not
// load keeps the old config serving and counts as a failed reload, as with
// SIGHUP, and is not retried until it changes again.
func TestServeReloadsConfigOnChange(t *testing.T) {
	bs := startBackends(t, 3, nil)
	// Equal lengths: the upstream lists differ in one digit.
	two := listenersYAML + "upstreams:\n" + fmt.Sprintf("  - name: a\n    url: %s\n  - name: b\n    url: %s\n", bs[0].URL, bs[1].URL)
	other := listenersYAML + "upstreams:\n" + fmt.Sprintf("  - name: a\n    url: %s\n  - name: c\n    url: %s\n", bs[0].URL, bs[2].URL)
	if len(two) != len(other) {
		t.Fatalf("the two configs differ in length: %d, %d", len(two), len(other))
	}
	cm := newConfigMapDir(t, two)
	cfg, err := config.Load(cm.path)
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	addrs := make(chan [2]string, 1)
	go func() {
		done <- serveWatching(ctx, cm.path, cfg, slog.New(slog.NewTextHandler(&logs, nil)), func(p, a net.Addr) {
			addrs <- [2]string{"http://" + p.String(), "http://" + a.String()}
		}, 20*time.Millisecond)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	})
	var a [2]string
	select {
	case a = <-addrs:
	case code := <-done:
		t.Fatalf("serve exited %d:\n%s", code, &logs)
	}
	proxy, admin := a[0], a[1]
	upstreams := func() string {
		var names []string
		for _, u := range mustGetRing(t, admin).Upstreams {
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

	cm.update(other)
	waitUpstreams("a,c")

	// A bad file: rejected, the old config serves on.
	cm.update(strings.Replace(other, "upstreams:", "upstreamz:", 1))
	testenv.Eventually(t, 10*time.Second, func() error {
		if v := metricValue(t, admin, `ringlb_config_reloads_total{result="error"}`); v != 1 {
			return fmt.Errorf("failed reloads %v, want 1 after a bad file:\n%s", v, &logs)
		}
		return nil
	})
	if got := upstreams(); got != "a,c" {
		t.Errorf("after a bad file: upstreams %s, want a,c", got)
	}
	if code, body := get(t, proxy+"/"); code != 200 || (body != "app-1" && body != "app-3") {
		t.Errorf("after a bad file: %d %q", code, body)
	}
	if !strings.Contains(logs.String(), "upstreamz: unknown field (did you mean upstreams?)") {
		t.Errorf("the bad file's problem is not logged:\n%s", &logs)
	}

	// Fixed: applied.
	cm.update(two)
	waitUpstreams("a,b")
	if v := metricValue(t, admin, `ringlb_config_reloads_total{result="ok"}`); v != 2 {
		t.Errorf("successful reloads %v, want 2 (one per good change)", v)
	}
	if v := metricValue(t, admin, `ringlb_config_reloads_total{result="error"}`); v != 1 {
		t.Errorf("failed reloads %v, want 1: a bad file is not retried until it changes", v)
	}
}

// TestServeWatchOff: `serve -watch=false` reloads on SIGHUP only. The
// file is changed and left for longer than the watch's period (2 s);
// then SIGHUP shows the change was there to be seen.
func TestServeWatchOff(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out the 2 s watch period")
	}
	bs := startBackends(t, 3, nil)
	cm := newConfigMapDir(t, listenersYAML+backendsYAML(bs[:2]))
	var stderr testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "-watch=false", cm.path}, io.Discard, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	})
	var m []string
	testenv.Eventually(t, 10*time.Second, func() error {
		if m = servingLine.FindStringSubmatch(stderr.String()); m == nil {
			return fmt.Errorf("serve logged no start:\n%s", &stderr)
		}
		return nil
	})
	admin := "http://" + m[2]
	before := ringVersion(t, admin)
	cm.update(listenersYAML + backendsYAML(bs))
	time.Sleep(configWatchInterval + time.Second)
	if v := ringVersion(t, admin); v != before {
		t.Fatalf("-watch=false: the ring changed to %s without a reload", v)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testenv.Eventually(t, 10*time.Second, func() error {
		if ringVersion(t, admin) == before {
			return fmt.Errorf("SIGHUP did not reload:\n%s", &stderr)
		}
		return nil
	})
}
