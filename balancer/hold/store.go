package hold

import (
	"math/bits"
	"runtime"
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

// Options configure a Store.
type Options struct {
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

type table struct {
	slots []slot
	mask  uint64
}

// slot is one record. meta packs the state (empty, live, deleted), a
// sequence number that is odd while a writer is changing the slot, and the
// upstream id. A reader loads meta, then the fields, then meta again; equal
// even values mean the fields belong together.
type slot struct {
	meta atomic.Uint64
	key  atomic.Uint64
	ver  atomic.Uint64
	used atomic.Int64
}

const (
	metaID    = 1<<32 - 1 // upstream id
	metaLive  = 1 << 32
	metaTomb  = 1 << 33
	metaUsed  = 1 << 34 // seen again within idle: in use (see admission in Store)
	seqShift  = 35
	seqOne    = 1 << seqShift
	metaState = metaLive | metaTomb
	metaFlags = metaID | metaState | metaUsed // all but the sequence number
)

func seqOdd(m uint64) bool { return (m>>seqShift)&1 == 1 }

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
func NewStore(o Options) *Store {
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

// MaxKeys returns the most records the store holds (Options.MaxKeys, at
// least 1). It is fixed: a store for another bound is a new store (see
// Range to carry the records over).
func (s *Store) MaxKeys() int { return s.maxKeys }

// Idle returns how long records live without use.
func (s *Store) Idle() time.Duration { return time.Duration(s.idle.Load()) }

// mix spreads the key hash over all 64 bits: under nginx placement ring
// hashes are 32-bit values in the top half, so their low bits are zero.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func (s *Store) shard(m uint64) *shard { return &s.shards[m>>s.shift] }

// find looks key up in t without a lock. It returns the slot index and a
// consistent copy of the record, or -1 when the key has no live record.
func find(t *table, key, m uint64) (i int, meta uint64, ver uint64, used int64) {
	i = int(m & t.mask)
	for probes := 0; probes <= int(t.mask); probes++ {
		sl := &t.slots[i]
		for spins := 0; ; spins++ {
			m1 := sl.meta.Load()
			if seqOdd(m1) { // a writer is in the middle of this slot
				if spins > 64 {
					runtime.Gosched()
				}
				continue
			}
			if m1 == 0 {
				return -1, 0, 0, 0
			}
			if m1&metaLive == 0 || sl.key.Load() != key {
				break // deleted, or another key: probe on
			}
			v, u := sl.ver.Load(), sl.used.Load()
			if sl.meta.Load() != m1 {
				continue // changed while read: read again
			}
			return i, m1, v, u
		}
		i = (i + 1) & int(t.mask)
	}
	return -1, 0, 0, 0
}

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

// doorBits returns the doorkeeper's two bit positions for mixed hash m
// (bits of m that neither the shard index nor the table index uses much).
func (sh *shard) doorBits(m uint64) (uint64, uint64) {
	n := uint64(sh.doorWords) * 64 // a power of two
	d := m * 0x9E3779B97F4A7C15
	return (d >> 7) & (n - 1), (d >> 37) & (n - 1)
}

func (sh *shard) doorHas(m uint64) bool {
	if sh.door == nil {
		return false
	}
	a, b := sh.doorBits(m)
	return sh.door[a>>6]&(1<<(a&63)) != 0 && sh.door[b>>6]&(1<<(b&63)) != 0
}

// doorAdd notes a refused key; after as many keys as the shard holds the
// filter is cleared, so that it forgets old one-shot keys (TinyLFU's
// reset) and its false positives stay rare. sh.mu is held.
func (sh *shard) doorAdd(m uint64) {
	if sh.door == nil {
		sh.door = make([]uint64, sh.doorWords)
	}
	if sh.doorN++; sh.doorN > sh.max {
		clear(sh.door)
		sh.doorN = 1
	}
	a, b := sh.doorBits(m)
	sh.door[a>>6] |= 1 << (a & 63)
	sh.door[b>>6] |= 1 << (b & 63)
}

// write changes a slot under the seqlock: odd sequence while writing, the
// next even one after. sh.mu is held.
func (sh *shard) write(sl *slot, old, state, key, ver uint64, used int64) {
	seq := old &^ metaFlags
	sl.meta.Store(seq + seqOne) // odd: readers wait
	sl.key.Store(key)
	sl.ver.Store(ver)
	sl.used.Store(used)
	sl.meta.Store(seq + 2*seqOne | state)
}

// remove deletes the live record in slot i; sh.mu is held.
func (sh *shard) remove(t *table, i int) {
	sl := &t.slots[i]
	old := sl.meta.Load()
	seq := old &^ metaFlags
	sl.meta.Store(seq + seqOne)
	sl.meta.Store(seq + 2*seqOne | metaTomb)
	sh.tombs++
	sh.n.Add(-1)
}

// removeIf deletes slot i of t if t is still the shard's table and the
// slot is unchanged since its meta was read as meta; sh.mu is held.
func (sh *shard) removeIf(t *table, i int, meta uint64) {
	if sh.tab.Load() == t && t.slots[i].meta.Load() == meta {
		sh.remove(t, i)
	}
}

// dead reports whether a live slot's record is expired or its upstream dropped.
func (s *Store) dead(sl *slot, now, idle int64) bool {
	if now-sl.used.Load() >= idle {
		return true
	}
	_, ok := s.names.name(uint32(sl.meta.Load() & metaID))
	return !ok
}

// sweep advances the clock hand over n slots, removing dead records, and
// returns how many it removed; sh.mu is held.
func (sh *shard) sweep(s *Store, t *table, n int, now, idle int64) int {
	removed := 0
	for ; n > 0; n-- {
		sh.hand = (sh.hand + 1) & int(t.mask)
		if sl := &t.slots[sh.hand]; sl.meta.Load()&metaLive != 0 && s.dead(sl, now, idle) {
			sh.remove(t, sh.hand)
			removed++
		}
	}
	return removed
}

// evictSample is how many live records eviction compares.
const evictSample = 8

// evict frees room for one record in a full shard, and reports whether it
// did: it walks the hand until it has seen evictSample live records (or the
// whole table), removing every dead one. If none was dead it removes the
// least recently used of the records it saw that are not in use (seen once
// only), or, when all of them are in use and inUse is true (the key to
// insert is on its second try), the least recently used of those. A key
// seen once never evicts a key in use. sh.mu is held.
func (sh *shard) evict(s *Store, t *table, now, idle int64, inUse bool) bool {
	oldest, oldestAt, seen, removed := -1, int64(0), 0, 0
	oldestUsed, oldestUsedAt := -1, int64(0)
	for n := 0; n < len(t.slots) && seen < evictSample; n++ {
		sh.hand = (sh.hand + 1) & int(t.mask)
		sl := &t.slots[sh.hand]
		if sl.meta.Load()&metaLive == 0 {
			continue
		}
		seen++
		if s.dead(sl, now, idle) {
			sh.remove(t, sh.hand)
			removed++
			continue
		}
		u := sl.used.Load()
		if sl.meta.Load()&metaUsed == 0 {
			if oldest < 0 || u < oldestAt {
				oldest, oldestAt = sh.hand, u
			}
		} else if oldestUsed < 0 || u < oldestUsedAt {
			oldestUsed, oldestUsedAt = sh.hand, u
		}
	}
	switch {
	case removed > 0:
	case oldest >= 0:
		sh.remove(t, oldest)
	case inUse && oldestUsed >= 0:
		sh.remove(t, oldestUsed)
	default:
		return false
	}
	return true
}

// rehash builds a new table for at least need live records (twice as many
// slots, within maxSz), copies the live records into it and publishes it;
// sh.mu is held. Readers still holding the old table see its records as
// they were; a lock-free refresh that lands in the old table after the copy
// is lost, which makes that record look older by at most one refresh.
func (sh *shard) rehash(t *table, need int) *table {
	sz := len(t.slots)
	for sz < sh.maxSz && need > sz/2 {
		sz *= 2
	}
	nt := &table{slots: make([]slot, sz), mask: uint64(sz - 1)}
	for i := range t.slots {
		sl := &t.slots[i]
		meta := sl.meta.Load()
		if meta&metaLive == 0 {
			continue
		}
		key := sl.key.Load()
		j := int(mix(key) & nt.mask)
		for nt.slots[j].meta.Load() != 0 {
			j = (j + 1) & int(nt.mask)
		}
		d := &nt.slots[j]
		d.key.Store(key)
		d.ver.Store(sl.ver.Load())
		d.used.Store(sl.used.Load())
		d.meta.Store(meta&metaFlags | 2*seqOne)
	}
	sh.tombs = 0
	sh.hand &= int(nt.mask)
	sh.tab.Store(nt)
	return nt
}

// Expire walks every shard's clock hand over up to perShard slots,
// removing expired records and records of dropped upstreams, and returns
// how many it removed. It takes one shard's lock at a time. Records also
// expire without it (they are never returned once idle, and eviction
// reclaims them); calling it now and then, say every second with perShard
// 64, keeps Len close to the number of live records when traffic is low.
func (s *Store) Expire(now int64, perShard int) int {
	idle := s.idle.Load()
	removed := 0
	for range s.shards {
		sh := &s.shards[s.cursor.Add(1)%uint32(len(s.shards))]
		sh.mu.Lock()
		removed += sh.sweep(s, sh.tab.Load(), perShard, now, idle)
		sh.mu.Unlock()
	}
	return removed
}

// Len returns the number of records held, expired ones not yet removed
// included.
func (s *Store) Len() int {
	n := int64(0)
	for i := range s.shards {
		n += s.shards[i].n.Load()
	}
	return int(n)
}

// Drop forgets every record held on upstream, at once for lookups (its
// records are removed lazily). Call it when upstream stops being a member
// of the ring (removed by a reload or by discovery), at time now; a later
// record on the same name starts afresh.
func (s *Store) Drop(upstream string, now int64) { s.names.drop(upstream, now) }

// Keep drops, as Drop does, every upstream the store knows for which
// member returns false. Call it after every membership change with the
// new members: the store's table of names then holds only members, and
// the names dropped lately (see Names), whatever names were recorded
// meanwhile by requests that began before the change.
func (s *Store) Keep(member func(upstream string) bool, now int64) { s.names.keep(member, now) }

// Range calls fn for every record live at now (younger than idle, its
// upstream not dropped), one shard at a time under that shard's lock, in
// no particular order, until fn returns false. fn must not call the
// store. Records written meanwhile in shards already walked are not seen.
// It is meant for rare jobs, such as copying the records into a store
// with another MaxKeys (a reload that changes max_keys).
func (s *Store) Range(now int64, fn func(key uint64, r Rec) bool) {
	idle := s.idle.Load()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		for j := range t.slots {
			sl := &t.slots[j]
			meta := sl.meta.Load() // stable: writers hold sh.mu
			if meta&metaLive == 0 {
				continue
			}
			used := sl.used.Load() // lock-free refreshes may still move it
			name, ok := s.names.name(uint32(meta & metaID))
			if !ok || now-used >= idle {
				continue
			}
			if !fn(sl.key.Load(), Rec{Upstream: name, Version: Version(sl.ver.Load()), LastUse: used}) {
				sh.mu.Unlock()
				return
			}
		}
		sh.mu.Unlock()
	}
}

// CountByUpstream returns, for each upstream with records live at now
// (younger than idle, the upstream not dropped), how many it has. It is a
// pass over every slot, one shard at a time under that shard's lock, like
// Range: a few milliseconds per million keys, meant for the admin API's
// per-upstream counts (a draining upstream is drained once it holds none).
// Counters kept on insert and drop could not say "younger than idle"
// without an expiry pass of their own: a record goes idle without any
// write, and is removed only when the clock hand or a lookup meets it.
func (s *Store) CountByUpstream(now int64) map[string]int {
	idle := s.idle.Load()
	byID := map[uint32]int{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		for j := range t.slots {
			sl := &t.slots[j]
			meta := sl.meta.Load() // stable: writers hold sh.mu
			if meta&metaLive == 0 || now-sl.used.Load() >= idle {
				continue
			}
			byID[uint32(meta&metaID)]++
		}
		sh.mu.Unlock()
	}
	out := make(map[string]int, len(byID))
	for id, n := range byID {
		if name, ok := s.names.name(id); ok {
			out[name] += n
		}
	}
	return out
}

// Names returns the size of the store's table of upstream names: the
// names its records may carry, and those dropped less than twice the idle
// time ago (a later new name reuses such an entry, not before: no record
// made on the dropped name may read as the new one).
func (s *Store) Names() int {
	if t := s.names.cur.Load(); t != nil {
		return len(t.entries)
	}
	return 0
}
