package hold

import (
	"runtime"
	"sync/atomic"
)

// A shard's table of slots: lock-free reads under each slot's seqlock,
// the writes made under the shard's lock, and the growth by rehashing.

// table is a shard's open-addressing table: linear probing from the
// mixed hash, its size a power of two.
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

// The fields of a slot's meta.
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

// seqOdd reports whether a slot's meta says a writer is changing it.
func seqOdd(m uint64) bool { return (m>>seqShift)&1 == 1 }

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
