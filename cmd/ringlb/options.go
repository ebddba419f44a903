package main

import (
	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/healthcheck"
)

// balancerOptions converts a config to the balancer's plain options.
func balancerOptions(cfg *config.Config) balancer.Options {
	o := balancer.Options{
		Placement:             cfg.Ring.Placement,
		PointsPerWeight:       cfg.Ring.PointsPerWeight,
		LoadFactor:            cfg.Ring.LoadFactor,
		LoadFloor:             cfg.Ring.LoadFloor,
		SlowStart:             cfg.Ring.SlowStart,
		OnUnavailable:         cfg.Ring.OnUnavailable,
		OnMissing:             cfg.Hash.OnMissing,
		CookieName:            cfg.Hash.Cookie.Name,
		CookieTTL:             cfg.Hash.Cookie.TTL,
		CookieSecure:          cfg.Hash.Cookie.Secure,
		CookieHTTPOnly:        cfg.Hash.Cookie.HTTPOnly,
		TrustedProxies:        cfg.TrustedProxies,
		UpstreamHeader:        cfg.UpstreamHeader,
		Retries:               cfg.Retries,
		DialTimeout:           cfg.Timeouts.Dial,
		ResponseHeaderTimeout: cfg.Timeouts.ResponseHeader,
		ReadTimeout:           cfg.Timeouts.Read,
		IdleConnTimeout:       cfg.Timeouts.IdleConn,
		AccessLog:             cfg.AccessLog,
		HealthChecks:          cfg.Health != nil,
		Breaker: balancer.BreakerOptions{
			ConsecutiveFailures: cfg.Breaker.ConsecutiveFailures,
			FailureStatuses:     cfg.Breaker.FailureStatuses,
			OpenTimeout:         cfg.Breaker.OpenTimeout,
			MaxOpenTimeout:      cfg.Breaker.MaxOpenTimeout,
		},
	}
	for _, u := range cfg.Upstreams {
		o.Upstreams = append(o.Upstreams, balancer.UpstreamOptions{Name: u.Name, URL: u.URL, Addr: u.Addr, Weight: u.Weight})
	}
	for _, k := range cfg.Hash.Key {
		o.Key = append(o.Key, balancer.KeySource{Kind: string(k.Kind), Name: k.Name})
	}
	return o
}

// healthOptions converts the health block; nil when there is none.
func healthOptions(h *config.Health) *healthcheck.Options {
	if h == nil {
		return nil
	}
	return &healthcheck.Options{
		Path:      h.Path,
		Interval:  h.Interval,
		Timeout:   h.Timeout,
		Rise:      h.Rise,
		Fall:      h.Fall,
		ExpectMin: h.ExpectStatus.Min,
		ExpectMax: h.ExpectStatus.Max,
	}
}

func healthTargets(cfg *config.Config) []healthcheck.Target {
	ts := make([]healthcheck.Target, len(cfg.Upstreams))
	for i, u := range cfg.Upstreams {
		ts[i] = healthcheck.Target{Name: u.Name, URL: u.URL}
	}
	return ts
}
