package balancer

import (
	"math"

	"github.com/ringlb/ringlb/ring"
)

// pick chooses a member for position h, judging each candidate as a
// request would: unavailable ones (health, an open breaker whose open
// period runs, a half-open one whose trial is in flight) are skipped, tried ones
// are excluded, slow-starting ones are skipped at inactive points, and
// under bounded loads full ones are passed over. Under on_unavailable fail
// only the owner is considered. If only slow start stood in the way, slow
// start is ignored rather than fail the request. With skipped non-nil the
// reasons are appended, as /debug/lookup shows them.
func (b *Balancer) pick(s *snapshot, h uint64, tried []int, skipped []ring.Skip) (ring.Choice, []ring.Skip) {
	total := b.inflight.Load()
	availW := math.Float64frombits(s.availW.Load())
	c := s.loadFactor
	slow := s.slowStart > 0
	sawSlow := false
	var now int64
	owner := -1
	if s.fail {
		owner = s.ring.Owner(h)
	}
	judge := func(i, seq int) ring.Reason {
		if owner >= 0 && i != owner {
			return ring.Excluded
		}
		for _, t := range tried {
			if t == i {
				return ring.Excluded
			}
		}
		m := &s.members[i]
		u := m.u
		if u.down.Load() {
			return ring.Unhealthy
		}
		if br := u.br.Load(); br != nil {
			switch br.state.Load() {
			case breakerOpen:
				// Once the open period is over the upstream is eligible:
				// allow makes this request its half-open trial.
				if now == 0 {
					now = b.nanotime()
				}
				if now < br.openUntil.Load() {
					return ring.BreakerOpen
				}
			case breakerHalfOpen:
				if br.trial.Load() {
					return ring.BreakerOpen
				}
			}
		}
		if slow {
			if ws := u.warmSince.Load(); ws != 0 {
				if now == 0 {
					now = b.nanotime()
				}
				if f := float64(now-ws) / float64(s.slowStart); f >= 1 {
					u.warmSince.CompareAndSwap(ws, 0)
				} else if seq >= ring.ActivePoints(m.points, f) {
					sawSlow = true
					return ring.SlowStart
				}
			}
		}
		if c > 0 && u.inflight.Load() >= ring.Limit(c, s.loadFloor, total, m.weight, availW) {
			return ring.Full
		}
		return ring.Accept
	}
	n0 := len(skipped)
	ch, skipped := s.ring.Pick(h, judge, skipped)
	if ch.Member < 0 && sawSlow {
		slow = false
		if skipped != nil {
			skipped = skipped[:n0]
		}
		ch, skipped = s.ring.Pick(h, judge, skipped)
	}
	return ch, skipped
}
