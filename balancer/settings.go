package balancer

import (
	"errors"
	"fmt"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/keyhash"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/ring"
)

// settings is what compile derives from Options: everything a snapshot
// holds besides the ring and the live upstreams, validated and in the
// form the request path reads.
type settings struct {
	specs []memberSpec // indexed like the ring's Members(); installLocked reads them

	keys         []key.Spec
	keyNames     []string          // each key source as RingStatus.KeySources names it
	keyLabels    []string          // each key source as key.Source.Label names it, for logs
	keyDesc      string            // "cookie session, header X-User-ID", for 400 answers
	salt         *keyhash.Salted   // options.Hash.Salt; nil: reported hashes are ring positions
	onMissing    options.OnMissing // never empty
	cookie       options.Cookie
	loadFactor   float64
	loadFloor    int64 // >= 1
	fail         bool
	retries      int
	retryStatus  breaker.StatusSet // RetryStatuses
	retryOn      bool              // RetryStatuses is not empty
	slowStart    int64             // nanoseconds
	header       string            // canonical UpstreamHeader, or ""
	readTimeout  time.Duration
	accessLog    *accesslog.Logger
	requestID    string // canonical RequestIDHeader, or ""
	requestIDH2  string // requestID in lower case, as HTTP/2 sends it
	failStatus   breaker.StatusSet
	failGRPC     breaker.GRPCStatusSet
	breaker      *breaker.Options // validated; nil when breakers are off
	transportCfg transportConfig
	healthChecks bool
	holdSet      hold.Settings   // zero: hold off
	handoffOpts  handoff.Options // Header "": off
	upstreamMax  int64           // limits.upstream_requests; 0: none
	send         time.Duration   // limits.send; 0: none
	clientBody   time.Duration   // timeouts.client_body; 0: none
	bodyMemory   int64           // limits.body_memory; 0: none
	bodyKeys     bool            // a key source reads the body (json)
	bodyLimit    int             // hash.body_limit, defaulted
}

// memberSpec is what the options say about one ring member.
type memberSpec struct {
	name     string
	url      *url.URL
	weight   float64
	points   int                // ring.PointsFor(points_per_weight, weight): slow start's point count
	protocol transport.Protocol // how ringlb speaks to it; discovered members take their source's
	state    state.Admin        // the configured admin state; discovered members: ready

	source  string // the discovery source's name; "" for a static upstream
	absent  bool   // discovered, missing from its source's answer: skipped
	initial bool   // discovered in its source's first answer: no slow start
}

// transportConfig is what the shared upstream transports are built from;
// a reload that changes it replaces them.
type transportConfig struct {
	dial, responseHeader, idleConn time.Duration
	tls                            transport.UpstreamTLS
}

// same reports whether c and o build the same transports: a CA pool read
// again from an unchanged file is the same.
func (c transportConfig) same(o transportConfig) bool {
	ct, ot := c.tls, o.tls
	if (ct.RootCAs == nil) != (ot.RootCAs == nil) || (ct.RootCAs != nil && !ct.RootCAs.Equal(ot.RootCAs)) {
		return false
	}
	ct.RootCAs, ot.RootCAs = nil, nil
	c.tls, o.tls = ct, ot
	return c == o
}

// compile validates opts and derives the settings and the ring a
// snapshot is installed from, with found (the discovered members) beside
// the static upstreams. It changes nothing, so a reload that fails here
// leaves everything as it was.
func compile(opts Options, found []discovery.Member) (settings, *ring.Ring, error) {
	set := settings{
		loadFactor:   opts.Ring.LoadFactor,
		loadFloor:    max(int64(opts.Ring.LoadFloor), 1),
		retries:      opts.Retries,
		slowStart:    int64(opts.Ring.SlowStart),
		cookie:       opts.Hash.Cookie,
		readTimeout:  opts.Timeouts.Read,
		accessLog:    opts.AccessLog,
		requestID:    textproto.CanonicalMIMEHeaderKey(opts.RequestIDHeader),
		requestIDH2:  strings.ToLower(opts.RequestIDHeader),
		healthChecks: opts.HealthChecks,
		upstreamMax:  int64(opts.Limits.UpstreamRequests),
		send:         opts.Limits.Send,
		clientBody:   opts.Timeouts.ClientBody,
		bodyMemory:   opts.Limits.BodyMemory,
		handoffOpts:  opts.Handoff,
		transportCfg: transportConfig{dial: opts.Timeouts.Dial, responseHeader: opts.Timeouts.ResponseHeader, idleConn: opts.Timeouts.IdleConn, tls: opts.UpstreamTLS},
	}
	if bo := opts.Breaker.Compiled(); bo.ConsecutiveFailures > 0 {
		set.breaker = &bo
		set.failStatus = breaker.NewStatusSet(bo.FailureStatuses)
		set.failGRPC = breaker.NewGRPCStatusSet(bo.FailureGRPCStatuses)
	}
	switch opts.Ring.OnUnavailable {
	case "", options.OnUnavailableRemap:
	case options.OnUnavailableFail:
		set.fail = true
	default:
		return settings{}, nil, fmt.Errorf("balancer: on_unavailable: unknown value %q", opts.Ring.OnUnavailable)
	}
	switch opts.Hash.OnMissing {
	case "", options.OnMissingRandom:
		set.onMissing = options.OnMissingRandom
	case options.OnMissingReject, options.OnMissingCookie:
		set.onMissing = opts.Hash.OnMissing
		if opts.Hash.OnMissing == options.OnMissingCookie && opts.Hash.Cookie.Name == "" {
			return settings{}, nil, errors.New("balancer: on_missing cookie needs a cookie name")
		}
	default:
		return settings{}, nil, fmt.Errorf("balancer: on_missing: unknown value %q", opts.Hash.OnMissing)
	}
	if opts.Ring.LoadFactor != 0 && !(opts.Ring.LoadFactor > 1) {
		return settings{}, nil, fmt.Errorf("balancer: load_factor must be 0 or > 1, got %v", opts.Ring.LoadFactor)
	}
	set.retryStatus, set.retryOn = breaker.NewStatusSet(opts.RetryStatuses), len(opts.RetryStatuses) > 0
	if opts.UpstreamHeader != "" {
		set.header = textproto.CanonicalMIMEHeaderKey(opts.UpstreamHeader)
	}
	if err := set.compileKeys(opts); err != nil {
		return settings{}, nil, err
	}
	if opts.Handoff.Header != "" && opts.Handoff.Window <= 0 {
		return settings{}, nil, fmt.Errorf("balancer: handoff window must be > 0, got %v", opts.Handoff.Window)
	}
	if opts.Discovery != nil && opts.Ring.Placement == ring.PlacementNginx {
		return settings{}, nil, errors.New("balancer: discovery needs placement ringlb")
	}
	var err error
	if set.holdSet, err = hold.Compile(opts.Hold, set.fail); err != nil {
		return settings{}, nil, fmt.Errorf("balancer: %w", err)
	}
	set.holdSet.Secure, set.holdSet.HTTPOnly = opts.Hash.Cookie.Secure, opts.Hash.Cookie.HTTPOnly
	if set.holdSet.Share.Redis != "" {
		set.holdSet.Share.Salt = string(opts.Hash.Salt) // the records' names are reported hashes
	}
	r, err := set.membership(opts, found, nil)
	if err != nil {
		return settings{}, nil, err
	}
	return set, r, nil
}

// compileKeys reads hash.key's sources, hash.body_limit and hash.salt
// into set.
func (set *settings) compileKeys(opts Options) error {
	bodyLimit := opts.Hash.BodyLimit
	if bodyLimit < 1 {
		bodyLimit = options.DefaultBodyLimit
	}
	set.bodyLimit = bodyLimit
	for i, k := range opts.Hash.Key {
		set.bodyKeys = set.bodyKeys || k.ReadsBody()
		ks, err := key.New(k, opts.TrustedProxies, bodyLimit)
		if err != nil {
			return fmt.Errorf("balancer: key[%d]: %w", i, err)
		}
		set.keys = append(set.keys, ks)
		set.keyNames = append(set.keyNames, k.String())
		set.keyLabels = append(set.keyLabels, k.Label())
	}
	set.keyDesc = strings.Join(set.keyNames, ", ")
	set.salt = keyhash.New(opts.Hash.Salt)
	return nil
}

// membership checks the upstreams, builds the ring from them and the
// discovered members found (a static upstream wins a name both have), and
// records, for each ring member, what the options say about it. When prev
// (nil: none) has the same members, it is the ring.
func (set *settings) membership(opts Options, found []discovery.Member, prev *ring.Ring) (*ring.Ring, error) {
	byName := make(map[string]options.Upstream, len(opts.Upstreams))
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
		switch {
		case uo.Protocol == transport.H2C && uo.URL.Scheme != "http":
			return nil, fmt.Errorf("balancer: upstreams[%d] (%s): protocol h2c needs an http url, got %v", i, uo.Name, uo.URL)
		case uo.Protocol == transport.H2 && uo.URL.Scheme != "https":
			return nil, fmt.Errorf("balancer: upstreams[%d] (%s): protocol h2 needs an https url, got %v", i, uo.Name, uo.URL)
		case uo.Protocol > transport.H2:
			return nil, fmt.Errorf("balancer: upstreams[%d] (%s): unknown protocol %v", i, uo.Name, uo.Protocol)
		case int(uo.State) >= len(state.Names()):
			return nil, fmt.Errorf("balancer: upstreams[%d] (%s): unknown state %v", i, uo.Name, uo.State)
		}
		byName[uo.Name] = uo
		rm = append(rm, ring.Member{Name: uo.Name, Addr: uo.Addr, Weight: uo.Weight})
	}
	drm, dspecs, err := discoveredSpecs(found, byName)
	if err != nil {
		return nil, err
	}
	rm = append(rm, drm...)
	// An answer that only readdressed, or marked members absent or
	// returned, keeps the ring instead of building all its points again.
	r, ro := prev, ring.Options{Placement: opts.Ring.Placement, PointsPerWeight: opts.Ring.PointsPerWeight, AllowEmpty: opts.Discovery != nil}
	if !prev.Places(rm, ro) {
		r, err = ring.New(rm, ro)
		if err != nil {
			return nil, fmt.Errorf("balancer: %w", err)
		}
	}
	set.specs = make([]memberSpec, len(r.Members()))
	for i, m := range r.Members() {
		uo, static := byName[m.Name]
		if !static {
			set.specs[i] = dspecs[m.Name]
			set.specs[i].points = ring.PointsFor(r.PointsPerWeight(), m.Weight)
			continue
		}
		set.specs[i] = memberSpec{name: uo.Name, url: uo.URL, weight: uo.Weight, points: ring.PointsFor(r.PointsPerWeight(), uo.Weight), protocol: uo.Protocol, state: uo.State}
	}
	return r, nil
}
