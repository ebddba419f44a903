package balancer

import (
	crand "crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"net/http"
	"time"

	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/reqbody"
)

// Where a request's key came from, besides an index into snapshot.keys.
const (
	srcRandom      = -1 // no key: a random position (on_missing random)
	srcAffinity    = -2 // the affinity cookie the request carries (on_missing cookie)
	srcNewAffinity = -3 // a new affinity cookie (on_missing cookie)
	srcRejected    = -4 // no key: answered 400 (on_missing reject)
	srcBodyFailed  = -5 // no key: the body could not be scanned (reqbody.Prefix.Failed); ServeHTTP answers
)

// keyLabel names where a request's key came from (src as position returns
// it) in one word, for log lines: a hash.key source's Label,
// "cookie:NAME" for the affinity cookie, "" for none.
func (s *snapshot) keyLabel(src int) string {
	switch {
	case src >= 0:
		return s.keyLabels[src]
	case src == srcAffinity, src == srcNewAffinity:
		return "cookie:" + s.cookie.Name
	}
	return ""
}

// position returns the request's ring position: the hash of its key, the
// affinity cookie's value first when on_missing is cookie, and where the
// key came from (an index into s.keys, or one of the src constants).
// With no key it follows on_missing: srcRandom says the position is a
// random one (it keys nothing, so hold does not record it); false means a
// 400 was written or, with srcBodyFailed, that the body could not be
// read for a key (ServeHTTP answers). A generated affinity cookie goes on
// the final response head (see downstream.Writer.Cookie).
func (b *Balancer) position(s *snapshot, w *downstream.Writer, r *http.Request) (pos uint64, src int, ok bool) {
	if s.onMissing == options.OnMissingCookie && !key.Dropped(r.Header, "Cookie") {
		if v, ok := key.CookieValue(r.Header, s.cookie.Name); ok {
			return s.ring.Hash(v), srcAffinity, true
		}
	}
	for i := range s.keys {
		if h, ok := s.keys[i].Hash(s.ring, r); ok {
			return h, i, true
		}
		if p, ok := r.Body.(*reqbody.Prefix); ok && p.Failed() {
			return 0, srcBodyFailed, false
		}
	}
	switch s.onMissing {
	case options.OnMissingReject:
		downstream.PlainError(w, http.StatusBadRequest, "missing hash key: the request has none of "+s.keyDesc+"\n")
		return 0, srcRejected, false
	case options.OnMissingCookie:
		var id [16]byte
		crand.Read(id[:])
		v := hex.EncodeToString(id[:])
		w.Cookie = (&http.Cookie{
			Name:     s.cookie.Name,
			Value:    v,
			Path:     "/",
			MaxAge:   int(s.cookie.TTL / time.Second),
			Secure:   s.cookie.Secure,
			HttpOnly: s.cookie.HTTPOnly,
			SameSite: http.SameSiteLaxMode,
		}).String()
		return s.ring.Hash(v), srcNewAffinity, true
	}
	return mrand.Uint64(), srcRandom, true
}
