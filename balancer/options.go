package balancer

import (
	"net/netip"
	"net/url"
	"time"

	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/ring"
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

	Upstreams []UpstreamOptions
	Ring      RingOptions
	Hash      HashOptions

	// TrustedProxies are the peers whose X-Forwarded-For the ip key
	// source believes.
	TrustedProxies []netip.Prefix
	// UpstreamHeader, when not empty, is a response header that carries
	// the name of the upstream that served (or failed) the request; error
	// bodies name upstreams only when it is set.
	UpstreamHeader string
	// Retries is how many other upstreams a failed request may be tried on.
	Retries int
	// RetryStatuses (500-599) are the response statuses that also count
	// as a failed attempt for a bodiless GET, HEAD or OPTIONS: such a
	// response is not passed on while a retry is left and another
	// upstream available, and counts for the breaker as it would have.
	RetryStatuses []int
	Timeouts      TimeoutOptions
	// transport.UpstreamTLS says how https upstreams are verified.
	UpstreamTLS transport.UpstreamTLS

	// AccessLog, when not nil, gets one line per request.
	AccessLog *accesslog.Logger
	// RequestIDHeader, when not empty, names the request id header: a
	// request's id is passed on when the client sent one, else generated
	// (16 random bytes, hex) and sent upstream; either way the response
	// carries it unless the upstream set it.
	RequestIDHeader string

	// Breaker configures the per-upstream circuit breakers; its zero
	// value turns them off.
	Breaker breaker.Options
	// Discovery, when not nil, adds members resolved from DNS to the
	// static Upstreams (which may then be empty); see DiscoveryOptions.
	Discovery *DiscoveryOptions
	// HealthChecks says that an active checker reports into the Balancer
	// (through a HealthReporter). A breaker's half-open trial then waits
	// for the check to say up. An Update that turns it off resets every
	// verdict to up and revokes the reporters handed out before it.
	HealthChecks bool

	// Hold keeps keys in use on their upstream through membership
	// changes (routing rule 11; see hold.Options); its zero value turns
	// it off.
	Hold hold.Options
	// Handoff is the handoff block (routing rule 17; see package
	// handoff); its zero Header turns it off.
	Handoff handoff.Options

	// Limits bounds what one upstream and one slow client may hold (see
	// LimitOptions); its zero value sets no limit.
	Limits LimitOptions
	// Counts is where the requests in flight per upstream URL are counted
	// for Limits.UpstreamRequests; Balancers sharing one are limited
	// together. Read by New only; nil: the Balancer counts on its own.
	Counts *UpstreamCounts
}

// UpstreamOptions describes one upstream. Its fields are in the
// config's order, so the command converts one into the other.
type UpstreamOptions struct {
	// Name is the upstream's identity on the ring under placement ringlb,
	// and its label everywhere (metrics, logs, the upstream header).
	Name string
	// URL is where requests go: an absolute http or https URL. A path in it
	// is prefixed to the request path.
	URL *url.URL
	// Weight is > 0.
	Weight float64
	// Addr is the URL's host[:port] exactly as written; the identity under
	// placement nginx.
	Addr string
	// transport.Protocol is how requests reach it: HTTP/1.1 (the zero value), h2c
	// (needs an http URL) or h2 (needs https).
	Protocol transport.Protocol
	// State is the admin state the upstream starts in (StateReady, the
	// zero value, StateDrain or StateMaint; see AdminState). Update
	// applies it only when it differs from the previous options' State
	// for this upstream, so a state set through SetState outlives reloads
	// that leave this field alone.
	State AdminState
}

// RingOptions is the ring block of the config file, which decodes into it.
//
// The option blocks the config file shares with the Balancer (RingOptions,
// HashOptions, CookieOptions, TimeoutOptions, breaker.Options, Route) are
// documented for both: each field's comment names the field in the file,
// its default there (what a file without the field gets) and the bounds
// the config's validation enforces; where a library caller's zero value
// means something else, the comment says so.
type RingOptions struct {
	// PointsPerWeight is points_per_weight, the number of ring points per
	// unit of weight; default 160; 1-10000. Under placement nginx it is
	// ring.NginxPointsPerWeight, fixed: the file leaves it unset or writes
	// 160 (for a library caller 0 means 160 there).
	PointsPerWeight int `yaml:"points_per_weight" default:"160"`
	// LoadFactor is load_factor, the bounded-load factor c; default 0,
	// which turns bounded loads off (every request goes to its key's
	// owner); else > 1.
	LoadFactor float64 `yaml:"load_factor"`
	// LoadFloor is load_floor, the least bounded-load cap, so that a quiet
	// fleet never splits a client's concurrent requests: no upstream
	// counts as full below this many in-flight requests (ring.Limit);
	// default 8; >= 1 (values below 1 count as 1, the proportional cap
	// alone). Used only when LoadFactor > 1.
	LoadFloor int `yaml:"load_floor" default:"8"`
	// Placement is placement: ring.PlacementRinglb (the default; also
	// when empty) or ring.PlacementNginx.
	Placement ring.Placement `yaml:"placement" default:"ringlb"`
	// SlowStart is slow_start; default 0s, off; >= 0. When > 0 it is how
	// long an upstream added by a reload (or readmitted after an
	// ejection) takes to get all its points back.
	SlowStart time.Duration `yaml:"slow_start"`
	// OnUnavailable is on_unavailable, what a request whose key's owner is
	// unavailable gets: OnUnavailableRemap (the default; also when empty)
	// or OnUnavailableFail, which needs LoadFactor 0 and SlowStart 0.
	OnUnavailable OnUnavailable `yaml:"on_unavailable" default:"remap"`
}

// OnUnavailable is ring.on_unavailable.
type OnUnavailable string

const (
	// OnUnavailableRemap skips clockwise to the next available upstream.
	OnUnavailableRemap OnUnavailable = "remap"
	// OnUnavailableFail answers 503 when the key's owner is unavailable,
	// and never retries elsewhere.
	OnUnavailableFail OnUnavailable = "fail"
)

// HashOptions is the hash block of the config file, which decodes into it
// (see RingOptions).
type HashOptions struct {
	// Key is key, the key sources in order: the first present on a
	// request gives its key. Default: cookie session, header X-User-ID,
	// query user, uri; at least one.
	Key []key.Source `yaml:"key" default:"[{cookie: session}, {header: X-User-ID}, {query: user}, uri]"`
	// OnMissing is on_missing, what happens when no source is present:
	// OnMissingRandom (the default; also when empty), OnMissingReject or
	// OnMissingCookie.
	OnMissing OnMissing `yaml:"on_missing" default:"random"`
	// Cookie is cookie, the affinity cookie of OnMissingCookie.
	Cookie CookieOptions `yaml:"cookie"`
	// BodyLimit is body_limit, how many bytes of a request body json key
	// sources read at most before deciding; default 65536; >= 1 (values
	// below 1 mean DefaultBodyLimit).
	BodyLimit int `yaml:"body_limit" default:"65536"`
	// SaltFile is salt_file, the path (relative to the config file's
	// directory) of a file holding the fleet's secret salt; default ""
	// (reported hashes are ring positions). The config reads it into Salt
	// (surrounding blanks and line ends removed, at least 16 bytes); the
	// balancer reads only Salt.
	SaltFile string `yaml:"salt_file"`
	// Salt, when not empty (hash.salt_file's content), keys the key
	// hashes the balancer reports: the access log's key_hash, the hashes
	// of HotKeys (and what LookupHash takes), and the names of the shared
	// hold store's records (see package keyhash). It never changes where
	// a key goes, nor Lookup's Hash, the ring position. Every replica
	// sharing a hold store needs the same salt. It is not in the file.
	Salt []byte
}

// DefaultBodyLimit is HashOptions.BodyLimit's default: 64 KiB.
const DefaultBodyLimit = 64 << 10

// OnMissing is hash.on_missing.
type OnMissing string

const (
	// OnMissingRandom sends a request without a key to a random position.
	OnMissingRandom OnMissing = "random"
	// OnMissingReject answers 400.
	OnMissingReject OnMissing = "reject"
	// OnMissingCookie generates an affinity id, hashes it and sets it as
	// the affinity cookie on the response.
	OnMissingCookie OnMissing = "cookie"
)

// CookieOptions is hash.cookie, the affinity cookie (see RingOptions).
type CookieOptions struct {
	// Name is name; default ringlb_affinity; a valid cookie name.
	Name string `yaml:"name" default:"ringlb_affinity"`
	// TTL is ttl, the cookie's Max-Age; default 24h; > 0 (0 makes it a
	// session cookie).
	TTL time.Duration `yaml:"ttl" default:"24h"`
	// Secure is secure; default false.
	Secure bool `yaml:"secure"`
	// HTTPOnly is http_only; default true.
	HTTPOnly bool `yaml:"http_only" default:"true"`
}

// TimeoutOptions is the timeouts block of the config file, which decodes
// into it (see RingOptions); 0 means no limit. Dial, ResponseHeader and
// IdleConn tune the shared transport.
type TimeoutOptions struct {
	// Dial is dial; default 2s; > 0.
	Dial time.Duration `yaml:"dial" default:"2s"`
	// ResponseHeader is response_header; default 30s; > 0.
	ResponseHeader time.Duration `yaml:"response_header" default:"30s"`
	// Read is read, the longest one read of an upstream's response body
	// may wait for data; default 60s; >= 0 (0: no limit). A body silent
	// for longer is cut, the client sees it truncated and the upstream's
	// breaker counts a failure (upgraded connections are not limited).
	// Streams that idle longer (SSE, long polls) need it raised.
	Read time.Duration `yaml:"read" default:"60s"`
	// ClientBody is client_body, the same for a request body, read from
	// the client (nginx's client_body_timeout); default 60s; >= 0 (0: no
	// limit). A body silent for longer gets 408 and its upstream request
	// is cut, never counted against the upstream.
	ClientBody time.Duration `yaml:"client_body" default:"60s"`
	// IdleConn is idle_conn; default 90s; > 0.
	IdleConn time.Duration `yaml:"idle_conn" default:"90s"`
}
