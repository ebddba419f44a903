package hold

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

const sec = int64(time.Second)

func TestStoreRecordLookupExpire(t *testing.T) {
	s := NewStore(StoreOptions{MaxKeys: 100, Idle: 10 * time.Second})
	v1, v2 := VersionOf("v1"), VersionOf("v2")
	if _, ok := s.Lookup(42, 0); ok {
		t.Fatal("empty store found a record")
	}
	s.Record(42, "a", v1, 5*sec)
	if r, ok := s.Lookup(42, 5*sec); !ok || r != (Rec{"a", v1, 5 * sec}) {
		t.Fatalf("Lookup = %+v, %v", r, ok)
	}
	if _, ok := s.Lookup(43, 5*sec); ok {
		t.Fatal("found a record for another key")
	}
	// Younger than idle: found; idle old: expired, and removed.
	if _, ok := s.Lookup(42, 15*sec-1); !ok {
		t.Fatal("record expired before idle")
	}
	if _, ok := s.Lookup(42, 15*sec); ok {
		t.Fatal("record idle for idle still found")
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after lazy expiry, want 0", s.Len())
	}

	// A refresh with the same upstream and version moves the time only.
	s.Record(42, "a", v1, 20*sec)
	s.Record(42, "a", v1, 28*sec)
	if r, _ := s.Lookup(42, 29*sec); r != (Rec{"a", v1, 28 * sec}) {
		t.Fatalf("after refresh: %+v", r)
	}
	// Time never goes back.
	s.Record(42, "a", v1, 21*sec)
	if r, _ := s.Lookup(42, 29*sec); r.LastUse != 28*sec {
		t.Fatalf("an older refresh moved LastUse to %d", r.LastUse)
	}
	// Another upstream or version replaces the record.
	s.Record(42, "b", v1, 30*sec)
	if r, _ := s.Lookup(42, 30*sec); r != (Rec{"b", v1, 30 * sec}) {
		t.Fatalf("after new upstream: %+v", r)
	}
	s.Record(42, "b", v2, 31*sec)
	if r, _ := s.Lookup(42, 31*sec); r != (Rec{"b", v2, 31 * sec}) {
		t.Fatalf("after new version: %+v", r)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d, want 1", s.Len())
	}

	// SetIdle applies to existing records.
	s.SetIdle(time.Second)
	if _, ok := s.Lookup(42, 32*sec); ok {
		t.Fatal("record older than the new idle still found")
	}
}

// Refreshes closer together than a millisecond (1/256 of a shorter idle)
// are skipped, sparing a shared write; the recorded time is then up to
// that much behind.
func TestStoreRefreshGrain(t *testing.T) {
	ms := int64(time.Millisecond)
	s := NewStore(StoreOptions{MaxKeys: 10, Idle: time.Hour})
	s.Record(1, "a", 1, 100*ms)
	s.Record(1, "a", 1, 100*ms+ms/2)
	if r, _ := s.Lookup(1, 101*ms); r.LastUse != 100*ms {
		t.Fatalf("refresh within the grain moved LastUse to %d", r.LastUse)
	}
	s.Record(1, "a", 1, 101*ms)
	if r, _ := s.Lookup(1, 101*ms); r.LastUse != 101*ms {
		t.Fatalf("refresh a grain later left LastUse at %d", r.LastUse)
	}
	s.SetIdle(256 * time.Microsecond) // grain 1µs
	s.Record(1, "a", 1, 101*ms+int64(time.Microsecond))
	if r, _ := s.Lookup(1, 101*ms+int64(time.Microsecond)); r.LastUse != 101*ms+int64(time.Microsecond) {
		t.Fatalf("with idle 256µs a refresh 1µs later left LastUse at %d", r.LastUse)
	}
}

func TestStoreDrop(t *testing.T) {
	idle := 10 * time.Second
	s := NewStore(StoreOptions{MaxKeys: 1000, Idle: idle})
	for k := uint64(0); k < 100; k++ {
		up := "a"
		if k%2 == 1 {
			up = "b"
		}
		s.Record(k, up, 7, sec)
	}
	s.Drop("a", 2*sec)
	s.Drop("nobody", 2*sec)
	for k := uint64(0); k < 100; k++ {
		r, ok := s.Lookup(k, 3*sec)
		if ok != (k%2 == 1) || (ok && r.Upstream != "b") {
			t.Fatalf("key %d after Drop(a): %+v, %v", k, r, ok)
		}
	}
	// Dropped records go away lazily; Expire finds the rest.
	for s.Expire(3*sec, 64) > 0 {
	}
	if s.Len() != 50 {
		t.Fatalf("Len = %d after Drop and Expire, want 50", s.Len())
	}
	// The name comes back: new records count, old ones stay void.
	s.Record(0, "a", 8, 4*sec)
	if r, ok := s.Lookup(0, 4*sec); !ok || r != (Rec{"a", 8, 4 * sec}) {
		t.Fatalf("re-added a: %+v, %v", r, ok)
	}
	if _, ok := s.Lookup(2, 4*sec); ok {
		t.Fatal("an old record of a dropped upstream came back with its name")
	}
}

// Keep drops every name but the members', whatever was recorded: their
// records are void at once, the table keeps nothing of the names (their
// strings are not held), and a name dropped long enough ago gives its
// entry to the next new one, so a churn of names keeps the table at the
// members and those dropped within twice idle.
func TestStoreKeep(t *testing.T) {
	idle := 10 * time.Second
	s := NewStore(StoreOptions{MaxKeys: 10_000, Idle: idle})
	const n, long = 1000, 8 << 10
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for k := range uint64(n) {
		s.Record(k, fmt.Sprintf("%0*d", long, k), 7, sec) // 8 MiB of names
	}
	s.Record(n, "a", 7, sec)
	s.Keep(func(name string) bool { return name == "a" }, 2*sec)
	for k := range uint64(n) {
		if r, ok := s.Lookup(k, 3*sec); ok {
			t.Fatalf("key %d on a name not kept: %+v", k, r)
		}
	}
	if r, ok := s.Lookup(n, 3*sec); !ok || r.Upstream != "a" {
		t.Fatalf("key %d on a: %+v, %v", n, r, ok)
	}
	for s.Expire(3*sec, 1024) > 0 {
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	if d := int64(m1.HeapAlloc) - int64(m0.HeapAlloc); d > n*long/4 {
		t.Errorf("%d bytes more on the heap once %d names of %d bytes were dropped", d, n, long)
	}
	// Churn: one name replaced by another every second for 20×idle. The
	// 1000 names dropped at 2s give their entries from 22s on; until then
	// each second's dropped name takes a new one: about 2×idle's worth.
	now := 3 * sec
	churn := func(from int) {
		for i := range 200 {
			name := fmt.Sprint("pod-", from+i)
			s.Record(uint64(i), name, 7, now)
			s.Keep(func(up string) bool { return up == "a" || up == name }, now)
			now += sec
		}
	}
	churn(0)
	first := s.Names()
	if want := n + 1 + int(2*idle/time.Second) + 2; first > want {
		t.Errorf("the name table grew to %d entries through a churn, want at most %d", first, want)
	}
	churn(1000)
	if got := s.Names(); got != first {
		t.Errorf("the name table grew from %d to %d entries through a second churn, want no growth", first, got)
	}
}

// A dropped name's id is reused only once every record carrying it has
// expired, and with a new generation.
func TestNamesReuse(t *testing.T) {
	var n names
	idle := int64(10)
	a, _ := n.intern("a", 0, idle)
	n.drop("a", 100)
	b, _ := n.intern("b", 110, idle) // too early: a's entry is kept
	if b&idIndex == a&idIndex {
		t.Fatalf("entry reused %d after drop, within 2×idle", 10)
	}
	c, _ := n.intern("c", 121, idle)
	if c&idIndex != a&idIndex || c == a {
		t.Fatalf("c = %#x, want a's entry %#x with a new generation", c, a)
	}
	if _, ok := n.name(a); ok {
		t.Fatal("old id of a names something")
	}
	if got, _ := n.name(c); got != "c" {
		t.Fatalf("name(c) = %q", got)
	}
}

// The store never holds more than MaxKeys records, and eviction spares the
// keys in use: a hot set refreshed while a flood of new keys passes stays.
func TestStoreBoundAndLRU(t *testing.T) {
	const max, hot, flood = 2000, 50, 40_000
	s := NewStore(StoreOptions{MaxKeys: max, Idle: 1000 * time.Hour})
	now := int64(0) // one millisecond per insert
	hotKey := func(i int) uint64 { return uint64(i)*0x9E3779B97F4A7C15 + 1 }
	for i := 0; i < flood; i++ {
		now += int64(time.Millisecond)
		s.Record(uint64(i)<<20|0xabc, "flood", 1, now)
		if i%100 == 0 {
			for h := 0; h < hot; h++ {
				s.Record(hotKey(h), "hot", 1, now)
			}
		}
		if i%1000 == 0 && s.Len() > max {
			t.Fatalf("Len = %d > MaxKeys %d", s.Len(), max)
		}
	}
	if s.Len() != max {
		t.Errorf("Len = %d after the flood, want %d (every shard full)", s.Len(), max)
	}
	for h := 0; h < hot; h++ {
		if r, ok := s.Lookup(hotKey(h), now); !ok || r.Upstream != "hot" {
			t.Fatalf("hot key %d evicted by the flood", h)
		}
	}
	// The oldest flood keys are gone, most of the newest are there.
	old, recent := 0, 0
	for i := 0; i < 500; i++ {
		if _, ok := s.Lookup(uint64(i)<<20|0xabc, now); ok {
			old++
		}
		if _, ok := s.Lookup(uint64(flood-1-i)<<20|0xabc, now); ok {
			recent++
		}
	}
	if old != 0 || recent < 475 {
		t.Errorf("of 500 oldest flood keys %d remain (want 0); of 500 newest %d (want >= 475)", old, recent)
	}
}

func TestStoreTinyAndNginxHashes(t *testing.T) {
	s := NewStore(StoreOptions{MaxKeys: 1, Idle: time.Hour})
	for k := uint64(0); k < 10; k++ {
		s.Record(k, "a", 1, int64(k)+1)
		if s.Len() != 1 {
			t.Fatalf("MaxKeys 1: Len = %d", s.Len())
		}
		if _, ok := s.Lookup(k, int64(k)+1); !ok {
			t.Fatalf("MaxKeys 1: newest key %d missing", k)
		}
	}
	// Under nginx placement hashes are 32-bit values in the top half.
	s = NewStore(StoreOptions{MaxKeys: 100_000, Idle: time.Hour})
	for k := uint64(0); k < 5000; k++ {
		s.Record(k<<32, "a", 1, 1)
	}
	for k := uint64(0); k < 5000; k++ {
		if _, ok := s.Lookup(k<<32, 1); !ok {
			t.Fatalf("key %d<<32 lost", k)
		}
	}
}

// Idle records go away as new keys arrive, without any sweep call, and
// Expire empties a store whose records are all idle.
func TestStoreIncrementalExpiry(t *testing.T) {
	s := NewStore(StoreOptions{MaxKeys: 1 << 14, Idle: time.Second})
	for k := uint64(0); k < 2000; k++ {
		s.Record(k*0x9E3779B97F4A7C15, "a", 1, 0)
	}
	for k := uint64(0); k < 8000; k++ {
		s.Record(k*0x9E3779B97F4A7C15+7, "a", 1, 2*sec)
	}
	if n := s.Len(); n > 8000+400 {
		t.Errorf("Len = %d: inserts reclaimed too few idle records", n)
	}
	for s.Expire(10*sec, 64) > 0 {
	}
	if s.Len() != 0 {
		t.Errorf("Len = %d after Expire of an idle store", s.Len())
	}
}

// Readers never see a torn record: each writer writes an upstream and the
// version made from it; a reader checks that they match. With -race this
// also checks the lock-free paths.
func TestStoreConcurrent(t *testing.T) {
	s := NewStore(StoreOptions{MaxKeys: 2000, Idle: 50 * time.Millisecond})
	ups := []string{"a", "b", "c", "d"}
	vers := map[string]Version{}
	for _, u := range ups {
		vers[u] = VersionOf("v-" + u)
	}
	var clock sync.Mutex
	now := int64(0)
	tick := func() int64 {
		clock.Lock()
		defer clock.Unlock()
		now += int64(time.Microsecond)
		return now
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10_000 {
				k := uint64((i*7 + w) % 3000)
				t := tick()
				switch i % 5 {
				case 0, 1:
					u := ups[(i+w)%len(ups)]
					s.Record(k, u, vers[u], t)
				case 2, 3:
					if r, ok := s.Lookup(k, t); ok && vers[r.Upstream] != r.Version {
						select {
						case errs <- fmt.Sprintf("torn record %+v", r):
						default:
						}
					}
				default:
					if i%1000 == 4 {
						s.Drop(ups[w], t)
					} else if i%100 == 4 {
						s.Expire(t, 16)
					}
				}
				if n := s.Len(); n > 2000 {
					select {
					case errs <- fmt.Sprintf("Len %d > 2000", n):
					default:
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// Range yields every live record once, none expired or dropped; copying
// through it carries the records into a store of another size.
func TestStoreRange(t *testing.T) {
	const idle = 10 * time.Second
	s := NewStore(StoreOptions{MaxKeys: 1000, Idle: idle})
	if s.MaxKeys() != 1000 {
		t.Fatalf("MaxKeys = %d", s.MaxKeys())
	}
	v := VersionOf("v1")
	for k := range uint64(300) {
		u := "a"
		if k%3 == 1 {
			u = "b"
		}
		used := 5 * sec
		if k%3 == 2 {
			u, used = "c", 1*sec // idle by 11s
		}
		s.Record(k, u, v, used)
	}
	s.Drop("b", 6*sec)
	got := map[uint64]Rec{}
	s.Range(11*sec, func(k uint64, r Rec) bool {
		if _, dup := got[k]; dup {
			t.Errorf("key %d yielded twice", k)
		}
		got[k] = r
		return true
	})
	if len(got) != 100 {
		t.Fatalf("Range yielded %d records, want the 100 on a (b dropped, c idle)", len(got))
	}
	for k, r := range got {
		if k%3 != 0 || r != (Rec{"a", v, 5 * sec}) {
			t.Fatalf("key %d: %+v", k, r)
		}
	}
	n := 0
	s.Range(11*sec, func(uint64, Rec) bool { n++; return n < 7 })
	if n != 7 {
		t.Fatalf("Range went on after false: %d calls", n)
	}
	small := NewStore(StoreOptions{MaxKeys: 50, Idle: idle})
	s.Range(11*sec, func(k uint64, r Rec) bool { small.Record(k, r.Upstream, r.Version, r.LastUse); return true })
	if small.Len() != 50 || small.MaxKeys() != 50 {
		t.Fatalf("copy into a 50-key store: Len %d", small.Len())
	}
	for k := range got {
		if r, ok := small.Lookup(k, 11*sec); ok && r != got[k] {
			t.Fatalf("copied key %d: %+v, want %+v", k, r, got[k])
		}
	}
}
