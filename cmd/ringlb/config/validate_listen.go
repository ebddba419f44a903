package config

// This file checks the listen addresses: their syntax, that the admin
// listener does not overlap the proxy's, and whether an upstream loops back
// to the proxy.

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

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

// wildcard reports whether the listener listens on every address.
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

// validateListeners checks listen and admin_listen, and that they do not overlap.
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

// splitHostPort reads host:port ([v6]:port for IPv6) with a numeric port
// 0-65535.
func splitHostPort(s string) (host string, port int, ok bool) {
	l, ok := parseListen(s)
	return l.host, l.port, ok
}
