package balancer

import (
	"math"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/ring"
)

// pick chooses a member for ring position pos, judging each candidate as a
// request would: members in maint or drain (rule 12; a key held on a
// draining member is chosen by the hold, not here), unavailable ones
// (health, an open breaker whose open period runs, a half-open one whose
// trial is in flight) are skipped, tried ones
// are excluded, slow-starting ones are skipped at inactive points, and
// under bounded loads full ones are passed over. Under on_unavailable fail
// only the owner is considered. If only slow start stood in the way, slow
// start is ignored rather than fail the request. With skipped non-nil the
// reasons are appended, as /debug/lookup shows them.
func (b *Balancer) pick(s *snapshot, pos uint64, tried []int, skipped []ring.Skip) (ring.Choice, []ring.Skip) {
	w := walk{
		b:      b,
		s:      s,
		tried:  tried,
		owner:  -1,
		total:  b.inflight.Load(),
		availW: math.Float64frombits(s.availW.Load()),
		slow:   s.slowStart > 0,
	}
	if s.fail {
		w.owner = s.ring.Owner(pos)
	}
	n0 := len(skipped)
	ch, skipped := s.ring.Pick(pos, w.judge, skipped)
	if ch.Member < 0 && w.sawSlow {
		w.slow = false
		if skipped != nil {
			skipped = skipped[:n0]
		}
		ch, skipped = s.ring.Pick(pos, w.judge, skipped)
	}
	return ch, skipped
}

// walk is one pick: what its judge reads, taken when the pick starts.
type walk struct {
	b      *Balancer
	s      *snapshot
	tried  []int
	owner  int     // under on_unavailable fail, the only member considered; else -1
	total  int64   // requests in flight, all upstreams
	availW float64 // total weight of available members
	slow   bool    // slow start applies
	// held says the request's key is held on the member judged (rule
	// 12): a draining member takes it.
	held bool
	// sawSlow records that slow start turned a member away.
	sawSlow bool
	now     int64 // the balancer's clock, read once when first needed; 0 before
}

func (w *walk) clock() int64 {
	if w.now == 0 {
		w.now = w.b.nanotime()
	}
	return w.now
}

// judge is the walk's verdict on member i at its point seq. It reads the
// upstream's state and writes none, so /debug/lookup, which walks the
// same way, changes nothing. A new reason to pass a member over belongs
// here, with its ring.Reason.
func (w *walk) judge(i, seq int) ring.Reason {
	if w.owner >= 0 && i != w.owner {
		return ring.Excluded
	}
	for _, t := range w.tried {
		if t == i {
			return ring.Excluded
		}
	}
	m := &w.s.members[i]
	if m.absent {
		return ring.Absent
	}
	u := m.u
	// The admin state first: it is the operator's word, and it holds
	// whatever the health check says.
	switch state.Admin(u.state.Load()) {
	case state.Ready:
	case state.Drain:
		if !w.held {
			return ring.Draining
		}
	default:
		return ring.Maint
	}
	if u.down.Load() {
		return ring.Unhealthy
	}
	// A closed breaker needs no clock.
	if br := u.br.Load(); br != nil && br.State() != breaker.Closed && !br.Eligible(w.clock()) {
		return ring.BreakerOpen
	}
	if w.slow {
		if ws := u.warmSince.Load(); ws != 0 {
			if f := float64(w.clock()-ws) / float64(w.s.slowStart); f < 1 && seq >= ring.ActivePoints(m.points, f) {
				w.sawSlow = true
				return ring.SlowStart
			}
		}
	}
	if w.s.loadFactor > 0 && u.inflight.Load() >= ring.Limit(w.s.loadFactor, w.s.loadFloor, w.total, m.weight, w.availW) {
		return ring.Full
	}
	return ring.Accept
}
