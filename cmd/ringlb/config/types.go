// Package config decodes, defaults and validates ringlb's YAML config file.
//
// Load reads a file strictly (unknown fields are errors), applies the
// defaults documented on each field, and validates the result, reporting
// every problem at once, each as "FILE:LINE: FIELD.PATH: message".
package config

import (
	"net/netip"
	"time"

	"github.com/ringlb/ringlb/balancer"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/route"
	"github.com/ringlb/ringlb/healthcheck"
)

// Config is a decoded, defaulted and validated config file.
type Config struct {
	// File is the path the config was read from, as given to Load.
	File string

	Listen          string        `yaml:"listen" default:"127.0.0.1:8080"`       // listen; default 127.0.0.1:8080
	AdminListen     string        `yaml:"admin_listen" default:"127.0.0.1:9901"` // admin_listen; default 127.0.0.1:9901
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" default:"15s"`        // shutdown_timeout; default 15s
	// ShutdownDelay is shutdown_delay; default 0s; >= 0. After a shutdown
	// signal /readyz answers 503 at once and the proxy keeps accepting
	// this long before draining, while load balancers in front (a
	// Kubernetes Service's endpoints) stop sending.
	ShutdownDelay  time.Duration `yaml:"shutdown_delay"`
	UpstreamHeader string        `yaml:"upstream_header"` // upstream_header; default "" (off); e.g. X-Upstream names the upstream
	// TrustedProxies is trusted_proxies; default none. Entries are CIDRs
	// (host bits cleared: 10.1.2.3/8 reads as 10.0.0.0/8) or bare IPs, which
	// stand for themselves (/32 or /128).
	TrustedProxies []netip.Prefix `yaml:"trusted_proxies" default:"[]"`
	// AccessLog is access_log: {format, path}, or false (off) / true
	// (format text); default off.
	AccessLog AccessLog `yaml:"access_log"`
	// RequestIDHeader is request_id_header; default X-Request-Id, "" off.
	RequestIDHeader string `yaml:"request_id_header" default:"X-Request-Id"`
	// DebugPprof is debug_pprof; default false. When true the admin
	// listener also serves net/http/pprof under /debug/pprof/.
	DebugPprof bool `yaml:"debug_pprof"`

	// Pool is the top-level pool blocks (hash, ring, upstreams, ...): the
	// one pool, named DefaultPool, of a config without pools. With pools it
	// is unused (those blocks at the top level are errors).
	Pool
	// Pools is the pools block in file order; nil without one. See Serving.
	Pools []Pool `yaml:"pools"`
	// Routes is the routes block in order (the first match wins); nil
	// without pools.
	Routes []Route `yaml:"routes"`
	// TLS is the tls block; nil when absent: plain HTTP on Listen.
	TLS *TLS `yaml:"tls"`
	// HTTP2 is http2; default true. With TLS it offers h2 beside
	// http/1.1 by ALPN; false serves HTTP/1.1 only. Without TLS it has no
	// effect unless H2C is set.
	HTTP2 bool `yaml:"http2" default:"true"`
	// H2C is h2c; default false. Without TLS it also accepts cleartext
	// HTTP/2 with prior knowledge beside HTTP/1.1; with TLS it is an error.
	H2C bool `yaml:"h2c"`

	// Expired holds, for tls.cert_file, a problem saying that the
	// certificate had expired (or was not valid yet) when the config was
	// loaded. It is not a load error: the pair loads and is served, and
	// clients decide; `ringlb validate` reports it as a problem.
	Expired Errors
	// MaxHeaderBytes caps request headers; larger ones get 431. Default 65536.
	MaxHeaderBytes int `yaml:"max_header_bytes" default:"65536"`
	// Limits is the limits block: what one upstream, one client
	// connection and one slow client may hold. Process-wide: not a pool's.
	Limits Limits `yaml:"limits"`

	// sums are the fingerprints of the pools that a later load may take
	// as they are (see SamePool); nil without pools.
	sums map[string]poolSum
}

// DefaultPool is the name of the one pool of a config without pools.
const DefaultPool = "default"

// Pool is one pool: the blocks a config without pools has at its top
// level, and an entry of pools. Each pool has its own ring, members,
// checks, breakers and hold records.
type Pool struct {
	// Name is the pool's name: the key under pools ([a-z0-9_-]+), or
	// DefaultPool.
	Name string

	// PoolOptions are the blocks the balancer reads as they are written:
	// upstreams, ring, hash, breaker, retries, retry_statuses, timeouts,
	// discovery, hold and handoff.
	balancer.PoolOptions

	Health *Health `yaml:"health"` // nil when the health block is absent: no active checks
	// UpstreamTLS is upstream_tls: how https upstreams are verified.
	UpstreamTLS UpstreamTLS `yaml:"upstream_tls"`
}

// The blocks the balancer reads as they are written are its own option
// types, documented there with their fields' names, defaults and bounds:
// the config holds them, and the command hands them over unchanged.
type (
	// Route is one entry of routes: a request whose host and path match
	// goes to Pool.
	Route = route.Route
	// Upstream is one entry of upstreams.
	Upstream = options.Upstream
	// Hash is the hash block.
	Hash = options.Hash
	// Handoff is the handoff block.
	Handoff = handoff.Options
	// Hold is the hold block: keys in use stay on the upstream that
	// served them through membership changes.
	Hold = hold.Options
	// HoldCookie is hold.cookie.
	HoldCookie = hold.CookieOptions
	// HoldShare is hold.share: the records shared between replicas
	// through a Redis server (routing rule 14).
	HoldShare = share.Options
	// AffinityCookie is hash.cookie, used when on_missing is cookie.
	AffinityCookie = options.Cookie
	// Ring is the ring block.
	Ring = options.Ring
	// Breaker is the breaker block.
	Breaker = breaker.Options
	// Timeouts is the timeouts block.
	Timeouts = options.Timeouts
	// Limits is the limits block.
	Limits = options.Limits
	// Health is the health block.
	Health = healthcheck.Options
	// StatusRange is health.expect_status.
	StatusRange = healthcheck.StatusRange
	// Discovery is the discovery block: ring members resolved from DNS or
	// Kubernetes, beside (or instead of) the static upstreams. Validation
	// resolves nothing.
	Discovery = discovery.Options
	// DiscoverySource is one entry of discovery.sources: exactly one of
	// SRV, Host and Kubernetes is set.
	DiscoverySource = discovery.Source
	// KubernetesSource is a source's kubernetes block.
	KubernetesSource = discovery.KubeService
)

// The values of discovery.sources[].protocol.
const (
	ProtocolHTTP1 = "http1"
	ProtocolH2C   = "h2c"
	ProtocolH2    = "h2"
)

// TLS is the tls block: the proxy listener's certificate.
//
// Relative paths are read from the config file's directory; CertFile and
// KeyFile hold them resolved.
type TLS struct {
	CertFile string `yaml:"cert_file" decode:"path"` // cert_file: PEM, the leaf first, then any chain; required
	KeyFile  string `yaml:"key_file" decode:"path"`  // key_file: PEM private key matching the leaf; required
	// MinVersion is min_version, "1.2" (default) or "1.3", as
	// tls.VersionTLS12 or tls.VersionTLS13.
	MinVersion uint16 `yaml:"min_version" decode:"tls_version" default:"1.2"`
}

// UpstreamTLS is the upstream_tls block, used for https upstreams. The
// transports take transport.UpstreamTLS, which holds the roots themselves:
// the command reads CAFile into it.
type UpstreamTLS struct {
	// CAFile is ca_file: PEM roots to verify upstreams against; "" uses
	// the system's. Relative to the config file's directory; held resolved.
	CAFile string `yaml:"ca_file" decode:"path"`
	// ServerName is server_name: sent as SNI and verified in the
	// upstream's certificate; "" uses each URL's host.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify is insecure_skip_verify; default false. True
	// accepts any certificate (for tests and private networks only).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// AccessLog is the access_log block.
type AccessLog struct {
	// Format is "" (off), text (slog, as ringlb's other lines), json or
	// combined (nginx's combined format, then ringlb's fields).
	Format string `yaml:"format"`
	// Path is the file written to, "" for standard output; reopened on
	// SIGUSR1. A relative path is the config file's directory's.
	Path string `yaml:"path"`
}

// On reports whether the access log is on.
func (a AccessLog) On() bool { return a.Format != "" }
