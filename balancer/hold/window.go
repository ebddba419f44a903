package hold

import (
	"net/http"
	"sync"
)

// window is rule 14's window: when it opened (the ring version became
// current, the process started, or, under on_return stay, an upstream of
// the pool returned), the keys looked up in the store since, once each,
// and the lookups in progress.
type window struct {
	since   int64
	looked  *Seen
	flights *flights
}

func newWindow(now int64, maxKeys int) *window {
	return &window{since: now, looked: NewSeen(maxKeys), flights: &flights{}}
}

// Reopen opens rule 14's window again at time now, when an upstream of
// the pool returned (made ready, readmitted) under on_return stay with
// share: a key whose session began on a neighbour of another replica
// while the upstream was out has no record here, and its owner is back;
// the store says where it is. Without share, or under on_return home, it
// does nothing.
func (s *State) Reopen(now int64) {
	if s.window == nil || s.Rule.Home {
		return
	}
	s.window.Store(newWindow(now, s.MaxKeys))
}

// shareLookup is rule 14 for a key with ring position h and no record in
// this process: within idle after this ring version became current, the
// first request of the key asks the shared store (waiting at most its
// timeout, never failing the request), and the key's requests that arrive
// meanwhile wait for that answer rather than route without it. A record
// found there becomes this process's own.
func (s *State) shareLookup(r *http.Request, h uint64, mono int64, clk WallClock) (Rec, bool) {
	w := s.window.Load()
	if mono-w.since >= int64(s.Rule.Idle) {
		return Rec{}, false
	}
	f, first := w.flights.join(h, w.looked)
	if f == nil {
		return Rec{}, false
	}
	if !first {
		select {
		case <-f.done:
			return f.rec, f.ok
		case <-r.Context().Done():
			return Rec{}, false
		}
	}
	f.rec, f.ok = s.shareGet(r, h, mono, clk)
	w.flights.end(h, f)
	return f.rec, f.ok
}

// shareGet asks the store for the record of h and, when it holds one
// younger than idle on a member, makes it this process's own.
func (s *State) shareGet(r *http.Request, h uint64, mono int64, clk WallClock) (Rec, bool) {
	idle := int64(s.Rule.Idle)
	sr, ok, err := s.share.Get(r.Context(), h, s.members)
	if err != nil || !ok {
		return Rec{}, false
	}
	age := max(int64(clk.Now().Sub(sr.At)), 0)
	if age >= idle {
		return Rec{}, false
	}
	rec := Rec{Upstream: sr.Upstream, Version: Version(sr.Version), LastUse: max(mono-age, 1)}
	s.Store.Record(h, rec.Upstream, rec.Version, rec.LastUse)
	return rec, true
}

// flights are the store lookups in progress, by key hash. Only requests
// with no record of their own reach it, within idle of a ring version
// change: about once per key, so a mutex is cheap enough.
type flights struct {
	mu sync.Mutex
	m  map[uint64]*flight
}

// flight is one lookup; rec and ok are set before done is closed.
type flight struct {
	done chan struct{}
	rec  Rec
	ok   bool
}

// join returns the lookup of h in progress (first false), or starts one
// when looked says h is new (first true), or nil: h was looked up already.
func (fs *flights) join(h uint64, looked *Seen) (f *flight, first bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[h]; f != nil {
		return f, false
	}
	if !looked.First(h) {
		return nil, false
	}
	if fs.m == nil {
		fs.m = make(map[uint64]*flight)
	}
	f = &flight{done: make(chan struct{})}
	fs.m[h] = f
	return f, true
}

// end publishes the answer of f, the lookup of h, to those waiting for it.
func (fs *flights) end(h uint64, f *flight) {
	fs.mu.Lock()
	delete(fs.m, h)
	fs.mu.Unlock()
	close(f.done)
}
