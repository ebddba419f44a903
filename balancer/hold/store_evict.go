package hold

// Eviction and expiry: the clock hand that sweeps dead records, the
// sampled LRU that frees room in a full shard, the doorkeeper that admits
// a key on its second try, and Expire (see Store).

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
