package process

import (
	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/cmd/ringlb/certs"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/healthcheck"
)

// balancerOptions converts one pool of a config (&cfg.Pool without pools)
// to the balancer's options: the pool's blocks and the process's settings
// the request path reads. The blocks that are the balancer's own types
// (hash, ring, breaker, timeouts) are handed over as they are. It reads
// upstream_tls.ca_file, which config.Load has checked: it fails, with a
// *certs.FileError, only if the file changed since.
func balancerOptions(proc *config.Config, cfg *config.Pool) (balancer.Options, error) {
	o := balancer.Options{
		Pool:            cfg.Name,
		Ring:            cfg.Ring,
		Hash:            cfg.Hash,
		TrustedProxies:  proc.TrustedProxies,
		UpstreamHeader:  proc.UpstreamHeader,
		Retries:         cfg.Retries,
		RetryStatuses:   cfg.RetryStatuses,
		Timeouts:        cfg.Timeouts,
		RequestIDHeader: proc.RequestIDHeader,
		Breaker:         cfg.Breaker,
		Handoff:         cfg.Handoff,
		HealthChecks:    cfg.Health != nil,
		Discovery:       DiscoveryOptions(cfg.Discovery),
		Hold:            cfg.Hold,
		Limits: balancer.LimitOptions{UpstreamRequests: proc.Limits.UpstreamRequests, Send: proc.Limits.Send,
			BodyMemory: int64(proc.Limits.BodyMemory)},
	}
	var err error
	if o.UpstreamTLS, err = upstreamTLS(cfg); err != nil {
		return balancer.Options{}, err
	}
	for _, u := range cfg.Upstreams {
		p, _ := transport.ParseProtocol(u.Protocol) // validated by config
		st, _ := balancer.ParseAdminState(u.State)  // validated by config; "" (not defaulted) is ready
		o.Upstreams = append(o.Upstreams, balancer.UpstreamOptions{Name: u.Name, URL: u.URL, Weight: u.Weight, Addr: u.Addr, Protocol: p, State: st})
	}
	return o, nil
}

// upstreamTLS converts a pool's upstream_tls, reading its CA file.
func upstreamTLS(cfg *config.Pool) (transport.UpstreamTLS, error) {
	t := transport.UpstreamTLS{ServerName: cfg.UpstreamTLS.ServerName, InsecureSkipVerify: cfg.UpstreamTLS.InsecureSkipVerify}
	if f := cfg.UpstreamTLS.CAFile; f != "" {
		pool, err := certs.LoadCAFile(f)
		if err != nil {
			return t, err
		}
		t.RootCAs = pool
	}
	return t, nil
}

// transportOptions are the settings of the transports health probes use:
// the request path's timeouts and upstream TLS, in a pool of their own.
func transportOptions(cfg *config.Pool, tls transport.UpstreamTLS) transport.Options {
	return transport.Options{
		DialTimeout:           cfg.Timeouts.Dial,
		ResponseHeaderTimeout: cfg.Timeouts.ResponseHeader,
		IdleConnTimeout:       cfg.Timeouts.IdleConn,
		TLS:                   tls,
	}
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

// DiscoveryOptions converts the discovery block; nil when there is none.
func DiscoveryOptions(d *config.Discovery) *balancer.DiscoveryOptions {
	if d == nil {
		return nil
	}
	o := &balancer.DiscoveryOptions{
		Resolver: d.Resolver, Interval: d.Interval, Timeout: d.Timeout, RemoveAfter: d.RemoveAfter, Confirm: d.Confirm,
		Kubeconfig: d.Kubeconfig, ClusterDomain: d.ClusterDomain,
	}
	for _, s := range d.Sources {
		o.Sources = append(o.Sources, s.Source(d.Kubeconfig))
	}
	return o
}
