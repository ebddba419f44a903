package admin

import (
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/state"
)

// The admin API for upstream states (routing rule 12):
//
//	GET  /upstreams                 {"pools": {"POOL": [upstreamStateJSON, ...]}}
//	GET  /upstreams/NAME            one upstreamStateJSON; 404 when no pool has NAME
//	POST /upstreams/NAME/drain      state drain; 200 with the object
//	POST /upstreams/NAME/maint      state maint; 200 with the object
//	POST /upstreams/NAME/ready      state ready; 200 with the object
//
// Another word than drain, maint or ready is 400. The POSTs pass the
// listener's Host and Origin rules (hostGuard) like every POST. Upstreams
// are looked up through pools and findUpstream, so that routes naming the
// pool (/pools/POOL/upstreams/NAME) are one more caller of findUpstream.

// upstreamStateJSON is one upstream of /upstreams. Its fields are part
// of the admin API: new ones may come, none is renamed.
type upstreamStateJSON struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	Available bool   `json:"available"`
	HeldKeys  int    `json:"held_keys"`
	Inflight  int64  `json:"inflight"`
	Tunnels   int64  `json:"tunnels"`
	Drained   bool   `json:"drained"`
	Source    string `json:"source"`
	// Hold says whether hold is on in the upstream's pool: whether a
	// drain keeps the keys in use on it. With it off, "drained" comes as
	// soon as nothing is in flight, and every key in use moves.
	Hold bool `json:"hold"`
	// Warning, in state drain with hold off, says that the keys in use
	// are not kept; absent otherwise.
	Warning string `json:"warning,omitempty"`
}

// drainWithoutHold is the warning of a draining upstream's object when
// hold is off.
const drainWithoutHold = "hold is off: the keys in use on this upstream are not kept while it drains; the next request of each goes to another upstream (hold.idle > 0 keeps them)"

func toStateJSON(u state.Upstream, holdOn bool) upstreamStateJSON {
	j := upstreamStateJSON{
		Name: u.Name, State: u.State.String(), Available: u.Available, HeldKeys: u.HeldKeys,
		Inflight: u.Inflight, Tunnels: u.Tunnels, Drained: u.Drained, Source: u.Source, Hold: holdOn,
	}
	if u.State == state.Drain && !holdOn {
		j.Warning = drainWithoutHold
	}
	return j
}

// pool is one pool's Balancer, as the admin routes find upstreams.
type pool struct {
	name string
	b    *balancer.Balancer
}

// pools returns every pool, in name order. A config without pools has
// one, named balancer.DefaultPool.
func (h *handler) pools() []pool {
	var out []pool
	for _, b := range h.rt.Pools() {
		out = append(out, pool{name: b.Pool(), b: b})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// findUpstream finds the upstream called name in the pool called inPool,
// or, with inPool "", in whichever pool has it. It fails with the status
// and message to answer: 404 when the pool or the upstream is unknown,
// 409 naming the pools when inPool is "" and several pools have name.
func (h *handler) findUpstream(inPool, name string) (pool, int, string) {
	var found []pool
	knownPool := inPool == ""
	for _, p := range h.pools() {
		if inPool != "" && p.name != inPool {
			continue
		}
		knownPool = true
		if _, err := p.b.UpstreamState(name); err == nil {
			found = append(found, p)
		}
	}
	switch {
	case !knownPool:
		return pool{}, http.StatusNotFound, "no pool " + quote(inPool)
	case len(found) == 0:
		return pool{}, http.StatusNotFound, "no upstream " + quote(name)
	case len(found) > 1:
		names := make([]string, len(found))
		for i, p := range found {
			names[i] = p.name
		}
		sort.Strings(names)
		return pool{}, http.StatusConflict, "upstream " + quote(name) + " is in pools " + strings.Join(names, ", ") +
			": use /pools/POOL/upstreams/" + url.PathEscape(name)
	}
	return found[0], 0, ""
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// nameParam returns the route's {name}, unescaped: names may hold
// characters a client escapes ("[::1]:8080").
func nameParam(r *http.Request) string {
	n := chi.URLParam(r, "name")
	if u, err := url.PathUnescape(n); err == nil {
		return u
	}
	return n
}

func (h *handler) listUpstreams(w http.ResponseWriter, _ *http.Request) {
	out := map[string][]upstreamStateJSON{}
	for _, p := range h.pools() {
		ups, holdOn := p.b.UpstreamStates(), p.b.HoldOn()
		list := make([]upstreamStateJSON, len(ups))
		for i, u := range ups {
			list[i] = toStateJSON(u, holdOn)
		}
		out[p.name] = list
	}
	writeJSON(w, http.StatusOK, map[string]any{"pools": out})
}

func (h *handler) getUpstream(w http.ResponseWriter, r *http.Request) {
	h.upstream(w, "", nameParam(r), nil)
}

func (h *handler) setUpstreamState(w http.ResponseWriter, r *http.Request) {
	word := chi.URLParam(r, "state")
	st, err := state.Parse(word)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "state " + quote(word) + " is not drain, maint or ready"})
		return
	}
	h.upstream(w, "", nameParam(r), &st)
}

func (h *handler) getPoolUpstream(w http.ResponseWriter, r *http.Request) {
	h.upstream(w, chi.URLParam(r, "pool"), nameParam(r), nil)
}

func (h *handler) setPoolUpstreamState(w http.ResponseWriter, r *http.Request) {
	word := chi.URLParam(r, "state")
	st, err := state.Parse(word)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "state " + quote(word) + " is not drain, maint or ready"})
		return
	}
	h.upstream(w, chi.URLParam(r, "pool"), nameParam(r), &st)
}

// upstream answers for the upstream called name in pool inPool ("": any
// pool), setting its state first when st is not nil.
func (h *handler) upstream(w http.ResponseWriter, inPool, name string, st *state.Admin) {
	p, code, msg := h.findUpstream(inPool, name)
	if code != 0 {
		writeJSON(w, code, map[string]string{"error": msg})
		return
	}
	var u state.Upstream
	var err error
	if st != nil {
		u, err = p.b.SetState(name, *st)
	} else {
		u, err = p.b.UpstreamState(name)
	}
	if errors.Is(err, balancer.ErrUnknownUpstream) { // removed meanwhile
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no upstream " + quote(name)})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, toStateJSON(u, p.b.HoldOn()))
}
