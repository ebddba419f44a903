package balancer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Route sends the requests it matches to a pool. It is an entry of the
// config file's routes, which decodes into it (see RingOptions). The path
// it is matched with is the request's as RoutePath reads it (decoded, "//"
// merged, dot segments removed).
type Route struct {
	// Host is host: "" (any host; the default), an exact host name or IP
	// address, or "*.SUFFIX" (any name ending in ".SUFFIX"), without port,
	// compared case-insensitively with the request's host without its
	// port (the config lower-cases it).
	Host string `yaml:"host" decode:"lower"`
	// PathPrefix is path_prefix: "" (any path; the default) or a path
	// starting with "/", without query or fragment, matched on whole
	// segments: /api matches /api, /api/ and /api/x but not /apix; /api/
	// matches /api/ and /api/x but not /api.
	PathPrefix string `yaml:"path_prefix"`
	// Pool is pool, the name of the pool the route sends requests to;
	// required, a pool the config defines.
	Pool string `yaml:"pool"`
}

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
	table   atomic.Pointer[routeTable]
	reg     prometheus.Registerer
	proc    *procMetrics
	noRoute prometheus.Counter
	counts  *UpstreamCounts // every pool's: limits.upstream_requests counts a URL across pools

	mu sync.Mutex // serialises Install and Remove
}

// routeTable is what a request reads: the compiled routes and the pools
// by name. With one pool and no routes, every request goes to only.
//
// Routes are indexed by host: byHost maps an exact host, or a wildcard's
// ".suffix", to the indexes of its routes in order; anyHost lists the
// routes without a host. A request looks up its host and each suffix of
// it that starts at a dot, and takes the lowest index whose path matches:
// the first matching route, without walking the others.
type routeTable struct {
	routes  []compiledRoute
	byHost  map[string][]int32
	anyHost []int32
	pools   []*Balancer // in config order
	only    *Balancer
}

// compiledRoute is a Route in the form matching reads: lowercase host
// (without "*." for a wildcard), and the pool's Balancer.
type compiledRoute struct {
	host     string // "" any; exact name; or ".suffix" when wild
	wild     bool
	prefix   string
	dirMatch bool // prefix ends in '/': it matches what starts with it
	b        *Balancer
}

// NewRouter returns a Router with no pools that registers the process's
// families on reg (nil: none): ringlb_config_reloads_total,
// ringlb_config_last_reload_success, the discovery families and
// ringlb_no_route_total. Its pools register theirs on reg too.
func NewRouter(reg prometheus.Registerer) (*Router, error) {
	rt := &Router{reg: reg, proc: newProcMetrics(), counts: NewUpstreamCounts()}
	rt.noRoute = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlb_no_route_total",
		Help: "Requests answered 404 because no route matched their host and path.",
	})
	rt.table.Store(&routeTable{})
	if reg != nil {
		if err := rt.proc.register(reg, rt.noRoute, discoveryCollector{pools: rt.Pools}); err != nil {
			return nil, fmt.Errorf("balancer: registering metrics: %w", err)
		}
	}
	return rt, nil
}

// RouterFor returns a Router whose one pool is b, a Balancer made by New:
// it shares b's process families and registers nothing. The admin handler
// of a single Balancer uses it.
func RouterFor(b *Balancer) *Router {
	rt := &Router{proc: b.metrics.proc, noRoute: prometheus.NewCounter(prometheus.CounterOpts{Name: "detached"})}
	rt.table.Store(&routeTable{pools: []*Balancer{b}, only: b})
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
func (rt *Router) Install(routes []Route, pools []*Balancer) error {
	t := &routeTable{pools: pools, byHost: map[string][]int32{}}
	byName := make(map[string]*Balancer, len(pools))
	for _, b := range pools {
		if byName[b.Pool()] != nil {
			return fmt.Errorf("balancer: two pools named %q", b.Pool())
		}
		byName[b.Pool()] = b
	}
	if len(routes) == 0 {
		if len(pools) != 1 {
			return fmt.Errorf("balancer: %d pools and no routes", len(pools))
		}
		t.only = pools[0]
	}
	for _, r := range routes {
		b := byName[r.Pool]
		if b == nil {
			return fmt.Errorf("balancer: route to unknown pool %q", r.Pool)
		}
		c := compiledRoute{host: strings.ToLower(r.Host), prefix: r.PathPrefix, b: b}
		if s, ok := strings.CutPrefix(c.host, "*."); ok {
			c.host, c.wild = "."+s, true
		}
		c.dirMatch = strings.HasSuffix(c.prefix, "/")
		i := int32(len(t.routes))
		if c.host == "" {
			t.anyHost = append(t.anyHost, i)
		} else {
			t.byHost[c.host] = append(t.byHost[c.host], i)
		}
		t.routes = append(t.routes, c)
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
		for _, c := range b.metrics.collectors(b) {
			rt.reg.Unregister(c)
		}
	}
}

// Pools returns the pools routed to, in config order.
func (rt *Router) Pools() []*Balancer { return rt.table.Load().pools }

// Pool returns the pool named name, or nil.
func (rt *Router) Pool(name string) *Balancer {
	for _, b := range rt.table.Load().pools {
		if b.Pool() == name {
			return b
		}
	}
	return nil
}

// Routes returns the routes in force, in order.
func (rt *Router) Routes() []Route {
	t := rt.table.Load()
	out := make([]Route, len(t.routes))
	for i, c := range t.routes {
		h := c.host
		if c.wild {
			h = "*" + h
		}
		out[i] = Route{Host: h, PathPrefix: c.prefix, Pool: c.b.Pool()}
	}
	return out
}

// Match returns the pool a request for host (a Host header: any port is
// ignored) and path (percent-decoded, as a request's URL.Path) goes to,
// or nil when no route matches. Routes see path as RoutePath makes it;
// when it refuses the path, so does Match, with RoutePath's error (the
// proxy answers such a request 400). With one pool and no routes, every
// path goes to that pool, as it is.
func (rt *Router) Match(host, path string) (*Balancer, error) {
	t := rt.table.Load()
	if t.only != nil {
		return t.only, nil
	}
	path, err := RoutePath(path)
	if err != nil {
		return nil, err
	}
	return t.match(host, path), nil
}

// The errors RoutePath refuses a path with.
var (
	ErrPathAboveRoot = errors.New(`its ".." segments climb above the root`)
	ErrPathNUL       = errors.New("it holds a NUL (%00)")
)

// RoutePath returns a request's path (percent-decoded, as URL.Path is) as
// routes match it, which is how nginx matches its locations: runs of
// slashes merged into one (nginx's merge_slashes, on by default), then
// the dot segments "." and ".." removed (RFC 3986 section 5.2.4). A "/"
// net/http decoded from %2F counts as a slash like any other, as in
// nginx, so "/static/..%2fsecret" is "/secret", "//static/a" and
// "/x/..//static/a" are "/static/a", and "/static/." is "/static/". It
// fails with ErrPathAboveRoot when a ".." climbs above the root
// ("/static/../../a") and with ErrPathNUL for a NUL in the path: nginx
// answers both 400. A path that does not start with "/" ("*", "") is
// returned as it is.
//
// A path with no "//", no "." or ".." segment and no NUL, as nearly
// every request's, is returned as it is, without a copy.
func RoutePath(path string) (string, error) {
	if !needsClean(path) {
		return path, nil
	}
	if strings.IndexByte(path, 0) >= 0 {
		return "", ErrPathNUL
	}
	var buf [256]byte
	out := buf[:0]
	for i := 0; i < len(path); {
		for i < len(path) && path[i] == '/' { // a run of slashes is one
			i++
		}
		j := i
		for j < len(path) && path[j] != '/' {
			j++
		}
		switch seg := path[i:j]; seg {
		case "", ".": // "" only at the end, after a slash
		case "..":
			k := bytes.LastIndexByte(out, '/')
			if k < 0 {
				return "", ErrPathAboveRoot
			}
			out = out[:k]
		default:
			out = append(append(out, '/'), seg...)
			i = j
			continue
		}
		if j == len(path) {
			out = append(out, '/') // "/a/", "/a/." and "/b/a/.." end in a directory
		}
		i = j
	}
	return string(out), nil
}

// needsClean reports whether RoutePath would change or refuse path: it
// starts with '/' and holds a NUL, "//", or a "." or ".." segment. Each
// check is one of the strings package's searches, the fastest way
// through a path that has none.
func needsClean(path string) bool {
	if len(path) == 0 || path[0] != '/' {
		return false
	}
	if strings.IndexByte(path, 0) >= 0 || strings.Contains(path, "//") {
		return true
	}
	for i := 0; ; {
		j := strings.Index(path[i:], "/.")
		if j < 0 {
			return false
		}
		i += j + 2
		rest := path[i:] // after "/.": a "." segment, a ".." one, or a name
		if rest == "" || rest[0] == '/' || rest[0] == '.' && (len(rest) == 1 || rest[1] == '/') {
			return true
		}
	}
}

func (t *routeTable) match(host, path string) *Balancer {
	if t.only != nil {
		return t.only
	}
	var buf [256]byte
	h := lowerASCII(buf[:0], routeHost(host))
	best := int32(-1)
	if len(h) > 0 {
		best = t.first(t.byHost[string(h)], path, best)
		for i := 1; i < len(h); i++ {
			if h[i] == '.' {
				best = t.first(t.byHost[string(h[i:])], path, best)
			}
		}
	}
	best = t.first(t.anyHost, path, best)
	if best < 0 {
		return nil
	}
	return t.routes[best].b
}

// first returns the first route of list (indexes in order) below best
// (-1: any) whose path prefix matches path, else best.
func (t *routeTable) first(list []int32, path string, best int32) int32 {
	for _, i := range list {
		if best >= 0 && i >= best {
			break
		}
		if t.routes[i].pathMatch(path) {
			return i
		}
	}
	return best
}

// pathMatch reports whether path is under the route's prefix, on whole
// segments.
func (c *compiledRoute) pathMatch(path string) bool {
	if c.prefix == "" {
		return true
	}
	if !strings.HasPrefix(path, c.prefix) {
		return false
	}
	return c.dirMatch || len(path) == len(c.prefix) || path[len(c.prefix)] == '/'
}

// lowerASCII appends s lower-cased (ASCII letters only) to dst.
func lowerASCII(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// routeHost strips the port (and a final dot) from a Host header:
// "App.example:8080" → "App.example", "[::1]:80" → "::1".
func routeHost(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			return h[1:i]
		}
		return h
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h[:i], ':') < 0 {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}

// ServeHTTP sends the request to its pool's Balancer, or answers 404
// with a one-line reason (counted in ringlb_no_route_total), or 400 for a
// path RoutePath refuses. The routes match the path RoutePath makes of
// URL.Path; the request goes on as it came, its target untouched.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := rt.table.Load()
	if t.only != nil {
		t.only.ServeHTTP(w, r)
		return
	}
	path, err := RoutePath(r.URL.Path)
	if err != nil {
		plainError(w, http.StatusBadRequest, "bad request path: "+err.Error()+"\n")
		return
	}
	b := t.match(r.Host, path)
	if b == nil {
		rt.noRoute.Inc()
		plainError(w, http.StatusNotFound, "no route for this host and path\n")
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
	for _, b := range rt.table.Load().pools {
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
	rt.proc.record(ok, systemClock{}.Now(), problems)
}

// LastReload returns the last reload attempt, or nil before the first.
func (rt *Router) LastReload() *Reload { return rt.proc.lastReload.Load() }

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
