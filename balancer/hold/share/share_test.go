package share

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/redistest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

func newClient(t *testing.T, srv *redistest.Server, prefix string) *Client {
	t.Helper()
	c, err := New(Options{Redis: srv.URL(), Prefix: prefix, Timeout: time.Second, Idle: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// members are the upstreams the records of these tests name.
var members = NewMembers([]string{"a", "app-1", "app-0.app.default.svc.cluster.local:8080"})

func TestPutGet(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := newClient(t, srv, "p:")
	at := time.UnixMilli(1_700_000_000_123)
	c.Put(0xfeedface, Record{Upstream: "app-0.app.default.svc.cluster.local:8080", Version: 0xabc, At: at})
	testenv.Eventually(t, 10*time.Second, func() error {
		if c.Counters().Written.Load() == 0 {
			return fmt.Errorf("not written yet")
		}
		return nil
	})
	r, ok, err := c.Get(context.Background(), 0xfeedface, members)
	if err != nil || !ok {
		t.Fatalf("Get: %v %v", ok, err)
	}
	if want := (Record{Upstream: "app-0.app.default.svc.cluster.local:8080", Version: 0xabc, At: at}); r != want {
		t.Errorf("Get = %+v, want %+v", r, want)
	}
	if _, ok, err := c.Get(context.Background(), 1, members); ok || err != nil {
		t.Errorf("Get of an unknown hash: %v %v", ok, err)
	}
	if got := srv.Do("KEYS", "*"); !slices.Equal(got, []string{"p:00000000feedface"}) {
		t.Errorf("keys = %q", got)
	}
	ttl, _ := strconv.Atoi(srv.Do("PTTL", "p:00000000feedface")[0])
	if ttl <= 50_000 || ttl > 60_000 {
		t.Errorf("PTTL = %d ms, want about idle (60000)", ttl)
	}
	n := c.Counters()
	if n.Found.Load() != 1 || n.None.Load() != 1 || n.Errors.Load() != 0 {
		t.Errorf("counters: %+v", n.Snapshot())
	}
	// A value that is not a record of ours reads as none.
	srv.Do("SET", "p:0000000000000002", "garbage")
	if _, ok, err := c.Get(context.Background(), 2, members); ok || err != nil {
		t.Errorf("Get of garbage: %v %v", ok, err)
	}
}

// What the server answers about one key is that key's answer: a value
// that is not a record naming a member (another upstream, one longer than
// any such record, a key of another type) is none, counted as none, and
// never marks the server down. A write replaces a key of another type.
func TestGetNotARecord(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := newClient(t, srv, "n:")
	at := time.Now().UnixMilli()
	srv.Do("SET", "n:0000000000000001", fmt.Sprintf("abc %d not-a-member", at))
	srv.Do("SET", "n:0000000000000002", fmt.Sprintf("abc %d a%s", at, strings.Repeat("x", 1<<20)))
	srv.Do("RPUSH", "n:0000000000000003", "x")
	srv.Do("SET", "n:0000000000000004", fmt.Sprintf("abc %d app-1", at))
	for h := uint64(1); h <= 3; h++ {
		if r, ok, err := c.Get(context.Background(), h, members); ok || err != nil {
			t.Errorf("Get(%d) = %+v %v %v, want none", h, r, ok, err)
		}
	}
	if r, ok, err := c.Get(context.Background(), 4, members); !ok || err != nil || r.Upstream != "app-1" {
		t.Errorf("Get(4) = %+v %v %v, want app-1's record", r, ok, err)
	}
	if s := c.Counters().Snapshot(); s.Found != 1 || s.None != 3 || s.Errors != 0 || s.LookupErrors != 0 || c.Down() {
		t.Errorf("counters %+v, down %v; want 1 found, 3 none, no error, not down", s, c.Down())
	}
	// The longest member's record is read whole.
	long := NewMembers([]string{strings.Repeat("y", 300)})
	srv.Do("SET", "n:0000000000000005", fmt.Sprintf("%x %d %s", uint64(1<<64-1), int64(-1<<63), strings.Repeat("y", 300)))
	if r, ok, err := c.Get(context.Background(), 5, long); !ok || err != nil || len(r.Upstream) != 300 {
		t.Errorf("Get of the longest record: %v %v (%d bytes of name)", ok, err, len(r.Upstream))
	}
	c.Put(3, Record{Upstream: "a", Version: 1, At: time.Now()})
	testenv.Eventually(t, 10*time.Second, func() error {
		if typ := srv.Do("TYPE", "n:0000000000000003"); len(typ) != 1 || typ[0] != "string" {
			return fmt.Errorf("the list is still a %v", typ)
		}
		return nil
	})
	if _, ok, err := c.Get(context.Background(), 3, members); !ok || err != nil {
		t.Errorf("Get after the write over the list: %v %v", ok, err)
	}
	if s := c.Counters().Snapshot(); s.Errors != 0 || c.Down() {
		t.Errorf("after the write over the list: %+v, down %v", s, c.Down())
	}
}

// Writes go in pipelined batches: never more than BatchMax records in one,
// and a lone record waits about FlushEvery.
func TestBatches(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := newClient(t, srv, "b:")
	before := pipelines(t, srv)
	const n = 2000
	for i := range n {
		c.Put(uint64(i), Record{Upstream: "a", Version: 1, At: time.Now()})
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if w := c.Counters().Written.Load(); w != n {
			return fmt.Errorf("%d of %d written", w, n)
		}
		return nil
	})
	if got := pipelines(t, srv) - before; got != n {
		t.Errorf("server ran %d SETs, want %d", got, n)
	}
	if b := c.batches.Load(); b < n/BatchMax {
		t.Errorf("%d records in %d pipelines, want at most %d per pipeline", n, b, BatchMax)
	}
	start := time.Now()
	c.Put(99999, Record{Upstream: "a", Version: 1, At: time.Now()})
	testenv.Eventually(t, 10*time.Second, func() error {
		if c.Counters().Written.Load() != n+1 {
			return fmt.Errorf("not written yet")
		}
		return nil
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a lone record took %v to be written", d)
	}
}

func pipelines(t *testing.T, srv *redistest.Server) int {
	info := strings.Join(srv.Do("INFO", "commandstats"), "\n")
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_set:calls="); ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}

// With the server gone, Get answers within the timeout, then at once
// (no network) until the background probe finds it back; queued writes
// beyond the bound are dropped and counted.
func TestDown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c, err := New(Options{Redis: srv.URL(), Prefix: "d:", Timeout: 200 * time.Millisecond, Idle: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.Stop()
	start := time.Now()
	if _, ok, err := c.Get(context.Background(), 1, members); ok || err == nil {
		t.Fatalf("Get with the server down: %v %v", ok, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("first Get took %v", d)
	}
	if !c.Down() {
		t.Fatal("not marked down after a failed lookup")
	}
	for range QueueMax + BatchMax + 100 {
		c.Put(7, Record{Upstream: "a", Version: 1, At: time.Now()})
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if c.Counters().Dropped.Load() == 0 {
			return fmt.Errorf("nothing dropped")
		}
		return nil
	})
	srv.Restart()
	testenv.Eventually(t, 20*time.Second, func() error {
		if c.Down() {
			return fmt.Errorf("still down")
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, ok, err := c.Get(context.Background(), 7, members); !ok || err != nil {
			return fmt.Errorf("record not there after the server returned: %v %v", ok, err)
		}
		return nil
	})
}

func TestCheck(t *testing.T) {
	for _, u := range []string{"redis://127.0.0.1:6379", "rediss://user@cache:6380/2", "redis://h"} {
		if err := Check(Options{Redis: u, Timeout: time.Second}); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"http://h:1", "h:6379", "redis://h:1/x", ""} {
		if err := Check(Options{Redis: u, Timeout: time.Second}); err == nil {
			t.Errorf("%s: no error", u)
		}
	}
}

func TestDecode(t *testing.T) {
	r := Record{Upstream: "a b", Version: 1<<63 + 5, At: time.UnixMilli(42)}
	got, ok := decode(string(encode(nil, r)))
	if !ok || got != r {
		t.Errorf("round trip: %+v %v", got, ok)
	}
	for _, v := range []string{"", "x", "1 2", "zz 1 a", "1 x a", "1 2 "} {
		if _, ok := decode(v); ok {
			t.Errorf("decode(%q) ok", v)
		}
	}
}

// BenchmarkPut is the request path's part of a write: queueing one record.
func BenchmarkPut(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	c, err := New(Options{Redis: srv.URL(), Prefix: "bp:", Timeout: time.Second, Idle: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := Record{Upstream: "app-1", Version: 1, At: time.Now()}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Put(uint64(i), r)
	}
}

// BenchmarkWrite is a write from queueing to the server's answer, batched:
// records per second through one client, as ns per record.
func BenchmarkWrite(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	c, err := New(Options{Redis: srv.URL(), Prefix: "bw:", Timeout: time.Second, Idle: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := Record{Upstream: "app-1", Version: 1, At: time.Now()}
	n := 0
	cpu0 := cpuTime()
	for b.Loop() {
		for c.Queued() > QueueMax/2 { // keep the queue from dropping
			time.Sleep(time.Millisecond)
		}
		c.Put(uint64(n), r)
		n++
	}
	for c.Counters().Written.Load()+c.Counters().Dropped.Load() < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	if d := c.Counters().Dropped.Load(); d != 0 {
		b.Fatalf("%d dropped", d)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(n), "cpu-ns/record")
}

// cpuTime is this process's user and system CPU time in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkGet is one lookup's round trip against a local server, with
// its p50 and p99.
func BenchmarkGet(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	c, err := New(Options{Redis: srv.URL(), Prefix: "bg:", Timeout: time.Second, Idle: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for i := range 1024 {
		c.Put(uint64(i), Record{Upstream: "app-1", Version: 1, At: time.Now()})
	}
	for c.Counters().Written.Load() < 1024 {
		time.Sleep(time.Millisecond)
	}
	var lat []time.Duration
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		if _, ok, err := c.Get(ctx, uint64(i&2047), members); err != nil || ok != (i&2047 < 1024) {
			b.Fatalf("Get: %v %v", ok, err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkServerMemory writes 1 000 000 records and reports the server's
// memory per record (INFO memory used_memory, before and after). It runs
// its work once whatever b.N is.
func BenchmarkServerMemory(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	c, err := New(Options{Redis: srv.URL(), Prefix: "ringlb:hold:", Timeout: time.Second, Idle: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	used := func() int {
		for _, line := range strings.Split(strings.Join(srv.Do("INFO", "memory"), "\n"), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		b.Fatal("no used_memory")
		return 0
	}
	before := used()
	const n = 1_000_000
	for i := range n {
		for c.Queued() > QueueMax/2 {
			time.Sleep(time.Millisecond)
		}
		c.Put(uint64(i)*0x9e3779b97f4a7c15, Record{Upstream: "app-7.app.default.svc.cluster.local:8080", Version: 0x1234567890abcdef, At: time.Now()})
	}
	for c.Counters().Written.Load() < n {
		time.Sleep(10 * time.Millisecond)
	}
	for b.Loop() {
	}
	b.ReportMetric(float64(used()-before)/n, "B/record")
}

// The queue takes memory as records come and gives a burst's back: a new
// client does not hold QueueMax records' room (0.9 MiB), and after 5000
// records are written the queue is back to at most queueKeep records'.
func TestQueueGrowsAndShrinks(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	c := newClient(t, srv, "q:")
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if d := int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc); d > 256<<10 {
		t.Errorf("a new client: %d bytes of heap, want under 256 KiB", d)
	}
	const n = 5000
	for i := range n {
		c.Put(uint64(i), Record{Upstream: "app-1", Version: 1, At: time.Now()})
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if w := c.Counters().Written.Load(); w < n {
			return fmt.Errorf("%d of %d written", w, n)
		}
		return nil
	})
	c.qmu.Lock()
	q, head := cap(c.q), c.head
	c.qmu.Unlock()
	if q > queueKeep || head != 0 || c.Queued() != 0 {
		t.Errorf("after the burst: queue capacity %d (want at most %d), head %d, queued %d", q, queueKeep, head, c.Queued())
	}
	if d := c.Counters().Dropped.Load(); d != 0 {
		t.Errorf("%d dropped", d)
	}
}
