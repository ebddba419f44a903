package hold

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// names interns upstream names as small ids, so that a slot stores a fixed
// 32-bit id instead of a string. The table is an immutable snapshot read
// without a lock and replaced, under mu, when a name is first seen or
// dropped: both are rare (membership changes).
//
// An id is an index into the snapshot's entries (low 20 bits) and that
// entry's generation (high 12 bits). Dropping a name retires its id: every
// record carrying it is void at once. The entry is reused for another name
// only once twice the idle time has passed since the drop, by which time
// every record carrying the old id has expired, and with the next
// generation, so an old id never names the new upstream.
type names struct {
	mu  sync.Mutex
	cur atomic.Pointer[nameSnap]
}

type nameSnap struct {
	ids     map[string]uint32 // name of every live entry → its id
	entries []nameEntry
}

type nameEntry struct {
	name   string
	gen    uint32
	live   bool
	diedAt int64
}

const (
	idBits  = 20
	idIndex = 1<<idBits - 1
	genMask = 1<<(32-idBits) - 1
)

// name returns the upstream name of a live id.
func (n *names) name(id uint32) (string, bool) {
	s := n.cur.Load()
	if s == nil {
		return "", false
	}
	i := int(id & idIndex)
	if i >= len(s.entries) {
		return "", false
	}
	e := &s.entries[i]
	if !e.live || e.gen != id>>idBits {
		return "", false
	}
	return e.name, true
}

// is reports whether id is live and names upstream.
func (n *names) is(id uint32, upstream string) bool {
	name, ok := n.name(id)
	return ok && name == upstream
}

// intern returns the id of upstream, giving it one if it has none. It
// fails only when 2^20 names are in use at once.
func (n *names) intern(upstream string, now, idle int64) (uint32, bool) {
	if s := n.cur.Load(); s != nil {
		if id, ok := s.ids[upstream]; ok {
			return id, true
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.cur.Load()
	if old == nil {
		old = &nameSnap{}
	}
	if id, ok := old.ids[upstream]; ok {
		return id, true
	}
	s := &nameSnap{ids: maps.Clone(old.ids), entries: slices.Clone(old.entries)}
	if s.ids == nil {
		s.ids = map[string]uint32{}
	}
	i := slices.IndexFunc(s.entries, func(e nameEntry) bool { return !e.live && now-e.diedAt > 2*idle })
	switch {
	case i >= 0:
		s.entries[i] = nameEntry{name: upstream, gen: (s.entries[i].gen + 1) & genMask, live: true}
	case len(s.entries) <= idIndex:
		i = len(s.entries)
		s.entries = append(s.entries, nameEntry{name: upstream, live: true})
	default:
		return 0, false
	}
	id := s.entries[i].gen<<idBits | uint32(i)
	s.ids[upstream] = id
	n.cur.Store(s)
	return id, true
}

// drop retires upstream's id, if it has one.
func (n *names) drop(upstream string, now int64) {
	n.keep(func(name string) bool { return name != upstream }, now)
}

// keep retires the id of every name for which member is false. The new
// snapshot's map is built afresh with the names kept (a map that only
// had names deleted would keep its size), and a retired entry keeps no
// name.
func (n *names) keep(member func(string) bool, now int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.cur.Load()
	if old == nil {
		return
	}
	kept := 0
	for name := range old.ids {
		if member(name) {
			kept++
		}
	}
	if kept == len(old.ids) {
		return
	}
	s := &nameSnap{ids: make(map[string]uint32, kept), entries: slices.Clone(old.entries)}
	for name, id := range old.ids {
		if member(name) {
			s.ids[name] = id
			continue
		}
		e := &s.entries[id&idIndex]
		e.name, e.live, e.diedAt = "", false, now
	}
	n.cur.Store(s)
}
