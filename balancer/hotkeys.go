package balancer

import (
	"slices"
	"sync"
	"time"

	"github.com/ringlb/ringlb/balancer/keyhash"
)

// Hot keys: a consistent hash spreads keys, not work. One hot key stays on
// its owner however many points the ring has, so the balancer counts the
// requests of the hottest keys, by key hash only, with the Space-Saving
// algorithm (Metwally, Agrawal, El Abbadi, 2005): hotCounters counters
// hold the keys seen most; a key not held takes the place of the least
// counted one, inheriting its count as the bound of its error. Any key
// whose true count exceeds requests/hotCounters is held, and a held key's
// estimate is at most its true count plus its error.
//
// Counting runs over fixed windows of hotWindow; the window before the
// current one is kept whole.

const (
	hotCounters = 100
	hotWindow   = time.Minute
)

// hotCounter is one monitored key (its count is in the window's heap).
type hotCounter struct {
	hash uint64
	err  uint64 // overestimation bound: the count it inherited
	sent string // the upstream its last request was sent to ("" if none)
}

// hotWindowCounts is one window's counts: hotCounters slots, a min-heap
// of slot numbers on their counts, and an open-addressing index from hash
// to slot (linear probing, deletion by backward shift): no map, no
// allocation after the window is made. The counts are kept in heap order
// beside the heap (cnt[i] is the count of slot heap[i]), so that sifting
// compares neighbouring words instead of following slot numbers.
type hotWindowCounts struct {
	start    int64 // the balancer's clock (ns) when the window began
	end      int64 // when it ended; 0 while current
	requests uint64
	n        int // slots in use
	slots    [hotCounters]hotCounter
	cnt      [hotCounters]uint64 // the counts, in heap order
	heap     [hotCounters]uint8  // slot numbers; heap[0] is the least counted
	pos      [hotCounters]uint8  // slot → its place in heap
	idx      [hotIndex]hotEntry
}

const hotIndex = 256 // a power of two, over twice hotCounters

type hotEntry struct {
	hash uint64
	slot uint8 // slot+1; 0: empty
}

func newHotWindow(start int64) *hotWindowCounts { return &hotWindowCounts{start: start} }

// hotKeys counts one balancer's requests by key hash.
type hotKeys struct {
	mu        sync.Mutex
	cur, prev *hotWindowCounts
}

// add counts one request of the key with ring position h, sent to sent
// ("" when it got no upstream), at time now (the balancer's clock).
func (hk *hotKeys) add(h uint64, sent string, now int64) {
	hk.mu.Lock()
	w := hk.cur
	if w == nil || now-w.start >= int64(hotWindow) {
		w = hk.rotateLocked(now)
	}
	w.requests++
	if i, ok := w.find(h); ok {
		if c := &w.slots[i]; c.sent != sent { // mostly the same: no store
			c.sent = sent
		}
		p := int(w.pos[i])
		w.cnt[p]++
		w.down(p)
	} else if w.n < hotCounters {
		i := w.n
		w.n++
		w.slots[i] = hotCounter{hash: h, sent: sent}
		w.heap[i], w.pos[i], w.cnt[i] = uint8(i), uint8(i), 1
		w.insert(h, i)
		w.up(i)
	} else { // the least counted key gives up its place
		i := int(w.heap[0])
		c := &w.slots[i]
		w.remove(c.hash)
		m := w.cnt[0]
		*c = hotCounter{hash: h, err: m, sent: sent}
		w.cnt[0] = m + 1
		w.insert(h, i)
		w.down(0)
	}
	hk.mu.Unlock()
}

func hotHome(h uint64) int { return int((h * 0x9e3779b97f4a7c15) >> (64 - 8)) } // 8 bits: hotIndex

func (w *hotWindowCounts) find(h uint64) (int, bool) {
	for j := hotHome(h); ; j = (j + 1) & (hotIndex - 1) {
		e := &w.idx[j]
		if e.slot == 0 {
			return 0, false
		}
		if e.hash == h {
			return int(e.slot - 1), true
		}
	}
}

func (w *hotWindowCounts) insert(h uint64, slot int) {
	j := hotHome(h)
	for w.idx[j].slot != 0 {
		j = (j + 1) & (hotIndex - 1)
	}
	w.idx[j] = hotEntry{hash: h, slot: uint8(slot + 1)}
}

// remove deletes h from the index, shifting back the entries after it
// that would otherwise no longer be found.
func (w *hotWindowCounts) remove(h uint64) {
	j := hotHome(h)
	for w.idx[j].hash != h || w.idx[j].slot == 0 {
		j = (j + 1) & (hotIndex - 1)
	}
	for {
		w.idx[j] = hotEntry{}
		k := j
		for {
			k = (k + 1) & (hotIndex - 1)
			if w.idx[k].slot == 0 {
				return
			}
			home := hotHome(w.idx[k].hash)
			// Entry k may move to j unless its home lies cyclically in (j, k].
			if (j < k && (home <= j || home > k)) || (j > k && home <= j && home > k) {
				break
			}
		}
		w.idx[j] = w.idx[k]
		j = k
	}
}

// rotateLocked ends the current window at now and starts another.
func (hk *hotKeys) rotateLocked(now int64) *hotWindowCounts {
	if hk.cur != nil {
		hk.cur.end = now
		if now-hk.cur.start >= 2*int64(hotWindow) {
			// Nothing came for a whole window: the one before is empty.
			hk.cur = newHotWindow(now - int64(hotWindow))
			hk.cur.end = now
		}
		hk.prev = hk.cur
	}
	hk.cur = newHotWindow(now)
	return hk.cur
}

// up and down sift the entry at heap place i to where its count belongs,
// moving the entries it passes by one place each and writing it once, at
// the end. Between equal counts it stops at the first place that fits.
func (w *hotWindowCounts) up(i int) {
	c0, s0 := w.cnt[i], w.heap[i]
	for i > 0 {
		p := (i - 1) / 2
		if c0 >= w.cnt[p] {
			break
		}
		w.cnt[i], w.heap[i] = w.cnt[p], w.heap[p]
		w.pos[w.heap[i]] = uint8(i)
		i = p
	}
	w.cnt[i], w.heap[i] = c0, s0
	w.pos[s0] = uint8(i)
}

func (w *hotWindowCounts) down(i int) {
	n := w.n
	c0, s0 := w.cnt[i], w.heap[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && w.cnt[r] < w.cnt[l] {
			c = r
		}
		if w.cnt[c] >= c0 {
			break
		}
		w.cnt[i], w.heap[i] = w.cnt[c], w.heap[c]
		w.pos[w.heap[i]] = uint8(i)
		i = c
	}
	w.cnt[i], w.heap[i] = c0, s0
	w.pos[s0] = uint8(i)
}

// HotKey is one of the hottest keys of a window.
type HotKey struct {
	Hash uint64 // the key's ring position
	// Hex is the key's reported hash, as the access log and LookupHash
	// take it: Hash as /debug/lookup shows it, or with a salt
	// (HashOptions.Salt) the salted hash.
	Hex      string
	Owner    string // the key's owner on the current ring ("" for an empty ring)
	Requests uint64 // Space-Saving's estimate: at most the true count + Error
	Error    uint64
	Share    float64 // Requests over the window's requests
	Sent     string  // where its last request was sent ("" for a 503)
}

// HotKeysWindow is a window's hottest keys, most requested first.
type HotKeysWindow struct {
	Seconds  float64 // the window's length so far (hotWindow once complete)
	Requests uint64
	Keys     []HotKey
}

// HotKeys returns the hottest keys of the current window (previous false)
// or of the complete window before it.
func (b *Balancer) HotKeys(previous bool) HotKeysWindow {
	out, s := b.hotKeys(previous)
	if s != nil {
		// Outside the lock that requests take: salted, 100 keys cost
		// 100 HMACs.
		for i := range out.Keys {
			out.Keys[i].Hex = s.reportedHash(out.Keys[i].Hash)
		}
	}
	return out
}

// hotKeys is HotKeys but for the keys' Hex, and the snapshot it read
// owners from (nil: none).
func (b *Balancer) hotKeys(previous bool) (HotKeysWindow, *snapshot) {
	now := b.nanotime()
	hk := &b.hot
	hk.mu.Lock()
	defer hk.mu.Unlock()
	if hk.cur != nil && now-hk.cur.start >= int64(hotWindow) {
		hk.rotateLocked(now)
	}
	w := hk.cur
	if previous {
		w = hk.prev
	}
	if w == nil {
		return HotKeysWindow{Seconds: hotWindow.Seconds()}, nil
	}
	end := w.end
	if end == 0 {
		end = now
	}
	s := b.snap.Load()
	out := HotKeysWindow{Seconds: min(time.Duration(end-w.start), hotWindow).Seconds(), Requests: w.requests}
	for i, c := range w.slots[:w.n] {
		count := w.cnt[w.pos[i]]
		owner := ""
		if s != nil {
			if o := s.ring.Owner(c.hash); o >= 0 {
				owner = s.members[o].u.name
			}
		}
		out.Keys = append(out.Keys, HotKey{Hash: c.hash, Owner: owner, Requests: count, Error: c.err, Share: float64(count) / float64(max(w.requests, 1)), Sent: c.sent})
	}
	slices.SortFunc(out.Keys, func(a, b HotKey) int {
		switch {
		case a.Requests > b.Requests:
			return -1
		case a.Requests < b.Requests:
			return 1
		case a.Hash < b.Hash:
			return -1
		case a.Hash > b.Hash:
			return 1
		}
		return 0
	})
	return out, s
}

// hottestShare is ringlb_hot_key_share: the hottest key's share of the
// current window's requests (0 before any).
func (b *Balancer) hottestShare() float64 {
	hk := &b.hot
	hk.mu.Lock()
	defer hk.mu.Unlock()
	w := hk.cur
	if w == nil || w.requests == 0 {
		return 0
	}
	var top uint64
	for _, c := range w.cnt[:w.n] {
		top = max(top, c)
	}
	return float64(top) / float64(w.requests)
}

// reportedHash is the hash the balancer shows of the key at ring position
// pos (the access log's key_hash, /debug/hotkeys): the position as
// FormatHash writes it, or with a salt the salted hash, 16 hex digits.
func (s *snapshot) reportedHash(pos uint64) string {
	if s.salt == nil {
		return s.ring.FormatHash(pos)
	}
	return keyhash.Hex(s.salt.Sum(pos))
}

// hotPosition finds the ring position of a hot key (of the current
// window or the one before) whose reported hash is hex. The positions
// are copied under the lock and hashed after it.
func (b *Balancer) hotPosition(s *snapshot, hex string) (uint64, bool) {
	var pos [2 * hotCounters]uint64
	n := 0
	hk := &b.hot
	hk.mu.Lock()
	for _, w := range [2]*hotWindowCounts{hk.cur, hk.prev} {
		if w != nil {
			for _, c := range w.slots[:w.n] {
				pos[n] = c.hash
				n++
			}
		}
	}
	hk.mu.Unlock()
	for _, p := range pos[:n] {
		if s.reportedHash(p) == hex {
			return p, true
		}
	}
	return 0, false
}
