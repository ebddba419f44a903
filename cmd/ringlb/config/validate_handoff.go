package config

// This file checks the handoff block.

import (
	"net/http"
	"strings"
)

// setByRinglb are the request fields ringlb sets or removes itself, which
// handoff.header may not name (X-Forwarded-* goes by its prefix).
var setByRinglb = []string{"Cdn-Loop", "Host", "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Authorization"}

// validateHandoff checks the handoff block: a header ringlb may send as
// its own, and a window > 0.
func (d *decoder) validateHandoff(h *Handoff) {
	if h.Window <= 0 {
		d.invalid("handoff.window", "must be > 0, got %s", h.Window)
	}
	if h.Header == "" {
		return
	}
	name := http.CanonicalHeaderKey(h.Header)
	switch {
	case !isToken(h.Header):
		d.invalid("handoff.header", "must be a valid header name (or \"\" to turn handoff off), got %q", short(h.Header))
	case strings.HasPrefix(name, "X-Forwarded-"):
		d.invalid("handoff.header", "%q is a header ringlb sets itself (X-Forwarded-*); choose another name, e.g. Ringlb-Handoff", h.Header)
	case d.requestID != "" && strings.EqualFold(name, d.requestID):
		d.invalid("handoff.header", "%q is request_id_header, which ringlb sets itself; choose another name, e.g. Ringlb-Handoff", h.Header)
	default:
		for _, s := range setByRinglb {
			if name == s {
				d.invalid("handoff.header", "%q is a header ringlb sets or removes itself; choose another name, e.g. Ringlb-Handoff", h.Header)
				return
			}
		}
	}
}
