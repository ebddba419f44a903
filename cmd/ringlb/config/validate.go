package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/ring"
)

// Limits that keep a config from building an unreasonably large ring.
const (
	maxPointsPerWeight = 10000
	maxPointsPerMember = 1_000_000
	maxPointsTotal     = 10_000_000
	minMaxHeaderBytes  = 1024
)

// validate checks the defaulted config and records every problem.
func (d *decoder) validate(c *Config) {
	d.validateListeners(c)
	if c.ShutdownTimeout < 0 {
		d.invalid("shutdown_timeout", "must be >= 0, got %s", c.ShutdownTimeout)
	}
	if c.ShutdownDelay < 0 {
		d.invalid("shutdown_delay", "must be >= 0, got %s", c.ShutdownDelay)
	}
	switch c.AccessLog.Format {
	case "", "text", "json", "combined":
	default:
		d.invalid("access_log.format", "must be \"\" (off), text, json or combined, got %q", short(c.AccessLog.Format))
	}
	if c.AccessLog.Path != "" {
		if c.AccessLog.Format == "" {
			d.invalid("access_log.path", "is set but access_log.format is \"\" (off); set a format or remove path")
		} else {
			c.AccessLog.Path = resolvePath(d.file, c.AccessLog.Path)
			if fi, err := os.Stat(filepath.Dir(c.AccessLog.Path)); err != nil || !fi.IsDir() {
				d.invalid("access_log.path", "%q: its directory does not exist", short(c.AccessLog.Path))
			}
		}
	}
	if c.RequestIDHeader != "" && !isToken(c.RequestIDHeader) {
		d.invalid("request_id_header", "must be a valid header name (or \"\" to turn it off), got %q", short(c.RequestIDHeader))
	}
	if c.UpstreamHeader != "" && !isToken(c.UpstreamHeader) {
		d.invalid("upstream_header", "must be a valid header name (or \"\" to turn it off), got %q", short(c.UpstreamHeader))
	}
	if c.MaxHeaderBytes < minMaxHeaderBytes {
		d.invalid("max_header_bytes", "must be >= %d, got %d", minMaxHeaderBytes, c.MaxHeaderBytes)
	}
	if c.Limits.UpstreamRequests < 0 {
		d.invalid("limits.upstream_requests", "must be >= 0 (0: no limit), got %d", c.Limits.UpstreamRequests)
	}
	if c.Limits.StreamsPerConnection < 1 {
		d.invalid("limits.streams_per_connection", "must be >= 1, got %d", c.Limits.StreamsPerConnection)
	}
	if c.Limits.Send < 0 {
		d.invalid("limits.send", "must be >= 0 (0: no limit), got %s", c.Limits.Send)
	}
	if c.Limits.BodyMemory < 0 {
		d.invalid("limits.body_memory", "must be >= 0 (0: no limit), got %d", c.Limits.BodyMemory)
	}
	d.validateTLS(c)
	if c.Pools == nil {
		if d.has("routes") {
			d.invalid("routes", "needs pools: routes send requests to the pools they name")
		}
		d.validatePool(&c.Pool)
		return
	}
	d.validatePools(c)
}

// validatePool checks one pool's blocks; d is scoped to the pool.
func (d *decoder) validatePool(p *Pool) {
	d.validateHash(&p.Hash)
	d.validateRing(&p.Ring)
	d.validateUpstreams(p)
	if p.Health != nil {
		d.validateHealth(p.Health)
	}
	d.validateBreaker(&p.Breaker)
	if p.Retries < 0 {
		d.invalid("retries", "must be >= 0, got %d", p.Retries)
	}
	for i, s := range p.RetryStatuses {
		if s < 500 || s > 599 {
			d.invalid(index("retry_statuses", i), "must be an HTTP status 500-599, got %d", s)
		}
	}
	positive("timeouts.dial", p.Timeouts.Dial, d)
	positive("timeouts.response_header", p.Timeouts.ResponseHeader, d)
	positive("timeouts.idle_conn", p.Timeouts.IdleConn, d)
	if p.Timeouts.Read < 0 {
		d.invalid("timeouts.read", "must be >= 0 (0: no limit), got %s", p.Timeouts.Read)
	}
	if p.Timeouts.ClientBody < 0 {
		d.invalid("timeouts.client_body", "must be >= 0 (0: no limit), got %s", p.Timeouts.ClientBody)
	}
	if p.Discovery != nil {
		d.validateDiscovery(p)
	}
	d.validateHold(p)
	d.validateUpstreamTLS(&p.UpstreamTLS)
}

// validateTLS checks tls, http2 and h2c; the files tls names are read by
// checkFiles.
func (d *decoder) validateTLS(c *Config) {
	if t := c.TLS; t != nil {
		for _, f := range [...]struct {
			field string
			val   string
		}{{"tls.cert_file", t.CertFile}, {"tls.key_file", t.KeyFile}} {
			switch {
			case !d.has(f.field):
				d.invalid(f.field, "required with tls")
			case f.val == "":
				d.invalid(f.field, "must not be empty")
			}
		}
	}
	if c.H2C && !d.isBad("h2c") {
		switch {
		case c.TLS != nil:
			d.invalid("h2c", "must be false with tls: cleartext HTTP/2 is for listeners without TLS (over TLS, http2 offers h2 by ALPN)")
		case !c.HTTP2 && !d.isBad("http2"):
			d.invalid("h2c", "must be false with http2: false, which turns HTTP/2 off")
		}
	}
}

// validateUpstreamTLS checks a pool's upstream_tls; its CA file is read by
// checkFiles.
func (d *decoder) validateUpstreamTLS(u *UpstreamTLS) {
	if u.InsecureSkipVerify && u.CAFile != "" {
		d.invalid("upstream_tls.insecure_skip_verify", "must be false with upstream_tls.ca_file, which it would ignore")
	}
	if u.ServerName != "" && !validServerName(u.ServerName) {
		d.invalid("upstream_tls.server_name", "must be a host name or IP address, got %q", short(u.ServerName))
	}
}

// validServerName reports whether s can be sent as SNI and verified: an IP
// address or a DNS name of letters, digits, '-', '_' and '.' (a leading
// "*." is not a name a server has).
func validServerName(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	if len(s) > 253 || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func positive(f string, v time.Duration, d *decoder) {
	if v <= 0 {
		d.invalid(f, "must be > 0, got %s", v)
	}
}

// listener is a parsed listen address.
type listener struct {
	host string
	port int
}

// parseListen reads host:port with a numeric port 0-65535 (0: any free
// port). The host may be empty (all interfaces).
func parseListen(s string) (listener, bool) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return listener{}, false
	}
	p, _ := strconv.Atoi(port)
	if p > 65535 {
		return listener{}, false
	}
	return listener{host: host, port: p}, true
}

func (l listener) wildcard() bool {
	if l.host == "" {
		return true
	}
	a, err := netip.ParseAddr(l.host)
	return err == nil && a.IsUnspecified()
}

// overlaps reports whether two listeners would contend for the same
// socket: same port (not 0, which picks a free one) and the same host, or
// either host a wildcard. Host names are resolved first, so localhost:8080
// and 127.0.0.1:8080 overlap; a name that does not resolve is compared as
// written (binding it fails anyway).
func (l listener) overlaps(o listener) bool {
	if l.port == 0 || l.port != o.port {
		return false
	}
	if l.wildcard() || o.wildcard() || strings.EqualFold(l.host, o.host) {
		return true
	}
	as, bs := hostAddrs(l.host), hostAddrs(o.host)
	for _, a := range as {
		for _, b := range bs {
			if a == b || a.IsUnspecified() || b.IsUnspecified() {
				return true
			}
		}
	}
	return false
}

// LoopsBack reports whether an upstream URL names ringlb's own proxy
// listener (listen): the same port, and the same host, or any loopback address
// when ringlb listens on every address. Host names other than localhost
// are compared as written, without lookups, so this catches the plain
// mistakes only (an upstream on another machine never matches).
func LoopsBack(listen string, u *url.URL) bool {
	l, ok := parseListen(listen)
	if !ok || l.port == 0 {
		return false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if port != strconv.Itoa(l.port) {
		return false
	}
	host := u.Hostname()
	ups := literalAddrs(host)
	if l.wildcard() {
		return slices.ContainsFunc(ups, func(a netip.Addr) bool { return a.IsLoopback() || a.IsUnspecified() })
	}
	if strings.EqualFold(l.host, host) {
		return true
	}
	for _, a := range literalAddrs(l.host) {
		if slices.Contains(ups, a) {
			return true
		}
	}
	return false
}

// literalAddrs returns the addresses host stands for without asking a
// resolver: itself when it is an IP address, the loopback addresses for
// localhost, else none.
func literalAddrs(host string) []netip.Addr {
	if strings.EqualFold(host, "localhost") {
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap().WithZone("")}
	}
	return nil
}

// resolveTimeout bounds the name lookups of listen addresses.
const resolveTimeout = 2 * time.Second

// hostAddrs returns the addresses host stands for: itself when it is an
// IP address, else what the system resolver says (nothing on failure).
// Addresses are unmapped and without zone.
func hostAddrs(host string) []netip.Addr {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap().WithZone("")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap().WithZone("")
	}
	return addrs
}

func (d *decoder) validateListeners(c *Config) {
	l, okL := parseListen(c.Listen)
	if !okL {
		d.invalid("listen", "must be host:port with a port 0-65535, got %q", short(c.Listen))
	}
	a, okA := parseListen(c.AdminListen)
	if !okA {
		d.invalid("admin_listen", "must be host:port with a port 0-65535, got %q", short(c.AdminListen))
	}
	if okL && okA && l.overlaps(a) && !d.isBad("listen") {
		d.invalid("admin_listen", "overlaps listen (%s); the admin listener needs its own address", c.Listen)
	}
}

func (d *decoder) validateHash(h *Hash) {
	if d.has("hash.key") && len(h.Key) == 0 {
		d.invalid("hash.key", "must list at least one source")
	}
	for i, k := range h.Key {
		d.validateKeySource(index("hash.key", i), k)
	}
	switch h.OnMissing {
	case "random", "reject", "cookie":
	default:
		d.invalid("hash.on_missing", "must be random, reject or cookie, got %q", short(string(h.OnMissing)))
	}
	if !isToken(h.Cookie.Name) {
		d.invalid("hash.cookie.name", "must be a valid cookie name, got %q", short(h.Cookie.Name))
	}
	positive("hash.cookie.ttl", h.Cookie.TTL, d)
	if h.BodyLimit < 1 {
		d.invalid("hash.body_limit", "must be >= 1, got %d", h.BodyLimit)
	}
	if h.SaltFile != "" {
		salt, msg := readSalt(resolvePath(d.file, h.SaltFile))
		if msg != "" {
			d.invalid("hash.salt_file", "%q: %s", short(h.SaltFile), msg)
			return
		}
		h.Salt = salt
	}
}

// MinSaltBytes is the shortest salt hash.salt_file may hold: 128 bits.
const MinSaltBytes = 16

// readSalt reads a salt file: its bytes, surrounding spaces, tabs and
// line ends removed (so a trailing newline, or none, gives one salt on
// every replica), at least MinSaltBytes of them. On failure it returns a
// message that never quotes the salt.
func readSalt(path string) ([]byte, string) {
	data, msg := readSmall(path, "want one salt of at least "+strconv.Itoa(MinSaltBytes)+" bytes")
	if msg != "" {
		return nil, msg
	}
	salt := bytes.Trim(data, " \t\r\n")
	if len(salt) < MinSaltBytes {
		return nil, fmt.Sprintf("holds a salt of %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64 > FILE)", len(salt), MinSaltBytes)
	}
	return bytes.Clone(salt), ""
}

// validateKeySource checks one hash.key entry, f being its field.
func (d *decoder) validateKeySource(f string, k key.Source) {
	if k.Kind == "" {
		return // decoding failed and said why
	}
	nf := f + "." + string(k.Kind)
	switch {
	case k.Kind == key.Combine:
		if len(k.Sources) == 0 {
			d.invalid(nf, "must list at least one source")
		}
		for j, p := range k.Sources {
			d.validateKeySource(index(nf, j), p)
		}
	case k.Kind == key.JSON:
		if k.Name == "" {
			d.invalid(nf, "must not be empty")
		} else if strings.HasPrefix(k.Name, ".") || strings.HasSuffix(k.Name, ".") || strings.Contains(k.Name, "..") {
			d.invalid(nf, "must be field names joined by dots, like metadata.session, got %q", short(k.Name))
		}
	case k.Kind != key.Cookie && k.Kind != key.Header && k.Kind != key.Query:
	case k.Name == "":
		d.invalid(nf, "must not be empty")
	case (k.Kind == key.Cookie || k.Kind == key.Header) && !isToken(k.Name):
		d.invalid(nf, "must be a valid %s name, got %q", k.Kind, short(k.Name))
	}
}

func (d *decoder) validateRing(r *Ring) {
	switch r.Placement {
	case "ringlb", "nginx":
	default:
		d.invalid("ring.placement", "must be ringlb or nginx, got %q", short(string(r.Placement)))
	}
	switch {
	case r.Placement == "nginx" && !d.isBad("ring.placement"):
		if r.PointsPerWeight != ring.NginxPointsPerWeight {
			d.invalid("ring.points_per_weight", "must be unset or %d under placement nginx, got %d", ring.NginxPointsPerWeight, r.PointsPerWeight)
		}
	case r.PointsPerWeight <= 0:
		d.invalid("ring.points_per_weight", "must be > 0, got %d", r.PointsPerWeight)
	case r.PointsPerWeight > maxPointsPerWeight:
		d.invalid("ring.points_per_weight", "must be <= %d, got %d", maxPointsPerWeight, r.PointsPerWeight)
	}
	if r.LoadFactor != 0 && !(r.LoadFactor > 1) {
		d.invalid("ring.load_factor", "must be 0 (off) or > 1, got %s", fmtFloat(r.LoadFactor))
	}
	if r.LoadFloor < 1 {
		d.invalid("ring.load_floor", "must be >= 1, got %d", r.LoadFloor)
	}
	if r.SlowStart < 0 {
		d.invalid("ring.slow_start", "must be >= 0, got %s", r.SlowStart)
	}
	switch r.OnUnavailable {
	case "remap":
	case "fail":
		// Overflow and warm-up both serve keys away from their owner.
		if (r.LoadFactor != 0 || r.SlowStart != 0) && !d.isBad("ring.load_factor") && !d.isBad("ring.slow_start") {
			d.invalid("ring.on_unavailable", "fail requires ring.load_factor: 0 (got %s) and ring.slow_start: 0s (got %s)",
				fmtFloat(r.LoadFactor), r.SlowStart)
		}
	default:
		d.invalid("ring.on_unavailable", "must be remap or fail, got %q", short(string(r.OnUnavailable)))
	}
}

// validName reports whether an upstream name is usable: non-empty, made of
// ASCII letters, digits and "-_.:". Names appear in the ring hash (NAME#i,
// so no '#'), in the upstream header, metric labels, log lines, URLs of
// the admin pages and the simulate command's -add NAME=WEIGHT (so no '=');
// a small safe alphabet keeps all of those unambiguous.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == ':') {
			return false
		}
	}
	return true
}

// ValidName reports whether s may be an upstream's name: non-empty, made
// of ASCII letters, digits and "-_.:" (upstreams[].name's rule).
func ValidName(s string) bool { return validName(s) }

// MaxPointsPerUpstream is the most ring points one upstream may own
// (round(points_per_weight × weight)).
const MaxPointsPerUpstream = maxPointsPerMember

func (d *decoder) validateUpstreams(c *Pool) {
	switch {
	case c.Discovery != nil:
		// Members may all come from DNS; a discovery block without sources
		// is reported there.
	case !d.has("upstreams"):
		d.invalid("upstreams", "required: list at least one upstream (or a discovery source)")
		return
	case len(c.Upstreams) == 0:
		d.invalid("upstreams", "must list at least one upstream (or a discovery source)")
		return
	}
	nginx := c.Ring.Placement == "nginx"
	// Points can only be judged once points_per_weight is sound.
	ppwOK := !d.isBad("ring.points_per_weight") && c.Ring.PointsPerWeight > 0 && c.Ring.PointsPerWeight <= maxPointsPerWeight
	names := map[string]int{}
	seen := upstreamAddrs{addrs: map[string]int{}, idents: map[string]int{}}
	total := 0
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		f := index("upstreams", i)

		d.checkUpstreamName(f, u.Name, i, names)
		d.checkUpstreamURL(f, u, i, seen, nginx)

		switch u.Protocol {
		case ProtocolHTTP1:
		case ProtocolH2C:
			if u.URL != nil && u.URL.Scheme != "http" && checkURL(u.URL) == "" {
				d.invalid(f+".protocol", "h2c is cleartext HTTP/2 and needs an http:// URL, got %q (use h2 for https)", short(u.URL.String()))
			}
		case ProtocolH2:
			if u.URL != nil && u.URL.Scheme != "https" && checkURL(u.URL) == "" {
				d.invalid(f+".protocol", "h2 is HTTP/2 over TLS and needs an https:// URL, got %q (use h2c for cleartext)", short(u.URL.String()))
			}
		default:
			d.invalid(f+".protocol", "must be http1, h2c or h2, got %q", short(u.Protocol))
		}
		switch u.State {
		case StateReady, StateDrain, StateMaint:
		default:
			d.invalid(f+".state", "must be ready, drain or maint, got %q", short(u.State))
		}

		total += d.checkWeight(f+".weight", u.Weight, c, ppwOK, nginx)
	}
	if total > maxPointsTotal {
		d.invalid("upstreams", "the ring would have %d points, more than %d; lower weights or ring.points_per_weight", total, maxPointsTotal)
	}
}

// userInfo matches the user info of a URL written scheme://USERINFO@host.
var userInfo = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@`)

// redactURL returns the URL s with its user info, if any, replaced by
// "xxxxx", so that a password (or a token written as the user name) never
// reaches an error message, a log line or the reload reply. It works on
// strings url.Parse refuses too.
func redactURL(s string) string {
	return userInfo.ReplaceAllString(s, "${1}xxxxx@")
}

// checkURL returns what is wrong with an upstream URL, or "".
func checkURL(u *url.URL) string {
	s := strconv.Quote(short(redactURL(u.String())))
	switch {
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "", u.Opaque != "":
		return "must be an absolute http:// or https:// URL, got " + s
	case u.User != nil:
		return "must not contain user info, got " + s
	case u.Hostname() == "":
		return "must have a host, got " + s
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "":
		return "must not have a query or fragment, got " + s
	case u.Path != "" && u.Path != "/":
		return "must not have a path (requests keep their own path; ringlb proxies to the upstream's root), got " + s
	}
	if strings.HasSuffix(u.Host, ":") {
		return "has an empty port, got " + s
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "port must be 1-65535, got " + s
		}
	}
	return ""
}

// normalURL returns scheme://host:port with the host lower-cased (IP
// addresses in canonical form) and the scheme's default port made explicit,
// so two URLs reaching the same server compare equal.
func normalURL(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	if n, err := strconv.Atoi(port); err == nil {
		port = strconv.Itoa(n)
	}
	return u.Scheme + "://" + net.JoinHostPort(host, port)
}

func (d *decoder) validateHealth(h *Health) {
	if !strings.HasPrefix(h.Path, "/") {
		d.invalid("health.path", "must start with \"/\", got %q", short(h.Path))
	} else if _, err := url.ParseRequestURI(h.Path); err != nil || strings.ContainsAny(h.Path, " \t\r\n#") {
		d.invalid("health.path", "must be a valid request path, got %q", short(h.Path))
	}
	positive("health.interval", h.Interval, d)
	positive("health.timeout", h.Timeout, d)
	if h.Interval > 0 && h.Timeout > 0 && h.Timeout >= h.Interval && !d.isBad("health.interval") {
		d.invalid("health.timeout", "must be < health.interval (%s), got %s", h.Interval, h.Timeout)
	}
	if h.Rise < 1 {
		d.invalid("health.rise", "must be >= 1, got %d", h.Rise)
	}
	if h.Fall < 1 {
		d.invalid("health.fall", "must be >= 1, got %d", h.Fall)
	}
	r := h.ExpectStatus
	switch {
	case r.Min < 100 || r.Max > 599:
		d.invalid("health.expect_status", "must be within 100-599, got %s", r)
	case r.Min > r.Max:
		d.invalid("health.expect_status", "must be a range MIN-MAX with MIN <= MAX, got %s", r)
	}
}

func (d *decoder) validateBreaker(b *Breaker) {
	if b.ConsecutiveFailures < 0 {
		d.invalid("breaker.consecutive_failures", "must be >= 0 (0 turns breakers off), got %d", b.ConsecutiveFailures)
	}
	for i, s := range b.FailureStatuses {
		if s < 100 || s > 599 {
			d.invalid(index("breaker.failure_statuses", i), "must be an HTTP status 100-599, got %d", s)
		}
	}
	for i, s := range b.FailureGRPCStatuses {
		if s < 0 || s > 16 {
			d.invalid(index("breaker.failure_grpc_statuses", i), "must be a gRPC status code 0-16, got %d", s)
		}
	}
	positive("breaker.open_timeout", b.OpenTimeout, d)
	if b.OpenTimeout > 0 && b.MaxOpenTimeout < b.OpenTimeout && !d.isBad("breaker.open_timeout") {
		d.invalid("breaker.max_open_timeout", "must be >= breaker.open_timeout (%s), got %s", b.OpenTimeout, b.MaxOpenTimeout)
	}
}

func (d *decoder) validateDiscovery(c *Pool) {
	disc := c.Discovery
	d.validateDiscoverySettings(c)
	if len(disc.Sources) == 0 {
		d.invalid("discovery.sources", "must list at least one source (or remove the discovery block)")
		return
	}
	ppwOK := !d.isBad("ring.points_per_weight") && c.Ring.PointsPerWeight > 0 && c.Ring.PointsPerWeight <= maxPointsPerWeight
	names := map[string]int{}
	for i := range disc.Sources {
		d.validateSource(c, i, names, ppwOK)
	}
}

// validateDiscoverySettings checks the discovery block's own fields: the
// resolver, kubeconfig, cluster domain and timing.
func (d *decoder) validateDiscoverySettings(c *Pool) {
	disc := c.Discovery
	if c.Ring.Placement == "nginx" && !d.isBad("ring.placement") {
		d.invalid("discovery", "needs placement ringlb: placement nginx identifies upstreams by the host:port written in the config")
	}
	if disc.Resolver != "" {
		if host, port, ok := splitHostPort(disc.Resolver); !ok || host == "" || port < 1 {
			d.invalid("discovery.resolver", "must be host:port of a DNS server with a port 1-65535 (or \"\" for the system's), got %q", short(disc.Resolver))
		}
	}
	if disc.Kubeconfig != "" {
		// Read and parsed as serve would, but the API server is not asked.
		if _, err := discovery.KubeRESTConfig(disc.Kubeconfig); err != nil {
			if inner := errors.Unwrap(err); inner != nil {
				err = inner
			}
			d.invalid("discovery.kubeconfig", "%q: cannot load: %v", disc.Kubeconfig, err)
		}
	}
	if !validDNSName(disc.ClusterDomain) {
		d.invalid("discovery.cluster_domain", "must be a DNS name like cluster.local, got %q", short(disc.ClusterDomain))
	}
	positive("discovery.interval", disc.Interval, d)
	positive("discovery.timeout", disc.Timeout, d)
	if disc.Interval > 0 && disc.Timeout > 0 && disc.Timeout >= disc.Interval && !d.isBad("discovery.interval") {
		d.invalid("discovery.timeout", "must be < discovery.interval (%s), got %s", disc.Interval, disc.Timeout)
	}
	if disc.RemoveAfter < 0 {
		d.invalid("discovery.remove_after", "must be >= 0, got %s", disc.RemoveAfter)
	}
	if disc.Confirm < 1 {
		d.invalid("discovery.confirm", "must be >= 1, got %d", disc.Confirm)
	}
}

// validateSource checks discovery.sources[i], noting its name in names
// (the sources' names seen, to their index).
func (d *decoder) validateSource(c *Pool, i int, names map[string]int, ppwOK bool) {
	disc := c.Discovery
	s, f := &disc.Sources[i], index("discovery.sources", i)
	hasSRV, hasHost, hasKube := d.has(f+".srv"), d.has(f+".host"), d.has(f+".kubernetes")
	kinds := 0
	for _, k := range []bool{hasSRV, hasHost, hasKube} {
		if k {
			kinds++
		}
	}
	switch {
	case d.isBad(f + ".srv"), d.isBad(f + ".host"), d.isBad(f + ".kubernetes"):
	case kinds > 1 && hasKube:
		d.invalid(f+".kubernetes", "a source has one of srv, host and kubernetes, not several")
	case hasSRV && hasHost:
		d.invalid(f+".host", "a source has either srv or host, not both")
	case kinds == 0:
		d.invalid(f, "needs srv (a name with SRV records) or host (a name with A/AAAA records), or kubernetes (a Service's EndpointSlices)")
	case hasKube && !d.validKube(f+".kubernetes", s.Kubernetes):
	case hasSRV && !validDNSName(s.SRV):
		d.invalid(f+".srv", "must be a DNS name like _http._tcp.app.example, got %q", short(s.SRV))
	case hasHost && !validDNSName(s.Host) && !isIP(s.Host):
		d.invalid(f+".host", "must be a DNS name or an IP address, got %q", short(s.Host))
	default:
		name := s.Name()
		if hasKube {
			name = s.kube(disc.Kubeconfig).String()
		}
		if j, dup := names[name]; dup {
			d.invalid(f, "%q is already discovery.sources[%d]; sources are named by their srv or host value, which must be unique", name, j)
		} else {
			names[name] = i
		}
	}
	switch {
	case hasKube && d.has(f+".port"):
		d.invalid(f+".port", "only with host: a kubernetes source names its port in kubernetes.port")
	case kinds != 1 || hasKube:
	case hasHost && !d.has(f+".port"):
		d.invalid(f+".port", "required with host: the port the members listen on")
	case hasHost && (s.Port < 1 || s.Port > 65535):
		d.invalid(f+".port", "must be 1-65535, got %d", s.Port)
	case hasSRV && d.has(f+".port"):
		d.invalid(f+".port", "only with host: SRV records carry their own ports")
	}
	scheme := s.Scheme == "http" || s.Scheme == "https"
	if !scheme {
		d.invalid(f+".scheme", "must be http or https, got %q", short(s.Scheme))
	}
	switch s.Protocol {
	case ProtocolHTTP1:
	case ProtocolH2C:
		if s.Scheme == "https" {
			d.invalid(f+".protocol", "h2c is cleartext HTTP/2 and needs scheme http; with https use h2")
		}
	case ProtocolH2:
		if s.Scheme == "http" {
			d.invalid(f+".protocol", "h2 needs scheme https; for cleartext HTTP/2 use h2c")
		}
	default:
		d.invalid(f+".protocol", "must be http1, h2c or h2, got %q", short(s.Protocol))
	}
	d.checkWeight(f+".weight", s.Weight, c, ppwOK, false)
}

// checkUpstreamName checks upstreams[i].name (f is "upstreams[i]"),
// noting it in names, which maps the names seen to their index.
func (d *decoder) checkUpstreamName(f, name string, i int, names map[string]int) {
	switch {
	case !d.has(f + ".name"):
		d.invalid(f+".name", "required")
	case name == "":
		d.invalid(f+".name", "must not be empty")
	case !validName(name):
		d.invalid(f+".name", "must use only letters, digits and \"-_.:\", got %q", short(name))
	default:
		if j, dup := names[name]; dup {
			d.invalid(f+".name", "%q is already the name of upstreams[%d]", name, j)
		} else {
			names[name] = i
		}
	}
}

// upstreamAddrs are the upstreams' addresses seen so far, to their index:
// normalised scheme://host:port, and the host[:port] as written
// (placement nginx's identity).
type upstreamAddrs struct{ addrs, idents map[string]int }

// checkUpstreamURL checks upstreams[i].url: required, absolute http(s),
// an address no other upstream has (nor, under placement nginx, a
// host[:port] as written).
func (d *decoder) checkUpstreamURL(f string, u *Upstream, i int, seen upstreamAddrs, nginx bool) {
	switch {
	case u.URL == nil && !d.has(f+".url"):
		d.invalid(f+".url", "required")
		return
	case u.URL == nil:
		return // failed to parse and said so
	}
	if msg := checkURL(u.URL); msg != "" {
		d.invalid(f+".url", "%s", msg)
		return
	}
	norm := normalURL(u.URL)
	if j, dup := seen.addrs[norm]; dup {
		d.invalid(f+".url", "%q is the same address as upstreams[%d].url", short(u.URL.String()), j)
		return
	}
	seen.addrs[norm] = i
	if nginx {
		if j, dup := seen.idents[u.Addr]; dup {
			d.invalid(f+".url", "host %q is also upstreams[%d]'s; placement nginx identifies upstreams by host[:port] as written", short(u.Addr), j)
			return
		}
		seen.idents[u.Addr] = i
	}
}

// checkWeight checks an upstream's or a source's weight (field f) and
// returns the ring points it gives (0 when it is not sound, or when
// points_per_weight is not: ppwOK false). Under placement nginx (nginx)
// weights are whole numbers.
func (d *decoder) checkWeight(f string, w float64, c *Pool, ppwOK, nginx bool) int {
	switch {
	case !(w > 0):
		d.invalid(f, "must be > 0, got %s", fmtFloat(w))
	case nginx && w != math.Trunc(w):
		d.invalid(f, "must be a whole number under placement nginx, got %s", fmtFloat(w))
	case !ppwOK:
	case ring.PointsFor(c.Ring.PointsPerWeight, w) < 1:
		d.invalid(f, "too small: gives round(%d × %s) = 0 ring points", c.Ring.PointsPerWeight, fmtFloat(w))
	case ring.PointsFor(c.Ring.PointsPerWeight, w) > maxPointsPerMember:
		d.invalid(f, "too large: gives round(%d × %s) > %d ring points", c.Ring.PointsPerWeight, fmtFloat(w), maxPointsPerMember)
	default:
		return ring.PointsFor(c.Ring.PointsPerWeight, w)
	}
	return 0
}

// validKube checks a source's kubernetes block (f is its field), asking
// no API server: the names as Kubernetes validates them, and a port that
// is a number 1-65535 or a port name. It reports whether all is well.
func (d *decoder) validKube(f string, k *KubernetesSource) bool {
	ok := true
	switch {
	case d.isBad(f + ".service"):
		ok = false
	case !d.has(f + ".service"):
		d.invalid(f+".service", "required: the name of the Service whose EndpointSlices list the members")
		ok = false
	case !dnsLabel(k.Service, true):
		d.invalid(f+".service", "must be a Service name (lowercase letters, digits and '-', starting with a letter, at most 63), got %q", short(k.Service))
		ok = false
	}
	if k.Namespace != "" && !dnsLabel(k.Namespace, false) {
		d.invalid(f+".namespace", "must be a namespace name (lowercase letters, digits and '-', at most 63), got %q", short(k.Namespace))
		ok = false
	}
	switch {
	case d.isBad(f + ".port"):
		ok = false
	case !d.has(f + ".port"):
		d.invalid(f+".port", "required: the EndpointSlice port, by name (http) or number (8080)")
		ok = false
	case !validKubePort(k.Port):
		d.invalid(f+".port", "must be a port number 1-65535 or a port name (lowercase letters, digits and '-', at most 15, with a letter), got %q", short(k.Port))
		ok = false
	}
	return ok
}

// dnsLabel reports whether s is an RFC 1123 label as Kubernetes names are
// (lowercase letters, digits and '-', alphanumeric at both ends, 1-63
// characters); letterFirst asks for RFC 1035's leading letter (Service
// names).
func dnsLabel(s string, letterFirst bool) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' || letterFirst && !(s[0] >= 'a' && s[0] <= 'z') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// validKubePort reports whether s is a port number 1-65535 or an
// IANA_SVC_NAME as Kubernetes port names are: at most 15 lowercase
// letters, digits and '-', at least one letter, no '-' at either end nor
// two in a row.
func validKubePort(s string) bool {
	if n, err := strconv.Atoi(s); err == nil {
		return n >= 1 && n <= 65535 && strconv.Itoa(n) == s
	}
	if s == "" || len(s) > 15 || !dnsLabel(s, false) || strings.Contains(s, "--") {
		return false
	}
	return strings.ContainsAny(s, "abcdefghijklmnopqrstuvwxyz")
}

// splitHostPort reads host:port ([v6]:port for IPv6) with a numeric port
// 0-65535.
func splitHostPort(s string) (host string, port int, ok bool) {
	l, ok := parseListen(s)
	return l.host, l.port, ok
}

// validDNSName reports whether s is a DNS name as resolvers accept it:
// dot-separated labels of 1-63 letters, digits, '-' or '_', at most 253
// characters, with an optional final dot.
func validDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func isIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == ""
}

// isToken reports whether s is a non-empty RFC 9110 token, the syntax of
// header and cookie names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Limits of the hold cookie's secret file.
const (
	MinSecretBytes    = 32       // shortest secret accepted: HMAC-SHA256's output size
	maxSecretFileSize = 64 << 10 // a secret file is a few lines; refuse anything larger
)

func (d *decoder) validateHold(c *Pool) {
	h := &c.Hold
	if h.Idle < 0 {
		d.invalid("hold.idle", "must be >= 0 (0s turns hold off), got %s", h.Idle)
	}
	if h.MaxKeys < 1 {
		d.invalid("hold.max_keys", "must be >= 1, got %d", h.MaxKeys)
	}
	d.validateHoldShare(h)
	ck := &h.Cookie
	if ck.Name == "" {
		if ck.SecretFile != "" {
			d.invalid("hold.cookie.secret_file", "is set but hold.cookie.name is empty (no cookie); set a name or remove secret_file")
		}
		return
	}
	switch {
	case !isToken(ck.Name):
		d.invalid("hold.cookie.name", "must be a valid cookie name (or \"\" for no cookie), got %q", short(ck.Name))
	case c.Hash.OnMissing == "cookie" && ck.Name == c.Hash.Cookie.Name:
		d.invalid("hold.cookie.name", "%q is also hash.cookie.name; the hold cookie needs a name of its own", ck.Name)
	default:
	keys:
		for i, k := range c.Hash.Key {
			for _, p := range append([]key.Source{k}, k.Sources...) {
				if p.Kind == key.Cookie && p.Name == ck.Name {
					d.invalid("hold.cookie.name", "%q is also the cookie hash.key[%d] reads; the hold cookie needs a name of its own", ck.Name, i)
					break keys
				}
			}
		}
	}
	if ck.SecretFile == "" {
		d.invalid("hold.cookie.secret_file", "required when hold.cookie.name is set")
		return
	}
	secrets, msg := readSecrets(resolvePath(d.file, ck.SecretFile))
	if msg != "" {
		d.invalid("hold.cookie.secret_file", "%q: %s", short(ck.SecretFile), msg)
		return
	}
	ck.Secrets = secrets
}

// validateHoldShare checks hold.share and reads its password file.
func (d *decoder) validateHoldShare(h *Hold) {
	sh := &h.Share
	if sh.Redis == "" {
		if sh.PasswordFile != "" {
			d.invalid("hold.share.password_file", "is set but hold.share.redis is empty (no sharing); set redis or remove password_file")
		}
		return
	}
	if h.Idle <= 0 {
		d.invalid("hold.share.redis", "needs hold on (hold.idle > 0)")
	}
	if u, err := url.Parse(sh.Redis); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			d.invalid("hold.share.redis", "holds a password; put it in hold.share.password_file instead")
			return
		}
	}
	if err := share.Check(share.Options{URL: sh.Redis, Timeout: time.Second}); err != nil {
		d.invalid("hold.share.redis", "want redis://[user@]host:port[/db] or rediss://...: %v", err)
	}
	if sh.Timeout <= 0 {
		d.invalid("hold.share.timeout", "must be > 0, got %s", sh.Timeout)
	}
	if sh.PasswordFile != "" {
		pw, msg := readPassword(resolvePath(d.file, sh.PasswordFile))
		if msg != "" {
			d.invalid("hold.share.password_file", "%q: %s", short(sh.PasswordFile), msg)
			return
		}
		sh.Password = pw
	}
}

// readPassword reads a password file: its first line, surrounding spaces,
// tabs and a CR removed; it must not be empty. On failure it returns a
// message that never quotes the file's content.
func readPassword(path string) (string, string) {
	data, msg := readSmall(path, "want the password on one line")
	if msg != "" {
		return "", msg
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	pw := strings.Trim(string(line), " \t\r")
	if pw == "" {
		return "", "holds no password on its first line"
	}
	return pw, ""
}

// readSmall reads a file of secrets, refusing one larger than
// maxSecretFileSize (then the message ends in want). On failure it returns
// a message that never quotes the content.
func readSmall(path, want string) ([]byte, string) {
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		var data []byte
		if data, err = io.ReadAll(io.LimitReader(f, maxSecretFileSize+1)); err == nil {
			if len(data) > maxSecretFileSize {
				return nil, fmt.Sprintf("larger than %d KiB; %s", maxSecretFileSize>>10, want)
			}
			return data, ""
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return nil, "cannot read: " + err.Error()
}

// resolvePath returns p, read relative to the directory of the config file
// when it is relative.
func resolvePath(configFile, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(configFile), p)
}

// readSecrets reads a secret file: one secret per line, surrounding spaces,
// tabs and a CR removed, blank lines ignored; at least one secret and each
// at least MinSecretBytes long. On failure it returns a message that never
// quotes a secret.
func readSecrets(path string) ([][]byte, string) {
	data, msg := readSmall(path, "want one secret per line")
	if msg != "" {
		return nil, msg
	}
	var secrets [][]byte
	for i, line := range bytes.Split(data, []byte("\n")) {
		s := bytes.Trim(line, " \t\r")
		if len(s) == 0 {
			continue
		}
		if len(s) < MinSecretBytes {
			return nil, fmt.Sprintf("line %d: secret is %d bytes, want at least %d", i+1, len(s), MinSecretBytes)
		}
		secrets = append(secrets, bytes.Clone(s))
	}
	if len(secrets) == 0 {
		return nil, fmt.Sprintf("holds no secret; want one per line, each at least %d bytes", MinSecretBytes)
	}
	return secrets, ""
}
