package balancer

import (
	"net/http"
	"strings"
	"time"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/ring"
)

// HandoffOptions is the handoff block (routing rule 17): remap is not
// migration, so ringlb tells the upstream that gets a key where the key
// was before, and the upstream can fetch the key's state from there. It
// may stand at the top level of a config without pools or in a pool.
type HandoffOptions struct {
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

// handoffState is a snapshot's handoff; nil when it is off.
type handoffState struct {
	header string // canonical
	window int64  // ns
	// values[i] is the header's value naming member i: a one-element
	// slice, capped, shared by every request that carries it (the
	// transports only read it).
	values [][]string
	// prev is the ring before this snapshot's version became current (nil
	// before any change, or when the change is older than the window at
	// install), prevTo maps its members to this snapshot's (-1: not a
	// member any more), and changed is when the version changed (the
	// balancer's clock).
	prev    *ring.Ring
	prevTo  []int
	changed int64
}

// installHandoff sets the handoff of snapshot s, which is about to replace
// old (nil at start), at time now: the previous ring is old's when the
// version changes, and carried over from old when it does not.
func installHandoff(s, old *snapshot, now int64) {
	h := s.handoffOpts
	if h.Header == "" {
		return
	}
	ho := &handoffState{header: http.CanonicalHeaderKey(h.Header), window: int64(h.Window), values: make([][]string, len(s.members))}
	for i := range s.members {
		m := &s.members[i]
		v := `name="` + sfEscape(m.u.name) + `", url="` + sfEscape(m.url.String()) + `"`
		ho.values[i] = []string{v}[:1:1]
	}
	switch {
	case old == nil:
	case old.ring.Version() != s.ring.Version():
		ho.prev, ho.changed = old.ring, now
	case old.handoff != nil:
		ho.prev, ho.changed = old.handoff.prev, old.handoff.changed
	}
	if ho.prev != nil {
		index := make(map[string]int, len(s.members))
		for i := range s.members {
			index[s.members[i].u.name] = i
		}
		ho.prevTo = make([]int, ho.prev.Len())
		for i, m := range ho.prev.Members() {
			j, ok := index[m.Name]
			if !ok {
				j = -1
			}
			ho.prevTo[i] = j
		}
	}
	s.handoff = ho
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

// handoffFrom is rule 17's P for the key at ring position h: the member
// the key was on before, or -1. It is, first that applies: the upstream
// of the key's hold record (this process's, the shared store's or a valid
// cookie's: rec, when found); else, within the window after the ring
// version changed, the upstream the previous version would have chosen
// (its first member clockwise that is available now; none when the first
// it meets is no longer a member); else the key's owner when it drains.
// P is named only while it is a member, available and not in maint.
func (s *snapshot) handoffFrom(rec hold.Rec, found bool, h uint64, now int64) int {
	ho := s.handoff
	p := -1
	switch {
	case found:
		if i, ok := s.hold.index[rec.Upstream]; ok {
			p = i
		}
	case ho.prev != nil && now-ho.changed < ho.window:
		ho.prev.Walk(h, func(m int) bool {
			j := ho.prevTo[m]
			if j < 0 {
				return false // removed: it had the key, and cannot hand it over
			}
			if s.members[j].u.available() && s.members[j].u.adminState() != state.Maint {
				p = j
				return false
			}
			return true
		})
	default:
		if o := s.ring.Owner(h); o >= 0 && s.members[o].u.adminState() == state.Drain {
			p = o
		}
	}
	if p >= 0 && (!s.members[p].u.available() || s.members[p].u.adminState() == state.Maint) {
		p = -1
	}
	return p
}

// handoffAttempt sets or removes the handoff header on r for an attempt
// on member u, the key's previous upstream being p (-1: none); it reports
// whether the header was set.
func (ho *handoffState) attempt(r *http.Request, p, u int) bool {
	if p < 0 || p == u {
		delete(r.Header, ho.header)
		return false
	}
	r.Header[ho.header] = ho.values[p]
	return true
}

// Handoff is what /debug/lookup shows of rule 17 for a key: the upstream
// a request with it would be told the key was on, and its URL.
type Handoff struct {
	From string
	URL  string
}

// lookupHandoff is the handoff a request at ring position h would carry,
// sent to member u (-1: nowhere), with this process's hold record (no
// cookie); nil when none.
func (b *Balancer) lookupHandoff(s *snapshot, h uint64, u int) *Handoff {
	if s.handoff == nil || u < 0 {
		return nil
	}
	now := b.nanotime()
	var rec hold.Rec
	var found bool
	if s.hold != nil {
		rec, found = s.hold.store.Lookup(h, now)
		found = found && now-rec.LastUse < int64(s.hold.rule.Idle)
	}
	p := s.handoffFrom(rec, found, h, now)
	if p < 0 || p == u {
		return nil
	}
	return &Handoff{From: s.members[p].u.name, URL: s.members[p].url.String()}
}

// handoffBegin finds the key's previous upstream (rule 17) for the
// request's attempts, each of which sets or removes the header (so a
// client's own header of that name never passes).
func (b *Balancer) handoffBegin(st *serving) {
	s := st.s
	if st.random {
		return
	}
	var rec hold.Rec
	found := false
	if q := st.hold(); q != nil && q.recOK && q.d.Reason != hold.Expired {
		rec, found = q.rec, true
	}
	st.from = s.handoffFrom(rec, found, st.pos, b.nanotime())
}
