package balancer

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/ring"
)

// HoldOptions is the hold block (routing rule 11). Its zero value turns
// hold off, which costs the request path one nil check.
type HoldOptions struct {
	// Idle, when > 0, turns hold on: a key served within Idle under
	// another ring version stays on the upstream that served it.
	Idle time.Duration
	// MaxKeys bounds the records this process keeps (values below 1
	// count as 1); beyond it the least recently used are forgotten.
	MaxKeys int
	// CookieName, when not empty, names the signed cookie that carries a
	// key's hold to every replica sharing the secret; Secrets then holds
	// at least one secret of hold.MinSecretLen bytes or more: the first
	// signs, all verify. The cookie's Secure and HttpOnly attributes are
	// the affinity cookie's (Hash.Cookie).
	CookieName string
	Secrets    [][]byte
	// Share, when Share.URL is set, shares the records with the other
	// replicas through a Redis server (routing rule 14; see
	// package share). Its Idle and Logger are the balancer's.
	Share share.Options
	// OnReturn is on_return: hold.Stay ("" too, the default) keeps a key
	// in use where it is when the upstream the ring prefers for it comes
	// back; hold.Home sends exactly that upstream's keys back to it.
	OnReturn hold.OnReturn
}

// holdSettings is what compile derives from HoldOptions; a zero rule.Idle
// means hold is off.
type holdSettings struct {
	rule    hold.Rule
	maxKeys int
	cookie  string
	codec   *hold.Codec
	share   share.Options // URL "": records stay in this process
}

// compileHold validates the hold block; fail is on_unavailable fail, under
// which a held key's owner is its held upstream.
func compileHold(o HoldOptions, fail bool) (holdSettings, error) {
	if o.Idle < 0 {
		return holdSettings{}, fmt.Errorf("balancer: hold idle must be >= 0, got %v", o.Idle)
	}
	if o.Idle == 0 {
		return holdSettings{}, nil
	}
	switch o.OnReturn {
	case "", hold.Stay, hold.Home:
	default:
		return holdSettings{}, fmt.Errorf("balancer: hold on_return: unknown value %q", o.OnReturn)
	}
	hs := holdSettings{rule: hold.Rule{Idle: o.Idle, Fail: fail, Home: o.OnReturn == hold.Home}, maxKeys: max(o.MaxKeys, 1)}
	if o.CookieName != "" {
		c, err := hold.NewCodec(o.Secrets)
		if err != nil {
			return holdSettings{}, fmt.Errorf("balancer: %w", err)
		}
		hs.cookie, hs.codec = o.CookieName, c
	} else if len(o.Secrets) > 0 {
		return holdSettings{}, errors.New("balancer: hold secrets given without a cookie name")
	}
	if o.Share.URL != "" {
		if err := share.Check(o.Share); err != nil {
			return holdSettings{}, fmt.Errorf("balancer: hold share: %w", err)
		}
		hs.share = o.Share
		hs.share.Idle = o.Idle
	}
	return hs, nil
}

// holdState is a snapshot's hold; nil when hold is off.
type holdState struct {
	holdSettings
	store    *hold.Store
	cur      hold.Version   // the ring's version
	index    map[string]int // member name → index in the snapshot
	secure   bool           // the cookie's attributes: the affinity cookie's
	httpOnly bool

	// With share on (rule 14): the client, the names a record read from
	// it may carry (the members), and the window in which keys without
	// a record of this process are looked up in the store (see
	// shareWindow), which the snapshots of one ring version share.
	share   *share.Client
	members *share.Members
	window  *atomic.Pointer[shareWindow]
	written *hold.Written
}

// holdExpireEvery is how often the expiry timer walks the store, so that
// ringlb_hold_keys follows the keys going idle when traffic is low.
const holdExpireEvery = time.Second

// installHoldLocked sets the hold of snapshot s, which is about to be
// installed (nil when off), keeping the process's one store across
// reloads: a new one when hold is turned on; when max_keys changes, one of
// the new size with the records carried over (what requests still on the
// previous snapshot record meanwhile goes to the old store and is lost).
// The expiry timer runs while hold is on. Callers hold b.mu.
func (b *Balancer) installHoldLocked(s *snapshot) {
	hs := s.holdSet
	old := b.snap.Load()
	b.installShareLocked(hs)
	if hs.rule.Idle <= 0 {
		b.holdStore.Store(nil)
		if b.holdTimer != nil {
			b.holdTimer.Stop()
			b.holdTimer = nil
		}
		s.hold = nil
		return
	}
	st := b.holdStore.Load()
	switch {
	case st == nil:
		st = hold.NewStore(hold.Options{MaxKeys: hs.maxKeys, Idle: hs.rule.Idle})
	case st.MaxKeys() != hs.maxKeys:
		ns := hold.NewStore(hold.Options{MaxKeys: hs.maxKeys, Idle: hs.rule.Idle})
		st.Range(b.nanotime(), func(k uint64, r hold.Rec) bool {
			ns.Record(k, r.Upstream, r.Version, r.LastUse)
			return true
		})
		st = ns
	default:
		st.SetIdle(hs.rule.Idle)
	}
	b.holdStore.Store(st)
	if b.holdTimer == nil {
		b.holdTimer = b.clk.AfterFunc(holdExpireEvery, b.expireHold)
	}
	h := &holdState{holdSettings: hs, store: st, cur: hold.VersionOf(s.ring.Version()),
		index: make(map[string]int, len(s.members)), secure: s.cookie.Secure, httpOnly: s.cookie.HTTPOnly}
	for i := range s.members {
		h.index[s.members[i].u.name] = i
	}
	if b.holdShare != nil {
		h.share, h.written = b.holdShare, b.holdWritten
		names := make([]string, len(s.members))
		for i := range s.members {
			names[i] = s.members[i].u.name
		}
		h.members = share.NewMembers(names)
		if old != nil && old.hold != nil && old.hold.share == h.share && old.hold.cur == h.cur {
			h.window = old.hold.window
		} else {
			h.window = new(atomic.Pointer[shareWindow])
			h.window.Store(newShareWindow(b.nanotime(), hs.maxKeys))
		}
	}
	s.hold = h
}

// dropHeldLocked forgets the records of every upstream that is not a
// member of s (the previous snapshot's members that s has not, and any
// other name recorded meanwhile by requests that began on an older
// snapshot): removing an upstream sends its keys along the ring at once,
// and the store's table of names holds the members only (and those
// dropped lately). Callers hold b.mu, after s was installed.
func (b *Balancer) dropHeldLocked(s *snapshot) {
	st := b.holdStore.Load()
	if st == nil {
		return
	}
	st.Keep(func(name string) bool { return s.ring.Index(name) >= 0 }, b.nanotime())
}

// expireHold walks the store a little (hold.Store.Expire) and sets the
// timer again, until hold is turned off or the Balancer closed.
func (b *Balancer) expireHold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.holdStore.Load()
	if st == nil || b.holdTimer == nil {
		return
	}
	st.Expire(b.nanotime(), 64)
	b.holdTimer = b.clk.AfterFunc(holdExpireEvery, b.expireHold)
}

// stopHoldLocked stops the expiry timer (Close). Callers hold b.mu.
func (b *Balancer) stopHoldLocked() {
	if b.holdTimer != nil {
		b.holdTimer.Stop()
		b.holdTimer = nil
	}
	if b.holdShare != nil {
		b.holdShare.Close()
		b.holdShare = nil
	}
}

// holdReq is rule 11 for one request: what it decided for the request's
// key, and what the response should record and set.
type holdReq struct {
	h    uint64
	rec  hold.Rec
	d    hold.Decision
	held int // the member the request is held on; -1: none
	// ck is the request's valid hold cookie, when ckOK.
	ck   hold.Cookie
	ckOK bool
	wall time.Time // the wall clock, read once, with a cookie name set
	// recOK: rec is a record (of this process, the store or the cookie).
	recOK bool
	// shown says the hold is worth naming (the access log's "held",
	// /debug/lookup's held): it sends the key elsewhere than the ring
	// would, or follows a record of another ring version. Under
	// on_return stay a key in use is held wherever it is; one the ring
	// sends to the same upstream is its owner's.
	shown bool
}

// holdBegin applies rule 11 to the request r with ring position h (its
// key's hash): the record of this process, or the request's valid cookie
// for its key, which wins; then Decide, judging the held upstream as the
// walk judges any (availability, and fullness under bounded loads; slow
// start does not apply: the held upstream already serves the key).
func (b *Balancer) holdBegin(s *snapshot, r *http.Request, h uint64, q *holdReq) {
	hs := s.hold
	q.h, q.held = h, -1
	mono := b.nanotime()
	rec, ok := hs.store.Lookup(h, mono)
	if !ok && hs.share != nil {
		rec, ok = b.shareLookup(r, hs, h, mono)
	}
	if hs.codec != nil {
		q.wall = b.clk.Now()
		if !key.Dropped(r.Header, "Cookie") {
			if v, present := key.CookieValue(r.Header, hs.cookie); present {
				if ck, cok := hs.codec.Decode(v, h, q.wall); cok {
					rec, ok = ck.Rec(q.wall, mono, hs.rule.Idle), true
					q.ck, q.ckOK = ck, true
				}
			}
		}
	}
	q.rec, q.recOK = rec, ok
	var held int
	q.d, held = b.decide(s, rec, ok, mono)
	if q.d.Outcome == hold.Hold {
		q.held = held
		moved := b.instead(s, h, held)
		if moved {
			b.heldTotal.Add(1)
		}
		q.shown = moved || s.holdNamed(rec, held)
	} else if q.d.Outcome == hold.HoldFail {
		q.held = held
	}
}

// decide applies rules 11 and 12 to a record (ok: there is one) at time
// mono, judging the held upstream with standing; held is its member
// index, -1 when it is not a member (or there is no record). Records of
// the current version are looked at only while some member drains (rule
// 12 holds their keys there too): otherwise the ring decides them.
func (b *Balancer) decide(s *snapshot, rec hold.Rec, ok bool, mono int64) (d hold.Decision, held int) {
	held = -1
	rule := s.hold.rule
	rule.Drains = s.drains.Load() > 0
	d = rule.Decide(rec, ok, s.hold.cur, mono, func(name string) hold.Standing {
		i, member := s.hold.index[name]
		if !member {
			return hold.NotMember
		}
		held = i
		return b.standing(s, i, mono)
	})
	return d, held
}

// standing judges member i at time now as the walk would (admin state,
// health, breaker, bounded loads) for a key held on it: without slow
// start (the held upstream already serves the key) or an on_unavailable
// fail owner (it is the owner), and taking it in state drain (rule 12).
func (b *Balancer) standing(s *snapshot, i int, now int64) hold.Standing {
	w := walk{b: b, s: s, owner: -1, total: b.inflight.Load(), availW: math.Float64frombits(s.availW.Load()), now: now, held: true}
	if w.judge(i, 0) != ring.Accept {
		return hold.Unavailable
	}
	if s.members[i].u.adminState() == state.Drain {
		return hold.Draining
	}
	return hold.Ready
}

// instead reports whether holding position h on member i sends the
// request elsewhere than the ring would: ringlb_held_total counts those.
// A key the new ring leaves where it was is held too (so that it stays if
// a later change moves it), but not counted.
func (b *Balancer) instead(s *snapshot, h uint64, i int) bool {
	if s.ring.Owner(h) == i {
		return false
	}
	c, _ := b.pick(s, h, nil, nil)
	return c.Member != i
}

// choose returns the member for the request's next attempt (q nil: hold
// is off, or the position is random): the held member first, then the
// ring's pick among those not tried. Under on_unavailable fail the held
// member is the key's owner: when it is unavailable (HoldFail), or once
// tried or refused by its breaker, there is nowhere else to go.
func (b *Balancer) choose(s *snapshot, h uint64, tried []int, q *holdReq) ring.Choice {
	if q != nil && q.held >= 0 {
		if q.d.Outcome == hold.HoldFail {
			return ring.Choice{Member: -1, Owner: q.held, Overflow: -1}
		}
		if !slices.Contains(tried, q.held) {
			return ring.Choice{Member: q.held, Owner: q.held, Overflow: -1}
		}
		if s.fail {
			return ring.Choice{Member: -1, Owner: q.held, Overflow: -1}
		}
	}
	c, _ := b.pick(s, h, tried, nil)
	return c
}

// setCookie returns the hold cookie's Set-Cookie value for an attempt on
// member m, or
// "" when the request's cookie already says what the response would
// (hold.NeedSet) or there is no cookie.
func (q *holdReq) setCookie(s *snapshot, m *member) string {
	hs := s.hold
	if hs.codec == nil {
		return ""
	}
	u, v := hold.After(q.d, q.rec, m.u.name, hs.cur)
	if !hold.NeedSet(q.ck, q.ckOK, u, v, q.wall, hs.rule.Idle) {
		return ""
	}
	val := hs.codec.Encode(hold.NewCookie(q.h, u, v, q.wall, hs.rule.Idle))
	if val == "" {
		return ""
	}
	return (&http.Cookie{
		Name:     hs.cookie,
		Value:    val,
		Path:     "/",
		MaxAge:   int((hs.rule.Idle + time.Second - 1) / time.Second),
		Secure:   hs.secure,
		HttpOnly: hs.httpOnly,
		SameSite: http.SameSiteLaxMode,
	}).String()
}

// holdRecord notes, once the request was served by m, where its key lives
// now (hold.After), at the time it ended.
func (b *Balancer) holdRecord(s *snapshot, q *holdReq, m *member) {
	u, v := hold.After(q.d, q.rec, m.u.name, s.hold.cur)
	now := b.nanotime()
	s.hold.store.Record(q.h, u, v, now)
	if sh := s.hold.share; sh != nil {
		changed := !q.recOK || q.rec.Upstream != u || q.rec.Version != v
		if s.hold.written.Due(q.h, now, int64(s.hold.rule.Idle)/2, changed) {
			sh.Put(q.h, share.Record{Upstream: u, Version: v, At: b.clk.Now()})
		}
	}
}

// heldOf returns the upstream a request with ring position h and no
// cookie would be held on now (/debug/lookup's "held"), or "".
func (b *Balancer) heldOf(s *snapshot, h uint64) string {
	if s.hold == nil {
		return ""
	}
	hs := s.hold
	mono := b.nanotime()
	rec, ok := hs.store.Lookup(h, mono)
	d, held := b.decide(s, rec, ok, mono)
	if d.Outcome != hold.Hold {
		return ""
	}
	if !s.holdNamed(rec, held) && !b.instead(s, h, held) {
		return "" // held where the ring sends it anyway
	}
	return rec.Upstream
}

// holdNamed says a hold on member held by rec is worth naming (the access
// log's "held", /debug/lookup's held) even where the ring would send the
// key anyway: it follows a record of another ring version, or keeps the
// key on a draining upstream.
func (s *snapshot) holdNamed(rec hold.Rec, held int) bool {
	return rec.Version != s.hold.cur || s.members[held].u.adminState() == state.Drain
}
