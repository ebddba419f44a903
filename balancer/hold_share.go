package balancer

import (
	"net/http"

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
// timeout, never failing the request). A record found there becomes this
// process's own.
func (b *Balancer) shareLookup(r *http.Request, hs *holdState, h uint64, mono int64) (hold.Rec, bool) {
	idle := int64(hs.rule.Idle)
	if mono-hs.since >= idle || !hs.looked.First(h) {
		return hold.Rec{}, false
	}
	sr, ok, err := hs.share.Get(r.Context(), h)
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
