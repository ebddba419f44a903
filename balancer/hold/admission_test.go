package hold

import (
	"testing"
	"time"
)

// TestStoreAdmissionByUse is the flood scaled down: a store of
// 2000 records, 20 keys in use (each seen twice within idle), then 40 000
// one-shot keys, about 14 600 a second as measured in the report, and not
// one use of the 20 meanwhile. Every key in use keeps its record; the
// store stays at its bound, churning through the one-shot keys. (With
// plain sampled LRU a record lived about 137 ms under that flood: all 20
// were gone.)
func TestStoreAdmissionByUse(t *testing.T) {
	const max, users, flood = 2000, 20, 40_000
	s := NewStore(StoreOptions{MaxKeys: max, Idle: 10 * time.Minute})
	user := func(i int) uint64 { return uint64(i)*0x9E3779B97F4A7C15 + 3 }
	now := int64(time.Second)
	for pass := 0; pass < 2; pass++ { // seen twice: in use
		for i := 0; i < users; i++ {
			s.Record(user(i), "app-1", 1, now)
		}
		now += int64(time.Second)
	}
	step := int64(time.Second) / 14_600
	for i := 0; i < flood; i++ {
		now += step
		s.Record(uint64(i)<<24|0x5a5, "app-2", 1, now)
		if i%1000 == 0 && s.Len() > max {
			t.Fatalf("Len = %d > MaxKeys %d", s.Len(), max)
		}
	}
	kept := 0
	for i := 0; i < users; i++ {
		if r, ok := s.Lookup(user(i), now); ok && r.Upstream == "app-1" {
			kept++
		}
	}
	if kept != users {
		t.Errorf("%d of %d keys in use kept their record through %d one-shot keys, want all", kept, users, flood)
	}
	if n := s.Len(); n < max*95/100 {
		t.Errorf("Len = %d after the flood, want about %d: one-shot keys are still admitted over each other", n, max)
	}
	recent := 0
	for i := flood - 100; i < flood; i++ {
		if _, ok := s.Lookup(uint64(i)<<24|0x5a5, now); ok {
			recent++
		}
	}
	if recent < 90 {
		t.Errorf("%d of the 100 newest one-shot keys have a record, want most", recent)
	}
}

// TestStoreAdmissionSecondTry fills a store with keys in use only: a new
// key is refused on its first try (it would evict a key in use), and
// admitted, in use, on its second, evicting the least recent of a sample.
// An expired key in use is no obstacle.
func TestStoreAdmissionSecondTry(t *testing.T) {
	const max = 64 // one shard
	s := NewStore(StoreOptions{MaxKeys: max, Idle: time.Minute})
	now := int64(time.Second)
	for pass := 0; pass < 2; pass++ {
		for k := uint64(1); k <= max; k++ {
			s.Record(k*0x9E3779B97F4A7C15, "a", 1, now+int64(k))
		}
		now += int64(time.Second)
	}
	newKey := uint64(0xdeadbeef)
	s.Record(newKey, "b", 1, now)
	if _, ok := s.Lookup(newKey, now); ok {
		t.Fatal("a key seen once evicted a key in use")
	}
	if s.Len() != max {
		t.Fatalf("Len = %d, want %d", s.Len(), max)
	}
	now += int64(time.Millisecond)
	s.Record(newKey, "b", 1, now)
	if r, ok := s.Lookup(newKey, now); !ok || r.Upstream != "b" {
		t.Fatal("a key on its second try was refused")
	}
	if s.Len() != max {
		t.Fatalf("Len = %d after the second try, want %d", s.Len(), max)
	}
	// Once idle has passed, records in use are dead and make room.
	now += int64(2 * time.Minute)
	other := uint64(0xfeedface)
	s.Record(other, "c", 1, now)
	if _, ok := s.Lookup(other, now); !ok {
		t.Error("a new key was refused by records in use long expired")
	}
}
