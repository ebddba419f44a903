package discovery

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Discoverer resolves its sources every interval and keeps their
// membership. Its methods are safe for concurrent use.
type Discoverer struct {
	kick   chan struct{} // Resolve's request for an immediate poll
	pollMu sync.Mutex    // one poll at a time

	mu      sync.Mutex // guards what follows
	opts    Options
	rs      *resolver
	states  []*sourceState // in Options.Sources order
	members []Member       // the last merged list
	dirty   bool           // settings changed: the next poll rebuilds the list
}

// New checks the options and returns a Discoverer that has resolved
// nothing yet: Members is empty until Run (or Poll) gets answers.
func New(opts Options) (*Discoverer, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	d := &Discoverer{kick: make(chan struct{}, 1)}
	d.install(opts, nil)
	return d, nil
}

// install sets the options, keeping the state of every source in old whose
// question (SRV name, or host and port) is unchanged. d.mu is held or d
// not yet shared.
func (d *Discoverer) install(opts Options, old []*sourceState) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Sources = slices.Clone(opts.Sources)
	if d.rs == nil || opts.Resolver != d.opts.Resolver {
		d.rs = &resolver{r: newResolver(opts.Resolver)}
	}
	d.rs = &resolver{r: d.rs.r, timeout: opts.Timeout} // a poll in flight keeps its own
	states := make([]*sourceState, len(opts.Sources))
	for i, src := range opts.Sources {
		for _, st := range old {
			if st.src.SRV == src.SRV && st.src.Host == src.Host && (src.SRV != "" || st.src.Port == src.Port) {
				states[i] = st
				st.src = src // scheme, protocol and weight apply from now on
				break
			}
		}
		if states[i] == nil {
			states[i] = newSourceState(src)
		}
	}
	d.opts, d.states = opts, states
}

// Reconfigure replaces the options (as on a config reload) and asks for an
// immediate poll. Sources asking the same question as before (same SRV
// name, or same host and port) keep their members, absent timers and
// counters, taking the new scheme, protocol and weight; the members of
// dropped sources leave the list at the next poll, which calls OnChange.
func (d *Discoverer) Reconfigure(opts Options) error {
	if err := opts.check(); err != nil {
		return err
	}
	d.mu.Lock()
	d.install(opts, d.states)
	d.dirty = true
	d.mu.Unlock()
	d.Resolve()
	return nil
}

// Resolve asks Run to poll now rather than at the end of the interval; it
// never blocks, and requests made while one is pending are merged.
func (d *Discoverer) Resolve() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Run polls at once, then every Interval (counted from the end of the last
// poll) and whenever Resolve asks, until ctx is done; it returns ctx.Err().
func (d *Discoverer) Run(ctx context.Context) error {
	d.Poll(ctx)
	t := time.NewTimer(d.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-d.kick:
		}
		d.Poll(ctx)
		t.Reset(d.interval())
	}
}

func (d *Discoverer) interval() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.opts.Interval
}

// Poll resolves every source once (in parallel, each query bounded by
// Timeout), applies the answers and failures, logs one line per event,
// and, if the member list changed, calls OnChange. It reports whether the
// list changed. Run calls it; a caller may call it directly, e.g. to wait
// for a first membership before serving.
func (d *Discoverer) Poll(ctx context.Context) bool {
	d.pollMu.Lock()
	defer d.pollMu.Unlock()

	d.mu.Lock()
	states, rs := d.states, d.rs
	srcs := make([]Source, len(states))
	for i, st := range states {
		srcs[i] = st.src // Reconfigure may change st.src, under d.mu
	}
	d.mu.Unlock()

	type result struct {
		recs []record
		err  error
	}
	results := make([]result, len(states))
	var wg sync.WaitGroup
	for i, src := range srcs {
		wg.Go(func() {
			results[i].recs, results[i].err = rs.resolve(ctx, src)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false // cancelled: not the sources' fault
	}

	d.mu.Lock()
	now, pol := d.opts.Now(), policy{removeAfter: d.opts.RemoveAfter, confirm: d.opts.Confirm}
	var events []Event
	changed := d.dirty
	d.dirty = false
	for i, st := range states {
		var c bool
		if err := results[i].err; err != nil {
			c, events = st.fail(pol, err, now, events)
		} else {
			c, events = st.answer(pol, results[i].recs, now, events)
		}
		changed = changed || c
	}
	var members []Member
	if changed {
		d.members, events = mergeMembers(d.states, events)
		members = slices.Clone(d.members)
	}
	logger, onChange := d.opts.Logger, d.opts.OnChange
	d.mu.Unlock()

	for _, e := range events {
		e.log(logger)
	}
	if changed && onChange != nil {
		onChange(Update{Members: members, Events: events})
	}
	return changed
}

// Members returns the current member list, sorted by name (a copy).
func (d *Discoverer) Members() []Member {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.members)
}

// Status returns each source's status, in Options.Sources order.
func (d *Discoverer) Status() []Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Status, len(d.states))
	for i, st := range d.states {
		out[i] = st.status()
	}
	return out
}
