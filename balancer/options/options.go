// Package options holds the option blocks the config file and the
// Balancer share: an upstream, the ring, hash, timeouts and limits
// blocks, which the config decodes into and the Balancer reads as they
// are.
//
// Each field's comment names the field in the file, its default there
// (what a file without the field gets) and the bounds the config's
// validation enforces; where a library caller's zero value means
// something else, the comment says so.
package options

import (
	"net/url"
	"time"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/ring"
)

// Upstream describes one upstream: an entry of the config file's
// upstreams, which decodes into it. Each field's comment names the field
// in the file, its default there and the bounds the config's validation
// enforces.
type Upstream struct {
	// Name is name, the upstream's identity on the ring under placement
	// ringlb, and its label everywhere (metrics, logs, the upstream
	// header): non-empty, unique, made of ASCII letters, digits and
	// "-_.:".
	Name string `yaml:"name"`
	// URL is url, where requests go: an absolute http or https URL. A
	// path in it is prefixed to the request path; the config allows none
	// (other than "/"), nor user info, a query or a fragment, and no two
	// upstreams share one (compared as scheme://host:port, default ports
	// filled in).
	URL *url.URL `yaml:"url"`
	// Weight is weight; default 1; > 0, whole under placement nginx.
	Weight float64 `yaml:"weight" default:"1"`
	// Addr is the URL's host[:port] exactly as written; the identity under
	// placement nginx. It is not in the file: the config fills it in.
	Addr string
	// Protocol is protocol, how requests reach it: http1 (transport.HTTP1,
	// the default and the zero value), h2c (cleartext HTTP/2 with prior
	// knowledge; needs an http URL) or h2 (HTTP/2 over TLS; needs https).
	Protocol transport.Protocol `yaml:"protocol" default:"http1"`
	// State is state, the admin state the upstream starts in: ready
	// (state.Ready, the default and the zero value), drain or maint (see
	// state.Admin, routing rule 12). The Balancer's Update applies it only
	// when it differs from the previous options' State for this upstream,
	// so a state set through its SetState (the admin API) outlives reloads
	// that leave this field alone.
	State state.Admin `yaml:"state" default:"ready"`
}

// Ring is the ring block.
type Ring struct {
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

// Hash is the hash block.
type Hash struct {
	// Key is key, the key sources in order: the first present on a
	// request gives its key. Default: cookie session, header X-User-ID,
	// query user, uri; at least one.
	Key []key.Source `yaml:"key" default:"[{cookie: session}, {header: X-User-ID}, {query: user}, uri]"`
	// OnMissing is on_missing, what happens when no source is present:
	// OnMissingRandom (the default; also when empty), OnMissingReject or
	// OnMissingCookie.
	OnMissing OnMissing `yaml:"on_missing" default:"random"`
	// Cookie is cookie, the affinity cookie of OnMissingCookie.
	Cookie Cookie `yaml:"cookie"`
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

// DefaultBodyLimit is Hash.BodyLimit's default: 64 KiB.
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

// Cookie is hash.cookie, the affinity cookie.
type Cookie struct {
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

// Timeouts is the timeouts block; 0 means no limit. Dial,
// ResponseHeader and IdleConn tune the shared transport.
type Timeouts struct {
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

// Limits is the limits block: what one upstream, one client connection
// and one slow client may hold. It is the process's, not a pool's: every
// pool gets the same. Its zero value sets no limit.
type Limits struct {
	// UpstreamRequests is upstream_requests, the most requests in flight
	// to one upstream URL, counted in the Balancer's Options.Counts (so
	// across every Balancer sharing them: a process's pools); default
	// 1024; >= 0, 0 for no limit. A request for an upstream already
	// holding that many is answered 503 "upstream busy" at once: never
	// retried elsewhere (that would move its key) and never counted
	// against the upstream's breaker.
	UpstreamRequests int `yaml:"upstream_requests" default:"1024"`
	// StreamsPerConnection is streams_per_connection, the most concurrent
	// HTTP/2 streams one client connection may open; default 250 (Go's
	// own); >= 1. The command's listener reads it, at start (a change
	// needs a restart); the Balancer does not.
	StreamsPerConnection int `yaml:"streams_per_connection" default:"250"`
	// Send is send, the longest one write (or flush) to the client may
	// block; default 60s; >= 0, 0 for no limit. A write that takes longer
	// cuts the request: the client's stream or connection is broken off
	// and the upstream connection closed. Each write that completes
	// starts the wait anew, so a slow reader that keeps reading is never
	// cut.
	Send time.Duration `yaml:"send" default:"60s"`
	// BodyMemory is body_memory, the most bytes of request bodies held at
	// once to find their keys (json sources), all requests of every
	// Balancer sharing the process's families together (a Router's
	// pools); default 64 MiB; >= 0, 0 for no limit. Memory is taken as
	// the bytes arrive, never for what a Content-Length declares: a
	// buffer starts at 4 KiB and doubles when full, up to hash.body_limit
	// (or the declared length, if smaller). A request whose buffer would
	// take the total beyond the limit is answered 503 at once, counted in
	// ringlb_body_memory_refused_total; the bytes held are
	// ringlb_body_memory_bytes.
	BodyMemory int64 `yaml:"body_memory" default:"67108864"`
}
