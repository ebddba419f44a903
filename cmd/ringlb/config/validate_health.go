package config

// This file checks how upstreams are judged: the health block's active
// checks and the breaker block's passive ones.

import (
	"net/url"
	"strings"
)

// validateHealth checks the health block.
func (d *decoder) validateHealth(h *Health) {
	if !strings.HasPrefix(h.Path, "/") {
		d.invalid("health.path", "must start with \"/\", got %q", short(h.Path))
	} else if _, err := url.ParseRequestURI(h.Path); err != nil || strings.ContainsAny(h.Path, " \t\r\n#") {
		d.invalid("health.path", "must be a valid request path, got %q", short(h.Path))
	}
	positive("health.interval", h.Interval, d)
	positive("health.timeout", h.Timeout, d)
	if h.Interval > 0 && h.Timeout > 0 && h.Timeout >= h.Interval && !d.isBad("health.interval") {
		d.invalid("health.timeout", "must be < health.interval (%s), got %s", h.Interval, h.Timeout)
	}
	if h.Rise < 1 {
		d.invalid("health.rise", "must be >= 1, got %d", h.Rise)
	}
	if h.Fall < 1 {
		d.invalid("health.fall", "must be >= 1, got %d", h.Fall)
	}
	r := h.ExpectStatus
	switch {
	case r.Min < 100 || r.Max > 599:
		d.invalid("health.expect_status", "must be within 100-599, got %s", r)
	case r.Min > r.Max:
		d.invalid("health.expect_status", "must be a range MIN-MAX with MIN <= MAX, got %s", r)
	}
}

// validateBreaker checks the breaker block.
func (d *decoder) validateBreaker(b *Breaker) {
	if b.ConsecutiveFailures < 0 {
		d.invalid("breaker.consecutive_failures", "must be >= 0 (0 turns breakers off), got %d", b.ConsecutiveFailures)
	}
	for i, s := range b.FailureStatuses {
		if s < 100 || s > 599 {
			d.invalid(index("breaker.failure_statuses", i), "must be an HTTP status 100-599, got %d", s)
		}
	}
	for i, s := range b.FailureGRPCStatuses {
		if s < 0 || s > 16 {
			d.invalid(index("breaker.failure_grpc_statuses", i), "must be a gRPC status code 0-16, got %d", s)
		}
	}
	positive("breaker.open_timeout", b.OpenTimeout, d)
	if b.OpenTimeout > 0 && b.MaxOpenTimeout < b.OpenTimeout && !d.isBad("breaker.open_timeout") {
		d.invalid("breaker.max_open_timeout", "must be >= breaker.open_timeout (%s), got %s", b.OpenTimeout, b.MaxOpenTimeout)
	}
}
