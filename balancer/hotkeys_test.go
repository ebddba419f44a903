package balancer

import (
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"testing"
	"time"
)

// A Zipf load (s = 1.1 over 10 000 keys): the true top 10 are listed, in
// order, each estimate within Space-Saving's bounds (true count <=
// estimate <= true count + its error, error <= requests/counters).
func TestHotKeysZipf(t *testing.T) {
	const n = 200_000
	b := &Balancer{clk: systemClock{}, epoch: time.Now()}
	z := rand.NewZipf(rand.New(rand.NewSource(1)), 1.1, 1, 9999)
	truth := map[uint64]uint64{}
	for range n {
		k := z.Uint64()*0x9e3779b97f4a7c15 + 7 // spread the ranks over the hash space
		truth[k]++
		b.hot.add(k, "a", 1)
	}
	// The index finds every monitored key at its slot, and nothing else.
	w := b.hot.cur
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
	got := b.HotKeys(false)
	if got.Requests != n || len(got.Keys) != hotCounters {
		t.Fatalf("%d requests, %d keys; want %d, %d", got.Requests, len(got.Keys), n, hotCounters)
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
	bound := uint64(n / hotCounters)
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
	clk := newFakeClock()
	b := &Balancer{}
	clk.install(b)
	for range 5 {
		b.hot.add(1, "a", b.nanotime())
	}
	b.hot.add(2, "b", b.nanotime())
	clk.advance(hotWindow + time.Second)
	b.hot.add(2, "c", b.nanotime())
	cur, prev := b.HotKeys(false), b.HotKeys(true)
	if cur.Requests != 1 || len(cur.Keys) != 1 || cur.Keys[0].Hash != 2 || cur.Keys[0].Sent != "c" {
		t.Errorf("current window %+v", cur)
	}
	if prev.Requests != 6 || prev.Seconds != 60 || prev.Keys[0].Hash != 1 || prev.Keys[0].Requests != 5 || prev.Keys[1].Sent != "b" {
		t.Errorf("previous window %+v", prev)
	}
	clk.advance(3 * hotWindow) // nothing for a long while: both empty
	if cur, prev := b.HotKeys(false), b.HotKeys(true); cur.Requests != 0 || prev.Requests != 0 {
		t.Errorf("after three idle windows: %+v %+v", cur, prev)
	}
}

// Through the proxy: a hot key's requests are counted once each, with
// where they went, and ringlb_hot_key_share follows.
func TestHotKeysServed(t *testing.T) {
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, newBackend(t, "a"), newBackend(t, "b"))))
	for i := range 30 {
		k := "hot"
		if i%3 == 0 {
			k = fmt.Sprint("cold-", i)
		}
		if code, _, _ := get(t, front.Client(), front.URL+"/", "X-User-ID", k); code != http.StatusOK {
			t.Fatal(code)
		}
	}
	hk := b.HotKeys(false)
	lk := b.Lookup("hot")
	if hk.Requests != 30 || len(hk.Keys) != 11 || fmt.Sprintf("%016x", hk.Keys[0].Hash) != lk.Hash || hk.Keys[0].Requests != 20 || hk.Keys[0].Sent != lk.Chosen {
		t.Errorf("hot keys %+v; lookup %+v", hk, lk)
	}
	if v := metric(t, reg, "ringlb_hot_key_share", "pool=default"); v < 0.66 || v > 0.67 {
		t.Errorf("ringlb_hot_key_share = %v, want 20/30", v)
	}
	if res, ok := b.LookupHash(lk.Hash); !ok || res.Owner != lk.Owner || res.Chosen != lk.Chosen || res.Key != "" {
		t.Errorf("LookupHash(%s) = %+v %v", lk.Hash, res, ok)
	}
	for _, bad := range []string{"", "xyz", "123", "00000000000000000"} {
		if _, ok := b.LookupHash(bad); ok {
			t.Errorf("LookupHash(%q) ok", bad)
		}
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
			var hk hotKeys
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				hk.add(c.ks[i%len(c.ks)], "app-1", 1)
			}
		})
	}
}
