package balancer

import (
	"net/netip"

	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/inflight"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/transport"
)

// Options configures a Balancer. Its blocks are the config file's; the
// command fills it from a config that its validation checked, which owns
// the bounds the fields' comments give. New and Update trust those bounds
// and reject only what they cannot run with: unknown words, an affinity
// cookie without a name, a load factor that leaves no upstream room,
// discovery under placement nginx, unusable key sources, upstreams and
// rings. Other values out of bounds are taken as the comments say (a
// negative count or limit as none, a list entry that no response can
// carry as never matching).
type Options struct {
	// Pool is the pool's name: the pool label of every per-upstream and
	// per-ring metric. Empty means DefaultPool. It is fixed by New
	// (Update ignores it).
	Pool string

	// PoolOptions are the pool's blocks as the config file writes them.
	PoolOptions

	// TrustedProxies are the peers whose X-Forwarded-For the ip key
	// source believes.
	TrustedProxies []netip.Prefix
	// UpstreamHeader, when not empty, is a response header that carries
	// the name of the upstream that served (or failed) the request; error
	// bodies name upstreams only when it is set.
	UpstreamHeader string
	// transport.UpstreamTLS says how https upstreams are verified.
	UpstreamTLS transport.UpstreamTLS

	// AccessLog, when not nil, gets one line per request.
	AccessLog *accesslog.Logger
	// RequestIDHeader, when not empty, names the request id header: a
	// request's id is passed on when the client sent one, else generated
	// (16 random bytes, hex) and sent upstream; either way the response
	// carries it unless the upstream set it.
	RequestIDHeader string

	// HealthChecks says that an active checker reports into the Balancer
	// (through a HealthReporter). A breaker's half-open trial then waits
	// for the check to say up. An Update that turns it off resets every
	// verdict to up and revokes the reporters handed out before it.
	HealthChecks bool

	// Limits bounds what one upstream and one slow client may hold (see
	// options.Limits); its zero value sets no limit.
	Limits options.Limits
	// Counts is where the requests in flight per upstream URL are counted
	// for Limits.UpstreamRequests; Balancers sharing one are limited
	// together. Read by New only; nil: the Balancer counts on its own.
	Counts *inflight.Counts
}

// PoolOptions are one pool's blocks, each field tagged with its name in
// the config file (a config without pools has them at its top level, and
// each entry of pools has its own): package config decodes the file into
// them, and the Balancer reads them as they are.
type PoolOptions struct {
	// Upstreams is upstreams: the static ring members.
	Upstreams []options.Upstream `yaml:"upstreams"`
	Ring      options.Ring       `yaml:"ring"`
	Hash      options.Hash       `yaml:"hash"`
	// Breaker is the breaker block: the per-upstream circuit breakers;
	// its zero value turns them off.
	Breaker breaker.Options `yaml:"breaker"`
	// Retries is retries: how many other upstreams a failed request may
	// be tried on; default 1, >= 0.
	Retries int `yaml:"retries" default:"1"`
	// RetryStatuses is retry_statuses (500-599); default none: the
	// response statuses that also count as a failed attempt for a
	// bodiless GET, HEAD or OPTIONS. Such a response is not passed on
	// while a retry is left and another upstream available (it is retried
	// on the next upstream clockwise), and counts for the breaker as it
	// would have.
	RetryStatuses []int            `yaml:"retry_statuses" default:"[]"`
	Timeouts      options.Timeouts `yaml:"timeouts"`
	// Discovery, when not nil, is the discovery block: ring members
	// resolved from DNS or Kubernetes, beside (or instead of) the static
	// Upstreams (which may then be empty); see package discovery for what
	// each field does. Nil when the block is absent. Its OnChange and
	// Logger are the Balancer's own.
	//
	// Discovered members are ring members like static ones (health
	// checks, breakers, slow start, bounded loads, metric series). A
	// member's name is its identity, so a member whose address changes
	// keeps its keys: only its proxy's target changes, and the ring
	// version does not. A member missing from its source's answer stays
	// on the ring but is skipped (skip reason "absent") until it returns
	// or is removed. A discovered name equal to a static upstream's is
	// ignored (the static one wins) and logged.
	Discovery *discovery.Options `yaml:"discovery"`
	// Hold is the hold block: it keeps keys in use on their upstream
	// through membership changes (routing rule 11; see hold.Options); its
	// zero Idle turns it off.
	Hold hold.Options `yaml:"hold"`
	// Handoff is the handoff block (routing rule 17; see package
	// handoff); its zero Header turns it off.
	Handoff handoff.Options `yaml:"handoff"`
}
