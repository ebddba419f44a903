package admin

import (
	"net/http"

	"net/url"
	"strings"

	"github.com/ringlb/ringlb/balancer"
)

// requestLookupJSON is /debug/lookup's answer for a described request: the
// key it yields, where that key came from, and the key's placement as for
// ?key= (the lookupJSON fields). With no key, Key and Source are null and
// Missing says what on_missing does with such a request.
type requestLookupJSON struct {
	Pool    string  `json:"pool,omitempty"` // as in lookupJSON, whose own is hidden by this one
	Key     *string `json:"key"`
	Source  *string `json:"source"`
	Missing string  `json:"on_missing,omitempty"`
	Outcome string  `json:"outcome,omitempty"` // with no key: what the request gets
	*lookupJSON
}

// lookupRequest answers /debug/lookup?path=P&header=NAME:VALUE&cookie=NAME=VALUE&ip=ADDR&host=HOST
// (header and cookie repeatable; path may carry a query): it builds the
// request a client would send, takes its key exactly as the proxy would,
// and places that key. A POST (in) describes a POST with its own body:
// its Content-Type and Content-Encoding go with it, unless header sets
// them, so a json key source reads the body as it would a client's.
func (h *handler) lookupRequest(w http.ResponseWriter, b *balancer.Balancer, in *http.Request, q url.Values) {
	path := q.Get("path")
	if path == "" {
		path = "/"
	}
	if !strings.HasPrefix(path, "/") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "path must start with /, got " + path})
		return
	}
	u, err := url.ParseRequestURI(path)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "path: " + err.Error()})
		return
	}
	r := &http.Request{Method: http.MethodGet, URL: u, RequestURI: path, Header: http.Header{}, Host: "proxy"}
	if host := q.Get("host"); host != "" {
		r.Host = host
	}
	for _, hv := range q["header"] {
		name, value, ok := strings.Cut(hv, ":")
		if !ok || strings.TrimSpace(name) == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "header must be NAME: VALUE, got " + hv})
			return
		}
		r.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	for _, c := range q["cookie"] {
		c = strings.TrimSpace(c)
		if c != "" {
			r.Header.Add("Cookie", c)
		}
	}
	if in.Method == http.MethodPost {
		r.Method, r.Body, r.ContentLength = http.MethodPost, in.Body, in.ContentLength
		for _, name := range []string{"Content-Type", "Content-Encoding"} {
			if v, ok := in.Header[name]; ok && r.Header[name] == nil {
				r.Header[name] = v
			}
		}
	}
	r.RemoteAddr = "192.0.2.1:1234"
	if ip := q.Get("ip"); ip != "" {
		r.RemoteAddr = ip + ":1234"
		if strings.Contains(ip, ":") {
			r.RemoteAddr = "[" + ip + "]:1234"
		}
	}
	key, source, ok := b.KeyOf(r)
	if !ok {
		st := b.Status()
		out := requestLookupJSON{Pool: h.poolOf(b), Missing: st.OnMissing}
		switch st.OnMissing {
		case "reject":
			out.Outcome = "400: the request has none of " + strings.Join(st.KeySources, ", ")
		case "cookie":
			out.Outcome = "a new affinity cookie, hashed to a random position; later requests carrying it stay together"
		default:
			out.Outcome = "a random upstream: no affinity"
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	res := b.Lookup(key)
	lj := toLookupJSON(res)
	writeJSON(w, http.StatusOK, requestLookupJSON{Pool: h.poolOf(b), Key: &key, Source: &source, lookupJSON: &lj})
}
