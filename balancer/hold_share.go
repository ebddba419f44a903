package balancer

import (
	"net/http"
	"sync"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/hold/share"
)

// installShareLocked keeps, starts or stops the shared store's client for
// the hold settings about to be installed: a reload that keeps the share
// options keeps the client and its queue. Callers hold b.mu.
func (b *Balancer) installShareLocked(hs holdSettings) {
	want := hs.share
	if hs.rule.Idle <= 0 {
		want = share.Options{}
	}
	if b.holdShare != nil && (want.URL == "" || !b.holdShareOpts.Same(want)) {
		b.holdShare.Close()
		b.holdShare = nil
	}
	if want.URL == "" || b.holdShare != nil {
		return
	}
	opts := want
	if p := b.Pool(); p != DefaultPool {
		// Pools are independent: each writes its own records, also when
		// several share one server and prefix.
		opts.Prefix += p + ":"
	}
	opts.Logger = b.log
	opts.Counters = &b.shareCounts
	c, err := share.New(opts)
	if err != nil { // compile checked the options
		b.log.Error("hold share: not started", "err", err)
		return
	}
	b.holdShare, b.holdShareOpts = c, want
	if b.holdWritten == nil {
		b.holdWritten = hold.NewWritten(hs.maxKeys)
	}
}

// shareLookup is rule 14 for a key with ring position h and no record in
// this process: within idle after this ring version became current, the
// first request of the key asks the shared store (waiting at most its
// timeout, never failing the request), and the key's requests that arrive
// meanwhile wait for that answer rather than route without it. A record
// found there becomes this process's own.
func (b *Balancer) shareLookup(r *http.Request, hs *holdState, h uint64, mono int64) (hold.Rec, bool) {
	w := hs.window.Load()
	if mono-w.since >= int64(hs.rule.Idle) {
		return hold.Rec{}, false
	}
	f, first := w.flights.join(h, w.looked)
	if f == nil {
		return hold.Rec{}, false
	}
	if !first {
		select {
		case <-f.done:
			return f.rec, f.ok
		case <-r.Context().Done():
			return hold.Rec{}, false
		}
	}
	f.rec, f.ok = b.shareGet(r, hs, h, mono)
	w.flights.end(h, f)
	return f.rec, f.ok
}

// shareWindow is rule 14's window: when it opened (the ring version
// became current, the process started, or, under on_return stay, an
// upstream of the pool returned), the keys looked up in the store since,
// once each, and the lookups in progress.
type shareWindow struct {
	since   int64
	looked  *hold.Seen
	flights *shareFlights
}

func newShareWindow(now int64, maxKeys int) *shareWindow {
	return &shareWindow{since: now, looked: hold.NewSeen(maxKeys), flights: &shareFlights{}}
}

// returnedLocked opens rule 14's window again when an upstream of the
// pool returned (made ready, readmitted) under on_return stay with
// share: a key whose session began on a neighbour of another replica
// while the upstream was out has no record here, and its owner is back;
// the store says where it is. Callers hold b.mu.
func (b *Balancer) returnedLocked() {
	s := b.snap.Load()
	if s == nil || s.hold == nil || s.hold.window == nil || s.hold.rule.Home {
		return
	}
	s.hold.window.Store(newShareWindow(b.nanotime(), s.hold.maxKeys))
}

// shareGet asks the store for the record of h and, when it holds one
// younger than idle on a member, makes it this process's own.
func (b *Balancer) shareGet(r *http.Request, hs *holdState, h uint64, mono int64) (hold.Rec, bool) {
	idle := int64(hs.rule.Idle)
	sr, ok, err := hs.share.Get(r.Context(), h, hs.members)
	if err != nil || !ok {
		return hold.Rec{}, false
	}
	age := max(int64(b.clk.Now().Sub(sr.At)), 0)
	if age >= idle {
		return hold.Rec{}, false
	}
	rec := hold.Rec{Upstream: sr.Upstream, Version: sr.Version, LastUse: max(mono-age, 1)}
	hs.store.Record(h, rec.Upstream, rec.Version, rec.LastUse)
	return rec, true
}

// shareFlights are the store lookups in progress, by key hash. Only
// requests with no record of their own reach it, within idle of a ring
// version change: about once per key, so a mutex is cheap enough.
type shareFlights struct {
	mu sync.Mutex
	m  map[uint64]*shareFlight
}

// shareFlight is one lookup; rec and ok are set before done is closed.
type shareFlight struct {
	done chan struct{}
	rec  hold.Rec
	ok   bool
}

// join returns the lookup of h in progress (first false), or starts one
// when looked says h is new (first true), or nil: h was looked up already.
func (fs *shareFlights) join(h uint64, looked *hold.Seen) (f *shareFlight, first bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[h]; f != nil {
		return f, false
	}
	if !looked.First(h) {
		return nil, false
	}
	if fs.m == nil {
		fs.m = make(map[uint64]*shareFlight)
	}
	f = &shareFlight{done: make(chan struct{})}
	fs.m[h] = f
	return f, true
}

// end publishes the answer of f, the lookup of h, to those waiting for it.
func (fs *shareFlights) end(h uint64, f *shareFlight) {
	fs.mu.Lock()
	delete(fs.m, h)
	fs.mu.Unlock()
	close(f.done)
}

// ShareStatus is the hold share's state, for the status page.
type ShareStatus struct {
	On     bool
	Server string // host:port
	Down   bool
	Queued int
	share.CountersSnapshot
}

func (b *Balancer) shareStatus() ShareStatus {
	b.mu.Lock()
	c := b.holdShare
	b.mu.Unlock()
	if c == nil {
		return ShareStatus{}
	}
	return ShareStatus{On: true, Server: c.Addr(), Down: c.Down(), Queued: c.Queued(), CountersSnapshot: b.shareCounts.Snapshot()}
}
