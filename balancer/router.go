package balancer

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/inflight"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/route"
)

// Router is the proxy handler of a process with pools: it sends each
// request to the Balancer of the pool the first matching route names, and
// answers 404 when none matches. Each pool is a Balancer of its own (its
// ring, members, checks and hold records); the Router holds an immutable
// table of routes and pools behind an atomic pointer, so a request loads
// it once and the pool's Balancer then loads its own snapshot. Install
// swaps a new table in.
//
// The pools share the Router's process families (reloads, discovery):
// create them with NewPool.
type Router struct {
	table   atomic.Pointer[route.Table[*Balancer]]
	reg     prometheus.Registerer
	proc    *metrics.Process
	noRoute prometheus.Counter
	counts  *inflight.Counts // every pool's: limits.upstream_requests counts a URL across pools

	mu sync.Mutex // serialises Install and Remove
}

// NewRouter returns a Router with no pools that registers the process's
// families on reg (nil: none): ringlb_config_reloads_total,
// ringlb_config_last_reload_success, the discovery families and
// ringlb_no_route_total. Its pools register theirs on reg too.
func NewRouter(reg prometheus.Registerer) (*Router, error) {
	rt := &Router{reg: reg, proc: metrics.NewProcess(), counts: inflight.NewCounts()}
	rt.noRoute = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlb_no_route_total",
		Help: "Requests answered 404 because no route matched their host and path.",
	})
	rt.table.Store(new(route.Table[*Balancer]))
	if reg != nil {
		if err := rt.proc.Register(reg, rt.noRoute, discoveryCollector(rt.Pools)); err != nil {
			return nil, fmt.Errorf("balancer: registering metrics: %w", err)
		}
	}
	return rt, nil
}

// RouterFor returns a Router whose one pool is b, a Balancer made by New:
// it shares b's process families and registers nothing. The admin handler
// of a single Balancer uses it.
func RouterFor(b *Balancer) *Router {
	rt := &Router{proc: b.proc, noRoute: prometheus.NewCounter(prometheus.CounterOpts{Name: "detached"})}
	t, _ := route.Compile(nil, []*Balancer{b}, (*Balancer).Pool) // one pool, no routes: cannot fail
	rt.table.Store(t)
	return rt
}

// NewPool builds the Balancer of one pool (opts.Pool names it) and
// registers its families on the Router's registry. It does not route to
// it until an Install names it. Unless opts.Counts says otherwise, the
// pools count their requests per upstream URL together, so
// Limits.UpstreamRequests bounds an upstream that serves several pools
// across all of them.
func (rt *Router) NewPool(opts Options, logger *slog.Logger) (*Balancer, error) {
	if opts.Pool == "" {
		opts.Pool = DefaultPool
	}
	if opts.Counts == nil {
		opts.Counts = rt.counts
	}
	return newBalancer(opts, rt.reg, logger, rt.proc)
}

// Install makes routes and pools current: requests from now on are routed
// by routes (first match wins) to pools, which must hold every pool a
// route names. With no routes, pools must be one pool, which gets every
// request. Pools left out of pools are not closed: see Remove.
func (rt *Router) Install(routes []route.Route, pools []*Balancer) error {
	t, err := route.Compile(routes, pools, (*Balancer).Pool)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.table.Store(t)
	return nil
}

// Remove closes a pool a reload dropped (after Install stopped routing
// to it) and unregisters its families. Requests already on it finish.
func (rt *Router) Remove(b *Balancer) {
	b.Close()
	if rt.reg != nil {
		for _, c := range b.collectors() {
			rt.reg.Unregister(c)
		}
	}
}

// Pools returns the pools routed to, in config order.
func (rt *Router) Pools() []*Balancer { return rt.table.Load().Pools() }

// Pool returns the pool named name, or nil.
func (rt *Router) Pool(name string) *Balancer {
	for _, b := range rt.table.Load().Pools() {
		if b.Pool() == name {
			return b
		}
	}
	return nil
}

// Routes returns the routes in force, in order.
func (rt *Router) Routes() []route.Route { return rt.table.Load().Routes((*Balancer).Pool) }

// Match returns the pool a request for host (a Host header: any port is
// ignored) and path (percent-decoded, as a request's URL.Path) goes to,
// or nil when no route matches. Routes see path as route.Path makes it;
// when it refuses the path, so does Match, with route.Path's error (the
// proxy answers such a request 400). With one pool and no routes, every
// path goes to that pool, as it is.
func (rt *Router) Match(host, path string) (*Balancer, error) {
	t := rt.table.Load()
	if only, ok := t.Only(); ok {
		return only, nil
	}
	path, err := route.Path(path)
	if err != nil {
		return nil, err
	}
	b, _ := t.Match(host, path)
	return b, nil
}

// ServeHTTP sends the request to its pool's Balancer, or answers 404
// with a one-line reason (counted in ringlb_no_route_total), or 400 for a
// path route.Path refuses. The routes match the path route.Path makes of
// URL.Path; the request goes on as it came, its target untouched.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := rt.table.Load()
	if only, ok := t.Only(); ok {
		only.ServeHTTP(w, r)
		return
	}
	path, err := route.Path(r.URL.Path)
	if err != nil {
		downstream.PlainError(w, http.StatusBadRequest, "bad request path: "+err.Error()+"\n")
		return
	}
	b, ok := t.Match(r.Host, path)
	if !ok {
		rt.noRoute.Inc()
		downstream.PlainError(w, http.StatusNotFound, "no route for this host and path\n")
		return
	}
	b.ServeHTTP(w, r)
}

// Ready reports whether every pool that has members has an available
// one, and some pool has: a pool still waiting for its first discovery
// answer does not hold the others back (with one pool, that is the
// Balancer's Ready).
func (rt *Router) Ready() bool {
	some := false
	for _, b := range rt.table.Load().Pools() {
		if b.MemberCount() == 0 {
			continue
		}
		if !b.Ready() {
			return false
		}
		some = true
	}
	return some
}

// RecordReload counts a reload attempt, as Balancer.RecordReload does.
func (rt *Router) RecordReload(ok bool, problems ...string) {
	rt.proc.Record(ok, systemClock{}.Now(), problems)
}

// LastReload returns the last reload attempt, or nil before the first.
func (rt *Router) LastReload() *metrics.Reload { return rt.proc.LastReload.Load() }

// WaitTunnels waits for every pool's upgraded connections, as
// Balancer.WaitTunnels does, and returns the first error.
func (rt *Router) WaitTunnels(ctx context.Context) error {
	var first error
	for _, b := range rt.Pools() {
		if err := b.WaitTunnels(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close closes every pool (Balancer.Close).
func (rt *Router) Close() {
	for _, b := range rt.Pools() {
		b.Close()
	}
}
