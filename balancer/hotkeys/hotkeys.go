// Package hotkeys counts a pool's hottest keys, by key hash, over fixed
// windows of a minute, with the Space-Saving algorithm.
package hotkeys

import (
	"slices"
	"sync"
	"time"
)

// A consistent hash spreads keys, not work. One hot key stays on its
// owner however many points the ring has, so the balancer counts the
// requests of the hottest keys, by key hash only, with the Space-Saving
// algorithm (Metwally, Agrawal, El Abbadi, 2005): Counters counters
// hold the keys seen most; a key not held takes the place of the least
// counted one, inheriting its count as the bound of its error. Any key
// whose true count exceeds requests/Counters is held, and a held key's
// estimate is at most its true count plus its error.
//
// Counting runs over fixed windows of Span; the window before the
// current one is kept whole.

const (
	Counters = 100
	Span     = time.Minute
)

// counter is one monitored key (its count is in the window's heap).
type counter struct {
	hash uint64
	err  uint64 // overestimation bound: the count it inherited
	sent string // the upstream its last request was sent to ("" if none)
}

// window is one window's counts: Counters slots, a min-heap
// of slot numbers on their counts, and an open-addressing index from hash
// to slot (linear probing, deletion by backward shift): no map, no
// allocation after the window is made. The counts are kept in heap order
// beside the heap (cnt[i] is the count of slot heap[i]), so that sifting
// compares neighbouring words instead of following slot numbers.
type window struct {
	start    int64 // the balancer's clock (ns) when the window began
	end      int64 // when it ended; 0 while current
	requests uint64
	n        int // slots in use
	slots    [Counters]counter
	cnt      [Counters]uint64 // the counts, in heap order
	heap     [Counters]uint8  // slot numbers; heap[0] is the least counted
	pos      [Counters]uint8  // slot → its place in heap
	idx      [indexSize]entry
}

const indexSize = 256 // a power of two, over twice Counters

type entry struct {
	hash uint64
	slot uint8 // slot+1; 0: empty
}

func newWindow(start int64) *window { return &window{start: start} }

// Counter counts one balancer's requests by key hash. Its zero value is
// ready to count.
type Counter struct {
	mu        sync.Mutex
	cur, prev *window
}

// Add counts one request of the key with ring position h, sent to sent
// ("" when it got no upstream), at time now (the balancer's clock).
func (hk *Counter) Add(h uint64, sent string, now int64) {
	hk.mu.Lock()
	w := hk.cur
	if w == nil || now-w.start >= int64(Span) {
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
	} else if w.n < Counters {
		i := w.n
		w.n++
		w.slots[i] = counter{hash: h, sent: sent}
		w.heap[i], w.pos[i], w.cnt[i] = uint8(i), uint8(i), 1
		w.insert(h, i)
		w.up(i)
	} else { // the least counted key gives up its place
		i := int(w.heap[0])
		c := &w.slots[i]
		w.remove(c.hash)
		m := w.cnt[0]
		*c = counter{hash: h, err: m, sent: sent}
		w.cnt[0] = m + 1
		w.insert(h, i)
		w.down(0)
	}
	hk.mu.Unlock()
}

func home(h uint64) int { return int((h * 0x9e3779b97f4a7c15) >> (64 - 8)) } // 8 bits: indexSize

func (w *window) find(h uint64) (int, bool) {
	for j := home(h); ; j = (j + 1) & (indexSize - 1) {
		e := &w.idx[j]
		if e.slot == 0 {
			return 0, false
		}
		if e.hash == h {
			return int(e.slot - 1), true
		}
	}
}

func (w *window) insert(h uint64, slot int) {
	j := home(h)
	for w.idx[j].slot != 0 {
		j = (j + 1) & (indexSize - 1)
	}
	w.idx[j] = entry{hash: h, slot: uint8(slot + 1)}
}

// remove deletes h from the index, shifting back the entries after it
// that would otherwise no longer be found.
func (w *window) remove(h uint64) {
	j := home(h)
	for w.idx[j].hash != h || w.idx[j].slot == 0 {
		j = (j + 1) & (indexSize - 1)
	}
	for {
		w.idx[j] = entry{}
		k := j
		for {
			k = (k + 1) & (indexSize - 1)
			if w.idx[k].slot == 0 {
				return
			}
			at := home(w.idx[k].hash)
			// Entry k may move to j unless its home lies cyclically in (j, k].
			if (j < k && (at <= j || at > k)) || (j > k && at <= j && at > k) {
				break
			}
		}
		w.idx[j] = w.idx[k]
		j = k
	}
}

// rotateLocked ends the current window at now and starts another.
func (hk *Counter) rotateLocked(now int64) *window {
	if hk.cur != nil {
		hk.cur.end = now
		if now-hk.cur.start >= 2*int64(Span) {
			// Nothing came for a whole window: the one before is empty.
			hk.cur = newWindow(now - int64(Span))
			hk.cur.end = now
		}
		hk.prev = hk.cur
	}
	hk.cur = newWindow(now)
	return hk.cur
}

// up and down sift the entry at heap place i to where its count belongs,
// moving the entries it passes by one place each and writing it once, at
// the end. Between equal counts it stops at the first place that fits.
func (w *window) up(i int) {
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

func (w *window) down(i int) {
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

// Key is one of the hottest keys of a window.
type Key struct {
	Hash uint64 // the key's ring position
	// Hex is the key's reported hash, as the access log and LookupHash
	// take it: Hash as /debug/lookup shows it, or with a salt
	// (options.Hash.Salt) the salted hash. The balancer fills it in.
	Hex string
	// Owner is the key's owner on the current ring ("" for an empty
	// ring). The balancer fills it in.
	Owner    string
	Requests uint64 // Space-Saving's estimate: at most the true count + Error
	Error    uint64
	Share    float64 // Requests over the window's requests
	Sent     string  // where its last request was sent ("" for a 503)
}

// Window is a window's hottest keys, most requested first.
type Window struct {
	Seconds  float64 // the window's length so far (Span once complete)
	Requests uint64
	Keys     []Key
}

// Window returns the hottest keys of the current window (previous
// false) or of the complete window before it, at time now, without their
// Hex or Owner.
func (hk *Counter) Window(previous bool, now int64) Window {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	if hk.cur != nil && now-hk.cur.start >= int64(Span) {
		hk.rotateLocked(now)
	}
	w := hk.cur
	if previous {
		w = hk.prev
	}
	if w == nil {
		return Window{Seconds: Span.Seconds()}
	}
	end := w.end
	if end == 0 {
		end = now
	}
	out := Window{Seconds: min(time.Duration(end-w.start), Span).Seconds(), Requests: w.requests}
	for i, c := range w.slots[:w.n] {
		count := w.cnt[w.pos[i]]
		out.Keys = append(out.Keys, Key{Hash: c.hash, Requests: count, Error: c.err, Share: float64(count) / float64(max(w.requests, 1)), Sent: c.sent})
	}
	slices.SortFunc(out.Keys, func(a, b Key) int {
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
	return out
}

// HottestShare is the hottest key's share of the current window's
// requests (0 before any).
func (hk *Counter) HottestShare() float64 {
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

// Positions copies into dst the ring positions of the keys held in the
// current window and the one before, and returns them.
func (hk *Counter) Positions(dst *[2 * Counters]uint64) []uint64 {
	n := 0
	hk.mu.Lock()
	for _, w := range [2]*window{hk.cur, hk.prev} {
		if w != nil {
			for _, c := range w.slots[:w.n] {
				dst[n] = c.hash
				n++
			}
		}
	}
	hk.mu.Unlock()
	return dst[:n]
}
