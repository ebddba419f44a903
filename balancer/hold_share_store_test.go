package balancer

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/internal/testutil/redistest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// The store is written by every replica, and by anyone else who can
// write to the server: what a lookup reads there is judged before it
// becomes this process's own. These tests write into the server directly.

// storeKey returns the store's key for key under prefix, as the client
// writes it (the prefix and the ring position in 16 hex digits).
func storeKey(b *Balancer, prefix, key string) string {
	return fmt.Sprintf("%s%016x", prefix, b.snap.Load().ring.Hash(key))
}

// reqCost is what a run of requests cost, per request.
type reqCost struct {
	bytes float64 // allocated by the whole process
	cpu   float64 // µs of the whole process's CPU time
}

// perRequest sends one request for each key (from 4 clients at once,
// each key once) and returns the process's allocations and CPU time per
// request.
func perRequest(t *testing.T, r replica, ks []string) reqCost {
	t.Helper()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := testenv.CPUTime()
	const clients = 4
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; i < len(ks); i += clients {
				code, _, body := get(t, r.front.Client(), r.front.URL+"/", "X-User-ID", ks[i])
				if code != http.StatusOK {
					t.Errorf("key %s: %d %s", ks[i], code, body)
					return
				}
			}
		})
	}
	wg.Wait()
	cpu := testenv.CPUTime() - cpu0
	runtime.ReadMemStats(&m1)
	n := float64(len(ks))
	return reqCost{bytes: float64(m1.TotalAlloc-m0.TotalAlloc) / n, cpu: float64(cpu.Microseconds()) / n}
}

// Records naming upstreams that are not members of the pool (a flood of
// 20 000 distinct names written into the server) are no record: they
// never enter the store's table of names, which stays at the members, and
// the requests that look them up cost what requests with no record cost.
func TestHoldShareForeignNames(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	const idle = 10 * time.Minute
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, newBackend(t, "a"), newBackend(t, "b")), idle)
	r := replicas(t, 1, clk, opts, srv, "t7:")[0]
	const n = 20_000
	ghosts := keys("ghost-", n)
	args := []string{"MSET"}
	at := clk.Now().UnixMilli()
	for i, k := range ghosts {
		args = append(args, storeKey(r.b, "t7:", k),
			fmt.Sprintf("%x %d ghost-%d.example:8080", uint64(hold.VersionOf("elsewhere")), at, i))
	}
	srv.Do(args...)
	args = nil

	base := perRequest(t, r, keys("plain-", n/10)) // no record in the store
	flood := perRequest(t, r, ghosts)
	names := r.b.hold.Store().Names()
	t.Logf("no record: %.0f B and %.0f µs CPU per request; records naming %d non-members: %.0f B and %.0f µs per request; name table: %d entries",
		base.bytes, base.cpu, n, flood.bytes, flood.cpu, names)
	if names > 2 {
		t.Errorf("the name table has %d entries after %d records naming non-members, want at most 2 (the members)", names, n)
	}
	if flood.bytes > 2*base.bytes+4096 {
		t.Errorf("a request whose record names a non-member allocates %.0f B, one with no record %.0f B", flood.bytes, base.bytes)
	}
	sc := r.b.hold.Counts.Snapshot()
	if sc.Found != 0 || sc.None != n+n/10 || sc.Errors != 0 {
		t.Errorf("lookups: %d found, %d none, %d errors; want 0, %d, 0", sc.Found, sc.None, sc.Errors, n+n/10)
	}
}

// A value longer than any record this pool could read (8 MiB, naming a
// non-member) is no record, is not read whole, and nothing of it stays in
// memory once the server forgets it.
func TestHoldShareHugeValue(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	const idle = 10 * time.Minute
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, newBackend(t, "a"), newBackend(t, "b")), idle)
	r := replicas(t, 1, clk, opts, srv, "t8:")[0]
	const huge = 8 << 20
	srv.Do("SET", storeKey(r.b, "t8:", "huge"),
		fmt.Sprintf("%x %d ", uint64(hold.VersionOf("elsewhere")), clk.Now().UnixMilli())+strings.Repeat("x", huge))
	visit(t, r.front, "warm-up") // the client's connection, the tables' first slots

	runtime.GC()
	var m0, m1, m2 runtime.MemStats
	runtime.ReadMemStats(&m0)
	visit(t, r.front, "huge")
	runtime.ReadMemStats(&m1)
	srv.Do("FLUSHALL")
	runtime.GC()
	runtime.ReadMemStats(&m2)
	read := int64(m1.TotalAlloc - m0.TotalAlloc)
	retained := int64(m2.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("a lookup of an %d-byte value allocated %d bytes; %d bytes more on the heap after FLUSHALL", huge, read, retained)
	if read > huge/2 {
		t.Errorf("the lookup allocated %d bytes for a %d-byte value, want it not read whole", read, huge)
	}
	if retained > huge/4 {
		t.Errorf("%d bytes more on the heap after the server forgot the %d-byte value", retained, huge)
	}
	if sc := r.b.hold.Counts.Snapshot(); sc.Found != 0 || sc.None != 2 || sc.Errors != 0 {
		t.Errorf("lookups: %d found, %d none, %d errors; want 0, 2, 0", sc.Found, sc.None, sc.Errors)
	}
}

// One key of another type in the store (a list where a record should be)
// is that key's "no record", not an outage: the store is not marked down,
// no error is counted, and every other key keeps its hold through the
// change; the key's next record overwrites it.
func TestHoldShareWrongTypeKey(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	const idle = 10 * time.Minute
	clk := newFakeClock()
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	opts := holdOptions(upstreamsOf(t, bes...), idle)
	old := replicas(t, 1, clk, opts, srv, "t9:")[0]
	live := keys("user-", 203)
	where := map[string]string{}
	for _, k := range live {
		where[k] = visit(t, old.front, k)
	}
	waitWritten(t, []replica{old}, uint64(len(live)))
	bad, others := live[0], live[1:]
	badKey := storeKey(old.b, "t9:", bad)
	srv.Do("DEL", badKey)
	srv.Do("RPUSH", badKey, "x")

	opts.Upstreams = upstreamsOf(t, append(bes, newBackend(t, "e"))...)
	nw := replicas(t, 1, clk, opts, srv, "t9:")[0]
	visit(t, nw.front, bad)
	down := nw.b.Status().Hold.Share.Down
	moved, movers := 0, 0
	for _, k := range others {
		if nw.b.Lookup(k).Owner != where[k] {
			movers++
		}
		if visit(t, nw.front, k) != where[k] {
			moved++
		}
	}
	t.Logf("%d of %d other keys lost their hold (the new ring moves %d); store marked down after the wrong-type key: %v",
		moved, len(others), movers, down)
	if movers == 0 {
		t.Fatal("the new ring moves none of the keys")
	}
	if moved != 0 {
		t.Errorf("%d of %d other keys lost their hold, want 0", moved, len(others))
	}
	if down {
		t.Error("the store was marked down by one key of the wrong type")
	}
	sc := nw.b.hold.Counts.Snapshot()
	if sc.Found != uint64(len(others)) || sc.None != 1 || sc.LookupErrors != 0 {
		t.Errorf("lookups: %d found, %d none, %d errors; want %d, 1, 0", sc.Found, sc.None, sc.LookupErrors, len(others))
	}
	if v := metric(t, nw.reg, "ringlb_hold_share_lookups_total", "result=error"); v != 0 {
		t.Errorf(`ringlb_hold_share_lookups_total{result="error"} = %v, want 0`, v)
	}

	// The bad key's request made a record: its write replaces the list.
	testenv.Eventually(t, 20*time.Second, func() error {
		if typ := srv.Do("TYPE", badKey); len(typ) != 1 || typ[0] != "string" {
			return fmt.Errorf("%s is a %v", badKey, typ)
		}
		return nil
	})
	if sc := nw.b.hold.Counts.Snapshot(); sc.Errors != 0 || nw.b.Status().Hold.Share.Down {
		t.Errorf("after writing over the list: %d errors, down %v", sc.Errors, nw.b.Status().Hold.Share.Down)
	}
	if v := metric(t, nw.reg, "ringlb_hold_share_errors_total"); v != 0 {
		t.Errorf("ringlb_hold_share_errors_total = %v, want 0", v)
	}
}
