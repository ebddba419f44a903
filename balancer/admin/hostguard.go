package admin

// This file keeps the admin listener to requests that name it: the Host
// check against DNS rebinding and the Origin check on POST.

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// hostGuard decides which Host and Origin values the admin listener
// answers (see Options.Addr).
type hostGuard struct {
	ip   netip.Addr // the listener's IP; invalid or unspecified: any IP
	port string     // the listener's port; "": any
	name string     // admin_listen's host when it is a name, lowercased
}

// newHostGuard returns the guard for a listener bound to addr, named name.
func newHostGuard(addr, name string) *hostGuard {
	g := &hostGuard{name: strings.ToLower(strings.TrimSuffix(name, "."))}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		g.port = port
		if ip, err := netip.ParseAddr(host); err == nil {
			g.ip = ip.Unmap()
		}
	}
	return g
}

// allowed reports whether hostport (a Host header) names the listener:
// with the listener's port, its IP (any loopback IP for a loopback
// listener, any IP for a wildcard), localhost or a name under it, or
// Name.
func (g *hostGuard) allowed(hostport string, defaultPort string) bool {
	return g.names(hostport, defaultPort, false)
}

// names reports whether hostport names the listener, as allowed says,
// or, own set, as its own origin does: only the listener's address as
// bound (any IP for a wildcard), localhost or Name, each with its port.
// An Origin needs the narrower rule: another loopback address, or a
// name under localhost (which a browser resolves to one, ::1 or
// 127.0.0.1, its own choice), with the same port can be another
// program's, whose page would then make a browser POST here.
func (g *hostGuard) names(hostport, defaultPort string, own bool) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), defaultPort
	}
	if g.port != "" && port != g.port {
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if !g.ip.IsValid() || g.ip.IsUnspecified() || ip == g.ip {
			return true
		}
		return !own && ip.IsLoopback() && g.ip.IsLoopback()
	}
	if host == "localhost" || (g.name != "" && host == g.name) {
		return true
	}
	return !own && strings.HasSuffix(host, ".localhost")
}

// anyHost lists the routes any Host may read: probes, whose Host is often
// whatever the prober resolved, and metrics, scraped by name.
func anyHost(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// middleware refuses requests whose Host, or a POST's Origin, is foreign.
func (g *hostGuard) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !anyHost(r.URL.Path) && !g.allowed(r.Host, "80") {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "Host " + strconv.Quote(r.Host) + " does not name this admin listener"})
			return
		}
		if r.Method == http.MethodPost {
			if o := r.Header.Get("Origin"); o != "" && !g.sameOrigin(o) {
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-site request refused (Origin " + strconv.Quote(o) + ")"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether an Origin header is the listener's own:
// http or https, and a host:port that names it strictly (see names).
func (g *hostGuard) sameOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // includes "null"
	}
	def := "80"
	if u.Scheme == "https" {
		def = "443"
	}
	return g.names(u.Host, def, true)
}
