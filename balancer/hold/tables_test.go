package hold

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// heapAfter returns the live heap after a collection, keeping v alive until
// then.
func heapAfter(v any) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	runtime.KeepAlive(v)
	return ms.HeapAlloc
}

// The tables follow the keys seen, not max_keys: at the default max_keys a
// table of a thousand keys is not 8 MiB of live heap (hold.share's Seen
// and Written tables were, from the start, whatever the traffic).
func TestTablesFollowKeysNotMaxKeys(t *testing.T) {
	base := heapAfter(nil)
	s, w := NewSeen(1_000_000), NewWritten(1_000_000)
	for h := uint64(1); h <= 1000; h++ {
		s.First(h * 0x9e3779b97f4a7c15)
		w.Due(h*0x9e3779b97f4a7c15, 1, int64(time.Minute), false)
	}
	if got := heapAfter([]any{s, w}) - base; got > 1<<20 {
		t.Errorf("Seen and Written with 1000 keys (max_keys 1000000): %d bytes of heap, want under 1 MiB", got)
	}
	if n := s.g.slots(); n < 2000 || n > 8192 {
		t.Errorf("Seen with 1000 keys has %d slots, want 2048..8192", n)
	}
}

// Growth forgets no hash in use: one asked about again since the table
// last grew is carried over to the next generation, so that a hash seen
// (written) before the table doubled is still seen (recent) after, up to
// the collisions of a table at most half full; and a table stops at its
// bound.
func TestTablesGrowWithoutForgetting(t *testing.T) {
	const n = 30_000
	s, w := NewSeen(1_000_000), NewWritten(1_000_000)
	every := int64(time.Minute)
	slots := s.g.slots()
	for i := uint64(1); i <= n; i++ {
		if !s.First(i) {
			t.Fatalf("First(%d) of a new hash = false", i)
		}
		if !w.Due(i, 1, every, false) {
			t.Fatalf("Due(%d) of a never-written hash = false", i)
		}
		if got := s.g.slots(); got != slots { // grown: the hashes so far are in use
			slots = got
			for j := uint64(1); j < i; j++ {
				s.First(j)
				w.Due(j, 1, every, false)
			}
		}
	}
	again, due := 0, 0
	for i := uint64(1); i <= n; i++ {
		if s.First(i) {
			again++
		}
		if w.Due(i, 2, every, false) {
			due++
		}
	}
	// A fixed table of 1<<20 slots forgets about 1.5 % of 30 000 hashes to
	// collisions; a growing one, at most half full, about as many.
	t.Logf("seen again %d, due again %d of %d", again, due, n)
	if again > n/10 || due > n/10 {
		t.Errorf("after growth: %d of %d hashes seen again, %d due again; want under 10 %% each", again, n, due)
	}
	if got := s.g.slots(); got > 1<<17 {
		t.Errorf("Seen with %d hashes grew to %d slots", n, got)
	}
	small := NewSeen(5000)
	for i := uint64(1); i <= 50_000; i++ {
		small.First(i)
	}
	if got := small.g.slots(); got != tableSlots(5000) {
		t.Errorf("Seen for max_keys 5000 after 50000 hashes: %d slots, want its bound %d", got, tableSlots(5000))
	}
	// Changed and stale records are due whatever the table did.
	if !w.Due(1, 2, every, true) {
		t.Error("Due of a changed record = false")
	}
	if !w.Due(2, 2+every+1<<writtenUnit, every, false) {
		t.Error("Due of a record last written more than every ago = false")
	}
}

// Of concurrent First calls for one hash, one gets true, also while the
// table grows (up to the rare race with the growth itself).
func TestSeenConcurrentGrowth(t *testing.T) {
	const n, g, batch = 5000, 4, 1 // one hash at a time: no collision between two raced ones
	s := NewSeen(1_000_000)
	trues := make([]int, n)
	var mu sync.Mutex
	for lo := 0; lo < n; lo += batch {
		var wg sync.WaitGroup
		for range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := lo; i < lo+batch; i++ {
					if s.First(uint64(i + 1)) {
						mu.Lock()
						trues[i]++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
	}
	none, extra := 0, 0
	for _, v := range trues {
		if v == 0 {
			none++
		}
		extra += max(v-1, 0)
	}
	if none > 0 || extra > n/200 {
		t.Errorf("%d hashes never first, %d extra firsts over %d hashes", none, extra, n)
	}
}

// A store that is not full has no doorkeeper yet: at the default max_keys
// the filters are 1 MiB, and a store that never refuses a key never reads
// them. A full one still admits a refused key on its second try.
func TestStoreDoorkeeperOnFirstRefusal(t *testing.T) {
	base := heapAfter(nil)
	s := NewStore(StoreOptions{MaxKeys: 1_000_000, Idle: time.Hour})
	for k := uint64(1); k <= 1000; k++ {
		s.Record(k, "a", 1, 1)
	}
	if got := heapAfter(s) - base; got > 1<<19 {
		t.Errorf("a store for 1000000 keys holding 1000: %d bytes of heap, want under 512 KiB", got)
	}
	small := NewStore(StoreOptions{MaxKeys: 64, Idle: time.Hour})
	now := int64(1)
	for k := uint64(1); k <= 64; k++ { // every record seen twice: in use
		small.Record(k, "a", 1, now)
		small.Record(k, "a", 1, now+1)
	}
	const newKey = 1 << 40 // one shard: the store is full
	small.Record(newKey, "b", 1, now+2)
	if _, ok := small.Lookup(newKey, now+2); ok {
		t.Fatal("a full store of keys in use admitted a one-shot key on its first try")
	}
	small.Record(newKey, "b", 1, now+2)
	if _, ok := small.Lookup(newKey, now+3); !ok {
		t.Error("a key refused once by a full store was not admitted on its second try")
	}
}
