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
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/ring"
)

// KeySource is one entry of hash.key: Kind is cookie, header, query, uri,
// path or ip; Name is the cookie, header or query parameter name (empty
// for the others).
type KeySource struct {
	Kind string
	Name string
}

// UpstreamOptions describes one upstream.
type UpstreamOptions struct {
	// Name is the upstream's identity on the ring under placement ringlb,
	// and its label everywhere (metrics, logs, the upstream header).
	Name string
	// URL is where requests go: an absolute http or https URL. A path in it
	// is prefixed to the request path.
	URL *url.URL
	// Addr is the URL's host[:port] exactly as written; the identity under
	// placement nginx.
	Addr string
	// Weight is > 0.
	Weight float64
}

// Options configures a Balancer. The command fills it from a validated
// config; New and Update still reject values that cannot work.
type Options struct {
	Upstreams []UpstreamOptions

	// Placement is "ringlb" (the default when empty) or "nginx".
	Placement string
	// PointsPerWeight is the number of ring points per unit of weight;
	// required under placement ringlb, 0 or 160 under nginx.
	PointsPerWeight int
	// LoadFactor is the bounded-load factor c (> 1); 0 turns bounded loads off.
	LoadFactor float64
	// LoadFloor is the least bounded-load cap: no upstream counts as full
	// below this many in-flight requests (ring.Limit). Values below 1 count
	// as 1, the proportional cap alone.
	LoadFloor int
	// SlowStart, when > 0, is how long an upstream added by a reload (or
	// readmitted after an ejection) takes to get all its points back.
	SlowStart time.Duration
	// OnUnavailable is "remap" (the default when empty: skip clockwise to
	// the next available upstream) or "fail" (503 when the key's owner is
	// unavailable; no retry elsewhere).
	OnUnavailable string

	// Key lists the key sources in order; the first present gives the key.
	Key []KeySource
	// OnMissing is what happens when no source is present: "random" (the
	// default when empty), "reject" (400) or "cookie" (generate an
	// affinity id and set it as the cookie CookieName).
	OnMissing string
	// CookieName, CookieTTL, CookieSecure and CookieHTTPOnly describe the
	// affinity cookie used by OnMissing "cookie". A TTL of 0 makes it a
	// session cookie.
	CookieName     string
	CookieTTL      time.Duration
	CookieSecure   bool
	CookieHTTPOnly bool

	// TrustedProxies are the peers whose X-Forwarded-For the ip key
	// source believes.
	TrustedProxies []netip.Prefix
	// UpstreamHeader, when not empty, is a response header that carries
	// the name of the upstream that served (or failed) the request.
	UpstreamHeader string
	// Retries is how many other upstreams a failed request may be tried on.
	Retries int

	// DialTimeout, ResponseHeaderTimeout and IdleConnTimeout tune the
	// shared transport; 0 means no limit.
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	IdleConnTimeout       time.Duration
	// ReadTimeout is the longest one read of an upstream's response body
	// may wait for data (timeouts.read); 0 means no limit. A body silent
	// for longer is cut: the client sees it truncated and the upstream's
	// breaker counts a failure. Upgraded connections are not limited.
	ReadTimeout time.Duration

	// AccessLog logs one line per request at level Info.
	AccessLog bool

	// Breaker configures the per-upstream circuit breakers; its zero
	// value turns them off.
	Breaker BreakerOptions
	// HealthChecks says that an active checker reports into SetHealthy.
	// A breaker's half-open trial then waits for the check to say up (it
	// reads the verdict SetHealthy records). An Update that turns it off
	// resets every verdict to up and ignores later reports, which a
	// checker being shut down may still send, until an Update turns it
	// back on. A Balancer created without it still takes SetHealthy calls.
	HealthChecks bool
}

const (
	missingRandom = iota
	missingReject
	missingCookie
)

// snapshot is everything a request needs, fixed when it is built.
type snapshot struct {
	ring    *ring.Ring
	members []member // indexed like ring.Members()
	opts    Options

	keys       []keyFunc
	keyDesc    string // "cookie session, header X-User-ID", for 400 answers
	onMissing  int
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
	s := &snapshot{opts: opts, loadFactor: opts.LoadFactor, loadFloor: max(int64(opts.LoadFloor), 1),
		retries: opts.Retries, slowStart: int64(opts.SlowStart)}
	bo, err := opts.Breaker.validate()
	if err != nil {
		return nil, err
	}
	if bo.ConsecutiveFailures > 0 {
		s.breaker = &bo
		s.failStatus = newStatusSet(bo.FailureStatuses)
	}
	switch opts.OnUnavailable {
	case "", "remap":
	case "fail":
		s.fail = true
	default:
		return nil, fmt.Errorf("balancer: on_unavailable: unknown value %q", opts.OnUnavailable)
	}
	switch opts.OnMissing {
	case "", "random":
	case "reject":
		s.onMissing = missingReject
	case "cookie":
		s.onMissing = missingCookie
		if opts.CookieName == "" {
			return nil, errors.New("balancer: on_missing cookie needs a cookie name")
		}
	default:
		return nil, fmt.Errorf("balancer: on_missing: unknown value %q", opts.OnMissing)
	}
	if opts.LoadFactor != 0 && !(opts.LoadFactor > 1) {
		return nil, fmt.Errorf("balancer: load_factor must be 0 or > 1, got %v", opts.LoadFactor)
	}
	if opts.Retries < 0 {
		return nil, fmt.Errorf("balancer: retries must be >= 0, got %d", opts.Retries)
	}
	if opts.UpstreamHeader != "" {
		s.header = textproto.CanonicalMIMEHeaderKey(opts.UpstreamHeader)
	}
	descs := make([]string, 0, len(opts.Key))
	for i, k := range opts.Key {
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
	r, err := ring.New(rm, ring.Options{Placement: ring.Placement(opts.Placement), PointsPerWeight: opts.PointsPerWeight})
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	s.ring = r

	// Validation is over: from here on, state changes.
	tcfg := [3]time.Duration{opts.DialTimeout, opts.ResponseHeaderTimeout, opts.IdleConnTimeout}
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
			if !initial && opts.SlowStart > 0 {
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
			points: int(math.Round(float64(r.PointsPerWeight()) * uo.Weight)),
			url:    uo.URL,
			proxy:  b.newProxy(s, u, uo.URL),
		}
	}
	b.ups = ups
	return s, nil
}

// recomputeLocked refreshes the current snapshot's available weight.
// Callers hold b.mu and call it after every availability change, so the
// last recomputation sees every change.
func (b *Balancer) recomputeLocked() {
	s := b.snap.Load()
	w := 0.0
	for i := range s.members {
		if s.members[i].u.Available() {
			w += s.members[i].weight
		}
	}
	s.availW.Store(math.Float64bits(w))
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

// SetHealthy records an active health check's verdict for the upstream
// called name; reason says why (it goes to the log). It has the signature
// of healthcheck.Reporter, so a Balancer can be handed to the checker
// directly. A verdict that changes the upstream's availability logs one
// line; an ejection counts in ringlb_ejections_total{reason="health"};
// an upstream that becomes available again slow-starts when
// Options.SlowStart > 0. An upstream whose breaker is open stays
// unavailable whatever the check says until its open period is over;
// after it, a verdict of up makes it available at once (half-open: the
// next request for its keys is the trial). Names not in the current ring
// (say, just removed by a reload) are ignored, and so is every report
// after an Update turned Options.HealthChecks off.
func (b *Balancer) SetHealthy(name string, up bool, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.ups[name]
	if u == nil || b.checksOff {
		return
	}
	if !u.down.CompareAndSwap(up, !up) {
		return
	}
	b.settleLocked(u, "health", reason)
}

// Close releases the transport's idle connections. Requests in flight are
// not interrupted; the Balancer stays usable.
func (b *Balancer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.transport.CloseIdleConnections()
}

// dialError marks an error from dialling an upstream: nothing was sent,
// so the request may go elsewhere whatever its method.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// transport is the upstream transport of one or more snapshots, with a
// count of the attempts using it. One that a reload replaced (retired)
// closes its idle connections at once and again when its last attempt
// ends: connections that requests in flight give back afterwards would
// otherwise sit idle, to upstreams perhaps removed, until idle_conn.
// (CloseIdleConnections also makes connections that become idle close,
// but only until the transport's next dial.)
type transport struct {
	*http.Transport
	active  atomic.Int64
	retired atomic.Bool
}

func (t *transport) begin() { t.active.Add(1) }

func (t *transport) end() {
	if t.active.Add(-1) == 0 && t.retired.Load() {
		t.CloseIdleConnections()
	}
}

func (t *transport) retire() {
	t.retired.Store(true)
	t.CloseIdleConnections()
}

func newTransport(opts Options) *http.Transport {
	d := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
	tlsTimeout := opts.DialTimeout
	if tlsTimeout == 0 {
		tlsTimeout = 10 * time.Second
	}
	return &http.Transport{
		Proxy: nil, // never send upstream traffic through $HTTP_PROXY
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
		MaxIdleConns:          16384,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       opts.IdleConnTimeout,
		ResponseHeaderTimeout: opts.ResponseHeaderTimeout,
		TLSHandshakeTimeout:   tlsTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}

// bufferPool lends ReverseProxy 32 KiB copy buffers. It pools array
// pointers, so neither Get nor Put allocates.
type bufferPool struct{ p sync.Pool }

const copyBufferSize = 32 << 10

func (bp *bufferPool) Get() []byte {
	if a, ok := bp.p.Get().(*[copyBufferSize]byte); ok {
		return a[:]
	}
	return new([copyBufferSize]byte)[:]
}

func (bp *bufferPool) Put(b []byte) {
	if cap(b) >= copyBufferSize {
		bp.p.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}

func (b *Balancer) newProxy(s *snapshot, u *Upstream, target *url.URL) *httputil.ReverseProxy {
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Forward the query exactly as received: ReverseProxy has
			// re-encoded one holding ";", a bad escape or too many
			// parameters (dropping pairs, sorting the rest), which breaks
			// signed URLs and the query the application reads.
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			pr.SetURL(target)
			setForwarded(pr.Out.Header, pr.In)
			pr.Out.Host = pr.In.Host
		},
		Transport:    b.transport.Transport,
		BufferPool:   &b.bufs,
		ErrorLog:     b.errLog,
		ErrorHandler: recordError,
	}
	key, val := s.header, []string{u.name}
	readTimeout := s.opts.ReadTimeout
	p.ModifyResponse = func(res *http.Response) error {
		if res.StatusCode == http.StatusSwitchingProtocols {
			if err := checkUpgrade(res); err != nil {
				return err // ReverseProxy closes the upstream connection
			}
		} else if readTimeout > 0 && res.Body != nil && res.Body != http.NoBody {
			res.Body = &silenceBody{rc: res.Body, d: readTimeout}
		}
		if key != "" {
			res.Header[key] = val[:1:1] // cap 1: an append elsewhere copies
		}
		return nil
	}
	return p
}

// upgradeError is a 101 response ReverseProxy would refuse: its Upgrade
// header names another protocol than the request's. byClient says the
// client caused it: it asked for a list of protocols ("websocket, foo",
// which ReverseProxy compares as one string) and the upstream chose one
// of them, as RFC 9110 lets it. Then neither the breaker nor a retry
// sees it; otherwise the upstream misbehaved and it is a failure.
type upgradeError struct {
	asked, got string
	byClient   bool
}

func (e *upgradeError) Error() string {
	return fmt.Sprintf("upstream switched to protocol %q when %q was requested", e.got, e.asked)
}

// checkUpgrade applies ReverseProxy's rule for a 101 (the response's
// Upgrade must equal the request's, ignoring case, and be printable) so
// that a refused switch is judged here, and its connection closed at once
// (ReverseProxy closes the body of a response ModifyResponse rejects, but
// not of one it refuses itself).
func checkUpgrade(res *http.Response) error {
	if res.Request == nil {
		return nil
	}
	asked, got := upgradeType(res.Request.Header), upgradeType(res.Header)
	if strings.EqualFold(asked, got) && printable(got) {
		return nil
	}
	e := &upgradeError{asked: asked, got: got}
	if got != "" && printable(got) {
		for _, tok := range strings.Split(asked, ",") {
			if strings.EqualFold(textproto.TrimString(tok), got) {
				e.byClient = true
			}
		}
	}
	return e
}

// upgradeType is the protocol a message's Upgrade header asks for, when
// its Connection header lists "upgrade"; as ReverseProxy reads it.
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// byClient reports whether err is the client's doing (see upgradeError):
// it neither feeds the breaker nor is retried.
func byClient(err error) bool {
	var ue *upgradeError
	return errors.As(err, &ue) && ue.byClient
}

// setForwarded sets the outbound X-Forwarded-For, -Host and -Proto
// exactly as httputil.ProxyRequest.SetXForwarded does, except that the
// client's X-Forwarded-For is kept (Rewrite mode drops it from the
// outbound request) with the client's address appended, as one
// comma-separated value. When the client sent no User-Agent it also sets
// an empty one, which ReverseProxy would otherwise set after Rewrite so
// that the transport sends none: the upstream sees the same header either
// way. The values share one backing array, one allocation per request
// where SetXForwarded and ReverseProxy make four; each is a capped
// one-element slice, so an append elsewhere copies.
func setForwarded(h http.Header, in *http.Request) {
	v := new([4]string)
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := in.Header["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		v[0] = ip
		h["X-Forwarded-For"] = v[0:1:1]
	} else {
		delete(h, "X-Forwarded-For")
	}
	v[1] = in.Host
	h["X-Forwarded-Host"] = v[1:2:2]
	v[2] = "http"
	if in.TLS != nil {
		v[2] = "https"
	}
	h["X-Forwarded-Proto"] = v[2:3:3]
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = v[3:4:4] // ""
	}
}

// recordError is every ReverseProxy's ErrorHandler: it writes nothing and
// leaves the error for ServeHTTP, which retries or answers.
func recordError(w http.ResponseWriter, r *http.Request, err error) {
	if rw, ok := w.(*responseWriter); ok {
		rw.err = err
		return
	}
	w.WriteHeader(http.StatusBadGateway)
}

// ServeHTTP proxies one request. It loads the current snapshot once,
// hashes the request's key (400 when on_missing is reject and there is
// none), picks an upstream (503 "no upstream available" when nothing is),
// and forwards. An attempt that fails before any response byte reached
// the client is retried on the next distinct available upstream clockwise,
// up to Options.Retries times: always when the connection was refused or
// the dial timed out, otherwise only for bodiless GET, HEAD and OPTIONS.
// When no retry is left the client gets 504 for a timeout and 502
// otherwise. Upstream responses, 5xx included, pass through as they are;
// a response that breaks mid-body aborts the client connection
// (http.ErrAbortHandler) so the client sees it truncated.
func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s := b.snap.Load()
	rw := &responseWriter{ResponseWriter: w, no1xx: !r.ProtoAtLeast(1, 1), tunnels: &b.tunnels}
	h, ok := b.position(s, rw, r)
	if !ok {
		b.accessLog(s, r, nil, http.StatusBadRequest, start, nil)
		return
	}
	var body *trackedBody
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		body = &trackedBody{rc: r.Body}
		r.Body = body
	}
	// tried holds the members this request may not use: those that
	// failed it and those whose breaker refused it.
	var triedBuf [4]int
	tried := triedBuf[:0]
	var last *member
	defer func() {
		if rw.tunnel != nil { // the upgraded connection's copy is over
			b.tunnels.remove(rw.tunnel)
		}
		b.account(s, rw, r, last, start)
	}()
	c, _ := b.pick(s, h, tried, nil)
	for attempts := 0; ; {
		if c.Member < 0 {
			if last == nil {
				b.noUpstream(s, rw, r, c.Owner)
				return
			}
			break // nowhere else to go
		}
		m := &s.members[c.Member]
		done, trial, ok := b.allow(m.u)
		if !ok {
			// The breaker refused after the walk admitted it (a race with a
			// trip, or the half-open trial was taken): walk on.
			tried = append(tried, c.Member)
			c, _ = b.pick(s, h, tried, nil)
			continue
		}
		if c.Overflow >= 0 {
			s.members[c.Overflow].u.m.overflow.Inc()
		}
		if last != nil {
			last.u.m.retries.Inc()
		}
		last = m
		nh := len(rw.Header())
		rw.err = nil
		b.attempt(s, m, rw, r, body, done, trial)
		attempts++
		if rw.err == nil || rw.wroteHeader || clientFault(r, body) || byClient(rw.err) {
			break
		}
		if s.fail || attempts > s.retries || len(rw.Header()) != nh || !retryable(rw.err, r, body) {
			break
		}
		tried = append(tried, c.Member)
		c, _ = b.pick(s, h, tried, nil)
	}
	if rw.err != nil && !rw.wroteHeader {
		b.writeError(s, rw, r, body, last)
	}
}

// attempt forwards the request to one upstream, holding its in-flight
// slot until the response is finished, also when the copy panics with
// http.ErrAbortHandler (which is left to reach net/http). The outcome goes
// to the upstream's breaker through done (from allow; nil without one).
// A half-open trial (trial true) is settled by the response head (or the
// 101), so that a long body (a stream, a download, a tunnel) does not
// keep the upstream's other keys away; the body's outcome then counts as
// an ordinary attempt of the closed breaker.
func (b *Balancer) attempt(s *snapshot, m *member, rw *responseWriter, r *http.Request, body *trackedBody, done func(error), trial bool) {
	u := m.u
	u.inflight.Add(1)
	b.inflight.Add(1)
	s.transport.begin()
	rw.trialSettled = false
	if trial {
		rw.onHead = func(code int) {
			rw.trialSettled = true
			b.report(s, u, done, outcome{status: code})
		}
	}
	finished := false
	defer func() {
		u.inflight.Add(-1)
		b.inflight.Add(-1)
		s.transport.end()
		if !finished {
			// The response broke off mid-body. The upstream is charged
			// only when ringlb was not held up by the client (see
			// responseWriter.clientBound).
			b.report(s, u, b.outcomeDone(u, rw, done, trial), outcome{status: rw.status, err: http.ErrAbortHandler, gone: clientFault(r, body) || rw.clientBound()})
			// What was received goes out before the connection is
			// aborted, so the client sees a truncated response (never a
			// complete-looking one: the length or last chunk is missing).
			_ = http.NewResponseController(rw.ResponseWriter).Flush()
		}
	}()
	m.proxy.ServeHTTP(rw, r)
	finished = true
	if rw.err != nil {
		b.report(s, u, b.outcomeDone(u, rw, done, trial), outcome{err: rw.err, gone: clientFault(r, body) || byClient(rw.err)})
	} else {
		b.report(s, u, b.outcomeDone(u, rw, done, trial), outcome{status: rw.status})
	}
}

// outcomeDone returns where an attempt's final outcome goes: done, unless
// the attempt is a trial whose head settled it; then the outcome counts
// as an ordinary attempt of the breaker (see ordinaryAttempt).
func (b *Balancer) outcomeDone(u *Upstream, rw *responseWriter, done func(error), trial bool) func(error) {
	if !trial {
		return done
	}
	rw.onHead = nil
	if rw.trialSettled {
		return b.ordinaryAttempt(u)
	}
	return done
}

// retryable says whether a failed attempt may be repeated elsewhere: any
// request whose connection was never made (and whose body is untouched),
// or a bodiless GET, HEAD or OPTIONS.
func retryable(err error, r *http.Request, body *trackedBody) bool {
	var de *dialError
	if errors.As(err, &de) {
		return body == nil || body.n.Load() == 0
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return body == nil
	}
	return false
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// writeError answers a request whose last attempt failed before any byte
// of a response was written: 400 when the client's request body could not
// be read, 504 for a timeout, 502 otherwise (always 502 under
// on_unavailable fail). A departed client's connection is aborted, so it
// can never read an empty response as a success; it is counted as 499.
func (b *Balancer) writeError(s *snapshot, rw *responseWriter, r *http.Request, body *trackedBody, m *member) {
	if body != nil && body.bad.Load() {
		rw.Header().Set("Connection", "close")
		plainError(rw, http.StatusBadRequest, "bad request: the request body could not be read\n")
		return
	}
	if r.Context().Err() != nil {
		rw.status = 499
		panic(http.ErrAbortHandler)
	}
	code, msg := http.StatusBadGateway, "bad gateway: upstream "+m.u.name+" failed\n"
	if byClient(rw.err) {
		msg = "bad gateway: upgrade to one protocol at a time, not a list\n"
	} else if !s.fail && isTimeout(rw.err) {
		code, msg = http.StatusGatewayTimeout, "gateway timeout: upstream "+m.u.name+" timed out\n"
	}
	b.log.Debug("upstream failed", "upstream", m.u.name, "method", r.Method, "uri", r.RequestURI, "error", rw.err)
	if s.header != "" {
		rw.Header().Set(s.header, m.u.name)
	}
	plainError(rw, code, msg)
}

// noUpstream answers 503: nothing is available, or, under
// on_unavailable fail, the key's owner is not.
func (b *Balancer) noUpstream(s *snapshot, rw *responseWriter, r *http.Request, owner int) {
	b.m.noUpstream.Inc()
	msg := "no upstream available\n"
	if s.fail && owner >= 0 {
		msg = "upstream " + s.members[owner].u.name + " for this key is unavailable\n"
	}
	plainError(rw, http.StatusServiceUnavailable, msg)
}

func plainError(w http.ResponseWriter, code int, msg string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// account records the request's metrics and access log line. It runs
// deferred, so it also sees requests aborted by http.ErrAbortHandler.
func (b *Balancer) account(s *snapshot, rw *responseWriter, r *http.Request, m *member, start time.Time) {
	code := rw.status
	if code == 0 {
		code = http.StatusOK
	}
	if m != nil {
		m.u.m.code(code).Inc()
		m.u.m.duration.Observe(time.Since(start).Seconds())
	}
	b.accessLog(s, r, m, code, start, rw.err)
}

func (b *Balancer) accessLog(s *snapshot, r *http.Request, m *member, code int, start time.Time, err error) {
	if !s.opts.AccessLog {
		return
	}
	name := ""
	if m != nil {
		name = m.u.name
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method), slog.String("uri", r.RequestURI),
		slog.String("remote", r.RemoteAddr), slog.Int("status", code),
		slog.String("upstream", name), slog.Duration("duration", time.Since(start)),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	b.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
}

// position returns the request's ring position: the hash of its key, the
// affinity cookie's value first when on_missing is cookie. With no key it
// follows on_missing; false means a 400 was written. A generated affinity
// cookie goes on the final response head (see responseWriter.setCookie).
func (b *Balancer) position(s *snapshot, w *responseWriter, r *http.Request) (uint64, bool) {
	if s.onMissing == missingCookie && !dropped(r.Header, "Cookie") {
		if v, ok := cookieValue(r.Header, s.opts.CookieName); ok {
			return s.ring.Hash(v), true
		}
	}
	for _, k := range s.keys {
		if v, ok := k(r); ok {
			return s.ring.Hash(v), true
		}
	}
	switch s.onMissing {
	case missingReject:
		plainError(w, http.StatusBadRequest, "missing hash key: the request has none of "+s.keyDesc+"\n")
		return 0, false
	case missingCookie:
		var id [16]byte
		rand.Read(id[:])
		v := hex.EncodeToString(id[:])
		w.setCookie = (&http.Cookie{
			Name:     s.opts.CookieName,
			Value:    v,
			Path:     "/",
			MaxAge:   int(s.opts.CookieTTL / time.Second),
			Secure:   s.opts.CookieSecure,
			HttpOnly: s.opts.CookieHTTPOnly,
			SameSite: http.SameSiteLaxMode,
		}).String()
		return s.ring.Hash(v), true
	}
	return mrand.Uint64(), true
}

// pick chooses a member for position h, judging each candidate as a
// request would: unavailable ones (health, an open breaker whose open
// period runs, a half-open one whose trial is in flight) are skipped, tried ones
// are excluded, slow-starting ones are skipped at inactive points, and
// under bounded loads full ones are passed over. Under on_unavailable fail
// only the owner is considered. If only slow start stood in the way, slow
// start is ignored rather than fail the request. With skipped non-nil the
// reasons are appended, as /debug/lookup shows them.
func (b *Balancer) pick(s *snapshot, h uint64, tried []int, skipped []ring.Skip) (ring.Choice, []ring.Skip) {
	total := b.inflight.Load()
	availW := math.Float64frombits(s.availW.Load())
	c := s.loadFactor
	slow := s.slowStart > 0
	sawSlow := false
	var now int64
	owner := -1
	if s.fail {
		owner = s.ring.Owner(h)
	}
	judge := func(i, seq int) ring.Reason {
		if owner >= 0 && i != owner {
			return ring.Excluded
		}
		for _, t := range tried {
			if t == i {
				return ring.Excluded
			}
		}
		m := &s.members[i]
		u := m.u
		if u.down.Load() {
			return ring.Unhealthy
		}
		if br := u.br.Load(); br != nil {
			switch br.state.Load() {
			case breakerOpen:
				// Once the open period is over the upstream is eligible:
				// allow makes this request its half-open trial.
				if now == 0 {
					now = b.clock()
				}
				if now < br.openUntil.Load() {
					return ring.BreakerOpen
				}
			case breakerHalfOpen:
				if br.trial.Load() {
					return ring.BreakerOpen
				}
			}
		}
		if slow {
			if ws := u.warmSince.Load(); ws != 0 {
				if now == 0 {
					now = b.clock()
				}
				if f := float64(now-ws) / float64(s.slowStart); f >= 1 {
					u.warmSince.CompareAndSwap(ws, 0)
				} else if seq >= ring.ActivePoints(m.points, f) {
					sawSlow = true
					return ring.SlowStart
				}
			}
		}
		if c > 0 && u.inflight.Load() >= ring.Limit(c, s.loadFloor, total, m.weight, availW) {
			return ring.Full
		}
		return ring.Accept
	}
	n0 := len(skipped)
	ch, skipped := s.ring.Pick(h, judge, skipped)
	if ch.Member < 0 && sawSlow {
		slow = false
		if skipped != nil {
			skipped = skipped[:n0]
		}
		ch, skipped = s.ring.Pick(h, judge, skipped)
	}
	return ch, skipped
}

// errReadTimeout ends a read of an upstream's response body that waited
// longer than Options.ReadTimeout.
var errReadTimeout = &readTimeoutError{}

type readTimeoutError struct{}

func (*readTimeoutError) Error() string {
	return "upstream response body silent for longer than timeouts.read"
}
func (*readTimeoutError) Timeout() bool   { return true }
func (*readTimeoutError) Temporary() bool { return false }

// silenceBody is an upstream response body each of whose reads may wait
// at most d for data. A read that waits longer closes the body, which
// ends it (and the connection) with errReadTimeout. Only time spent in a
// read counts: time ringlb spends writing to the client does not.
type silenceBody struct {
	rc      io.ReadCloser
	d       time.Duration
	timer   *time.Timer
	expired atomic.Bool
}

func (b *silenceBody) Read(p []byte) (int, error) {
	if b.timer == nil {
		b.timer = time.AfterFunc(b.d, b.expire)
	} else {
		b.timer.Reset(b.d)
	}
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && b.expired.Load() {
		err = errReadTimeout
	}
	return n, err
}

func (b *silenceBody) expire() {
	b.expired.Store(true)
	b.rc.Close() // the transport closes the connection: the read ends
}

func (b *silenceBody) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	return b.rc.Close()
}

// trackedBody counts the request body bytes read, so a retry happens only
// when nothing was sent; notes whether reading the client's body failed
// (a malformed chunk, a connection closed short of Content-Length), which
// is the client's fault and never the upstream's; and ignores Close, so an
// attempt's transport cannot close the body a retry still needs (net/http
// closes it after the handler returns). The transport reads it on its own
// goroutine, hence the atomics.
type trackedBody struct {
	rc  io.ReadCloser
	n   atomic.Int64
	bad atomic.Bool
}

func (t *trackedBody) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	t.n.Add(int64(n))
	if err != nil && err != io.EOF {
		t.bad.Store(true)
	}
	return n, err
}

// clientFault reports whether the current attempt failed because of the
// client: it went away, or its request body could not be read. Such an
// attempt says nothing about the upstream and is not retried.
func clientFault(r *http.Request, body *trackedBody) bool {
	return r.Context().Err() != nil || (body != nil && body.bad.Load())
}

func (t *trackedBody) Close() error { return nil }

// responseWriter notes the status sent to the client and the error of
// the current attempt, and passes Flush and Hijack through. It also
// times the writes to the client, so that a response that breaks off
// mid-body can be put down to the side that held it up (clientBound).
type responseWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	err         error

	// onHead, when set, is called once with the final status as the head
	// is written; attempt sets it for a half-open trial, and trialSettled
	// records that it ran.
	onHead       func(code int)
	trialSettled bool
	// setCookie, when not empty, is a Set-Cookie value added to the final
	// head only: a 1xx sends the header map and ReverseProxy then clears
	// it, so anything put there before proxying would miss the response.
	setCookie string
	// no1xx drops informational responses: the client speaks HTTP/1.0,
	// which has none (RFC 9110 section 15.2).
	no1xx bool
	// tunnels tracks the connection once Hijack hands it over; tunnel is
	// that connection, removed from tunnels when ServeHTTP returns.
	tunnels *tunnels
	tunnel  net.Conn

	headAt     time.Time     // when the final head was written
	clientWait time.Duration // time spent in writes and flushes to the client
	clientErr  bool          // a write or flush to the client failed
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
			if !w.no1xx {
				w.ResponseWriter.WriteHeader(code) // informational: more to come
			}
			return
		}
		w.head(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

// head records the final status, before it is written, and adds what
// belongs on the final head.
func (w *responseWriter) head(code int) {
	if w.setCookie != "" {
		w.Header().Add("Set-Cookie", w.setCookie)
	}
	w.status, w.wroteHeader = code, true
	w.headAt = time.Now()
	if f := w.onHead; f != nil {
		w.onHead = nil
		f(code)
	}
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.head(http.StatusOK)
	}
	t := time.Now()
	n, err := w.ResponseWriter.Write(p)
	w.clientWait += time.Since(t)
	if err != nil {
		w.clientErr = true
	}
	return n, err
}

// FlushError flushes buffered data to the client (http.ResponseController
// and ReverseProxy's streaming use it).
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.head(http.StatusOK)
	}
	t := time.Now()
	err := http.NewResponseController(w.ResponseWriter).Flush()
	w.clientWait += time.Since(t)
	if err != nil {
		w.clientErr = true
	}
	return err
}

// minClientWait is the least time blocked on the client that can make a
// broken-off response the client's doing; below it, writes merely took
// their usual microseconds.
const minClientWait = 10 * time.Millisecond

// clientBound reports whether a response that broke off mid-body is put
// down to the client rather than the upstream: a write to the client
// failed, or ringlb spent at least half of the time since the response
// head (and at least minClientWait) blocked writing to the client. Then
// the client, not the upstream, set the pace, and an upstream that gave
// up (a write deadline, a send timeout) gave up waiting on the client:
// ringlb could not read while it could not write. A client that reads
// slowly on purpose must not be able to eject an upstream.
func (w *responseWriter) clientBound() bool {
	if w.clientErr {
		return true
	}
	if w.headAt.IsZero() || w.clientWait < minClientWait {
		return false
	}
	return 2*w.clientWait >= time.Since(w.headAt)
}

// Flush implements http.Flusher.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// Hijack takes over the connection, for protocol upgrades.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	// Counted before the server lets go of the connection, so a
	// Shutdown that sees no active connection also sees this tunnel.
	w.tunnels.opening()
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		w.tunnels.remove(nil)
		return c, brw, err
	}
	w.tunnel = c
	w.tunnels.opened(c)
	w.head(http.StatusSwitchingProtocols)
	// ReverseProxy copies from the connection itself: bytes the client
	// sent right behind its request, already in the server's buffer,
	// must come first.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		c = &bufferedConn{Conn: c, early: bytes.Clone(early)}
	}
	return c, brw, nil
}

// bufferedConn is a hijacked connection whose first reads return the
// bytes the server had already buffered.
type bufferedConn struct {
	net.Conn
	early []byte
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(p, c.early)
		c.early = c.early[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection when it can, as ReverseProxy does
// to the client's connection once the upstream is done sending.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// tunnels tracks the connections handed over for protocol upgrades
// (WebSocket tunnels): http.Server.Shutdown forgets hijacked connections,
// so without this a shutdown would cut them at once.
type tunnels struct {
	mu    sync.Mutex
	n     int                   // tunnels open or opening
	conns map[net.Conn]struct{} // the open ones
	idle  chan struct{}         // closed when n drops to 0; nil until waited for
}

func (t *tunnels) opening() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tunnels) opened(c net.Conn) {
	t.mu.Lock()
	if t.conns == nil {
		t.conns = map[net.Conn]struct{}{}
	}
	t.conns[c] = struct{}{}
	t.mu.Unlock()
}

// remove ends a tunnel counted by opening (c nil: one that never opened).
func (t *tunnels) remove(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c != nil {
		delete(t.conns, c)
	}
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// WaitTunnels waits until every upgraded connection (a WebSocket tunnel,
// which http.Server.Shutdown does not wait for) has closed, or ctx is
// done; then it closes those still open and returns ctx's error. Call it
// after the proxy server's Shutdown, with the same deadline.
func (b *Balancer) WaitTunnels(ctx context.Context) error {
	t := &b.tunnels
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	return ctx.Err()
}
