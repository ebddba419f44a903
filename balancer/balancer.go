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
// circuit breaker, availability) lives in Upstream values that outlive
// reloads while their name stays.
//
// An upstream is available while its health verdict (SetHealthy, fed by
// an active checker) is up and its breaker (see BreakerOptions) is not
// open. Unavailable upstreams are skipped in the clockwise walk, so only
// their keys move; when one returns, exactly its keys come back, all at
// once or, with Options.SlowStart, a growing set of its points at a time.
package balancer

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/ring"
)

// snapshot is everything a request needs, fixed when it is built.
type snapshot struct {
	ring    *ring.Ring
	members []member // indexed like ring.Members()
	opts    Options

	keys       []keyFunc
	keyDesc    string    // "cookie session, header X-User-ID", for 400 answers
	onMissing  OnMissing // never empty
	loadFactor float64
	loadFloor  int64 // >= 1
	fail       bool
	retries    int
	slowStart  int64  // nanoseconds
	header     string // canonical UpstreamHeader, or ""
	failStatus statusSet
	breaker    *BreakerOptions // validated; nil when breakers are off
	transport  *transport      // the one every member's proxy uses

	// availW is the total weight of available members, as float64 bits;
	// recomputed (under Balancer.mu) on every availability flip.
	availW atomic.Uint64
}

// member is one ring member of a snapshot: the shared Upstream plus what
// this configuration says about it.
type member struct {
	u      *Upstream
	weight float64
	points int // round(points_per_weight × weight): slow start's point count
	url    *url.URL
	proxy  *httputil.ReverseProxy
}

// Balancer is the proxy handler. It is safe for concurrent use; create it
// with New.
type Balancer struct {
	snap     atomic.Pointer[snapshot]
	inflight atomic.Int64 // all upstreams, including draining removed ones

	lastReload atomic.Pointer[Reload]

	log    *slog.Logger
	errLog *log.Logger
	m      *metrics
	bufs   bufferPool
	epoch  time.Time
	now    func() time.Time

	tunnels tunnels // upgraded connections (WebSocket), for shutdown

	mu        sync.Mutex // serialises Update, SetHealthy, settle and Close
	ups       map[string]*Upstream
	checksOff bool // an Update turned HealthChecks off: SetHealthy is ignored
	transport *transport
	tcfg      [3]time.Duration
}

// New builds a Balancer and registers its metrics on reg (nil: none). It
// fails on options that cannot work (no upstreams, an unknown key source,
// a bad weight) and if reg already holds ringlb's metrics.
func New(opts Options, reg prometheus.Registerer, logger *slog.Logger) (*Balancer, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &Balancer{
		log:    logger,
		errLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		epoch:  time.Now(),
		now:    time.Now,
		ups:    map[string]*Upstream{},
		m:      newMetrics(),
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.buildLocked(opts, true)
	if err != nil {
		return nil, err
	}
	b.snap.Store(s)
	b.recomputeLocked()
	if reg != nil {
		if err := b.m.register(b, reg); err != nil {
			b.transport.CloseIdleConnections()
			return nil, fmt.Errorf("balancer: registering metrics: %w", err)
		}
	}
	logger.Info("ring ready", "version", s.ring.Version(), "upstreams", len(s.members), "placement", string(s.ring.Placement()))
	return b, nil
}

// Update reloads: it builds a new snapshot from opts and swaps it in.
// Requests already running finish on the snapshot they started with.
// Upstreams keep their state while their name stays; removed ones drain
// and their metric series are deleted. On error nothing changes.
func (b *Balancer) Update(opts Options) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.snap.Load()
	s, err := b.buildLocked(opts, false)
	if err != nil {
		return "", err
	}
	b.snap.Store(s)
	b.recomputeLocked()
	if old.opts.HealthChecks && !opts.HealthChecks {
		b.checksOff = true
		for i := range s.members {
			s.members[i].u.down.Store(false)
		}
	} else if opts.HealthChecks {
		b.checksOff = false
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
			b.m.retire(u.m)
		}
	}
	b.log.Info("ring reloaded", "version", s.ring.Version(), "previous", old.ring.Version(),
		"upstreams", len(s.members), "added", added, "removed", removed)
	return s.ring.Version(), nil
}

// buildLocked validates opts and builds a snapshot, creating Upstreams for
// new names and updating b.ups and the transport. Nothing is changed when
// it fails.
func (b *Balancer) buildLocked(opts Options, initial bool) (*snapshot, error) {
	s := &snapshot{opts: opts, loadFactor: opts.Ring.LoadFactor, loadFloor: max(int64(opts.Ring.LoadFloor), 1),
		retries: opts.Retries, slowStart: int64(opts.Ring.SlowStart)}
	bo, err := opts.Breaker.validate()
	if err != nil {
		return nil, err
	}
	if bo.ConsecutiveFailures > 0 {
		s.breaker = &bo
		s.failStatus = newStatusSet(bo.FailureStatuses)
	}
	switch opts.Ring.OnUnavailable {
	case "", OnUnavailableRemap:
	case OnUnavailableFail:
		s.fail = true
	default:
		return nil, fmt.Errorf("balancer: on_unavailable: unknown value %q", opts.Ring.OnUnavailable)
	}
	switch opts.Hash.OnMissing {
	case "", OnMissingRandom:
		s.onMissing = OnMissingRandom
	case OnMissingReject, OnMissingCookie:
		s.onMissing = opts.Hash.OnMissing
		if opts.Hash.OnMissing == OnMissingCookie && opts.Hash.Cookie.Name == "" {
			return nil, errors.New("balancer: on_missing cookie needs a cookie name")
		}
	default:
		return nil, fmt.Errorf("balancer: on_missing: unknown value %q", opts.Hash.OnMissing)
	}
	if opts.Ring.LoadFactor != 0 && !(opts.Ring.LoadFactor > 1) {
		return nil, fmt.Errorf("balancer: load_factor must be 0 or > 1, got %v", opts.Ring.LoadFactor)
	}
	if opts.Retries < 0 {
		return nil, fmt.Errorf("balancer: retries must be >= 0, got %d", opts.Retries)
	}
	if opts.UpstreamHeader != "" {
		s.header = textproto.CanonicalMIMEHeaderKey(opts.UpstreamHeader)
	}
	descs := make([]string, 0, len(opts.Hash.Key))
	for i, k := range opts.Hash.Key {
		f, err := newKeyFunc(k, opts.TrustedProxies)
		if err != nil {
			return nil, fmt.Errorf("balancer: key[%d]: %w", i, err)
		}
		s.keys = append(s.keys, f)
		descs = append(descs, k.String())
	}
	s.keyDesc = strings.Join(descs, ", ")

	byName := make(map[string]UpstreamOptions, len(opts.Upstreams))
	rm := make([]ring.Member, 0, len(opts.Upstreams))
	for i, uo := range opts.Upstreams {
		if uo.Name == "" {
			return nil, fmt.Errorf("balancer: upstreams[%d]: empty name", i)
		}
		if _, dup := byName[uo.Name]; dup {
			return nil, fmt.Errorf("balancer: upstreams[%d]: duplicate name %q", i, uo.Name)
		}
		if uo.URL == nil || (uo.URL.Scheme != "http" && uo.URL.Scheme != "https") || uo.URL.Host == "" {
			return nil, fmt.Errorf("balancer: upstreams[%d] (%s): url must be absolute http(s), got %v", i, uo.Name, uo.URL)
		}
		byName[uo.Name] = uo
		rm = append(rm, ring.Member{Name: uo.Name, Addr: uo.Addr, Weight: uo.Weight})
	}
	r, err := ring.New(rm, ring.Options{Placement: opts.Ring.Placement, PointsPerWeight: opts.Ring.PointsPerWeight})
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	s.ring = r

	// Validation is over: from here on, state changes.
	tcfg := [3]time.Duration{opts.Timeouts.Dial, opts.Timeouts.ResponseHeader, opts.Timeouts.IdleConn}
	if b.transport == nil || tcfg != b.tcfg {
		if b.transport != nil {
			b.transport.retire()
		}
		b.transport = &transport{Transport: newTransport(opts)}
		b.tcfg = tcfg
	}
	s.transport = b.transport
	ups := make(map[string]*Upstream, len(rm))
	s.members = make([]member, len(r.Members()))
	for i, rmem := range r.Members() {
		uo := byName[rmem.Name]
		u := b.ups[uo.Name]
		if u == nil {
			u = &Upstream{name: uo.Name, m: b.m.forUpstream(uo.Name)}
			if !initial && opts.Ring.SlowStart > 0 {
				u.warmSince.Store(b.clock())
			}
		}
		switch br := u.br.Load(); {
		case s.breaker == nil:
			u.br.Store(nil) // an open one closes: Update settles it
		case br == nil:
			u.br.Store(b.newBreaker(u, s.breaker))
		default:
			br.cfg.Store(s.breaker)
		}
		ups[uo.Name] = u
		s.members[i] = member{
			u:      u,
			weight: uo.Weight,
			points: ring.PointsFor(r.PointsPerWeight(), uo.Weight),
			url:    uo.URL,
			proxy:  b.newProxy(s, u, uo.URL),
		}
	}
	b.ups = ups
	return s, nil
}

// clock returns nanoseconds since the balancer started (monotonic), never 0.
func (b *Balancer) clock() int64 { return int64(b.now().Sub(b.epoch)) + 1 }

// Version returns the current ring's membership version.
func (b *Balancer) Version() string { return b.snap.Load().ring.Version() }

// RecordReload counts a reload attempt in ringlb_config_reloads_total,
// sets ringlb_config_last_reload_success (1 when ok, 0 when rejected: it
// stays 0 until a reload succeeds) and keeps the attempt, with the
// problems of a rejected one, for LastReload. Whoever performs a reload
// calls it once: the admin handler does for POST /reload, the command
// does for SIGHUP.
func (b *Balancer) RecordReload(ok bool, problems ...string) {
	if ok {
		b.m.reloadOK.Inc()
		b.m.reloadLast.Set(1)
	} else {
		b.m.reloadErr.Inc()
		b.m.reloadLast.Set(0)
	}
	b.lastReload.Store(&Reload{At: b.now(), OK: ok, Problems: problems})
}

// Reload is one reload attempt as RecordReload recorded it.
type Reload struct {
	At       time.Time
	OK       bool
	Problems []string // why it was rejected
}

// LastReload returns the last reload attempt, or nil before the first.
func (b *Balancer) LastReload() *Reload { return b.lastReload.Load() }

// Close releases the transport's idle connections. Requests in flight are
// not interrupted; the Balancer stays usable.
func (b *Balancer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.transport.CloseIdleConnections()
}
