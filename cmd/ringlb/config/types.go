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
	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/balancer/route"
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

	Hash      Hash       `yaml:"hash"`
	Ring      Ring       `yaml:"ring"`
	Upstreams []Upstream `yaml:"upstreams"`
	Health    *Health    `yaml:"health"` // nil when the health block is absent: no active checks
	Breaker   Breaker    `yaml:"breaker"`
	Retries   int        `yaml:"retries" default:"1"` // retries; default 1
	// RetryStatuses is retry_statuses; default none. A bodiless GET, HEAD
	// or OPTIONS answered with one of these (500-599) is retried on the
	// next upstream clockwise, within Retries.
	RetryStatuses []int    `yaml:"retry_statuses" default:"[]"`
	Timeouts      Timeouts `yaml:"timeouts"`
	// UpstreamTLS is upstream_tls: how https upstreams are verified.
	UpstreamTLS UpstreamTLS `yaml:"upstream_tls"`
	// Discovery is nil when the discovery block is absent: the ring's
	// members are the static Upstreams only.
	Discovery *Discovery `yaml:"discovery"`
	// Hold is the hold block; its zero Idle turns hold off.
	Hold Hold `yaml:"hold"`
	// Handoff is the handoff block; its zero Header turns it off.
	Handoff Handoff `yaml:"handoff"`
}

// Limits is the limits block.
type Limits struct {
	// UpstreamRequests is limits.upstream_requests: the most requests in
	// flight to one upstream URL, counted across pools; default 1024, 0
	// for no limit. A request beyond it gets 503 at once.
	UpstreamRequests int `yaml:"upstream_requests" default:"1024"`
	// StreamsPerConnection is limits.streams_per_connection: the most
	// concurrent HTTP/2 streams one client connection may open; default
	// 250 (Go's own), >= 1. Taken at start (a change needs a restart).
	StreamsPerConnection int `yaml:"streams_per_connection" default:"250"`
	// Send is limits.send: the longest a write to a client may make no
	// progress before the request is cut; default 60s, 0 for no limit.
	Send time.Duration `yaml:"send" default:"60s"`
	// BodyMemory is limits.body_memory: the most bytes of request bodies
	// held at once to find json keys, all requests together; default
	// 64 MiB, 0 for no limit. A request beyond it gets 503 at once.
	BodyMemory int `yaml:"body_memory" default:"67108864"`
}

// The blocks the balancer reads as they are written are its own option
// types, documented there with their fields' names, defaults and bounds:
// the config holds them, and the command hands them over unchanged.
type (
	// Route is one entry of routes: a request whose host and path match
	// goes to Pool.
	Route = route.Route
	// Hash is the hash block.
	Hash = balancer.HashOptions
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
	AffinityCookie = balancer.CookieOptions
	// Ring is the ring block.
	Ring = balancer.RingOptions
	// Breaker is the breaker block.
	Breaker = breaker.Options
	// Timeouts is the timeouts block.
	Timeouts = balancer.TimeoutOptions
)

// Upstream is one entry of upstreams.
// Its fields match balancer.UpstreamOptions, which the command converts it to.
type Upstream struct {
	// Name is the upstream's identity on the ring under placement ringlb:
	// non-empty, unique, made of ASCII letters, digits and "-_.:".
	Name string `yaml:"name"`
	// URL is absolute http or https with a host and no user info, path
	// (other than "/"), query or fragment; no two upstreams share one
	// (compared as scheme://host:port, default ports filled in).
	URL    *url.URL `yaml:"url"`
	Weight float64  `yaml:"weight" default:"1"` // default 1; > 0; whole under placement nginx
	// Protocol is how ringlb talks to the upstream: ProtocolHTTP1 (the
	// default), ProtocolH2C (cleartext HTTP/2 with prior knowledge; needs
	// an http URL) or ProtocolH2 (HTTP/2 over TLS; needs an https URL).
	Protocol string `yaml:"protocol" default:"http1"`
	// Addr is the URL's host[:port] exactly as written (nginx placement's identity).
	Addr string
	// State is the admin state: StateReady (the default), StateDrain or
	// StateMaint (routing rule 12). Applied at start and by a reload that
	// changes it; a state set through the admin API outlives reloads that
	// leave it alone.
	State string `yaml:"state" default:"ready"`
}

// Health is the health block.
type Health struct {
	Path     string        `yaml:"path" default:"/healthz"` // default /healthz
	Interval time.Duration `yaml:"interval" default:"2s"`   // default 2s
	Timeout  time.Duration `yaml:"timeout" default:"1s"`    // default 1s; < Interval
	Rise     int           `yaml:"rise" default:"2"`        // default 2
	Fall     int           `yaml:"fall" default:"3"`        // default 3
	// ExpectStatus is the inclusive range of passing statuses; default 200-399.
	ExpectStatus StatusRange `yaml:"expect_status" default:"200-399"`
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

// Discovery is the discovery block: ring members resolved from DNS, beside
// (or instead of) the static upstreams. Validation resolves nothing.
type Discovery struct {
	// Resolver is the host:port of the DNS server asked; "" (the default)
	// uses the system's resolver configuration.
	Resolver    string        `yaml:"resolver"`
	Interval    time.Duration `yaml:"interval" default:"5s"`     // default 5s; every source is resolved again this often
	Timeout     time.Duration `yaml:"timeout" default:"2s"`      // default 2s; per query; < Interval
	RemoveAfter time.Duration `yaml:"remove_after" default:"5m"` // default 5m; >= 0; an absent member is removed after this
	// Confirm is how many identical answers in a row it takes to apply one
	// that would leave a source with fewer than half of its present
	// members. Default 3; >= 1 (1: apply at once).
	Confirm int `yaml:"confirm" default:"3"`
	// Kubeconfig is the kubeconfig file of the kubernetes sources' API
	// server, relative to the config file's directory and held resolved;
	// "" (the default) uses the pod's service account (in-cluster).
	Kubeconfig string `yaml:"kubeconfig" decode:"path"`
	// ClusterDomain is the cluster's DNS domain, part of the names of
	// endpoints with a hostname; default "cluster.local".
	ClusterDomain string `yaml:"cluster_domain" default:"cluster.local"`
	// Sources lists at least one source; no two share a Name().
	Sources []DiscoverySource `yaml:"sources" default:"[]"`
}

// DiscoverySource is one entry of discovery.sources: exactly one of SRV,
// Host and Kubernetes is set.
type DiscoverySource struct {
	SRV  string `yaml:"srv"`  // srv: a DNS name whose SRV records give one member per target
	Host string `yaml:"host"` // host: a DNS name whose A and AAAA records give one member per address
	Port int    `yaml:"port"` // port: 1-65535, with Host only (SRV records carry their ports)
	// Kubernetes is the kubernetes block: a Service port whose
	// EndpointSlices give the members; nil when absent.
	Kubernetes *KubernetesSource `yaml:"kubernetes"`
	// Scheme is http (default) or https: the members' URLs are
	// SCHEME://ADDRESS:PORT.
	Scheme string `yaml:"scheme" default:"http"`
	// Protocol is how members are spoken to: http1 (default), h2c
	// (cleartext HTTP/2, scheme http) or h2 (scheme https).
	Protocol string  `yaml:"protocol" default:"http1"`
	Weight   float64 `yaml:"weight" default:"1"` // default 1; > 0: the ring weight of each member
}

// KubernetesSource is a source's kubernetes block.
type KubernetesSource struct {
	Service string `yaml:"service"` // service: the Service's name; required
	// Namespace is the Service's namespace; "" is the namespace ringlb's
	// pod runs in (in-cluster, read from its service account), else
	// "default". Use Resolved for the one that applies.
	Namespace string `yaml:"namespace"`
	Port      string `yaml:"port"` // port: the EndpointSlice port's name or number; required
}

// Name returns the source as configured: its srv or host value, or for a
// kubernetes source "kubernetes:NAMESPACE/SERVICE:PORT" (an unset
// namespace as discovery.DefaultNamespace gives it). It labels the source
// in metrics, logs and the admin pages.
func (s DiscoverySource) Name() string {
	switch {
	case s.SRV != "":
		return s.SRV
	case s.Kubernetes != nil:
		return s.kube("").String()
	}
	return s.Host
}

// The values of upstreams[].state.
const (
	StateReady = "ready"
	StateDrain = "drain"
	StateMaint = "maint"
)

// kube returns the kubernetes block as package discovery takes it, an
// unset namespace filled in for kubeconfig; zero without the block.
func (s DiscoverySource) kube(kubeconfig string) discovery.KubeService {
	k := s.Kubernetes
	if k == nil {
		return discovery.KubeService{}
	}
	ns := k.Namespace
	if ns == "" {
		ns = discovery.DefaultNamespace(kubeconfig)
	}
	return discovery.KubeService{Service: k.Service, Namespace: ns, Port: k.Port}
}

// Source returns the source as package discovery takes it, for a
// discovery block whose kubeconfig is kubeconfig.
func (s DiscoverySource) Source(kubeconfig string) discovery.Source {
	return discovery.Source{
		SRV: s.SRV, Host: s.Host, Port: s.Port, Kubernetes: s.kube(kubeconfig),
		Scheme: s.Scheme, Protocol: s.Protocol, Weight: s.Weight,
	}
}

// The values of upstreams[].protocol.
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

// UpstreamTLS is the upstream_tls block, used for https upstreams.
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
