package hold

// The store-wide operations: counts, drops of upstreams and the walks over
// every record, each taking one shard's lock at a time.

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
