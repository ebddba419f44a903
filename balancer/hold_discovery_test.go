package balancer

import (
	"slices"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/internal/testutil/dnstest"
)

// Hold through a discovery change: a member appearing in the SRV answer
// is a membership change like a reload's. Every key in use stays on the
// upstream that served it though the new ring gives some to the
// newcomer, new keys follow the new ring, and once idle has passed
// without use the held keys follow the ring too.
func TestHoldThroughDiscovery(t *testing.T) {
	const idle = 10 * time.Minute
	z := dnstest.New(t)
	f := newFleet(t, z, 4)
	f.publish()
	opts := discOptions(z, nil, srvSource(srvName))
	r := newDiscRig(t, z, opts)
	b := r.b
	// The clock goes in before anything is served, under b.mu (the
	// Discoverer's first poll may be installing members); hold is turned
	// on after it, so that the expiry timer runs on it from its start.
	clk := newFakeClock()
	b.mu.Lock()
	clk.install(b)
	b.mu.Unlock()
	opts.Hold = hold.Options{Idle: idle, MaxKeys: 100_000}
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	r.poll(t)
	if got, want := memberNames(b), f.names(false); !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}

	used := testKeys(400)
	where := placement(b, used)
	if bad := r.serveKeys(t, where); bad > 0 {
		t.Fatalf("%d requests failed before the change", bad)
	}
	if n := metric(t, r.reg, "ringlb_hold_keys"); n != float64(len(used)) {
		t.Fatalf("ringlb_hold_keys = %v after %d keys", n, len(used))
	}

	clk.advance(time.Minute)
	newcomer := f.add(t)
	f.publish()
	r.poll(t)
	if got, want := memberNames(b), f.names(false); !slices.Equal(got, want) {
		t.Fatalf("members after the scale-out %v, want %v", got, want)
	}
	// The ring (placement without hold) gives some keys to the newcomer...
	ringNow := placement(b, used)
	n, to := moves(where, ringNow)
	if len(to) != 1 || to[newcomer] != n || n < len(used)/10 {
		t.Fatalf("the new ring moves %d of %d keys, to %v; want about a fifth, all to %s", n, len(used), to, newcomer)
	}
	for k, o := range where {
		if ringNow[k] != o {
			if h := b.Lookup(k).Held; h != o {
				t.Errorf("key %s: lookup held %q, want %s", k, h, o)
			}
		}
	}
	// ...but every key in use stays where it was: 0 moved.
	if bad := r.serveKeys(t, where); bad > 0 {
		t.Fatalf("%d of %d keys in use moved (or failed) after the discovery change", bad, len(used))
	}
	if got := metric(t, r.reg, "ringlb_held_total"); got != float64(n) {
		t.Errorf("ringlb_held_total = %v, want %d (the keys the ring moved, each once)", got, n)
	}
	nc := f.bes[len(f.bes)-1]
	if h := nc.hits.Load(); h != 0 {
		t.Errorf("the newcomer served %d requests of keys in use", h)
	}

	// New keys follow the new ring, the newcomer included.
	fresh := make([]string, 300)
	for i := range fresh {
		fresh[i] = "fresh-" + used[i]
	}
	ringFresh := placement(b, fresh)
	if bad := r.serveKeys(t, ringFresh); bad > 0 {
		t.Fatalf("%d new keys did not follow the new ring", bad)
	}
	onNew := 0
	for _, o := range ringFresh {
		if o == newcomer {
			onNew++
		}
	}
	if onNew == 0 || nc.hits.Load() != int64(onNew) {
		t.Errorf("the newcomer served %d new keys, the ring gives it %d (want some)", nc.hits.Load(), onNew)
	}

	// Idle passes without use: the held keys follow the ring, to the
	// newcomer.
	clk.advance(idle + time.Minute)
	clk.fire()
	before := nc.hits.Load()
	if bad := r.serveKeys(t, ringNow); bad > 0 {
		t.Fatalf("%d idle keys did not follow the ring", bad)
	}
	if got := nc.hits.Load() - before; got != int64(n) {
		t.Errorf("the newcomer served %d of the %d idle keys the ring gives it", got, n)
	}
	for k := range where {
		if h := b.Lookup(k).Held; h != "" {
			t.Errorf("idle key %s: lookup still held on %s", k, h)
		}
	}
}
