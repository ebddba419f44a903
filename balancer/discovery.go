package balancer

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/ring"
)

// discoveryState is the Balancer's discovery side. Guarded by Balancer.mu
// except run, which the metrics and admin pages read without a lock.
type discoveryState struct {
	run       discovery.Running  // the discovery block's Discoverer
	static    Options            // the options last installed, the static half of every membership
	found     []discovery.Member // the Discoverer's last member list
	conflicts map[string]bool    // discovered names a static upstream shadows, logged once each
	changed   chan struct{}      // signalled (never blocking) after a membership change
}

// foundFor returns the discovered members a snapshot built from opts holds:
// the last list while opts has a discovery block, else none. Callers hold
// b.mu.
func (d *discoveryState) foundFor(opts Options) []discovery.Member {
	if opts.Discovery == nil {
		return nil
	}
	return d.found
}

// prepareDiscoveryLocked does the fallible part of applying opts'
// discovery block, before anything changes (see discovery.Running.Prepare);
// commit, called once the snapshot is installed, starts a new Discoverer
// or stops the old one when the block was removed. Callers hold b.mu.
func (b *Balancer) prepareDiscoveryLocked(opts Options) (commit func(), err error) {
	var o *discovery.Options
	if opts.Discovery != nil {
		do := *opts.Discovery
		do.Logger = b.log
		o = &do
	}
	start, err := b.disc.run.Prepare(o, func(d *discovery.Discoverer, u discovery.Update) { b.discovered(d, u.Members) })
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	return func() {
		if start() {
			b.disc.found = nil
			b.log.Info("discovery off: the ring's members are the static upstreams")
		}
	}, nil
}

// Resolve asks the pool's discovery, if it has any, to poll now rather
// than at the end of its interval, as a reload does: for a reload that
// leaves the pool's options as they are, and so calls no Update. It never
// blocks.
func (b *Balancer) Resolve() {
	if d := b.disc.run.Discoverer(); d != nil {
		d.Resolve()
	}
}

// discovered installs a new member list from d: the next snapshot is the
// static upstreams plus the discovered members, with everything else as
// it was. Lists from a Discoverer that was since stopped are ignored.
func (b *Balancer) discovered(d *discovery.Discoverer, found []discovery.Member) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.disc.run.Current(d) {
		return
	}
	b.disc.found = found
	old := b.snap.Load()
	set := old.settings
	r, err := set.membership(b.disc.static, found, old.ring)
	if err != nil { // names and weights come checked: not expected
		b.log.Error("discovery: membership not installed", "err", err)
		return
	}
	// The Discoverer has logged each member's change; a new version of
	// the ring is logged here.
	s := b.installLocked(set, r)
	b.afterMembershipLocked(old, s)
	b.logVersion("discovery", old, s)
}

// afterMembershipLocked finishes a membership change from old to s:
// availability follows absence, removed upstreams lose their metric
// series, shadowed names are logged once and the health checker is told.
// Callers hold b.mu.
func (b *Balancer) afterMembershipLocked(old, s *snapshot) {
	for i := range s.members {
		b.settleLocked(s.members[i].u, "discovery", "")
	}
	for i := range old.members {
		if u := old.members[i].u; b.ups[u.name] != u {
			b.metrics.Retire(u.metrics)
		}
	}
	b.logConflictsLocked()
	select {
	case b.disc.changed <- struct{}{}:
	default:
	}
}

// logConflictsLocked logs each discovered name that a static upstream
// shadows, once while the clash lasts.
func (b *Balancer) logConflictsLocked() {
	if len(b.disc.found) == 0 && len(b.disc.conflicts) == 0 {
		return
	}
	now := map[string]bool{}
	for _, u := range b.disc.static.Upstreams {
		if i, ok := slices.BinarySearchFunc(b.disc.found, u.Name, func(m discovery.Member, n string) int {
			return strings.Compare(m.Name, n)
		}); ok && b.disc.static.Discovery != nil {
			m := b.disc.found[i]
			now[u.Name] = true
			if !b.disc.conflicts[u.Name] {
				b.log.Warn("discovery: a discovered member has a static upstream's name; the static one is kept",
					"upstream", u.Name, "url", u.URL.String(), "source", m.Source, "discovered_url", m.URL)
			}
		}
	}
	b.disc.conflicts = now
}

// discoveredSpecs returns the members of found that a static upstream
// (in static) does not shadow, as ring members and specs by name.
func discoveredSpecs(found []discovery.Member, static map[string]options.Upstream) ([]ring.Member, map[string]memberSpec, error) {
	rm := make([]ring.Member, 0, len(found))
	specs := make(map[string]memberSpec, len(found))
	for _, m := range found {
		if _, shadowed := static[m.Name]; shadowed {
			continue
		}
		u, err := url.Parse(m.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("balancer: discovered member %s: %w", m.Name, err)
		}
		proto, err := transport.ParseProtocol(cmp.Or(m.Protocol, "http1"))
		if err != nil {
			return nil, nil, fmt.Errorf("balancer: discovered member %s: %w", m.Name, err)
		}
		rm = append(rm, ring.Member{Name: m.Name, Addr: u.Host, Weight: m.Weight})
		// A terminating Kubernetes endpoint (serving still) drains: its
		// held keys stay, new keys go elsewhere (rule 12). As a configured
		// state, it applies when it changes, so a state set through the
		// admin API meanwhile stands until the endpoint's changes.
		st := state.Ready
		if m.Terminating {
			st = state.Drain
		}
		specs[m.Name] = memberSpec{name: m.Name, url: u, weight: m.Weight, protocol: proto, state: st,
			source: m.Source, absent: m.Absent, initial: m.Initial}
	}
	return rm, specs, nil
}

// MembersChanged is signalled after discovery changed the members or
// their URLs (not after Update, whose caller knows). Whoever keeps
// per-member state outside the Balancer, such as the health checker's
// targets, reads Members again then.
func (b *Balancer) MembersChanged() <-chan struct{} { return b.disc.changed }

// MemberURL is a ring member's name, where its requests go and how
// ringlb speaks to it.
type MemberURL struct {
	Name     string
	URL      *url.URL
	Protocol transport.Protocol
}

// Members returns every current ring member (absent ones included), by
// name.
func (b *Balancer) Members() []MemberURL {
	s := b.snap.Load()
	out := make([]MemberURL, len(s.members))
	for i := range s.members {
		out[i] = MemberURL{Name: s.members[i].name, URL: s.members[i].url, Protocol: s.members[i].protocol}
	}
	return out
}

// discoveryStatus returns each source's state, in config order; nil
// without a discovery block.
func (b *Balancer) discoveryStatus() []discovery.Status {
	if d := b.disc.run.Discoverer(); d != nil {
		return d.Status()
	}
	return nil
}

// discoveryCollector returns the collector of the discovery families of
// the pools that pools returns.
func discoveryCollector(pools func() []*Balancer) prometheus.Collector {
	return discovery.NewCollector(func() []*discovery.Discoverer {
		var out []*discovery.Discoverer
		for _, b := range pools() {
			if d := b.disc.run.Discoverer(); d != nil {
				out = append(out, d)
			}
		}
		return out
	})
}
