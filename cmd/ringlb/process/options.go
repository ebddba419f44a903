package process

import (
	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/cmd/ringlb/certs"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// balancerOptions converts one pool of a config (&cfg.Pool without pools)
// to the balancer's options: the pool's blocks and the process's settings
// the request path reads. The blocks that are the balancer's own types
// (upstreams, hash, ring, breaker, timeouts, discovery, handoff and
// limits) are handed over as they are. It reads upstream_tls.ca_file,
// which config.Load has checked: it fails, with a *certs.FileError, only
// if the file changed since.
func balancerOptions(proc *config.Config, cfg *config.Pool) (balancer.Options, error) {
	o := balancer.Options{
		Pool:            cfg.Name,
		PoolOptions:     cfg.PoolOptions,
		TrustedProxies:  proc.TrustedProxies,
		UpstreamHeader:  proc.UpstreamHeader,
		RequestIDHeader: proc.RequestIDHeader,
		HealthChecks:    cfg.Health != nil,
		Limits:          proc.Limits,
	}
	if len(o.Upstreams) == 0 { // none is nil, written "upstreams: []" or not, for sameOptions
		o.Upstreams = nil
	}
	var err error
	if o.UpstreamTLS, err = upstreamTLS(cfg); err != nil {
		return balancer.Options{}, err
	}
	return o, nil
}

// upstreamTLS converts a pool's upstream_tls, reading its CA file. The
// config keeps a block of its own for it: the file it names is read here,
// at every start and reload, into the pool of roots the transports take.
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
