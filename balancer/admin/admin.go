// Package admin serves ringlb's admin listener: a status page, Prometheus
// metrics, liveness and readiness, JSON views of the ring and of a key's
// placement, and POST /reload.
//
// Routes:
//
//	GET  /               HTML status page (see status.go)
//	GET  /metrics        Prometheus exposition from the given gatherer
//	GET  /healthz        200 "ok" while the process runs
//	GET  /readyz         200 when at least one upstream is available and the
//	                     process is not shutting down, else 503
//	GET  /debug/ring     JSON view of the ring (see ringJSON)
//	GET  /debug/lookup   ?key=K: JSON placement of K (see lookupJSON); or
//	                     ?path=P&header=N:V&cookie=N=V&ip=A&host=H: the key
//	                     such a request yields and its placement (see
//	                     lookupRequest)
//	POST /debug/lookup   the same for a request with the POST's body (and
//	                     its Content-Type and Content-Encoding)
//	POST /reload         re-read the config: 200 {"version"} (with several
//	                     pools also {"pools"}) or 400 {"errors"}
//	GET  /upstreams      admin states of every upstream (see upstreams.go)
//	GET  /upstreams/NAME one of them
//	POST /upstreams/NAME/{drain,maint,ready}
//	                     set its admin state: 200 with it
//	GET  /debug/pprof/   net/http/pprof, only with Options.Pprof (404 otherwise)
//
// Every route but /healthz, /readyz and /metrics is 403 unless the
// request's Host names the listener, and POST is 403 from a foreign
// Origin (see Options.Addr).
package admin

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlb/ringlb/balancer"
)

// ReloadFunc performs a reload: it re-reads the config, applies it with
// Balancer.Update and records the attempt with Balancer.RecordReload, and
// returns every pool's ring version as applied, in config order. On
// failure it returns every problem ("file:line: field: message") and an
// error. POST /reload answers with what it returns (see reloadJSON).
type ReloadFunc func() (versions []PoolVersion, problems []string, err error)

// PoolVersion is a pool's ring version.
type PoolVersion struct{ Pool, Version string }

// Options are the admin handler's switches; the zero value serves the
// routes listed in the package doc and nothing more.
type Options struct {
	// Pprof serves net/http/pprof under /debug/pprof/ (config
	// debug_pprof). Off, those paths are 404. Profiles expose memory
	// contents and cost CPU: keep the admin listener private.
	Pprof bool
	// Version, Listen and Started describe the process on the status
	// page: ringlb's version, the proxy's listen address, and when it
	// started (zero: not shown).
	Version string
	Listen  string
	Started time.Time
	// Addr is the admin listener's address as bound ("127.0.0.1:9901",
	// "[::]:9901"), and Name the host of admin_listen as written when it
	// is a name. Every route but /healthz, /readyz and /metrics answers
	// only requests whose Host names the listener: Addr's IP (any IP
	// when it is a wildcard), a loopback name (localhost), or Name, with
	// Addr's port. That keeps a browser tricked by DNS rebinding (a name
	// of the attacker's that resolves to the listener) out. POST also
	// refuses an Origin other than such a Host, so a web page cannot
	// make a browser reload; that Origin must be the listener's own
	// address: Addr's IP exactly (any IP when it is a wildcard), localhost
	// or Name, with Addr's port, never another loopback address or a name
	// under localhost. Empty Addr: any port, any IP.
	Addr string
	Name string
	// Certificate, if set, describes the certificate the proxy listener
	// serves now, for the status page; ok false: no TLS.
	Certificate func() (subject string, notAfter time.Time, ok bool)
	// Stopping, if set, reports that the process is shutting down: then
	// /readyz answers 503 "shutting down", whatever the upstreams, so
	// that load balancers in front stop sending.
	Stopping func() bool
}

// NewHandler returns the admin handler for b, a process's one pool.
// gatherer is what /metrics exposes (normally the registry b registered
// on); reload performs POST /reload (nil: 501).
func NewHandler(b *balancer.Balancer, gatherer prometheus.Gatherer, reload ReloadFunc, opts Options) http.Handler {
	return NewRouterHandler(balancer.RouterFor(b), gatherer, reload, opts)
}

// NewRouterHandler returns the admin handler for the pools of rt. With
// several pools, /debug/ring takes ?pool=NAME and /debug/lookup ?pool=NAME
// or ?host=H&path=P (the pool the routes give such a request); /readyz
// is 200 when every pool with members has an available upstream; and
// /pools/POOL/upstreams/NAME[/STATE] names an upstream in one pool.
func NewRouterHandler(rt *balancer.Router, gatherer prometheus.Gatherer, reload ReloadFunc, opts Options) http.Handler {
	h := &handler{rt: rt, gatherer: gatherer, reload: reload, opts: opts}
	g := newHostGuard(opts.Addr, opts.Name)
	r := chi.NewRouter()
	r.Use(middleware.GetHead) // HEAD /healthz and friends, as probes send them
	r.Use(g.middleware)
	if opts.Pprof {
		// pprof.Index serves the named profiles (goroutine, heap, ...) too.
		r.HandleFunc("/debug/pprof/*", pprof.Index)
		r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		r.HandleFunc("/debug/pprof/profile", pprof.Profile)
		r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	r.Get("/", h.index)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	r.Get("/readyz", h.readyz)
	r.Get("/debug/ring", h.ring)
	r.Get("/debug/lookup", h.lookup)
	r.Post("/debug/lookup", h.lookup) // a request lookup with the request's body
	r.Get("/debug/hotkeys", h.hotkeys)
	r.Post("/reload", h.doReload)
	r.Get("/upstreams", h.listUpstreams)
	r.Get("/upstreams/{name}", h.getUpstream)
	r.Post("/upstreams/{name}/{state}", h.setUpstreamState)
	r.Get("/pools/{pool}/upstreams/{name}", h.getPoolUpstream)
	r.Post("/pools/{pool}/upstreams/{name}/{state}", h.setPoolUpstreamState)
	return r
}

// handler serves the admin routes of one Router.
type handler struct {
	rt       *balancer.Router
	gatherer prometheus.Gatherer
	reload   ReloadFunc
	opts     Options
}

// readyz answers GET /readyz (see the package doc).
func (h *handler) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if h.opts.Stopping != nil && h.opts.Stopping() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("shutting down\n"))
		return
	}
	if h.rt.Ready() {
		w.Write([]byte("ready\n"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	pools := h.rt.Pools()
	if len(pools) > 1 {
		for _, b := range pools {
			if b.MemberCount() > 0 && !b.Ready() {
				w.Write([]byte("no upstream available in pool " + b.Pool() + "\n"))
				return
			}
		}
	}
	w.Write([]byte("no upstream available\n"))
}

// poolFor returns the pool a /debug request names: ?pool=NAME, else (for
// /debug/lookup, byRoute) the pool the routes give ?host= and ?path=,
// else the only pool. On failure it has answered: 404 for an unknown pool
// or a request no route matches, 400 when several pools leave it open or
// for a path the proxy would refuse (a bad encoding, dot segments above
// the root: see route.Path).
func (h *handler) poolFor(w http.ResponseWriter, q url.Values, byRoute bool) (*balancer.Balancer, bool) {
	pools := h.rt.Pools()
	if q.Has("pool") {
		if b := h.rt.Pool(q.Get("pool")); b != nil {
			return b, true
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no pool " + quote(q.Get("pool")) + "; pools: " + poolNames(pools)})
		return nil, false
	}
	if len(pools) == 1 {
		return pools[0], true
	}
	if byRoute && (q.Has("host") || q.Has("path")) {
		path := q.Get("path")
		if path == "" {
			path = "/"
		}
		u, err := url.ParseRequestURI(path)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "path: " + err.Error()})
			return nil, false
		}
		path = u.Path
		b, err := h.rt.Match(q.Get("host"), path)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "path " + quote(path) + ": " + err.Error() + "; the proxy answers such a request 400"})
			return nil, false
		}
		if b != nil {
			return b, true
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no route matches host " + quote(q.Get("host")) + " and path " + quote(path)})
		return nil, false
	}
	msg := "pool=NAME is required with several pools: " + poolNames(pools)
	if byRoute {
		msg += " (or host= and path= to pick one by routes)"
	}
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
	return nil, false
}

// poolNames lists the pools' names, comma-separated, for error messages.
func poolNames(pools []*balancer.Balancer) string {
	names := make([]string, len(pools))
	for i, b := range pools {
		names[i] = b.Pool()
	}
	return strings.Join(names, ", ")
}

// ringJSON is /debug/ring's shape, fixed by SPEC.
type ringJSON struct {
	Version         string         `json:"version"`
	Placement       string         `json:"placement"`
	PointsPerWeight int            `json:"points_per_weight"`
	LoadFactor      float64        `json:"load_factor"`
	Upstreams       []upstreamJSON `json:"upstreams"`
	// Discovery lists the discovery sources; [] without a discovery block.
	Discovery []discoveryJSON `json:"discovery"`
}

// discoveryJSON is one discovery source: its present members, the time
// of its last successful answer (RFC 3339, "" before the first) and the
// last query's error ("" when it succeeded).
type discoveryJSON struct {
	Source      string `json:"source"`
	Members     int    `json:"members"`
	LastSuccess string `json:"last_success"`
	LastError   string `json:"last_error"`
}

// upstreamJSON is one upstream in /debug/ring.
type upstreamJSON struct {
	Name           string  `json:"name"`
	URL            string  `json:"url"`
	Weight         float64 `json:"weight"`
	Points         int     `json:"points"`
	Share          float64 `json:"share"`
	Available      bool    `json:"available"`
	Health         string  `json:"health"`
	Breaker        string  `json:"breaker"`
	Inflight       int64   `json:"inflight"`
	ActiveFraction float64 `json:"active_fraction"`
	Source         string  `json:"source"` // "static", or the discovery source
	Absent         bool    `json:"absent"` // missing from its discovery source's answer
	State          string  `json:"state"`  // admin state: ready, drain or maint
}

// ring answers GET /debug/ring.
func (h *handler) ring(w http.ResponseWriter, r *http.Request) {
	b, ok := h.poolFor(w, r.URL.Query(), false)
	if !ok {
		return
	}
	st := b.Status()
	out := ringJSON{
		Version:         st.Version,
		Placement:       st.Placement,
		PointsPerWeight: st.PointsPerWeight,
		LoadFactor:      st.LoadFactor,
		Upstreams:       make([]upstreamJSON, 0, len(st.Upstreams)),
		Discovery:       make([]discoveryJSON, 0, len(st.Discovery)),
	}
	for _, d := range st.Discovery {
		dj := discoveryJSON{Source: d.Source, Members: d.Members, LastError: d.LastError}
		if !d.LastSuccess.IsZero() {
			dj.LastSuccess = d.LastSuccess.UTC().Format(time.RFC3339)
		}
		out.Discovery = append(out.Discovery, dj)
	}
	for _, u := range st.Upstreams {
		out.Upstreams = append(out.Upstreams, upstreamJSON{
			Name: u.Name, URL: u.URL, Weight: u.Weight, Points: u.Points, Share: u.Share,
			Available: u.Available, Health: u.Health, Breaker: u.Breaker, Inflight: u.Inflight,
			ActiveFraction: u.ActiveFraction, Source: u.Source, Absent: u.Absent, State: u.AdminState,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// doReload answers POST /reload.
func (h *handler) doReload(w http.ResponseWriter, _ *http.Request) {
	if h.reload == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "reload is not configured"})
		return
	}
	versions, problems, err := h.reload()
	if err != nil {
		if len(problems) == 0 {
			problems = []string{err.Error()}
		}
		writeJSON(w, http.StatusBadRequest, map[string][]string{"errors": problems})
		return
	}
	writeJSON(w, http.StatusOK, toReloadJSON(versions))
}

// reloadJSON is POST /reload's answer. With one pool, Version is its
// ring version and Pools is left out. With several, Version lists
// "POOL=VERSION" for each, space-separated in config order, and Pools
// has the same as an object, so that a script need not parse the string.
type reloadJSON struct {
	Version string            `json:"version"`
	Pools   map[string]string `json:"pools,omitempty"`
}

// toReloadJSON renders the applied versions as POST /reload answers them.
func toReloadJSON(versions []PoolVersion) reloadJSON {
	if len(versions) == 1 {
		return reloadJSON{Version: versions[0].Version}
	}
	out := reloadJSON{Pools: make(map[string]string, len(versions))}
	vs := make([]string, len(versions))
	for i, v := range versions {
		vs[i] = v.Pool + "=" + v.Version
		out.Pools[v.Pool] = v.Version
	}
	out.Version = strings.Join(vs, " ")
	return out
}

// writeJSON answers code with v as indented JSON, never cached.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // problems like "must be > 0" read as written
	enc.Encode(v)
}

// formatPct renders a fraction as a percentage with one decimal.
func formatPct(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" }
