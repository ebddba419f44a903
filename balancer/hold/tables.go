package hold

import "sync/atomic"

// tableSlots returns the slot count of a table for a store of maxKeys
// records: the next power of two, at most 1<<20 (8 MiB of slots).
func tableSlots(maxKeys int) int {
	n := 1 << 10
	for n < maxKeys && n < 1<<20 {
		n *= 2
	}
	return n
}

// Seen remembers which key hashes were already seen, in a fixed table of
// atomic slots: First is true once per hash, except that a hash whose slot
// another hash took since may be seen again (a bounded, lock-free set that
// forgets under pressure). The zero value is not usable: call NewSeen.
type Seen struct {
	slots []atomic.Uint64
	mask  uint64
}

// NewSeen returns an empty set sized for a store of maxKeys records.
func NewSeen(maxKeys int) *Seen {
	n := tableSlots(maxKeys)
	return &Seen{slots: make([]atomic.Uint64, n), mask: uint64(n - 1)}
}

// First reports whether h is seen for the first time, and remembers it.
// Of concurrent calls for one hash, one gets true.
func (t *Seen) First(h uint64) bool {
	m := mix(h) | 1 // never 0, the empty slot
	sl := &t.slots[m&t.mask]
	cur := sl.Load()
	return cur != m && sl.CompareAndSwap(cur, m)
}

// Written says when each key hash's record was last written somewhere
// (the shared store), in a fixed table of atomic slots packing 24 bits of
// the hash and the time in units of 2^26 ns (about 67 ms). A slot shared by
// two hashes makes the next write of either due: never a missed write for
// long, at worst an extra one. The zero value is not usable: call
// NewWritten.
type Written struct {
	slots []atomic.Uint64
	mask  uint64
}

const (
	writtenTimeBits = 40
	writtenTimeMask = 1<<writtenTimeBits - 1
	writtenUnit     = 26 // log2 of the time unit in ns
)

// NewWritten returns a table sized for a store of maxKeys records.
func NewWritten(maxKeys int) *Written {
	n := tableSlots(maxKeys)
	return &Written{slots: make([]atomic.Uint64, n), mask: uint64(n - 1)}
}

// Due reports whether the record of hash h should be written at time now
// (monotonic ns): when changed, when it was never written, or when the
// last write is at least every ns old; then it notes now as the last.
func (t *Written) Due(h uint64, now, every int64, changed bool) bool {
	m := mix(h)
	sl := &t.slots[m&t.mask]
	tag := m >> writtenTimeBits
	tu := uint64(now>>writtenUnit) & writtenTimeMask
	cur := sl.Load()
	if !changed && cur != 0 && cur>>writtenTimeBits == tag &&
		int64((tu-cur)&writtenTimeMask)<<writtenUnit < every {
		return false
	}
	sl.Store(tag<<writtenTimeBits | tu)
	return true
}
