// Package forward is the headers a proxy adds to the request it forwards
// and checks on the one it receives: X-Forwarded-*, CDN-Loop, the request
// id and Expect.
package forward

import (
	"net"
	"net/http"
	"strings"
)

// SetForwarded sets the outbound X-Forwarded-For, -Host and -Proto
// exactly as httputil.ProxyRequest.SetXForwarded does, except that the
// client's X-Forwarded-For is kept (Rewrite mode drops it from the
// outbound request) with the client's address appended, as one
// comma-separated value. When the client sent no User-Agent it also sets
// an empty one, which ReverseProxy would otherwise set after Rewrite so
// that the transport sends none: the upstream sees the same header either
// way. The values share one backing array, one allocation per request
// where SetXForwarded and ReverseProxy make four; each is a capped
// one-element slice, so an append elsewhere copies.
func SetForwarded(h http.Header, in *http.Request) {
	v := new([4]string)
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := in.Header["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		v[0] = ip
		h["X-Forwarded-For"] = v[0:1:1]
	} else {
		delete(h, "X-Forwarded-For")
	}
	v[1] = in.Host
	h["X-Forwarded-Host"] = v[1:2:2]
	v[2] = "http"
	if in.TLS != nil {
		v[2] = "https"
	}
	h["X-Forwarded-Proto"] = v[2:3:3]
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = v[3:4:4] // ""
	}
}

// LocalAddr is the address of ringlb's end of the connection r came
// on, as host:port ("" for a request that came on none).
func LocalAddr(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a != nil {
		return a.String()
	}
	return ""
}
