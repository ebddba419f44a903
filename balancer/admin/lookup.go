package admin

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/ring"
)

// lookupJSON is /debug/lookup's shape, fixed by SPEC. Chosen is null when
// the request would get 503. Pool names the pool placed in, with several
// pools only (so that a lookup by host and path says which the routes
// picked).
type lookupJSON struct {
	Pool       string        `json:"pool,omitempty"`
	Key        string        `json:"key"`
	Hash       string        `json:"hash"`
	KeyHash    string        `json:"key_hash"` // as the access log and /debug/hotkeys show it
	Owner      string        `json:"owner"`
	Held       *string       `json:"held"`
	Preference []string      `json:"preference"`
	Chosen     *string       `json:"chosen"`
	Skipped    []skippedJSON `json:"skipped"`
	// Handoff is the handoff header a request with this key would carry
	// (routing rule 17): the key's previous upstream and its URL; left
	// out when it would carry none.
	Handoff *handoffJSON `json:"handoff,omitempty"`
}

// handoffJSON is the previous upstream /debug/lookup says a request's
// handoff header would name.
type handoffJSON struct {
	From string `json:"from"`
	URL  string `json:"url"`
}

// skippedJSON is an upstream /debug/lookup says was passed over, and why.
type skippedJSON struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// reasonName is a skipped entry's reason as /debug/lookup names it.
func reasonName(r ring.Reason) string { return r.String() }

// lookup answers /debug/lookup: by key, by hash, or for a described request.
func (h *handler) lookup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	b, ok := h.poolFor(w, q, true)
	if !ok {
		return
	}
	// An empty key beside a described request is the status page's form
	// left blank: the request's own key counts.
	described := q.Has("path") || q.Has("header") || q.Has("cookie") || q.Has("ip") || q.Has("host")
	if r.Method == http.MethodPost || q.Get("key") == "" && !q.Has("hash") && described {
		h.lookupRequest(w, b, r, q)
		return
	}
	if !q.Has("key") && q.Has("hash") {
		h.lookupHash(w, b, q.Get("hash"))
		return
	}
	if !q.Has("key") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "missing query parameter key (or path, header, cookie, ip to describe a request)"})
		return
	}
	if q.Get("key") == "" {
		// No request has an empty key: every source needs a non-empty value.
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "key must not be empty: no request has an empty key"})
		return
	}
	out := toLookupJSON(b.Lookup(q.Get("key")))
	out.Pool = h.poolOf(b)
	writeJSON(w, http.StatusOK, out)
}

// poolOf is b's name with several pools, else "" (answers leave it out).
func (h *handler) poolOf(b *balancer.Balancer) string {
	if len(h.rt.Pools()) > 1 {
		return b.Pool()
	}
	return ""
}

// toLookupJSON renders a key's placement as /debug/lookup answers it.
func toLookupJSON(res balancer.LookupResult) lookupJSON {
	out := lookupJSON{
		Key:        res.Key,
		Hash:       res.Hash,
		KeyHash:    res.KeyHash,
		Owner:      res.Owner,
		Preference: res.Preference,
		Skipped:    make([]skippedJSON, 0, len(res.Skipped)),
	}
	if res.Chosen != "" {
		out.Chosen = &res.Chosen
	}
	if res.Held != "" {
		out.Held = &res.Held
	}
	if h := res.Handoff; h != nil {
		out.Handoff = &handoffJSON{From: h.From, URL: h.URL}
	}
	for _, s := range res.Skipped {
		out.Skipped = append(out.Skipped, skippedJSON{Name: s.Name, Reason: reasonName(s.Reason)})
	}
	return out
}

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
