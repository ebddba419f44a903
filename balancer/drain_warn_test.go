package balancer

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/state"
)

// An upstream set to drain by the config (at start or by a reload) while
// hold is off gets the warning too, once; with hold on, none.
func TestDrainWithoutHoldWarnsFromConfig(t *testing.T) {
	a, c := newBackend(t, "a"), newBackend(t, "c")
	for _, holdOn := range []bool{false, true} {
		var logs bytes.Buffer
		opts := baseOptions(upstreamsOf(t, a, c))
		opts.Upstreams[1].State = state.Drain
		if holdOn {
			opts.Hold = hold.Options{Idle: time.Second, MaxKeys: 100}
		}
		b, err := New(opts, metrics.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Update(opts); err != nil { // the state stays: no second warning
			t.Fatal(err)
		}
		b.Close()
		n := strings.Count(logs.String(), `level=WARN msg="upstream draining with hold off: keys in use on it are not kept" upstream=c by=config`)
		if want := map[bool]int{false: 1, true: 0}[holdOn]; n != want || b.HoldOn() != holdOn {
			t.Errorf("hold on %v: %d warnings (want %d), HoldOn %v:\n%s", holdOn, n, want, b.HoldOn(), logs.String())
		}
	}
}
