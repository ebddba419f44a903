package process

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
)

// manyPools is a config of n pools of m upstreams each (made-up loopback
// ports), every pool routed by its own path; pool 0's first upstream has
// weight w.
func manyPools(n, m int, w float64) string {
	var b strings.Builder
	b.WriteString(ringlbtest.Listeners + "pools:\n")
	for p := range n {
		fmt.Fprintf(&b, "  p%d:\n    upstreams:\n", p)
		for u := range m {
			weight := 1.0
			if p == 0 && u == 0 {
				weight = w
			}
			fmt.Fprintf(&b, "      - {name: u%d, url: http://127.0.0.1:%d, weight: %g}\n", u, 20000+p*m+u, weight)
		}
	}
	b.WriteString("routes:\n")
	for p := range n {
		fmt.Fprintf(&b, "  - {path_prefix: /p%d, pool: p%d}\n", p, p)
	}
	return b.String()
}

// BenchmarkReloadOnePool reloads a config of 50 pools of 20 upstreams in
// which one pool's weight changes each time. "reload" is the whole of a
// SIGHUP (reading, parsing and validating the file included); "unchanged"
// is a SIGHUP with the file as it was; "route" a reload in which a route
// changes instead (no pool changes); "apply" is what follows the parse:
// options for every changed pool (the others keep theirs), comparing
// them, and updating the one pool that changed.
func BenchmarkReloadOnePool(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "ringlb.yaml")
	files := [2]string{manyPools(50, 20, 1), manyPools(50, 20, 2)}
	if err := os.WriteFile(path, []byte(files[0]), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := newServer(path, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer srv.close()
	other := srv.rt.Pool("p1")
	before := other.Snapshots()
	alternate := func(srcs ...string) func(*testing.B) {
		return func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				if err := os.WriteFile(path, []byte(srcs[(i+1)%len(srcs)]), 0o644); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, problems, err := srv.reload(); err != nil {
					b.Fatal(problems)
				}
			}
		}
	}
	b.Run("reload", alternate(files[0], files[1]))
	b.Run("unchanged", func(b *testing.B) {
		for b.Loop() {
			if _, problems, err := srv.reload(); err != nil {
				b.Fatal(problems)
			}
		}
	})
	b.Run("route", alternate(files[0], strings.Replace(files[0], "{path_prefix: /p49,", "{path_prefix: /q49,", 1)))
	var cfgs [2]*config.Config
	for i, f := range files {
		if cfgs[i], err = config.Parse(path, []byte(f)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("apply", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			next := cfgs[(i+1)%2]
			srv.mu.Lock()
			proc := processOptions(next)
			opts, kept, err := srv.poolOptions(next, proc, srv.alog)
			if err == nil {
				err = srv.applyPools(next, opts, kept)
				srv.cfg, srv.proc = next, proc
			}
			srv.mu.Unlock()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	if other.Snapshots() != before {
		b.Errorf("pool p1 installed %d snapshots while only p0 changed", other.Snapshots()-before)
	}
}
