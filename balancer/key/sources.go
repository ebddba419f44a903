package key

// The sources that read the request head: host, cookie, query, client IP.

import (
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
)

// hostKey is the host key source: the request's Host (its URL's host
// for a request in absolute form), lowercased, without port and without
// a trailing dot, as nginx's $host reads it; an IPv6 literal keeps its
// brackets. Only a host with upper-case letters allocates.
func hostKey(r *http.Request) (string, bool) {
	h := r.Host
	if h == "" && r.URL != nil {
		h = r.URL.Host // a request built in-process
	}
	if len(h) > 0 && h[0] == '[' {
		if i := strings.IndexByte(h, ']'); i >= 0 {
			h = h[:i+1]
		}
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if 'A' <= h[i] && h[i] <= 'Z' {
			return strings.ToLower(h), true
		}
	}
	return h, h != ""
}

// CookieValue returns the value of the cookie called name exactly as
// net/http's http.Request.Cookie reads it, but without allocating: the
// first pair with that name whose value net/http accepts, reading the
// Cookie header lines in order, pairs split on ";", the pair and the name
// trimmed of ASCII blanks, one pair of surrounding double quotes removed,
// and a value holding bytes a cookie value cannot (controls, non-ASCII,
// double quote, backslash) skipped as net/http skips it. An empty value
// is that cookie too: the source is then absent, not read from a later
// pair ("session=; session=bob" has no key, as the application reads
// ""). So the key is the cookie the application behind ringlb reads.
func CookieValue(h http.Header, name string) (string, bool) {
	for _, line := range h["Cookie"] {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			k, v, _ := strings.Cut(textproto.TrimString(part), "=")
			if textproto.TrimString(k) != name {
				continue
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			if validCookieValue(v) {
				return v, v != ""
			}
		}
	}
	return "", false
}

// validCookieValue reports whether every byte of v may appear in a cookie
// value, by net/http's rule (RFC 6265 cookie-octets, plus space and comma).
func validCookieValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < 0x20 || b >= 0x7f || b == '"' || b == ';' || b == '\\' {
			return false
		}
	}
	return true
}

// queryValue returns the first value of the query parameter name in a raw
// query, unescaping only what needs it; an empty value counts as absent.
// Pairs that do not unescape are skipped, as url.ParseQuery skips them.
func queryValue(raw, name string) (string, bool) {
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(part, "=")
		if strings.ContainsAny(k, "%+") {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			var err error
			if v, err = url.QueryUnescape(v); err != nil {
				continue
			}
		}
		return v, v != ""
	}
	return "", false
}

// ClientIP returns the client's address. Without trusted proxies, or when
// the peer is not one of them, it is the peer's address. When the peer is
// trusted, X-Forwarded-For (every header line, comma-separated entries) is
// walked from the right, skipping trusted entries; the first untrusted
// entry is the client. If every entry is trusted, the leftmost is used.
// Spoofed entries a client put in front are never reached.
func ClientIP(r *http.Request, trusted []netip.Prefix) (string, bool) {
	host := r.RemoteAddr
	if ap, err := netip.ParseAddrPort(host); err == nil {
		addr := ap.Addr()
		if addr.Is4In6() || addr.Zone() != "" {
			host = addr.Unmap().WithZone("").String()
		} else {
			host = HostOnly(host)
		}
		if len(trusted) == 0 || !isTrusted(addr, trusted) {
			return host, true
		}
	} else {
		// Not ip:port (a unix socket, a test): use it whole.
		return host, host != ""
	}
	lines := r.Header["X-Forwarded-For"]
	leftmost := ""
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for line != "" {
			var entry string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				entry, line = line[j+1:], line[:j]
			} else {
				entry, line = line, ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			addr, err := netip.ParseAddr(entry)
			if err != nil {
				// Garbage cannot be trusted: it is what the client sent.
				return entry, true
			}
			addr = addr.Unmap().WithZone("")
			if !isTrusted(addr, trusted) {
				return canonical(addr, entry), true
			}
			leftmost = entry
		}
	}
	if leftmost != "" {
		addr, _ := netip.ParseAddr(leftmost)
		return canonical(addr.Unmap().WithZone(""), leftmost), true
	}
	return host, true
}

// canonical returns a.String(), without allocating when s, the text a
// was parsed from, already is that string (the usual case).
func canonical(a netip.Addr, s string) string {
	var buf [64]byte
	if string(a.AppendTo(buf[:0])) == s {
		return s
	}
	return a.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	a = a.Unmap().WithZone("")
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// HostOnly strips the port from "host:port" or "[v6]:port".
func HostOnly(hostport string) string {
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 {
		return hostport
	}
	h := hostport[:i]
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	return h
}
