// Package handoff tells a key's new owner where the key was (routing
// rule 17): remap is not migration, so ringlb names to the upstream that
// gets a key, in a request header, the upstream the key was on before and
// its URL, and the upstream can fetch the key's state from there.
package handoff

import (
	"net/http"
	"strings"
	"time"

	"github.com/ringlb/ringlb/ring"
)

// Options is the handoff block. It may stand at the top level of a config
// without pools or in a pool.
type Options struct {
	// Header is handoff.header, the request header that names the key's
	// previous upstream, e.g. Ringlb-Handoff; default "", which turns
	// handoff off. A valid field name, none that ringlb sets itself
	// (X-Forwarded-*, the request id header, CDN-Loop) and no hop-by-hop
	// field. Its value is an RFC 8941 dictionary: name="P", url="P's URL".
	Header string `yaml:"header"`
	// Window is handoff.window: how long after the pool's ring version
	// changed the previous version's choice for a key is named; default
	// 5m; > 0.
	Window time.Duration `yaml:"window" default:"5m"`
}

// State is a snapshot's handoff; nil when it is off.
type State struct {
	header string // canonical
	window int64  // ns
	// values[i] is the header's value naming member i: a one-element
	// slice, capped, shared by every request that carries it (the
	// transports only read it).
	values [][]string
	// cur is the snapshot's ring. prev is the ring before its version
	// became current (nil before any change, or when the change is older
	// than the window at install), prevTo maps prev's members to cur's
	// (-1: not a member any more), and changed is when the version
	// changed (the balancer's clock).
	cur     *ring.Ring
	prev    *ring.Ring
	prevTo  []int
	changed int64
}

// New returns the handoff of a snapshot with ring r, whose member i has
// the URL urls[i], replacing at time now a snapshot with ring old (nil at
// start) and handoff was (nil: off): the previous ring is old when the
// version changes, and was's when it does not. It returns nil when o
// turns handoff off.
func New(o Options, r *ring.Ring, urls []string, old *ring.Ring, was *State, now int64) *State {
	if o.Header == "" {
		return nil
	}
	st := &State{header: http.CanonicalHeaderKey(o.Header), window: int64(o.Window), values: make([][]string, r.Len()), cur: r}
	for i, m := range r.Members() {
		v := `name="` + sfEscape(m.Name) + `", url="` + sfEscape(urls[i]) + `"`
		st.values[i] = []string{v}[:1:1]
	}
	switch {
	case old == nil:
	case old.Version() != r.Version():
		st.prev, st.changed = old, now
	case was != nil:
		st.prev, st.changed = was.prev, was.changed
	}
	if st.prev != nil {
		index := make(map[string]int, r.Len())
		for i, m := range r.Members() {
			index[m.Name] = i
		}
		st.prevTo = make([]int, st.prev.Len())
		for i, m := range st.prev.Members() {
			j, ok := index[m.Name]
			if !ok {
				j = -1
			}
			st.prevTo[i] = j
		}
	}
	return st
}

// sfEscape escapes a string for an RFC 8941 sf-string: backslash and
// double quote get a backslash. Names and URLs are printable ASCII.
func sfEscape(v string) string {
	if !strings.ContainsAny(v, `"\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '"' || v[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// Members is what From asks of the snapshot's members, by index.
type Members interface {
	// Held returns the index of the member named by a hold record, -1
	// when none is.
	Held(upstream string) int
	// Usable reports whether member i is available and not in maint:
	// only such a member is named.
	Usable(i int) bool
	// Draining reports whether member i is in admin state drain.
	Draining(i int) bool
}

// From is rule 17's P for the key at ring position h at time now: the
// member the key was on before, or -1. It is, first that applies: held,
// the upstream of the key's hold record (this process's, the shared
// store's or a valid cookie's; "" for none); else, within the window
// after the ring version changed, the upstream the previous version
// would have chosen (its first member clockwise that is usable now; none
// when the first it meets is no longer a member); else the key's owner
// when it drains. P is named only while it is a member and usable.
func (st *State) From(held string, h uint64, now int64, m Members) int {
	p := -1
	switch {
	case held != "":
		p = m.Held(held)
	case st.prev != nil && now-st.changed < st.window:
		st.prev.Walk(h, func(i int) bool {
			j := st.prevTo[i]
			if j < 0 {
				return false // removed: it had the key, and cannot hand it over
			}
			if m.Usable(j) {
				p = j
				return false
			}
			return true
		})
	default:
		if o := st.cur.Owner(h); o >= 0 && m.Draining(o) {
			p = o
		}
	}
	if p >= 0 && !m.Usable(p) {
		p = -1
	}
	return p
}

// Attempt sets or removes the handoff header on r for an attempt on
// member u, the key's previous upstream being p (-1: none); it reports
// whether the header was set.
func (st *State) Attempt(r *http.Request, p, u int) bool {
	if p < 0 || p == u {
		delete(r.Header, st.header)
		return false
	}
	r.Header[st.header] = st.values[p]
	return true
}

// Previous is what /debug/lookup shows of rule 17 for a key: the upstream
// a request with it would be told the key was on, and its URL.
type Previous struct {
	From string
	URL  string
}
