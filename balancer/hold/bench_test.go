package hold

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks with 1 000 000 records, the default max_keys. Regression
// signals: allocs/op above 0 for Lookup and for refreshing an existing
// record; Lookup or Refresh slowing by a multiple (they are a few memory
// reads and atomics); the parallel variants slowing as -cpu grows (a lock
// or a shared write on the common path); B/record above 128
// (BenchmarkStoreMemory).

const benchRecords = 1_000_000

var sinkRec Rec

// filled returns a store holding n records on 8 upstreams under one version.
func filled(b *testing.B, n int) (*Store, []uint64) {
	b.Helper()
	s := NewStore(StoreOptions{MaxKeys: n, Idle: time.Hour})
	keys := make([]uint64, n)
	rng := rand.New(rand.NewPCG(1, 2))
	ups := make([]string, 8)
	for i := range ups {
		ups[i] = "app-" + strconv.Itoa(i)
	}
	for i := range keys {
		keys[i] = rng.Uint64()
		s.Record(keys[i], ups[i%len(ups)], 1, 1)
	}
	if s.Len() < n*99/100 {
		b.Fatalf("filled %d of %d", s.Len(), n)
	}
	return s, keys
}

func BenchmarkStoreLookup(b *testing.B) {
	s, keys := filled(b, benchRecords)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		sinkRec, _ = s.Lookup(keys[i%len(keys)], 2)
	}
}

// Refresh: Record of an existing key with its own upstream and version, a
// refresh grain later each time so that every call writes the time: the
// lock-free path.
func BenchmarkStoreRefresh(b *testing.B) {
	s, keys := filled(b, benchRecords)
	ups := make([]string, 8)
	for i := range ups {
		ups[i] = "app-" + strconv.Itoa(i)
	}
	now := int64(2)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now += int64(time.Millisecond)
		j := i % len(keys)
		s.Record(keys[j], ups[j%8], 1, now)
	}
}

// Insert: new keys into a full store, each evicting one.
func BenchmarkStoreInsertFull(b *testing.B) {
	s, _ := filled(b, benchRecords)
	rng := rand.New(rand.NewPCG(3, 4))
	now := int64(2)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		now++
		s.Record(rng.Uint64(), "app-1", 2, now)
	}
}

// Parallel: the request path's common case, a lookup and a refresh of a
// key in use, from every P at once.
func BenchmarkStoreLookupRefreshParallel(b *testing.B) {
	s, keys := filled(b, benchRecords)
	ups := make([]string, 8)
	for i := range ups {
		ups[i] = "app-" + strconv.Itoa(i)
	}
	var clock atomic.Int64
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 5))
		for pb.Next() {
			j := rng.IntN(len(keys))
			now := clock.Add(1000)
			if r, ok := s.Lookup(keys[j], now); ok {
				s.Record(keys[j], r.Upstream, r.Version, now)
			}
		}
	})
}

// Parallel inserts of new keys into a full store: the locked path.
func BenchmarkStoreInsertParallel(b *testing.B) {
	s, _ := filled(b, benchRecords)
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 6))
		now := int64(2)
		for pb.Next() {
			now++
			s.Record(rng.Uint64(), "app-1", 2, now)
		}
	})
}

// Memory per record with 1 000 000 records, from runtime.MemStats: the
// heap in use after filling, less before, over the number of records.
func BenchmarkStoreMemory(b *testing.B) {
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s, keys := filled(b, benchRecords)
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc) - float64(8*len(keys))
		b.ReportMetric(heap/float64(s.Len()), "B/record")
		runtime.KeepAlive(s)
		runtime.KeepAlive(keys)
	}
}

func BenchmarkCookieEncode(b *testing.B) {
	c := mustCodec(b, secretA)
	ck := NewCookie(42, "app-12", 3, t0, time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.Encode(ck)
	}
}

func BenchmarkCookieDecode(b *testing.B) {
	c := mustCodec(b, secretA, secretB)
	v := mustCodec(b, secretB).Encode(NewCookie(42, "app-12", 3, t0, time.Hour)) // verified by the second secret
	b.Run("valid", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := c.Decode(v, 42, t0); !ok {
				b.Fatal("rejected")
			}
		}
	})
	b.Run("other-key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := c.Decode(v, 43, t0); ok {
				b.Fatal("accepted")
			}
		}
	})
}
