package config

// This file checks the static upstreams: names, URLs, protocols (against
// their URLs) and weights. Unknown protocols and admin states are the
// decoder's to report.

import (
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/ringlb/ringlb/balancer/transport"
)

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

// validateUpstreams checks the static upstreams and the points they give.
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

		switch u.Protocol { // an unknown one was reported by the decoder
		case transport.H2C:
			if u.URL != nil && u.URL.Scheme != "http" && checkURL(u.URL) == "" {
				d.invalid(f+".protocol", "h2c is cleartext HTTP/2 and needs an http:// URL, got %q (use h2 for https)", short(u.URL.String()))
			}
		case transport.H2:
			if u.URL != nil && u.URL.Scheme != "https" && checkURL(u.URL) == "" {
				d.invalid(f+".protocol", "h2 is HTTP/2 over TLS and needs an https:// URL, got %q (use h2c for cleartext)", short(u.URL.String()))
			}
		}

		total += d.checkWeight(f+".weight", u.Weight, c, ppwOK, nginx)
	}
	if total > maxPointsTotal {
		d.invalid("upstreams", "the ring would have %d points, more than %d; lower weights or ring.points_per_weight", total, maxPointsTotal)
	}
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
