package hold

import "sync/atomic"

// tableSlots returns the most slots a table for a store of maxKeys records
// grows to: the next power of two, at most 1<<20 (8 MiB of slots).
func tableSlots(maxKeys int) int {
	n := minTableSlots
	for n < maxKeys && n < 1<<20 {
		n *= 2
	}
	return n
}

// minTableSlots is the size a table starts at (8 KiB of slots).
const minTableSlots = 1 << 10

// slotTable is one generation of a Seen or Written table. A table starts
// at minTableSlots and doubles, up to its maximum, once half its slots are
// taken: its memory follows the keys actually seen, not max_keys (a fixed
// table of max_keys slots is 8 MiB at the default, all of it live heap that
// the garbage collector's goal multiplies). The generation it replaced
// stays readable from the new one until the next growth, so that a hash
// is not forgotten by a growth: it is carried over when next asked about.
type slotTable struct {
	slots []atomic.Uint64
	mask  uint64
	taken atomic.Int64 // slots filled from empty
	prev  atomic.Pointer[slotTable]
}

func newSlotTable(n int) *slotTable {
	return &slotTable{slots: make([]atomic.Uint64, n), mask: uint64(n - 1)}
}

// tables is the current generation of a Seen or Written table and its
// bound.
type tables struct {
	cur     atomic.Pointer[slotTable]
	max     int
	growing atomic.Bool
}

func (g *tables) init(maxKeys int) {
	g.max = tableSlots(maxKeys)
	g.cur.Store(newSlotTable(min(minTableSlots, g.max)))
}

// filled notes that a slot of t was filled from empty, and grows the table
// when half of t's slots are taken. One caller grows; the others go on
// with t meanwhile.
func (g *tables) filled(t *slotTable) {
	if t.taken.Add(1) <= int64(len(t.slots)/2) || len(t.slots) >= g.max || !g.growing.CompareAndSwap(false, true) {
		return
	}
	if g.cur.Load() == t {
		nt := newSlotTable(2 * len(t.slots))
		nt.prev.Store(t)
		t.prev.Store(nil) // the generation before t is dropped
		g.cur.Store(nt)
	}
	g.growing.Store(false)
}

// slots returns the number of slots of the current generation.
func (g *tables) slots() int { return len(g.cur.Load().slots) }

// Seen remembers which key hashes were already seen, in a table of atomic
// slots: First is true once per hash, except that a hash whose slot another
// hash took since may be seen again (a bounded, lock-free set that forgets
// under pressure), and so may a hash first seen by a call racing a growth
// of the table. The zero value is not usable: call NewSeen.
type Seen struct{ g tables }

// NewSeen returns an empty set for a store of maxKeys records. It starts
// small and grows with the hashes it is given.
func NewSeen(maxKeys int) *Seen {
	t := &Seen{}
	t.g.init(maxKeys)
	return t
}

// First reports whether h is seen for the first time, and remembers it.
// Of concurrent calls for one hash, one gets true.
func (t *Seen) First(h uint64) bool {
	x := mix(h)
	m := x | 1 // never 0, the empty slot
	st := t.g.cur.Load()
	i := x & st.mask
	a, b := &st.slots[i], &st.slots[i^1] // a hash may sit in either slot of its pair
	va, vb := a.Load(), b.Load()
	if va == m || vb == m {
		return false
	}
	sl, cur := a, va // the slot to take: an empty one, else one of the two by the hash
	if va != 0 && (vb == 0 || x>>32&1 == 1) {
		sl, cur = b, vb
	}
	if p := st.prev.Load(); p != nil {
		j := x & p.mask
		if p.slots[j].Load() == m || p.slots[j^1].Load() == m {
			if cur == 0 && sl.CompareAndSwap(0, m) { // carried over
				t.g.filled(st)
			}
			return false
		}
	}
	if !sl.CompareAndSwap(cur, m) {
		return false
	}
	if cur == 0 {
		t.g.filled(st)
	}
	return true
}

// Written says when each key hash's record was last written somewhere
// (the shared store), in a table of atomic slots packing 24 bits of the
// hash and the time in units of 2^26 ns (about 67 ms). A slot shared by
// two hashes makes the next write of either due: never a missed write for
// long, at worst an extra one. It grows as Seen does. The zero value is
// not usable: call NewWritten.
type Written struct{ g tables }

const (
	writtenTimeBits = 40
	writtenTimeMask = 1<<writtenTimeBits - 1
	writtenUnit     = 26 // log2 of the time unit in ns
)

// NewWritten returns a table for a store of maxKeys records. It starts
// small and grows with the hashes it is given.
func NewWritten(maxKeys int) *Written {
	t := &Written{}
	t.g.init(maxKeys)
	return t
}

// Due reports whether the record of hash h should be written at time now
// (monotonic ns): when changed, when it was never written, or when the
// last write is at least every ns old; then it notes now as the last.
func (t *Written) Due(h uint64, now, every int64, changed bool) bool {
	m := mix(h)
	st := t.g.cur.Load()
	tag := m >> writtenTimeBits
	tu := uint64(now>>writtenUnit) & writtenTimeMask
	mine := func(v uint64) bool { return v != 0 && v>>writtenTimeBits == tag }
	recent := func(v uint64) bool { return mine(v) && int64((tu-v)&writtenTimeMask)<<writtenUnit < every }
	i := m & st.mask
	a, b := &st.slots[i], &st.slots[i^1] // a hash may sit in either slot of its pair
	va, vb := a.Load(), b.Load()
	// The slot to note the write in: the hash's own, else an empty one,
	// else one of the two by the hash.
	sl, cur := a, va
	switch {
	case mine(va):
	case mine(vb):
		sl, cur = b, vb
	case va != 0 && (vb == 0 || m>>32&1 == 1):
		sl, cur = b, vb
	}
	if !changed {
		if recent(cur) {
			return false
		}
		if p := st.prev.Load(); p != nil && !mine(cur) {
			j := m & p.mask
			for _, pv := range [2]uint64{p.slots[j].Load(), p.slots[j^1].Load()} {
				if recent(pv) {
					if cur == 0 && sl.CompareAndSwap(0, pv) { // carried over
						t.g.filled(st)
					}
					return false
				}
			}
		}
	}
	sl.Store(tag<<writtenTimeBits | tu)
	if cur == 0 {
		t.g.filled(st)
	}
	return true
}
