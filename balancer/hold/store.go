package hold

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Version identifies a ring version: the 64-bit xxhash of the ring's
// version string (VersionOf). Records and cookies carry it instead of the
// string: it is fixed-size, and equal versions give equal values on every
// machine.
type Version uint64

// VersionOf returns the Version of a ring version string.
func VersionOf(ringVersion string) Version { return Version(xxhash.Sum64String(ringVersion)) }

// Clock returns a monotonic clock in nanoseconds, counted from the call.
// Every time given to a Store and to Rule must come from one such clock.
func Clock() func() int64 {
	start := time.Now()
	return func() int64 { return int64(time.Since(start)) }
}

// Rec is a hold record: the upstream that served a key, the ring version it
// was served under, and when the key was last used (monotonic nanoseconds).
type Rec struct {
	Upstream string
	Version  Version
	LastUse  int64
}

// StoreOptions configure a Store.
type StoreOptions struct {
	// MaxKeys bounds the number of records; values below 1 count as 1.
	// Beyond it the least recently used records are forgotten
	// (approximately: see Store).
	MaxKeys int
	// Idle is how long a record lives without use; values <= 0 make every
	// record expired at once (hold off).
	Idle time.Duration
}

// Store holds the hold records. It is safe for concurrent use; the zero
// value is not usable: call NewStore.
//
// Layout: the records are split into shards by the top bits of the
// (re-mixed) key hash; each shard is an open-addressing table of 32-byte
// slots whose fields are atomics guarded by a per-slot sequence number
// (a seqlock), so Lookup and the refresh of an existing record read and
// write without taking any lock. Inserting a new key, changing a key's
// upstream or version, deleting and growing take the shard's mutex, held
// for a few slot writes (or, when a shard's table grows or is cleaned of
// deleted slots, for one pass over that shard only: never the whole store).
//
// Bound and eviction: each shard holds at most its part of MaxKeys (the
// parts sum to MaxKeys exactly). Inserting into a full shard first evicts:
// a clock hand walks the shard's slots, drops every expired record it
// meets, and if none was expired evicts the least recently used of the 8
// records it examined (sampled LRU, as Redis does; the evicted record is
// the least recent of its sample, not necessarily of the store).
//
// Admission by use: a record seen again within idle (refreshed, or
// recorded anew) is marked in use. A key seen only once evicts only
// records not in use; when every record of the sample is in use the key is
// refused, and a doorkeeper (a Bloom filter per shard, cleared after as
// many refusals as the shard holds) remembers it, so that its next try,
// its second sighting, may evict the least recent record in use and enters
// in use itself. So a flood of one-shot keys churns through the records
// seen once and never pushes out the keys in use (TinyLFU's doorkeeper
// with an SLRU-like probation/protected split, reduced to one bit). Every
// insert also advances the hand over two more slots, dropping expired
// records; Lookup drops an expired record it finds when the shard's lock is
// free; Expire walks every shard a little. No pass ever stops the whole
// store.
//
// Memory: 32 bytes per slot; a table is kept at most half full of live
// records and grows by doubling, so a full store uses between 64 and 128
// bytes per record (64 to 68 at the default 1 000 000 keys; see
// BenchmarkStoreMemory), allocated as keys arrive; the doorkeeper adds
// 4 bits per slot of the largest table (1 to 2 bytes per record),
// allocated when the shard is first full and refuses a key.
type Store struct {
	maxKeys int
	idle    atomic.Int64 // nanoseconds
	grain   atomic.Int64 // refreshes closer than this to the last are skipped (ns)
	shift   uint         // shard index = mixed hash >> shift
	shards  []shard
	names   names
	cursor  atomic.Uint32 // Expire's next shard
}

// shard is one part of the store. Its table pointer is read without the
// lock; everything else is guarded by mu.
type shard struct {
	mu    sync.Mutex
	tab   atomic.Pointer[table]
	n     atomic.Int64 // live records (written under mu)
	tombs int          // deleted slots in tab
	max   int          // most live records this shard may hold
	maxSz int          // largest table size (a power of two)
	hand  int          // clock hand over tab's slots
	// door is the doorkeeper: a Bloom filter (two bits per key) of the
	// keys this full shard refused, so that a key's second try is known
	// as one; doorN counts the keys added since it was last cleared.
	door      []uint64 // nil until the first refusal
	doorWords int      // its size
	doorN     int
	_         [64]byte // keep shards on separate cache lines
}

// minTable is the size of a shard's first table.
const minTable = 8

// maxShards is the most shards a store uses; a store has fewer when MaxKeys
// is small, so that each shard holds at least a few dozen records and the
// per-shard LRU stays close to a global one.
const (
	maxShards         = 256
	minRecordsInShard = 64
)

// NewStore returns an empty store.
func NewStore(o StoreOptions) *Store {
	maxKeys := max(o.MaxKeys, 1)
	n := 1
	for n < maxShards && maxKeys/(n*2) >= minRecordsInShard {
		n *= 2
	}
	s := &Store{maxKeys: maxKeys, shift: uint(64 - bits.TrailingZeros(uint(n))), shards: make([]shard, n)}
	if n == 1 {
		s.shift = 64 // x >> 64 is 0 for unsigned x
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.max = maxKeys / n
		if i < maxKeys%n {
			sh.max++
		}
		sh.maxSz = minTable
		for sh.maxSz < 2*sh.max {
			sh.maxSz *= 2
		}
		sz := min(minTable, sh.maxSz)
		sh.tab.Store(&table{slots: make([]slot, sz), mask: uint64(sz - 1)})
		// 4 bits per slot of the largest table (8 to 16 per record the
		// shard holds), at least one word, a power of two: with two probes
		// and at most max keys between clears, at most about 5% false
		// positives, when it is fullest. It is allocated at the shard's
		// first refusal (a shard that never fills never needs it: 1 MiB at
		// the default max_keys).
		sh.doorWords = (sh.maxSz*4 + 63) / 64
	}
	s.SetIdle(o.Idle)
	return s
}

// SetIdle changes how long records live without use; it applies at once to
// every record, old ones included.
func (s *Store) SetIdle(d time.Duration) {
	s.idle.Store(int64(d))
	// Refreshing a record's time costs a write to a shared cache line;
	// skipping refreshes closer than a millisecond (or 1/256 of a shorter
	// idle) keeps a hot key from bouncing it between cores, at the price of
	// that much precision in expiry and in eviction's LRU order.
	s.grain.Store(min(int64(d)/256, int64(time.Millisecond)))
}

// MaxKeys returns the most records the store holds
// (StoreOptions.MaxKeys, at least 1). It is fixed: a store for another
// bound is a new store (see Range to carry the records over).
func (s *Store) MaxKeys() int { return s.maxKeys }

// Idle returns how long records live without use.
func (s *Store) Idle() time.Duration { return time.Duration(s.idle.Load()) }

func (s *Store) shard(m uint64) *shard { return &s.shards[m>>s.shift] }

// Lookup returns the record of the key whose ring hash is key, if there is
// one younger than idle whose upstream has not been dropped. It takes no
// lock and allocates nothing.
func (s *Store) Lookup(key uint64, now int64) (Rec, bool) {
	m := mix(key)
	sh := s.shard(m)
	t := sh.tab.Load()
	i, meta, ver, used := find(t, key, m)
	if i < 0 {
		return Rec{}, false
	}
	name, ok := s.names.name(uint32(meta & metaID))
	if !ok || now-used >= s.idle.Load() {
		// Expired or dropped: remove it if that costs no waiting.
		if sh.mu.TryLock() {
			sh.removeIf(t, i, meta)
			sh.mu.Unlock()
		}
		return Rec{}, false
	}
	return Rec{Upstream: name, Version: Version(ver), LastUse: used}, true
}

// Record notes that the key whose ring hash is key was served by upstream
// under ring version v at now. A record with the same upstream and version
// only has its time refreshed, without a lock or an allocation; otherwise
// the record is replaced or inserted under the shard's lock, evicting the
// least recently used record of a full shard (see Store).
func (s *Store) Record(key uint64, upstream string, v Version, now int64) {
	m := mix(key)
	sh := s.shard(m)
	t := sh.tab.Load()
	if i, meta, ver, used := find(t, key, m); i >= 0 && Version(ver) == v && s.names.is(uint32(meta&metaID), upstream) {
		sl := &t.slots[i]
		if meta&metaUsed == 0 && now-used < s.idle.Load() {
			// Seen again within idle: in use from now on. Once per
			// record; if a locked writer got there first, it decides.
			if !sl.meta.CompareAndSwap(meta, meta|metaUsed) {
				goto locked
			}
			meta |= metaUsed
		}
		if now-used < s.grain.Load() || now <= used {
			return
		}
		// Only if the slot still holds what was read: else take the lock.
		if sl.used.CompareAndSwap(used, now) && sl.meta.Load() == meta {
			return
		}
	}
locked:
	id, ok := s.names.intern(upstream, now, s.idle.Load())
	if !ok {
		return
	}
	sh.mu.Lock()
	sh.record(s, key, m, id, v, now)
	sh.mu.Unlock()
}

// record inserts or updates key's record; sh.mu is held.
func (sh *shard) record(s *Store, key, m uint64, id uint32, v Version, now int64) {
	t := sh.tab.Load()
	idle := s.idle.Load()
	if i, meta, _, used := find(t, key, m); i >= 0 {
		state := metaLive | uint64(id) | meta&metaUsed
		if now-used < idle {
			state |= metaUsed
		}
		sh.write(&t.slots[i], meta, state, key, uint64(v), max(now, used))
		return
	}
	state := metaLive | uint64(id)
	if int(sh.n.Load()) >= sh.max {
		again := sh.doorHas(m)
		if !sh.evict(s, t, now, idle, again) {
			sh.doorAdd(m) // refused: its next try is its second sighting
			return
		}
		if again {
			state |= metaUsed
		}
	}
	sh.sweep(s, t, 2, now, idle)
	live := int(sh.n.Load())
	if live+sh.tombs+1 > len(t.slots)*3/4 || live+1 > len(t.slots)/2 {
		t = sh.rehash(t, live+1)
	}
	i := int(m & t.mask)
	for t.slots[i].meta.Load()&metaLive != 0 {
		i = (i + 1) & int(t.mask)
	}
	sl := &t.slots[i]
	old := sl.meta.Load()
	if old&metaTomb != 0 {
		sh.tombs--
	}
	sh.write(sl, old, state, key, uint64(v), now)
	sh.n.Add(1)
}
