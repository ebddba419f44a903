package hold

import (
	"net/http"
	"slices"
	"time"

	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/ring"
)

// Request is rule 11 for one request: the record of its key, the
// request's hold cookie, and what was decided from them.
type Request struct {
	Key uint64 // the key's ring position
	Rec Rec
	// RecOK: Rec is a record (of this process, the shared store or the
	// cookie).
	RecOK    bool
	Decision Decision
	// Held is the member the request is held on (Decision Hold or
	// HoldFail); -1: none.
	Held int
	// Shown says the hold is worth naming (the access log's "held",
	// /debug/lookup's held): it sends the key elsewhere than the ring
	// would, or follows a record of another ring version, or keeps the
	// key on a draining upstream. Under on_return stay a key in use is
	// held wherever it is; one the ring sends to the same upstream is its
	// owner's. The balancer, which knows the ring, sets it.
	Shown bool
	// Cookie is the request's valid hold cookie, when CookieOK.
	Cookie   Cookie
	CookieOK bool
	wall     time.Time // the wall clock, read once, with a cookie name set
}

// WallClock is where the hold reads the wall clock: for the cookie's
// times and the shared store's records'.
type WallClock interface{ Now() time.Time }

// Find sets q to what rule 11 starts from for request r, whose key has
// ring position h, at time mono: the record of this process; without
// one, with share on, the shared store's (rule 14: see shareLookup); and
// the request's valid cookie for its key, which wins.
func (s *State) Find(q *Request, r *http.Request, h uint64, mono int64, clk WallClock) {
	q.Key = h
	rec, ok := s.Store.Lookup(h, mono)
	if !ok && s.share != nil {
		rec, ok = s.shareLookup(r, h, mono, clk)
	}
	if s.Codec != nil {
		q.wall = clk.Now()
		if !key.Dropped(r.Header, "Cookie") {
			if v, present := key.CookieValue(r.Header, s.Cookie); present {
				if ck, cok := s.Codec.Decode(v, h, q.wall); cok {
					rec, ok = ck.Rec(q.wall, mono, s.Rule.Idle), true
					q.Cookie, q.CookieOK = ck, true
				}
			}
		}
	}
	q.Rec, q.RecOK = rec, ok
}

// Decide applies rules 11 and 12 to q's record at time mono, setting its
// Decision and Held; standing judges the held upstream by its member
// index. drains says some member is in admin state drain: only then are
// records of the current version looked at under on_return home (rule
// 12 holds their keys on a draining upstream too); otherwise the ring
// decides them.
func (s *State) Decide(q *Request, drains bool, mono int64, standing func(i int) Standing) {
	held := -1
	rule := s.Rule
	rule.Drains = drains
	q.Decision = rule.Decide(q.Rec, q.RecOK, s.Current, mono, func(name string) Standing {
		i, member := s.Index[name]
		if !member {
			return NotMember
		}
		held = i
		return standing(i)
	})
	q.Held = -1
	if q.Decision.Outcome != Route {
		q.Held = held
	}
}

// Choice is the choice of the held member for q's next attempt, once
// the members tried have been; ok false leaves it to the ring (no hold,
// or the held member was tried and others may serve). Under
// on_unavailable fail the held member is the key's owner: when it is
// unavailable (HoldFail), or once tried or refused by its breaker, there
// is nowhere else to go (Member -1).
func (s *State) Choice(q *Request, tried []int) (c ring.Choice, ok bool) {
	switch {
	case q.Held < 0:
		return ring.Choice{}, false
	case q.Decision.Outcome == HoldFail:
		return ring.Choice{Member: -1, Owner: q.Held, Overflow: -1}, true
	case !slices.Contains(tried, q.Held):
		return ring.Choice{Member: q.Held, Owner: q.Held, Overflow: -1}, true
	case s.Rule.Fail:
		return ring.Choice{Member: -1, Owner: q.Held, Overflow: -1}, true
	}
	return ring.Choice{}, false
}

// SetCookie returns the hold cookie's Set-Cookie value for an attempt of
// q's request on the upstream served, or "" when the request's cookie
// already says what the response would (NeedSet) or there is no cookie.
func (s *State) SetCookie(q *Request, served string) string {
	if s.Codec == nil {
		return ""
	}
	u, v := After(q.Decision, q.Rec, served, s.Current)
	if !NeedSet(q.Cookie, q.CookieOK, u, v, q.wall, s.Rule.Idle) {
		return ""
	}
	val := s.Codec.Encode(NewCookie(q.Key, u, v, q.wall, s.Rule.Idle))
	if val == "" {
		return ""
	}
	return (&http.Cookie{
		Name:     s.Cookie,
		Value:    val,
		Path:     "/",
		MaxAge:   int((s.Rule.Idle + time.Second - 1) / time.Second),
		Secure:   s.Secure,
		HttpOnly: s.HTTPOnly,
		SameSite: http.SameSiteLaxMode,
	}).String()
}

// Record notes, once q's request was served by the upstream served, where
// its key lives now (After), at time now. With share on, the record goes
// to the shared store too when it changed or half of idle has passed
// since it was last written there.
func (s *State) Record(q *Request, served string, now int64, clk WallClock) {
	u, v := After(q.Decision, q.Rec, served, s.Current)
	s.Store.Record(q.Key, u, v, now)
	if s.share != nil {
		changed := !q.RecOK || q.Rec.Upstream != u || q.Rec.Version != v
		if s.written.Due(q.Key, now, int64(s.Rule.Idle)/2, changed) {
			s.share.Put(q.Key, share.Record{Upstream: u, Version: uint64(v), At: clk.Now()})
		}
	}
}
