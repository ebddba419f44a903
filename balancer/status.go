package balancer

import (
	"cmp"
	"math"
	"net/http"
	"strings"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/ring"
)

// RingStatus is a read-only view of the current ring for the admin
// listener (/debug/ring and the status page).
type RingStatus struct {
	Version         string
	Placement       string
	PointsPerWeight int
	LoadFactor      float64
	LoadFloor       int64
	// KeySources lists hash.key as "cookie session", "header X-User-Id",
	// ..., in order; OnMissing is random, reject or cookie.
	KeySources []string
	OnMissing  string
	Upstreams  []UpstreamStatus
	// Discovery lists each discovery source, in config order; nil
	// without a discovery block.
	Discovery []discovery.Status
	// Hold is the hold block in force; its zero value: hold off.
	Hold hold.Status
}

// UpstreamStatus is one upstream in a RingStatus.
type UpstreamStatus struct {
	Name      string
	URL       string
	Weight    float64
	Points    int     // points on the ring
	Share     float64 // fraction of the hash space owned
	Available bool
	Health    string // "up" or "down"; "up" before a first probe or without checks
	Breaker   string // "closed", "half-open" or "open"
	Inflight  int64
	// ActiveFraction is the slow-start fraction of points active, 1 unless
	// slow-starting.
	ActiveFraction float64
	// Ejection says since when and why the upstream is unavailable; nil
	// while it is available.
	Ejection *Ejection
	// Source is "static", or the discovery source (srv or host value)
	// the upstream came from; Absent is true while it is missing from
	// that source's answer.
	Source string
	Absent bool
	// AdminState is the admin state: "ready", "drain" or "maint".
	AdminState string
	// Tunnels counts the upgraded connections (WebSocket) open to it,
	// each also counted in Inflight.
	Tunnels int64
}

// Status returns the current ring and the live state of its upstreams, in
// ring member order (by name under placement ringlb).
func (b *Balancer) Status() RingStatus {
	s := b.snap.Load()
	st := RingStatus{
		Version:         s.ring.Version(),
		Placement:       string(s.ring.Placement()),
		PointsPerWeight: s.ring.PointsPerWeight(),
		LoadFactor:      s.loadFactor,
		LoadFloor:       s.loadFloor,
		OnMissing:       string(s.onMissing),
		Hold:            b.hold.Status(s.hold),
		Upstreams:       make([]UpstreamStatus, len(s.members)),
		Discovery:       b.discoveryStatus(),
	}
	st.KeySources = append(st.KeySources, s.keyNames...)
	now := b.nanotime()
	for i := range s.members {
		m := &s.members[i]
		u := m.u
		health := "up"
		if u.down.Load() {
			health = "down"
		}
		bname := breaker.Names[u.breakerState()]
		st.Upstreams[i] = UpstreamStatus{
			Name:           u.name,
			URL:            m.url.String(),
			Weight:         m.weight,
			Points:         s.ring.Points(i),
			Share:          s.ring.Share(i),
			Available:      u.available(),
			Health:         health,
			Breaker:        bname,
			Inflight:       u.inflight.Load(),
			ActiveFraction: s.activeFraction(u, now),
			Ejection:       u.ejection.Load(),
			Source:         cmp.Or(m.source, "static"),
			Absent:         m.absent,
			AdminState:     u.adminState().String(),
			Tunnels:        u.tunnels.Load(),
		}
	}
	return st
}

func (s *snapshot) activeFraction(u *upstream, now int64) float64 {
	ws := u.warmSince.Load()
	if ws == 0 || s.slowStart <= 0 {
		return 1
	}
	return math.Min(1, math.Max(0, float64(now-ws)/float64(s.slowStart)))
}

// KeyOf returns the key a request would hash on and where it came from:
// "cookie NAME" for the affinity cookie (under on_missing cookie) or a
// hash.key source as KeySources names it. ok is false when the request has
// none, and then on_missing decides (a random position, 400, or a new
// affinity cookie).
func (b *Balancer) KeyOf(r *http.Request) (k, source string, ok bool) {
	s := b.snap.Load()
	if s.onMissing == options.OnMissingCookie {
		if v, ok := key.CookieValue(r.Header, s.cookie.Name); ok {
			return v, "cookie " + s.cookie.Name + " (affinity)", true
		}
	}
	for i := range s.keys {
		if v, ok := s.keys[i].Value(r); ok {
			return strings.Clone(v), s.keyNames[i], true // a json key points into the body's buffer
		}
	}
	return "", "", false
}

// MemberCount returns the number of ring members (absent ones included).
func (b *Balancer) MemberCount() int { return len(b.snap.Load().members) }

// Ready reports whether at least one upstream is available.
func (b *Balancer) Ready() bool {
	s := b.snap.Load()
	for i := range s.members {
		if s.members[i].u.available() {
			return true
		}
	}
	return false
}

// Skipped is an upstream passed over by a lookup and why: ring.Unhealthy,
// ring.BreakerOpen, ring.Full, ring.SlowStart, ring.Absent, ring.Draining,
// ring.Maint or ring.Busy (the chosen upstream holds
// limits.upstream_requests: a request stops there).
type Skipped struct {
	Name   string
	Reason ring.Reason
}

// LookupResult answers "where would this key go now?".
type LookupResult struct {
	Key  string
	Hash string // the key's ring position in hex (16 digits; 8 under nginx)
	// KeyHash is the key's hash as the access log, HotKeys and the shared
	// hold store report it: Hash, or with a salt the salted hash.
	KeyHash string
	// Owner owns the key's position, ignoring availability and load.
	Owner string
	// Held is the upstream a request with this key (and no hold cookie)
	// would be held on now instead of Chosen (routing rule 11); "" when
	// no hold applies.
	Held string
	// Preference lists every upstream once, clockwise from the key.
	Preference []string
	// Chosen is where a request with this key would go now, applying
	// availability, slow start and bounded loads exactly as a request does;
	// "" when it would get 503.
	Chosen  string
	Skipped []Skipped
	// Handoff is what a request with this key (and no hold cookie) would
	// be told of the key's previous upstream (routing rule 17); nil for
	// nothing (handoff off, no previous upstream, or sent to it).
	Handoff *handoff.Previous
}

// Lookup reports how the current ring places key, through the same pick
// a request makes.
func (b *Balancer) Lookup(key string) LookupResult {
	s := b.snap.Load()
	return b.lookupAt(s, key, s.ring.Hash(key))
}

// LookupHash is Lookup for a key known only by its hash, as
// /debug/hotkeys and the access log show it: the hex the lookup's Hash
// shows (16 digits; 8 under placement nginx). ok is false when hash is
// not such a number. With a salt (options.Hash.Salt) those show the
// salted hash, which cannot be turned back into a position: it is looked
// for among the hot keys (HotKeys, this window and the one before), and
// ok is false when none has it.
func (b *Balancer) LookupHash(hash string) (res LookupResult, ok bool) {
	return b.lookupHash(hash)
}

// SaltedKeyHashes reports whether the key hashes the balancer reports
// are salted (options.Hash.Salt), and so cannot be turned back into ring
// positions (see LookupHash).
func (b *Balancer) SaltedKeyHashes() bool { return b.snap.Load().salt != nil }

func (b *Balancer) lookupHash(hash string) (res LookupResult, ok bool) {
	s := b.snap.Load()
	var pos uint64
	if s.salt != nil {
		pos, ok = b.hotPosition(s, strings.ToLower(hash))
	} else {
		pos, ok = s.ring.ParseHash(hash)
	}
	if !ok {
		return LookupResult{}, false
	}
	return b.lookupAt(s, "", pos), true
}

func (b *Balancer) lookupAt(s *snapshot, key string, pos uint64) LookupResult {
	res := LookupResult{
		Key:        key,
		Hash:       s.ring.FormatHash(pos),
		KeyHash:    s.reportedHash(pos),
		Preference: make([]string, 0, len(s.members)),
		Skipped:    []Skipped{},
		Held:       b.heldOf(s, pos),
	}
	if o := s.ring.Owner(pos); o >= 0 { // -1: an empty ring (discovery has no members yet)
		res.Owner = s.members[o].u.name
	}
	s.ring.Walk(pos, func(i int) bool {
		res.Preference = append(res.Preference, s.members[i].u.name)
		return true
	})
	choice, skipped := b.pick(s, pos, nil, make([]ring.Skip, 0, len(s.members)))
	if choice.Member >= 0 && s.members[choice.Member].count.Busy(s.upstreamMax) {
		// A request would stop here: 503 "upstream busy", not moved on.
		skipped = append(skipped, ring.Skip{Member: choice.Member, Reason: ring.Busy})
		choice.Member = -1
	}
	if choice.Member >= 0 {
		res.Chosen = s.members[choice.Member].u.name
	}
	for _, sk := range skipped {
		res.Skipped = append(res.Skipped, Skipped{Name: s.members[sk.Member].u.name, Reason: sk.Reason})
	}
	to := choice.Member
	if res.Held != "" {
		to = s.ring.Index(res.Held)
	}
	res.Handoff = b.lookupHandoff(s, pos, to)
	return res
}

// Owners samples the ring: it returns the index into Status().Upstreams
// of the member owning each of n evenly spaced positions around the
// circle, starting at 0. The admin page draws the ring from it.
func (b *Balancer) Owners(n int) []int {
	s := b.snap.Load()
	if n <= 0 || s.ring.Len() == 0 {
		return nil
	}
	out := make([]int, n)
	step := math.MaxUint64 / uint64(n)
	for i := range out {
		out[i] = s.ring.Owner(uint64(i)*step + step/2)
	}
	return out
}
