// Package healthcheck runs active HTTP health checks against a set of
// targets (upstreams) and reports when one goes down or comes back up.
//
// Each target has one prober goroutine. It sends GET Path to the target every
// Interval (each wait jittered by ±10%, the first one a random offset within
// the first Interval, so the probes of many targets do not align). A probe
// passes when the response status is within ExpectStatus and no
// transport error or timeout occurred. A target starts up; it goes down after
// Fall consecutive failures and comes back after Rise consecutive passes.
// Only those transitions are reported, through a Reporter, so the package
// never depends on who consumes them.
//
// Usage:
//
//	hc := healthcheck.New(healthcheck.Options{
//		Path:     "/healthz",
//		Interval: 2 * time.Second,
//		Timeout:  time.Second,
//		Rise:     2,
//		Fall:     3,
//	}, healthcheck.ReporterFunc(func(name string, up bool, reason string) {
//		pool.SetHealthy(name, up) // e.g. flip an atomic on the upstream
//	}), logger)
//	hc.Update(opts, []healthcheck.Target{{Name: "app-1", URL: u1}, {Name: "app-2", URL: u2}})
//	go hc.Run(ctx) // returns once ctx is done and every prober has stopped
//	...
//	hc.Update(newOpts, newTargets) // on reload: state carries over by name
package healthcheck

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// UserAgent is the User-Agent header every probe carries.
const UserAgent = "ringlb-healthcheck"

// maxDrain bounds how much of a probe's response body is read (and thrown
// away) so that its connection can be reused. A longer body is cut off and
// its connection closed.
const maxDrain = 64 << 10

// Defaults of Options, which ringlb's config applies too.
const (
	DefaultPath      = "/healthz"
	DefaultInterval  = 2 * time.Second
	DefaultTimeout   = time.Second
	DefaultRise      = 2
	DefaultFall      = 3
	DefaultExpectMin = 200
	DefaultExpectMax = 399
)

// Options configure every prober of a Checker. They are the config
// file's health block, which decodes into them: each comment names the
// field in the file and its default there. The zero value of each field
// selects its default (see DefaultPath and the others).
type Options struct {
	// Path is path, the request target of a probe, a path with an
	// optional "?query"; default /healthz. It replaces the target URL's
	// path and query (as in HAProxy's and Envoy's checks: a base path in
	// the upstream URL is not prefixed). A missing leading "/" is added
	// (the config requires one).
	Path string `yaml:"path" default:"/healthz"`
	// Interval is interval, the time from the start of one probe to the
	// start of the next, ±10% jitter; default 2s; > 0.
	Interval time.Duration `yaml:"interval" default:"2s"`
	// Timeout is timeout, which bounds one probe: connecting, sending,
	// the response headers and draining the body; default 1s; > 0 and
	// (in the config) < Interval. If it is not less than Interval, probes
	// of one target still never overlap: the next one starts when the
	// previous one has ended.
	Timeout time.Duration `yaml:"timeout" default:"1s"`
	// Rise is rise, how many consecutive passes bring a down target back
	// up; default 2; >= 1.
	Rise int `yaml:"rise" default:"2"`
	// Fall is fall, how many consecutive failures take an up target down;
	// default 3; >= 1.
	Fall int `yaml:"fall" default:"3"`
	// ExpectStatus is expect_status, the inclusive range of passing
	// statuses, written 200-399 or 200; default 200-399 (as is the zero
	// range); within 100-599. Redirects are not followed: a 3xx is judged
	// as it is.
	ExpectStatus StatusRange `yaml:"expect_status" default:"200-399"`
}

// StatusRange is an inclusive range of HTTP status codes.
type StatusRange struct{ Min, Max int }

// String formats the range as written in the config: "200-399", or "200"
// when Min == Max.
func (r StatusRange) String() string {
	if r.Min == r.Max {
		return strconv.Itoa(r.Min)
	}
	return strconv.Itoa(r.Min) + "-" + strconv.Itoa(r.Max)
}

// withDefaults returns o with every zero (or negative) field replaced by its
// default and Path given a leading "/".
func (o Options) withDefaults() Options {
	if o.Path == "" {
		o.Path = DefaultPath
	}
	if !strings.HasPrefix(o.Path, "/") {
		o.Path = "/" + o.Path
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Rise <= 0 {
		o.Rise = DefaultRise
	}
	if o.Fall <= 0 {
		o.Fall = DefaultFall
	}
	if o.ExpectStatus == (StatusRange{}) {
		o.ExpectStatus = StatusRange{DefaultExpectMin, DefaultExpectMax}
	}
	return o
}

// Target is one thing to probe.
type Target struct {
	// Name identifies the target in reports and across Updates.
	Name string
	// URL is the target's base URL; a probe goes to its scheme, userinfo and
	// host, with Options.Path. The Host header is the URL's host. Logs show
	// it without its password. A nil URL makes every probe fail.
	URL *url.URL
	// Transport, if not nil, sends this target's probes instead of the
	// Checker's own client, so that a probe speaks the target's protocol
	// (cleartext HTTP/2, say) and verifies its certificate as requests to
	// it do. Redirects are still not followed.
	Transport http.RoundTripper
}

// Reporter receives health transitions.
type Reporter interface {
	// SetHealthy is called once per real transition of the named target:
	// up false when it has failed Fall probes in a row, up true when it has
	// passed Rise probes in a row after being down. reason says why, e.g.
	// "3 consecutive failures: connection refused" or "2 consecutive
	// passes". It is never called for a target's initial (up) state.
	//
	// Calls for one target never overlap and arrive in order; calls for
	// different targets may be concurrent. SetHealthy runs on the prober's
	// goroutine and should return quickly. It must not call Update, and the
	// caller of Update must not hold a lock SetHealthy takes: Update waits
	// for the probers of removed targets, which may be inside SetHealthy.
	SetHealthy(name string, up bool, reason string)
}

// ReporterFunc adapts a function to a Reporter.
type ReporterFunc func(name string, up bool, reason string)

// SetHealthy calls f(name, up, reason).
func (f ReporterFunc) SetHealthy(name string, up bool, reason string) { f(name, up, reason) }

// Checker probes a set of targets. Build it with New, give it targets with
// Update, and run it with Run. Its methods are safe for concurrent use.
type Checker struct {
	reporter Reporter
	log      *slog.Logger
	client   *http.Client

	mu      sync.Mutex
	opts    Options // with defaults
	probers map[string]*prober
	ctx     context.Context // Run's context; nil before Run
	stopped bool            // Run has seen its context end
	wg      sync.WaitGroup  // one per started prober
}

// New returns a Checker with no targets. r may be nil (only Healthy then
// tells the state); log nil discards the log lines.
//
// The Checker has its own HTTP client: a small idle pool (one kept-alive
// connection per target), no compression, no proxy from the environment and
// no redirects, so probes neither take connections from the request path's
// pool nor measure anything but the target itself.
func New(opts Options, r Reporter, log *slog.Logger) *Checker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:           0, // no total cap: at most one per target, below
		MaxIdleConnsPerHost:    1,
		IdleConnTimeout:        90 * time.Second,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &Checker{
		reporter: r,
		log:      log,
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: noRedirects,
		},
		opts:    opts.withDefaults(),
		probers: make(map[string]*prober),
	}
}

// noRedirects makes a client return a redirect as the response it is.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Update sets the options and the targets, as on a config reload.
//
// A target whose name is new gets a prober that starts up; a name no longer
// listed loses its prober; a name that stays keeps its prober, its state and
// its consecutive counts, whatever else changed. A changed Rise or Fall
// applies from the next probe (a count already past the new threshold then
// transitions on the next probe of the same outcome). When the interval or a
// target's URL changed, that prober's next probe is rescheduled at a random
// offset within the new interval; when the URL changed its consecutive
// counts restart from zero (they were about another server) but its state
// is kept.
//
// When Update returns, the probers of removed targets have stopped: no later
// report names them (see Reporter for the locking this implies). Before Run,
// Update only records the targets; after Run has returned it starts nothing.
// Duplicate names: the last one wins (ringlb's config rejects them).
func (c *Checker) Update(opts Options, targets []Target) {
	opts = opts.withDefaults()
	want := make(map[string]Target, len(targets))
	for _, t := range targets {
		want[t.Name] = t
	}

	var removed []*prober
	c.mu.Lock()
	oldOpts := c.opts
	c.opts = opts
	for name, p := range c.probers {
		if _, ok := want[name]; !ok {
			delete(c.probers, name)
			removed = append(removed, p)
		}
	}
	for name, t := range want {
		u := probeURL(t.URL, opts.Path)
		cfg := &probeConfig{url: u.String(), logURL: u.Redacted(), opts: opts}
		if t.Transport != nil {
			cfg.client = &http.Client{Transport: t.Transport, CheckRedirect: noRedirects}
		}
		p, ok := c.probers[name]
		if !ok {
			p = newProber(name, cfg)
			c.probers[name] = p
			if c.ctx != nil && !c.stopped {
				c.start(p)
			}
			continue
		}
		old := p.cfg.Swap(cfg)
		if old.url != cfg.url || oldOpts.Interval != opts.Interval {
			select {
			case p.retime <- struct{}{}:
			default: // one pending is enough: the prober reads the latest cfg
			}
		}
	}
	c.mu.Unlock()

	// Outside the lock: a removed prober may be reporting, and a Reporter
	// may call Healthy.
	for _, p := range removed {
		if p.cancel != nil {
			p.cancel()
			<-p.done
		}
	}
	if len(removed) > 0 {
		c.client.CloseIdleConnections()
	}
}

// Run starts a prober per target and blocks until ctx is done and every
// prober has stopped (each probe in flight is cancelled). Targets added by
// Update while Run runs are probed from then on. Run is meant to be called
// once; a second call returns at once.
func (c *Checker) Run(ctx context.Context) {
	c.mu.Lock()
	if c.ctx != nil {
		c.mu.Unlock()
		return
	}
	c.ctx = ctx
	for _, p := range c.probers {
		c.start(p)
	}
	c.mu.Unlock()

	<-ctx.Done()

	c.mu.Lock()
	c.stopped = true // no prober starts after this, so Wait cannot miss one
	c.mu.Unlock()
	c.wg.Wait()
	c.client.CloseIdleConnections()
}

// Healthy reports the named target's state: known is false when the name is
// not a current target. A target is up until Fall probes in a row fail.
func (c *Checker) Healthy(name string) (up bool, known bool) {
	c.mu.Lock()
	p, ok := c.probers[name]
	c.mu.Unlock()
	if !ok {
		return false, false
	}
	return p.up.Load(), true
}
