// Package balancer is ringlb's request path: it extracts a key from each
// request, picks an upstream on the consistent-hash ring (skipping
// unavailable upstreams and, with bounded loads, full ones), and forwards
// the request through that upstream's httputil.ReverseProxy, retrying
// elsewhere when the upstream could not be reached.
//
// A Balancer holds an immutable snapshot (ring, upstreams, settings) behind
// an atomic pointer. A request loads it once and uses it for its pick and
// every retry; Update builds a new snapshot and swaps it in, so the request
// path takes no lock. Per-upstream state (in-flight count, health verdict,
// circuit breaker, availability) lives in upstream values that outlive
// reloads while their name stays.
//
// An upstream is available while its health verdict (reported by an
// active checker through a HealthReporter) is up and its breaker (see
// breaker.Options) is not open. Unavailable upstreams are skipped in the
// clockwise walk, so only their keys move; when one returns, exactly its
// keys come back, all at once or, with slow start, a growing set of its
// points at a time.
package balancer

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/hotkeys"
	"github.com/ringlb/ringlb/balancer/inflight"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/ring"
)

// snapshot is everything a request needs, fixed when it is installed:
// the compiled settings, the ring, and each member's live upstream and
// proxy.
type snapshot struct {
	settings
	ring      *ring.Ring
	members   []member            // indexed like ring.Members()
	transport *upstreamTransports // the one every member's proxy uses
	hold      *hold.State         // nil when hold is off
	handoff   *handoff.State      // nil when handoff is off

	// availW is the total weight of the members that take new keys
	// (available and ready), as float64 bits; drains counts the members
	// in state drain. Both are recomputed (under Balancer.mu) on every
	// change of availability or admin state.
	availW atomic.Uint64
	drains atomic.Int32
}

// member is one ring member of a snapshot: what the options say about
// it, the shared upstream state, and the proxy that forwards to it.
type member struct {
	memberSpec
	u     *upstream
	proxy *httputil.ReverseProxy
	count *inflight.Count // the requests in flight to its URL, for limits.upstream_requests
}

// Balancer is the proxy handler. It is safe for concurrent use; create it
// with New.
type Balancer struct {
	snap     atomic.Pointer[snapshot]
	installs atomic.Uint64 // snapshots installed: see Snapshots
	inflight atomic.Int64  // all upstreams, including draining removed ones

	log     *slog.Logger
	errLog  *log.Logger
	metrics *metrics.Pool
	proc    *metrics.Process // the process's families: its own, or its Router's
	bufs    bufferPool
	epoch   time.Time // the start of nanotime
	clk     clock

	tunnels downstream.Tunnels // upgraded connections (WebSocket), for shutdown

	mu        sync.Mutex // serialises Update, health reports, settle and Close
	ups       map[string]*upstream
	healthGen uint64 // incremented by an Update that turns HealthChecks off: revokes HealthReporters
	transport *upstreamTransports
	disc      discoveryState

	hold hold.Keeper     // the hold records and the shared store's client, across reloads (under mu)
	hot  hotkeys.Counter // the hottest keys (see hotkeys.go)

	counts *inflight.Counts // per upstream URL, maybe shared with other Balancers
	urls   inflight.Uses    // the counts this Balancer's members use; guarded by mu

	localLog failLog // rate-limits warnings about ringlb's own limits, all upstreams together
}

// New builds a Balancer and registers its metrics on reg (nil: none). It
// fails on options that cannot work (no upstreams, an unknown key source,
// a bad weight) and if reg already holds ringlb's metrics.
func New(opts Options, reg prometheus.Registerer, logger *slog.Logger) (*Balancer, error) {
	return newBalancer(opts, reg, logger, nil)
}

// newBalancer is New for a pool of a Router when proc is the Router's
// process families: then it registers only the pool's own on reg (and
// the Router reports its discovery sources).
func newBalancer(opts Options, reg prometheus.Registerer, logger *slog.Logger, proc *metrics.Process) (*Balancer, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &Balancer{
		log:     logger,
		errLog:  slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		epoch:   time.Now(),
		clk:     systemClock{},
		ups:     map[string]*upstream{},
		metrics: metrics.NewPool(cmp.Or(opts.Pool, DefaultPool)),
		counts:  opts.Counts,
	}
	if b.counts == nil {
		b.counts = inflight.NewCounts()
	}
	b.hold.Log, b.hold.Now = logger, b.nanotime
	b.hold.AfterFunc = func(d time.Duration, f func()) hold.Timer { return b.clk.AfterFunc(d, f) }
	if p := b.Pool(); p != DefaultPool {
		b.hold.Prefix = p + ":"
	}
	b.proc = proc
	if proc == nil {
		b.proc = metrics.NewProcess()
	}
	b.disc.changed = make(chan struct{}, 1)
	set, r, err := compile(opts, nil)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	startDiscovery, err := b.prepareDiscoveryLocked(opts)
	if err != nil {
		return nil, err
	}
	s := b.installLocked(set, r)
	b.disc.static = opts
	if reg != nil {
		cs := b.collectors()
		if proc == nil { // the process's one pool
			err = b.proc.Register(reg, append(cs, discoveryCollector(func() []*Balancer { return []*Balancer{b} }))...)
		} else {
			err = metrics.RegisterAll(reg, cs)
		}
		if err != nil {
			b.transport.CloseIdleConnections()
			return nil, fmt.Errorf("balancer: registering metrics: %w", err)
		}
	}
	b.logVersion("start", nil, s)
	startDiscovery()
	return b, nil
}

// Update reloads: it builds a new snapshot from opts and swaps it in.
// Requests already running finish on the snapshot they started with.
// Upstreams keep their state while their name stays; removed ones drain
// and their metric series are deleted. On error nothing changes.
//
// The discovery block is applied too: its Discoverer starts, takes the new
// settings (keeping the members of sources that stay) and resolves at
// once, or stops, taking the discovered members with it.
func (b *Balancer) Update(opts Options) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	set, r, err := compile(opts, b.disc.foundFor(opts))
	if err != nil {
		return "", err
	}
	commitDiscovery, err := b.prepareDiscoveryLocked(opts)
	if err != nil {
		return "", err
	}
	old := b.snap.Load()
	s := b.installLocked(set, r)
	b.disc.static = opts
	commitDiscovery()
	if old.healthChecks && !s.healthChecks {
		b.healthGen++ // the checker being stopped can say nothing more
		for i := range s.members {
			s.members[i].u.down.Store(false)
		}
	}
	for i := range s.members {
		b.settleLocked(s.members[i].u, "reload", "")
	}
	var added, removed []string
	for i := range s.members {
		if old.ring.Index(s.members[i].u.name) < 0 {
			added = append(added, s.members[i].u.name)
		}
	}
	for i := range old.members {
		u := old.members[i].u
		if b.ups[u.name] != u {
			removed = append(removed, u.name)
			b.metrics.Retire(u.metrics)
		}
	}
	b.logConflictsLocked()
	b.log.Info("ring reloaded", "version", s.ring.Version(), "previous", old.ring.Version(),
		"upstreams", len(s.members), "added", added, "removed", removed)
	b.logVersion("reload", old, s)
	return s.ring.Version(), nil
}

// logVersion logs a change of the ring's version, one line each whatever
// made it (cause: "start", "reload" or "discovery"): the new version, the
// previous one, and the members on the ring (absent ones included). old
// is the snapshot s replaced, nil at start; when it had the same version
// nothing is logged.
func (b *Balancer) logVersion(cause string, old, s *snapshot) {
	attrs := make([]slog.Attr, 0, 5)
	attrs = append(attrs, slog.String("version", s.ring.Version()))
	if old != nil {
		if old.ring.Version() == s.ring.Version() {
			return
		}
		attrs = append(attrs, slog.String("previous", old.ring.Version()))
	}
	attrs = append(attrs, slog.Int("members", len(s.members)), slog.String("cause", cause))
	if old == nil {
		attrs = append(attrs, slog.String("placement", string(s.ring.Placement())))
	}
	b.log.LogAttrs(context.Background(), slog.LevelInfo, "ring version", attrs...)
}

// installLocked makes a compiled configuration current: it replaces the
// transport when its settings changed, creates upstream state for new names
// (an upstream joining a running balancer slow-starts), gives each its
// breaker settings, builds the members' proxies and swaps the snapshot
// in. Callers hold b.mu.
func (b *Balancer) installLocked(set settings, r *ring.Ring) *snapshot {
	old := b.snap.Load()
	var now int64
	if old != nil {
		now = b.nanotime()
	}
	if b.transport == nil || !b.transport.cfg.same(set.transportCfg) {
		if b.transport != nil {
			b.transport.retire()
		}
		b.transport = newTransport(set.transportCfg)
	}
	s := &snapshot{settings: set, ring: r, transport: b.transport, members: make([]member, len(set.specs))}
	ups := make(map[string]*upstream, len(set.specs))
	for i, spec := range set.specs {
		u := b.ups[spec.name]
		isNew := u == nil
		switch {
		case isNew:
			u = &upstream{name: spec.name, metrics: b.metrics.ForUpstream(spec.name), tunnels: downstream.TunnelCount{All: &b.tunnels}}
			if old != nil && s.slowStart > 0 && !spec.initial {
				u.warmSince.Store(now)
			}
		case old != nil:
			u.endWarmup(now, old.slowStart)
		}
		was := u.adminState()
		b.applyConfigStateLocked(u, spec.state, isNew)
		b.warnSpecDrain(u, was, spec, set.holdSet.Rule.Idle > 0)
		u.absent.Store(spec.absent) // the caller settles it
		switch br := u.br.Load(); {
		case s.breaker == nil:
			u.br.Store(nil) // an open one closes: Update settles it
		case br == nil:
			u.br.Store(b.newBreaker(u, s.breaker))
		default:
			br.SetOptions(s.breaker)
		}
		ups[spec.name] = u
		s.members[i] = member{memberSpec: spec, u: u, proxy: b.newProxy(s, u, spec)}
	}
	s.specs = nil // kept once, in the members
	installHandoff(s, old, b.nanotime())
	b.countsLocked(s)
	b.ups = ups
	b.installHoldLocked(s)
	b.proc.Body.SetLimit(s.bodyMemory) // the process's: every pool sets the same
	b.snap.Store(s)
	b.installs.Add(1)
	b.hold.Keep(s.hold)
	b.recomputeLocked()
	return s
}

// nanotime returns nanoseconds since the balancer started on its clock
// (monotonic on the system clock), never 0. On the system clock it reads
// the monotonic clock only: time.Since does, where time.Now reads the
// wall clock too, and a request asks several times.
func (b *Balancer) nanotime() int64 {
	if _, sys := b.clk.(systemClock); sys {
		return int64(time.Since(b.epoch)) + 1
	}
	return int64(b.clk.Now().Sub(b.epoch)) + 1
}

// clock is where a Balancer reads the time and sets its timers: the
// system clock, or one a test drives.
type clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) timer
}

// timer is a timer set by clock.AfterFunc.
type timer interface {
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time                            { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }

// Snapshots returns how many snapshots the Balancer has installed: 1
// after New, one more for each Update and each membership change
// discovery makes. A reload that leaves a pool alone leaves it as it was.
func (b *Balancer) Snapshots() uint64 { return b.installs.Load() }

// Version returns the current ring's membership version.
func (b *Balancer) Version() string { return b.snap.Load().ring.Version() }

// RecordReload counts a reload attempt in ringlb_config_reloads_total,
// sets ringlb_config_last_reload_success (1 when ok, 0 when rejected: it
// stays 0 until a reload succeeds) and keeps the attempt, with the
// problems of a rejected one, for LastReload. The function that performs
// a reload calls it once per attempt, whatever asked for the reload.
func (b *Balancer) RecordReload(ok bool, problems ...string) {
	b.proc.Record(ok, b.clk.Now(), problems)
}

// LastReload returns the last reload attempt, or nil before the first.
// The pools of a Router share it.
func (b *Balancer) LastReload() *metrics.Reload { return b.proc.LastReload.Load() }

// Close stops discovery, releases the transport's idle connections and
// stops the timers that end the breakers' open periods. Requests in flight
// are not interrupted; the Balancer stays usable (an open period then ends
// with the next request or health report; the members stay as discovery
// last left them).
func (b *Balancer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.disc.run.Stop()
	b.transport.CloseIdleConnections()
	for _, u := range b.ups {
		if br := u.br.Load(); br != nil {
			br.Stop()
		}
	}
	b.hold.Close()
}

// WaitTunnels waits until every upgraded connection (a WebSocket tunnel,
// which http.Server.Shutdown does not wait for) has closed, or ctx is
// done; then it closes those still open and returns ctx's error. Call it
// after the proxy server's Shutdown, with the same deadline.
func (b *Balancer) WaitTunnels(ctx context.Context) error { return b.tunnels.Wait(ctx) }
