package healthcheck

// This file is one target's prober: its schedule, its probe and how it
// counts outcomes into transitions.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

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
	client *http.Client // the Target's Transport; nil: the Checker's client
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

// newProber returns a prober for name that starts up, with cfg as its config.
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
	client := c.client
	if cfg.client != nil {
		client = cfg.client
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, describe(err, cfg.opts.Timeout)
	}
	// Drain (bounded) so the connection can be reused; an error here does
	// not change the verdict, which the status already gave.
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()
	if exp := cfg.opts.ExpectStatus; resp.StatusCode < exp.Min || resp.StatusCode > exp.Max {
		return false, fmt.Sprintf("status %d, want %d-%d", resp.StatusCode, exp.Min, exp.Max)
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

// plural returns one when n is 1, many otherwise.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
