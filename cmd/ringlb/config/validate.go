package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Limits that keep a config from building an unreasonably large ring.
const (
	maxPointsPerWeight = 10000
	maxPointsPerMember = 1_000_000
	maxPointsTotal     = 10_000_000
	minMaxHeaderBytes  = 1024
)

// validate checks the defaulted config and records every problem.
func (d *decoder) validate(c *Config) {
	d.validateListeners(c)
	if c.ShutdownTimeout < 0 {
		d.invalid("shutdown_timeout", "must be >= 0, got %s", c.ShutdownTimeout)
	}
	if c.ShutdownDelay < 0 {
		d.invalid("shutdown_delay", "must be >= 0, got %s", c.ShutdownDelay)
	}
	switch c.AccessLog.Format {
	case "", "text", "json", "combined":
	default:
		d.invalid("access_log.format", "must be \"\" (off), text, json or combined, got %q", short(c.AccessLog.Format))
	}
	if c.AccessLog.Path != "" {
		if c.AccessLog.Format == "" {
			d.invalid("access_log.path", "is set but access_log.format is \"\" (off); set a format or remove path")
		} else {
			c.AccessLog.Path = resolvePath(d.file, c.AccessLog.Path)
			if fi, err := os.Stat(filepath.Dir(c.AccessLog.Path)); err != nil || !fi.IsDir() {
				d.invalid("access_log.path", "%q: its directory does not exist", short(c.AccessLog.Path))
			}
		}
	}
	if c.RequestIDHeader != "" && !isToken(c.RequestIDHeader) {
		d.invalid("request_id_header", "must be a valid header name (or \"\" to turn it off), got %q", short(c.RequestIDHeader))
	}
	if c.UpstreamHeader != "" && !isToken(c.UpstreamHeader) {
		d.invalid("upstream_header", "must be a valid header name (or \"\" to turn it off), got %q", short(c.UpstreamHeader))
	}
	if c.MaxHeaderBytes < minMaxHeaderBytes {
		d.invalid("max_header_bytes", "must be >= %d, got %d", minMaxHeaderBytes, c.MaxHeaderBytes)
	}
	if c.Limits.UpstreamRequests < 0 {
		d.invalid("limits.upstream_requests", "must be >= 0 (0: no limit), got %d", c.Limits.UpstreamRequests)
	}
	if c.Limits.StreamsPerConnection < 1 {
		d.invalid("limits.streams_per_connection", "must be >= 1, got %d", c.Limits.StreamsPerConnection)
	}
	if c.Limits.Send < 0 {
		d.invalid("limits.send", "must be >= 0 (0: no limit), got %s", c.Limits.Send)
	}
	if c.Limits.BodyMemory < 0 {
		d.invalid("limits.body_memory", "must be >= 0 (0: no limit), got %d", c.Limits.BodyMemory)
	}
	d.validateTLS(c)
	d.requestID = c.RequestIDHeader
	if c.Pools == nil {
		if d.has("routes") {
			d.invalid("routes", "needs pools: routes send requests to the pools they name")
		}
		d.validatePool(&c.Pool)
		return
	}
	d.validatePools(c)
}

// validatePool checks one pool's blocks; d is scoped to the pool.
func (d *decoder) validatePool(p *Pool) {
	d.validateHash(&p.Hash)
	d.validateRing(&p.Ring)
	d.validateUpstreams(p)
	if p.Health != nil {
		d.validateHealth(p.Health)
	}
	d.validateBreaker(&p.Breaker)
	if p.Retries < 0 {
		d.invalid("retries", "must be >= 0, got %d", p.Retries)
	}
	for i, s := range p.RetryStatuses {
		if s < 500 || s > 599 {
			d.invalid(index("retry_statuses", i), "must be an HTTP status 500-599, got %d", s)
		}
	}
	positive("timeouts.dial", p.Timeouts.Dial, d)
	positive("timeouts.response_header", p.Timeouts.ResponseHeader, d)
	positive("timeouts.idle_conn", p.Timeouts.IdleConn, d)
	if p.Timeouts.Read < 0 {
		d.invalid("timeouts.read", "must be >= 0 (0: no limit), got %s", p.Timeouts.Read)
	}
	if p.Timeouts.ClientBody < 0 {
		d.invalid("timeouts.client_body", "must be >= 0 (0: no limit), got %s", p.Timeouts.ClientBody)
	}
	if p.Discovery != nil {
		d.validateDiscovery(p)
	}
	d.validateHold(p)
	d.validateHandoff(&p.Handoff)
	d.validateUpstreamTLS(&p.UpstreamTLS)
}

// positive records a problem with duration field f unless v > 0.
func positive(f string, v time.Duration, d *decoder) {
	if v <= 0 {
		d.invalid(f, "must be > 0, got %s", v)
	}
}

// isToken reports whether s is a non-empty RFC 9110 token, the syntax of
// header and cookie names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// fmtFloat formats f as briefly as it reads back.
func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// resolvePath returns p, read relative to the directory of the config file
// when it is relative.
func resolvePath(configFile, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(configFile), p)
}
