package main

import (
	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/healthcheck"
)

// balancerOptions converts a config to the balancer's options. The
// blocks that share their shape convert as they are.
func balancerOptions(cfg *config.Config) balancer.Options {
	o := balancer.Options{
		Ring: balancer.RingOptions(cfg.Ring),
		Hash: balancer.HashOptions{
			Key:       cfg.Hash.Key,
			OnMissing: cfg.Hash.OnMissing,
			Cookie:    balancer.CookieOptions(cfg.Hash.Cookie),
		},
		TrustedProxies: cfg.TrustedProxies,
		UpstreamHeader: cfg.UpstreamHeader,
		Retries:        cfg.Retries,
		Timeouts:       balancer.TimeoutOptions(cfg.Timeouts),
		AccessLog:      cfg.AccessLog,
		Breaker: balancer.BreakerOptions{
			ConsecutiveFailures: cfg.Breaker.ConsecutiveFailures,
			FailureStatuses:     cfg.Breaker.FailureStatuses,
			OpenTimeout:         cfg.Breaker.OpenTimeout,
			MaxOpenTimeout:      cfg.Breaker.MaxOpenTimeout,
		},
		HealthChecks: cfg.Health != nil,
	}
	for _, u := range cfg.Upstreams {
		o.Upstreams = append(o.Upstreams, balancer.UpstreamOptions{Name: u.Name, URL: u.URL, Weight: u.Weight, Addr: u.Addr})
	}
	return o
}

// healthOptions converts the health block; nil when there is none.
func healthOptions(health *config.Health) *healthcheck.Options {
	if health == nil {
		return nil
	}
	return &healthcheck.Options{
		Path:      health.Path,
		Interval:  health.Interval,
		Timeout:   health.Timeout,
		Rise:      health.Rise,
		Fall:      health.Fall,
		ExpectMin: health.ExpectStatus.Min,
		ExpectMax: health.ExpectStatus.Max,
	}
}

func healthTargets(cfg *config.Config) []healthcheck.Target {
	ts := make([]healthcheck.Target, len(cfg.Upstreams))
	for i, u := range cfg.Upstreams {
		ts[i] = healthcheck.Target{Name: u.Name, URL: u.URL}
	}
	return ts
}
