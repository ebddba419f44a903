// Package healthcheck runs active HTTP health checks against a set of
// targets (upstreams) and reports when one goes down or comes back up.
//
// Each target has one prober goroutine. It sends GET Path to the target every
// Interval (each wait jittered by ±10%, the first one a random offset within
// the first Interval, so the probes of many targets do not align). A probe
// passes when the response status is within [ExpectMin, ExpectMax] and no
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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// Options configure every prober of a Checker. The zero value of each field
// selects its default (see DefaultPath and the others).
type Options struct {
	// Path is the request target of a probe, a path with an optional
	// "?query". It replaces the target URL's path and query (as in HAProxy's
	// and Envoy's checks: a base path in the upstream URL is not prefixed).
	// A missing leading "/" is added. Default "/healthz".
	Path string
	// Interval is the time from the start of one probe to the start of the
	// next, ±10% jitter. Default 2s.
	Interval time.Duration
	// Timeout bounds one probe: connecting, sending, the response headers and
	// draining the body. Default 1s. It should be less than Interval; if it
	// is not, probes of one target still never overlap: the next one starts
	// when the previous one has ended.
	Timeout time.Duration
	// Rise is how many consecutive passes bring a down target back up.
	// Default 2.
	Rise int
	// Fall is how many consecutive failures take an up target down.
	// Default 3.
	Fall int
	// ExpectMin and ExpectMax are the inclusive range of passing statuses.
	// Both zero means 200-399. Redirects are not followed: a 3xx is judged
	// as it is.
	ExpectMin, ExpectMax int
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
	if o.ExpectMin == 0 && o.ExpectMax == 0 {
		o.ExpectMin, o.ExpectMax = DefaultExpectMin, DefaultExpectMax
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
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		opts:    opts.withDefaults(),
		probers: make(map[string]*prober),
	}
}

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

// start launches p's goroutine. c.mu must be held, with c.ctx set.
func (c *Checker) start(p *prober) {
	ctx, cancel := context.WithCancel(c.ctx)
	p.cancel = cancel
	p.done = make(chan struct{})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(p.done)
		defer cancel()
		c.loop(ctx, p)
	}()
}

// probeConfig is what a prober needs for its next probe; Update swaps it.
type probeConfig struct {
	url    string
	logURL string // url without a password
	opts   Options
}

// prober is one target's state. passes and fails belong to its goroutine;
// up is read by Healthy; cfg is swapped by Update.
type prober struct {
	name   string
	cfg    atomic.Pointer[probeConfig]
	retime chan struct{} // capacity 1: the interval or URL changed
	up     atomic.Bool

	passes, fails int
	lastURL       string // the URL the counts are about

	// Set by start under Checker.mu; nil if never started.
	cancel context.CancelFunc
	done   chan struct{}
}

func newProber(name string, cfg *probeConfig) *prober {
	p := &prober{name: name, retime: make(chan struct{}, 1), lastURL: cfg.url}
	p.cfg.Store(cfg)
	p.up.Store(true)
	return p
}

// loop probes until ctx is done.
func (c *Checker) loop(ctx context.Context, p *prober) {
	timer := time.NewTimer(firstDelay(p.cfg.Load().opts.Interval))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.retime:
			timer.Reset(firstDelay(p.cfg.Load().opts.Interval))
			continue
		case <-timer.C:
		}
		start := time.Now()
		cfg := p.cfg.Load()
		pass, why := c.probe(ctx, cfg)
		if ctx.Err() != nil {
			return // cancelled, not failed: do not count it
		}
		c.record(p, cfg, pass, why)
		timer.Reset(time.Until(start.Add(nextDelay(cfg.opts.Interval))))
	}
}

// record counts one probe's outcome and reports a transition if it makes one.
func (c *Checker) record(p *prober, cfg *probeConfig, pass bool, why string) {
	if cfg.url != p.lastURL {
		p.passes, p.fails, p.lastURL = 0, 0, cfg.url
	}
	var reason string
	if pass {
		p.passes, p.fails = p.passes+1, 0
		if p.up.Load() || p.passes < cfg.opts.Rise {
			return
		}
		reason = fmt.Sprintf("%d consecutive %s", p.passes, plural(p.passes, "pass", "passes"))
	} else {
		p.passes, p.fails = 0, p.fails+1
		if !p.up.Load() || p.fails < cfg.opts.Fall {
			return
		}
		reason = fmt.Sprintf("%d consecutive %s: %s", p.fails, plural(p.fails, "failure", "failures"), why)
	}
	p.up.Store(pass)
	if pass {
		c.log.Info("health check: upstream up", "upstream", p.name, "url", cfg.logURL, "reason", reason)
	} else {
		c.log.Warn("health check: upstream down", "upstream", p.name, "url", cfg.logURL, "reason", reason)
	}
	if c.reporter != nil {
		c.reporter.SetHealthy(p.name, pass, reason)
	}
}

// probe sends one check and says whether it passed, and if not why.
func (c *Checker) probe(ctx context.Context, cfg *probeConfig) (pass bool, why string) {
	ctx, cancel := context.WithTimeout(ctx, cfg.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.url, nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", UserAgent)
	resp, err := c.client.Do(req)
	if err != nil {
		return false, describe(err, cfg.opts.Timeout)
	}
	// Drain (bounded) so the connection can be reused; an error here does
	// not change the verdict, which the status already gave.
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()
	if resp.StatusCode < cfg.opts.ExpectMin || resp.StatusCode > cfg.opts.ExpectMax {
		return false, fmt.Sprintf("status %d, want %d-%d", resp.StatusCode, cfg.opts.ExpectMin, cfg.opts.ExpectMax)
	}
	return true, ""
}

// describe turns a transport error into a short reason.
func describe(err error, timeout time.Duration) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout after " + timeout.String()
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error() // without the repeated "Get URL:" prefix
	}
	return err.Error()
}

// probeURL is base with its path and query replaced by path ("/p?q"),
// read as a request target (escapes in it are kept as written). A nil base
// gives a URL every probe fails on ("unsupported protocol scheme").
func probeURL(base *url.URL, path string) *url.URL {
	var u url.URL
	if base != nil {
		u = *base
	}
	u.RawPath, u.Fragment, u.RawFragment, u.ForceQuery = "", "", "", false
	if ref, err := url.ParseRequestURI(path); err == nil {
		u.Path, u.RawPath, u.RawQuery = ref.Path, ref.RawPath, ref.RawQuery
	} else {
		u.Path, u.RawQuery, _ = strings.Cut(path, "?") // escaped by String
	}
	return &u
}

// firstDelay is a random offset in [0, interval): when a prober starts, or
// its interval changes, its probes fall anywhere in the cycle.
func firstDelay(interval time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(interval)))
}

// nextDelay is interval ±10%, uniformly, so probers that happen to align
// drift apart.
func nextDelay(interval time.Duration) time.Duration {
	spread := int64(interval) / 5
	return interval - time.Duration(spread/2) + time.Duration(rand.Int64N(spread+1))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
