package hotkeys

import (
	"math/rand"
	"slices"
	"testing"
	"time"
)

// A Zipf load (s = 1.1 over 10 000 keys): the true top 10 are listed, in
// order, each estimate within Space-Saving's bounds (true count <=
// estimate <= true count + its error, error <= requests/counters).
func TestHotKeysZipf(t *testing.T) {
	const n = 200_000
	var hk Counter
	z := rand.NewZipf(rand.New(rand.NewSource(1)), 1.1, 1, 9999)
	truth := map[uint64]uint64{}
	for range n {
		k := z.Uint64()*0x9e3779b97f4a7c15 + 7 // spread the ranks over the hash space
		truth[k]++
		hk.Add(k, "a", 1)
	}
	// The index finds every monitored key at its slot, and nothing else.
	w := hk.cur
	inIndex := 0
	for _, e := range w.idx {
		if e.slot != 0 {
			inIndex++
		}
	}
	for i, c := range w.slots[:w.n] {
		if j, ok := w.find(c.hash); !ok || j != i {
			t.Fatalf("slot %d (%x): index finds %d %v", i, c.hash, j, ok)
		}
	}
	if inIndex != w.n {
		t.Fatalf("index holds %d entries for %d slots", inIndex, w.n)
	}
	got := hk.Window(false, 1)
	if got.Requests != n || len(got.Keys) != Counters {
		t.Fatalf("%d requests, %d keys; want %d, %d", got.Requests, len(got.Keys), n, Counters)
	}
	type kc struct {
		k uint64
		c uint64
	}
	var want []kc
	for k, c := range truth {
		want = append(want, kc{k, c})
	}
	slices.SortFunc(want, func(a, b kc) int { return int(b.c) - int(a.c) })
	bound := uint64(n / Counters)
	for i := range 10 {
		g := got.Keys[i]
		if g.Hash != want[i].k {
			t.Errorf("rank %d: listed %x (%d), true %x (%d)", i+1, g.Hash, g.Requests, want[i].k, want[i].c)
			continue
		}
		if tc := truth[g.Hash]; g.Requests < tc || g.Requests > tc+g.Error || g.Error > bound {
			t.Errorf("rank %d: estimate %d error %d, true %d (bound %d)", i+1, g.Requests, g.Error, tc, bound)
		}
	}
	if s := got.Keys[0].Share; s < 0.1 || s > 0.2 {
		t.Errorf("the hottest key's share %.3f", s)
	}
}

// Windows: counts start again after a minute; the window before is kept.
func TestHotKeysWindows(t *testing.T) {
	var hk Counter
	now := int64(time.Hour)
	for range 5 {
		hk.Add(1, "a", now)
	}
	hk.Add(2, "b", now)
	now += int64(Span + time.Second)
	hk.Add(2, "c", now)
	cur, prev := hk.Window(false, now), hk.Window(true, now)
	if cur.Requests != 1 || len(cur.Keys) != 1 || cur.Keys[0].Hash != 2 || cur.Keys[0].Sent != "c" {
		t.Errorf("current window %+v", cur)
	}
	if prev.Requests != 6 || prev.Seconds != 60 || prev.Keys[0].Hash != 1 || prev.Keys[0].Requests != 5 || prev.Keys[1].Sent != "b" {
		t.Errorf("previous window %+v", prev)
	}
	now += int64(3 * Span) // nothing for a long while: both empty
	if cur, prev := hk.Window(false, now), hk.Window(true, now); cur.Requests != 0 || prev.Requests != 0 {
		t.Errorf("after three idle windows: %+v %+v", cur, prev)
	}
}

// BenchmarkHotKeysAdd is the request path's cost of counting a key:
// zipf, a Zipf load over 10 000 keys (mostly keys held already), and
// uniform, 100 000 keys visited in turn as bench/run.sh's paths are (every
// add replaces the least counted key).
func BenchmarkHotKeysAdd(b *testing.B) {
	z := rand.NewZipf(rand.New(rand.NewSource(1)), 1.1, 1, 9999)
	zipf := make([]uint64, 4096)
	for i := range zipf {
		zipf[i] = z.Uint64() * 0x9e3779b97f4a7c15
	}
	uniform := make([]uint64, 100_000)
	for i := range uniform {
		uniform[i] = uint64(i*7919%100_000) * 0x9e3779b97f4a7c15
	}
	for _, c := range []struct {
		name string
		ks   []uint64
	}{{"zipf", zipf}, {"uniform", uniform}} {
		b.Run(c.name, func(b *testing.B) {
			var hk Counter
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				hk.Add(c.ks[i%len(c.ks)], "app-1", 1)
			}
		})
	}
}
