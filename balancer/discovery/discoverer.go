package discovery

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Discoverer resolves its sources every interval and keeps their
// membership. Its methods are safe for concurrent use.
type Discoverer struct {
	kick     chan struct{} // Resolve's request for an immediate poll
	kubeKick chan struct{} // a Kubernetes watch saw something: apply the Kubernetes sources
	pollMu   sync.Mutex    // one poll at a time

	mu      sync.Mutex // guards what follows
	opts    Options
	rs      *resolver
	states  []*sourceState // in Options.Sources order
	members []Member       // the last merged list
	dirty   bool           // settings changed: the next poll rebuilds the list

	kc      *kubeClient                // made when a Kubernetes source first needs it
	runCtx  context.Context            // Run's; nil before Run: Kubernetes sources are listed, not watched
	watches map[KubeService]*kubeWatch // while running: one per Kubernetes source
	recheck *time.Timer                // a guarded Kubernetes answer's deadline
}

// New checks the options and returns a Discoverer that has resolved
// nothing yet: Members is empty until Run (or Poll) gets answers.
func New(opts Options) (*Discoverer, error) {
	opts.Sources = withNamespaces(opts.Sources, opts.Kubeconfig)
	if err := opts.check(); err != nil {
		return nil, err
	}
	d := &Discoverer{kick: make(chan struct{}, 1), kubeKick: make(chan struct{}, 1)}
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
			if st.src.same(src) {
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
	opts.Sources = withNamespaces(opts.Sources, opts.Kubeconfig)
	if err := opts.check(); err != nil {
		return err
	}
	d.mu.Lock()
	d.install(opts, d.states)
	d.dirty = true
	d.syncWatchesLocked()
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
//
// Kubernetes sources are watched while Run runs: a change they see is
// applied at once (their sources only); every interval their cache is
// read again with the DNS sources.
func (d *Discoverer) Run(ctx context.Context) error {
	d.mu.Lock()
	d.runCtx = ctx
	d.syncWatchesLocked()
	d.mu.Unlock()
	defer d.stopWatches()

	d.Poll(ctx)
	t := time.NewTimer(d.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.kubeKick:
			d.poll(ctx, false)
			continue
		case <-t.C:
		case <-d.kick:
		}
		d.Poll(ctx)
		t.Reset(d.interval())
	}
}

// kickKube asks Run to apply the Kubernetes sources now; it never blocks.
func (d *Discoverer) kickKube() {
	select {
	case d.kubeKick <- struct{}{}:
	default:
	}
}

// syncWatchesLocked starts a watch for every Kubernetes source that has
// none and stops those of sources gone, while Run runs; a new kubeconfig
// restarts them all. d.mu is held.
func (d *Discoverer) syncWatchesLocked() {
	if d.runCtx == nil {
		return
	}
	if d.kc != nil && d.kc.kubeconfig != d.opts.Kubeconfig {
		for k, w := range d.watches {
			w.cancel()
			delete(d.watches, k)
		}
		d.kc = nil
	}
	want := map[KubeService]bool{}
	for _, st := range d.states {
		k := st.src.Kubernetes
		if k.Service == "" {
			continue
		}
		want[k] = true
		if d.watches[k] == nil {
			if d.watches == nil {
				d.watches = map[KubeService]*kubeWatch{}
			}
			d.watches[k] = d.kubeClientLocked().startWatch(d.runCtx, k, d.kickKube)
		}
	}
	for k, w := range d.watches {
		if !want[k] {
			w.cancel()
			delete(d.watches, k)
		}
	}
}

// kubeClientLocked returns the Kubernetes client, making it first. d.mu is held.
func (d *Discoverer) kubeClientLocked() *kubeClient {
	if d.kc == nil || d.kc.kubeconfig != d.opts.Kubeconfig {
		d.kc = newKubeClient(d.opts.Kubeconfig, d.opts.Timeout)
	}
	return d.kc
}

// stopWatches stops every watch (Run returns).
func (d *Discoverer) stopWatches() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, w := range d.watches {
		w.cancel()
		delete(d.watches, k)
	}
	d.runCtx = nil
	if d.recheck != nil {
		d.recheck.Stop()
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
//
// A Kubernetes source is read from its watch's cache while Run runs
// (before the watch's first list there is no answer yet), else listed
// once, each list bounded by Timeout.
func (d *Discoverer) Poll(ctx context.Context) bool { return d.poll(ctx, true) }

// poll is Poll, of every source (all) or of the Kubernetes sources only.
func (d *Discoverer) poll(ctx context.Context, all bool) bool {
	d.pollMu.Lock()
	defer d.pollMu.Unlock()

	plan := d.planPoll(all)
	results := plan.gather(ctx, all)
	if ctx.Err() != nil {
		return false // cancelled: not the sources' fault
	}

	d.mu.Lock()
	changed, events, members := d.applyLocked(plan.states, results, all)
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

// pollPlan is what a poll asks, as the settings stood when it began.
type pollPlan struct {
	states  []*sourceState
	rs      *resolver
	srcs    []Source     // each state's source (Reconfigure may change st.src, under d.mu)
	watches []*kubeWatch // each Kubernetes source's watch; nil if none
	kc      *kubeClient  // for the Kubernetes sources without a watch, when all
	domain  string
	timeout time.Duration
}

// planPoll takes, under d.mu, what a poll of every source (all) or of the
// Kubernetes sources only needs.
func (d *Discoverer) planPoll(all bool) pollPlan {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := pollPlan{
		states:  d.states,
		rs:      d.rs,
		srcs:    make([]Source, len(d.states)),
		watches: make([]*kubeWatch, len(d.states)),
		domain:  cmp.Or(d.opts.ClusterDomain, DefaultClusterDomain),
		timeout: d.opts.Timeout,
	}
	for i, st := range p.states {
		p.srcs[i] = st.src
		if k := st.src.Kubernetes; k.Service != "" {
			if p.watches[i] = d.watches[k]; p.watches[i] == nil && all {
				p.kc = d.kubeClientLocked()
			}
		}
	}
	return p
}

// gather gets each source's result: a watched Kubernetes source's from its
// watch's cache, and, when all, the others' from a list or a resolution,
// all at once.
func (p *pollPlan) gather(ctx context.Context, all bool) []kubeResult {
	kc, rs, domain, timeout := p.kc, p.rs, p.domain, p.timeout // the goroutines' own copies
	results := make([]kubeResult, len(p.states))
	var wg sync.WaitGroup
	for i, src := range p.srcs {
		switch {
		case p.watches[i] != nil:
			results[i] = p.watches[i].read(domain)
		case src.Kubernetes.Service != "" && all:
			wg.Go(func() {
				sl, err := kc.list(ctx, src.Kubernetes, timeout)
				if err != nil {
					results[i] = kubeResult{errs: 1, err: err}
				} else {
					results[i] = kubeResult{recs: sliceRecords(sl, src.Kubernetes, domain), ok: true}
				}
			})
		case src.Kubernetes.Service == "" && all:
			wg.Go(func() {
				recs, err := rs.resolve(ctx, src)
				if err != nil {
					results[i] = kubeResult{errs: 1, err: err}
				} else {
					results[i] = kubeResult{recs: recs, ok: true}
				}
			})
		}
	}
	wg.Wait()
	return results
}

// applyLocked applies a poll's results to their states, schedules the
// recheck of a guarded answer and, if the member list changed, merges it
// again; it returns whether it changed, the events, and the new list (a
// copy). d.mu is held.
func (d *Discoverer) applyLocked(states []*sourceState, results []kubeResult, all bool) (changed bool, events []Event, members []Member) {
	now := d.opts.Now()
	pol := policy{removeAfter: d.opts.RemoveAfter, confirm: d.opts.Confirm,
		confirmFor: time.Duration(d.opts.Confirm) * d.opts.Interval}
	changed = d.dirty
	d.dirty = false
	var recheck time.Time
	for i, st := range states {
		var c bool
		r := results[i]
		for range r.errs {
			c, events = st.fail(pol, r.err, now, events)
			changed = changed || c
		}
		switch {
		case r.ok:
			c, events = st.answer(pol, r.recs, now, events)
		case all || st.src.Kubernetes.Service != "":
			c, events = st.expire(pol, now, events)
		}
		changed = changed || c
		if !st.shortSince.IsZero() {
			if t := st.shortSince.Add(pol.confirmFor); recheck.IsZero() || t.Before(recheck) {
				recheck = t
			}
		}
	}
	d.scheduleRecheckLocked(recheck, now)
	if changed {
		d.members, events = mergeMembers(d.states, events)
		members = slices.Clone(d.members)
	}
	return changed, events, members
}

// scheduleRecheckLocked has a guarded answer applied when its wait is over
// at recheck (if not zero, and while Run runs), not at the next interval.
// d.mu is held.
func (d *Discoverer) scheduleRecheckLocked(recheck, now time.Time) {
	if recheck.IsZero() || d.runCtx == nil {
		return
	}
	if d.recheck != nil {
		d.recheck.Stop()
	}
	d.recheck = time.AfterFunc(max(recheck.Sub(now), 0)+time.Millisecond, d.kickKube)
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
