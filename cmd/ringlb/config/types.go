// Package config decodes, defaults and validates ringlb's YAML config file.
//
// Load reads a file strictly (unknown fields are errors), applies the
// defaults documented on each field, and validates the result, reporting
// every problem at once, each as "FILE:LINE: FIELD.PATH: message".
package config

import (
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/ring"
)

// Config is a decoded, defaulted and validated config file.
type Config struct {
	// File is the path the config was read from, as given to Load.
	File string

	Listen          string        // listen; default 127.0.0.1:8080
	AdminListen     string        // admin_listen; default 127.0.0.1:9901
	ShutdownTimeout time.Duration // shutdown_timeout; default 15s
	UpstreamHeader  string        // upstream_header; default X-Upstream; "" turns it off
	// TrustedProxies is trusted_proxies; default none. Entries are CIDRs
	// (host bits cleared: 10.1.2.3/8 reads as 10.0.0.0/8) or bare IPs, which
	// stand for themselves (/32 or /128).
	TrustedProxies []netip.Prefix
	AccessLog      bool // access_log; default false: one log line per request when true
	// DebugPprof is debug_pprof; default false. When true the admin
	// listener also serves net/http/pprof under /debug/pprof/.
	DebugPprof bool

	Hash      Hash
	Ring      Ring
	Upstreams []Upstream
	Health    *Health // nil when the health block is absent: no active checks
	Breaker   Breaker
	Retries   int // retries; default 1
	Timeouts  Timeouts
	// MaxHeaderBytes caps request headers; larger ones get 431. Default 65536.
	MaxHeaderBytes int
}

// Hash is the hash block.
type Hash struct {
	// Key is ordered: the first source present on a request gives its key.
	// Default: cookie session, header X-User-ID, query user, uri.
	Key []balancer.KeySource
	// OnMissing is random (default), reject or cookie.
	OnMissing balancer.OnMissing
	Cookie    AffinityCookie
}

// AffinityCookie is hash.cookie, used when on_missing is cookie.
// Its fields match balancer.CookieOptions, which the command converts it to.
type AffinityCookie struct {
	Name     string        // default ringlb_affinity
	TTL      time.Duration // default 24h
	Secure   bool          // default false
	HTTPOnly bool          // default true
}

// Ring is the ring block.
// Its fields match balancer.RingOptions, which the command converts it to.
type Ring struct {
	PointsPerWeight int // default 160
	// LoadFactor is the bounded-load factor c; default 0, which turns
	// bounded loads off (every request goes to its key's owner); else > 1.
	LoadFactor float64
	// LoadFloor is the least bounded-load cap in in-flight requests, so a
	// quiet fleet never splits a client's concurrent requests; default 8,
	// at least 1. Used only when LoadFactor > 1.
	LoadFloor     int
	Placement     ring.Placement // ringlb (default) or nginx
	SlowStart     time.Duration
	OnUnavailable balancer.OnUnavailable // remap (default) or fail
}

// Upstream is one entry of upstreams.
// Its fields match balancer.UpstreamOptions, which the command converts it to.
type Upstream struct {
	// Name is the upstream's identity on the ring under placement ringlb:
	// non-empty, unique, made of ASCII letters, digits and "-_.:".
	Name string
	// URL is absolute http or https with a host and no user info, path
	// (other than "/"), query or fragment; no two upstreams share one
	// (compared as scheme://host:port, default ports filled in).
	URL    *url.URL
	Weight float64 // default 1; > 0; whole under placement nginx
	// Addr is the URL's host[:port] exactly as written (nginx placement's identity).
	Addr string
}

// Health is the health block.
type Health struct {
	Path     string        // default /healthz
	Interval time.Duration // default 2s
	Timeout  time.Duration // default 1s; < Interval
	Rise     int           // default 2
	Fall     int           // default 3
	// ExpectStatus is the inclusive range of passing statuses; default 200-399.
	ExpectStatus StatusRange
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

// Breaker is the breaker block.
// Its fields match balancer.BreakerOptions, which the command converts it to.
type Breaker struct {
	ConsecutiveFailures int           // default 5; 0 turns breakers off
	FailureStatuses     []int         // default [502, 503, 504]
	OpenTimeout         time.Duration // default 5s
	MaxOpenTimeout      time.Duration // default 60s; >= OpenTimeout
}

// Timeouts is the timeouts block.
// Its fields match balancer.TimeoutOptions, which the command converts it to.
type Timeouts struct {
	Dial           time.Duration // default 2s
	ResponseHeader time.Duration // default 30s
	// Read is the longest an upstream's response body may stay silent:
	// the longest wait of one read after the head; default 60s, 0 for no
	// limit. Streams that idle longer (SSE, long polls) need it raised.
	Read     time.Duration
	IdleConn time.Duration // default 90s
}
