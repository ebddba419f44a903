// Package route matches requests to pools: the routes of a config with
// pools (host, path prefix, first match wins) and the path they are
// matched on, cleaned as nginx cleans it.
package route

import (
	"fmt"
	"strings"
)

// Route sends the requests it matches to a pool. It is an entry of the
// config file's routes, which decodes into it (see package options). The path
// it is matched with is the request's as Path reads it (decoded, "//"
// merged, dot segments removed).
type Route struct {
	// Host is host: "" (any host; the default), an exact host name or IP
	// address, or "*.SUFFIX" (any name ending in ".SUFFIX"), without port,
	// compared case-insensitively with the request's host without its
	// port (the config lower-cases it).
	Host string `yaml:"host" decode:"lower"`
	// PathPrefix is path_prefix: "" (any path; the default) or a path
	// starting with "/", without query or fragment, matched on whole
	// segments: /api matches /api, /api/ and /api/x but not /apix; /api/
	// matches /api/ and /api/x but not /api.
	PathPrefix string `yaml:"path_prefix"`
	// Pool is pool, the name of the pool the route sends requests to;
	// required, a pool the config defines.
	Pool string `yaml:"pool"`
}

// Table is what a request reads: the compiled routes and the pools
// by name. With one pool and no routes, every request goes to only.
//
// Routes are indexed by host: byHost maps an exact host, or a wildcard's
// ".suffix", to the indexes of its routes in order; anyHost lists the
// routes without a host. A request looks up its host and each suffix of
// it that starts at a dot, and takes the lowest index whose path matches:
// the first matching route, without walking the others.
type Table[P any] struct {
	routes  []compiled[P]
	byHost  map[string][]int32
	anyHost []int32
	pools   []P // in config order
	only    P
	hasOnly bool
}

// compiled is a Route in the form matching reads: lowercase host
// (without "*." for a wildcard), and its pool.
type compiled[P any] struct {
	host     string // "" any; exact name; or ".suffix" when wild
	wild     bool
	prefix   string
	dirMatch bool // prefix ends in '/': it matches what starts with it
	pool     P
}

// Compile builds the table of routes over pools, which must hold every
// pool a route names (name gives a pool's name). With no routes, pools
// must be one pool, which gets every request.
func Compile[P any](routes []Route, pools []P, name func(P) string) (*Table[P], error) {
	t := &Table[P]{pools: pools, byHost: map[string][]int32{}}
	byName := make(map[string]P, len(pools))
	for _, p := range pools {
		if _, dup := byName[name(p)]; dup {
			return nil, fmt.Errorf("balancer: two pools named %q", name(p))
		}
		byName[name(p)] = p
	}
	if len(routes) == 0 {
		if len(pools) != 1 {
			return nil, fmt.Errorf("balancer: %d pools and no routes", len(pools))
		}
		t.only, t.hasOnly = pools[0], true
	}
	for _, r := range routes {
		p, ok := byName[r.Pool]
		if !ok {
			return nil, fmt.Errorf("balancer: route to unknown pool %q", r.Pool)
		}
		c := compiled[P]{host: strings.ToLower(r.Host), prefix: r.PathPrefix, pool: p}
		if s, ok := strings.CutPrefix(c.host, "*."); ok {
			c.host, c.wild = "."+s, true
		}
		c.dirMatch = strings.HasSuffix(c.prefix, "/")
		i := int32(len(t.routes))
		if c.host == "" {
			t.anyHost = append(t.anyHost, i)
		} else {
			t.byHost[c.host] = append(t.byHost[c.host], i)
		}
		t.routes = append(t.routes, c)
	}
	return t, nil
}

// Pools are the table's pools, in config order.
func (t *Table[P]) Pools() []P { return t.pools }

// Only is the one pool of a table without routes; false for one with
// routes.
func (t *Table[P]) Only() (P, bool) { return t.only, t.hasOnly }

// Routes returns the table's routes, in order; name gives a pool's name.
func (t *Table[P]) Routes(name func(P) string) []Route {
	out := make([]Route, len(t.routes))
	for i, c := range t.routes {
		h := c.host
		if c.wild {
			h = "*" + h
		}
		out[i] = Route{Host: h, PathPrefix: c.prefix, Pool: name(c.pool)}
	}
	return out
}

// Match returns the pool of the first route that matches host (a Host
// header: any port is ignored) and path (as Path makes it); false when
// none does. With one pool and no routes, every request goes to it.
func (t *Table[P]) Match(host, path string) (P, bool) {
	if t.hasOnly {
		return t.only, true
	}
	var buf [256]byte
	h := lowerASCII(buf[:0], routeHost(host))
	best := int32(-1)
	if len(h) > 0 {
		best = t.first(t.byHost[string(h)], path, best)
		for i := 1; i < len(h); i++ {
			if h[i] == '.' {
				best = t.first(t.byHost[string(h[i:])], path, best)
			}
		}
	}
	best = t.first(t.anyHost, path, best)
	if best < 0 {
		var none P
		return none, false
	}
	return t.routes[best].pool, true
}

// first returns the first route of list (indexes in order) below best
// (-1: any) whose path prefix matches path, else best.
func (t *Table[P]) first(list []int32, path string, best int32) int32 {
	for _, i := range list {
		if best >= 0 && i >= best {
			break
		}
		if t.routes[i].pathMatch(path) {
			return i
		}
	}
	return best
}

// pathMatch reports whether path is under the route's prefix, on whole
// segments.
func (c *compiled[P]) pathMatch(path string) bool {
	if c.prefix == "" {
		return true
	}
	if !strings.HasPrefix(path, c.prefix) {
		return false
	}
	return c.dirMatch || len(path) == len(c.prefix) || path[len(c.prefix)] == '/'
}

// lowerASCII appends s lower-cased (ASCII letters only) to dst.
func lowerASCII(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// routeHost strips the port (and a final dot) from a Host header:
// "App.example:8080" → "App.example", "[::1]:80" → "::1".
func routeHost(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			return h[1:i]
		}
		return h
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h[:i], ':') < 0 {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}
