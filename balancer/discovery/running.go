package discovery

import (
	"context"
	"sync/atomic"
)

// Running is the Discoverer of a discovery block that comes and goes with
// reloads: Prepare starts one for a new block, reconfigures the running
// one for a block that stays, or stops it when the block is gone. Prepare,
// its commits and Stop are serialised by the caller; Current, Resolve,
// Status and Discoverer may be called at any time. The zero value runs
// nothing.
type Running struct {
	cur atomic.Pointer[run]
}

// run is one started Discoverer and what stops it.
type run struct {
	d      *Discoverer
	cancel context.CancelFunc
}

// Prepare does the fallible part of applying a discovery block o (nil:
// none), before anything changes: it builds the Discoverer of a new block
// (not running yet) or reconfigures the running one, which then resolves
// at once. Each change reaches onChange with the Discoverer that made it
// (in place of o's OnChange), which Current tells from one since
// replaced. commit, called once the caller has applied the rest, starts
// the new Discoverer, or stops the running one when o is nil; it reports
// whether it stopped one.
func (r *Running) Prepare(o *Options, onChange func(*Discoverer, Update)) (commit func() (stopped bool), err error) {
	cur := r.cur.Load()
	switch {
	case o == nil && cur == nil:
		return func() bool { return false }, nil
	case o == nil:
		return func() bool {
			r.cur.Store(nil)
			cur.cancel() // a poll in flight finds itself replaced and changes nothing
			return true
		}, nil
	}
	do := *o
	if cur != nil {
		do.OnChange = func(u Update) { onChange(cur.d, u) }
		if err := cur.d.Reconfigure(do); err != nil {
			return nil, err
		}
		return func() bool { return false }, nil
	}
	next := &run{}
	do.OnChange = func(u Update) { onChange(next.d, u) }
	d, err := New(do)
	if err != nil {
		return nil, err
	}
	next.d = d
	return func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		next.cancel = cancel
		r.cur.Store(next)
		go d.Run(ctx) // returns when cancelled
		return false
	}, nil
}

// Current reports whether d is the running Discoverer.
func (r *Running) Current(d *Discoverer) bool {
	cur := r.cur.Load()
	return cur != nil && cur.d == d
}

// Discoverer returns the running Discoverer, or nil.
func (r *Running) Discoverer() *Discoverer {
	if cur := r.cur.Load(); cur != nil {
		return cur.d
	}
	return nil
}

// Stop stops the running Discoverer, if any.
func (r *Running) Stop() {
	if cur := r.cur.Swap(nil); cur != nil {
		cur.cancel()
	}
}
