//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// TestServeWatchOff: `serve -watch=false` reloads on SIGHUP only. The
// file is changed and left for longer than the watch's period (2 s);
// then SIGHUP shows the change was there to be seen.
func TestServeWatchOff(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out the 2 s watch period")
	}
	bs := ringlbtest.StartBackends(t, 3, nil)
	cm := ringlbtest.NewConfigMapDir(t, ringlbtest.Listeners+ringlbtest.BackendsYAML(bs[:2]))
	var stderr testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "-watch=false", cm.Path}, io.Discard, &stderr) }()
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
	before := ringlbtest.RingVersion(t, admin)
	cm.Update(ringlbtest.Listeners + ringlbtest.BackendsYAML(bs))
	time.Sleep(configWatchInterval + time.Second)
	if v := ringlbtest.RingVersion(t, admin); v != before {
		t.Fatalf("-watch=false: the ring changed to %s without a reload", v)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testenv.Eventually(t, 10*time.Second, func() error {
		if ringlbtest.RingVersion(t, admin) == before {
			return fmt.Errorf("SIGHUP did not reload:\n%s", &stderr)
		}
		return nil
	})
}
