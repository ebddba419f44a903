package config

import (
	"net/netip"
	"strings"
)

// inPool returns the decoder whose relative field paths are p's: d itself
// for the top-level pool of a config without pools.
func (d *decoder) inPool(c *Config, p *Pool) *decoder {
	if c.Pools == nil {
		return d
	}
	return d.in(poolPath(p.Name))
}

// validatePools checks a config with pools: no pool block at the top
// level, each pool (named [a-z0-9_-]+) as a config without pools is
// checked, and the routes, which must name defined pools and reach every
// one of them.
func (d *decoder) validatePools(c *Config) {
	for _, k := range poolKeys() {
		if d.has(k) {
			d.invalid(k, "must be inside a pool when the config has pools: move it under pools.NAME")
		}
	}
	if len(c.Pools) == 0 && !d.isBad("pools") {
		d.invalid("pools", "must define at least one pool (or remove pools: a config without them is the pool %q)", DefaultPool)
		return
	}
	defined := map[string]bool{}
	for i := range c.Pools {
		p := &c.Pools[i]
		defined[p.Name] = true
		if !validPoolName(p.Name) {
			d.invalid(poolPath(p.Name), "a pool name must be made of a-z, 0-9, '_' and '-', got %q", short(p.Name))
		}
		if !d.reused[p.Name] { // else valid as it was
			d.inPool(c, p).validatePool(p)
		}
	}
	if !d.has("routes") {
		d.invalid("routes", "required with pools: list the routes that send requests to them")
		return
	}
	reached := map[string]bool{}
	for i := range c.Routes {
		r, f := &c.Routes[i], index("routes", i)
		d.validateRoute(f, r)
		switch {
		case !d.has(f + ".pool"):
			d.invalid(f+".pool", "required: the pool this route sends requests to")
		case !defined[r.Pool]:
			d.invalid(f+".pool", "%q is not a pool%s; define it under pools", short(r.Pool), didYouMean(r.Pool, defined))
		}
		for j := range i {
			if o := c.Routes[j]; o.Host == r.Host && o.PathPrefix == r.PathPrefix && !d.isBad(index("routes", j)) {
				d.invalid(f, "never matches: routes[%d] has the same host and path_prefix and comes first", j)
				r = nil
				break
			}
		}
		if r != nil {
			reached[r.Pool] = true
		}
	}
	for i := range c.Pools {
		if name := c.Pools[i].Name; !reached[name] {
			d.invalid(poolPath(name), "no route reaches pool %q: add a route with pool: %s", short(name), short(name))
		}
	}
}

// validateRoute checks a route's host and path_prefix.
func (d *decoder) validateRoute(f string, r *Route) {
	if d.has(f+".host") && !validHostPattern(r.Host) {
		d.invalid(f+".host", "must be a host name (app.example.com), an IP address or a wildcard *.example.com, without port; got %q", short(r.Host))
	}
	if p := r.PathPrefix; d.has(f+".path_prefix") && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?# \t\r\n")) {
		d.invalid(f+".path_prefix", "must be a path starting with \"/\" (no query or fragment), got %q", short(p))
	}
}

// validHostPattern reports whether a route's host is usable: a DNS name, an
// IP address (an IPv6 one bare or in brackets), or "*." and a DNS name.
func validHostPattern(h string) bool {
	if suffix, ok := strings.CutPrefix(h, "*."); ok {
		return validDNSName(suffix) && !strings.HasSuffix(suffix, ".")
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); err == nil {
		return a.Zone() == ""
	}
	return validDNSName(h) && !strings.HasSuffix(h, ".")
}

// validPoolName reports whether s is [a-z0-9_-]+.
func validPoolName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
