package balancer

import (
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
)

// allow asks u's breaker whether a request may go to u now (see
// breaker.allow; without a breaker it always may, and done is nil), and
// publishes what that changed.
func (b *Balancer) allow(u *upstream) (done func(error), trial, ok bool) {
	br := u.br.Load()
	if br == nil {
		return nil, false, true
	}
	done, trial, ok = br.Allow(b.nanotime(), u.down.Load())
	if trial {
		b.settleIfDirty(u)
	}
	return done, trial, ok
}

// ordinaryAttempt is u's breaker's ordinaryAttempt; nil without one.
func (b *Balancer) ordinaryAttempt(u *upstream) func(error) {
	if br := u.br.Load(); br != nil {
		return br.OrdinaryAttempt()
	}
	return nil
}

// report hands one attempt's outcome to u's breaker (done from allow; nil
// without a breaker) and publishes what that changed.
func (b *Balancer) report(s *snapshot, u *upstream, done func(error), o breaker.Outcome) {
	if done == nil {
		return
	}
	done(o.Verdict(&s.failStatus))
	b.settleIfDirty(u)
}

// expireOpen runs when an open period is over (the timer set at the trip)
// and publishes its end without waiting for a request; see settleLocked.
func (b *Balancer) expireOpen(u *upstream, br *breaker.Breaker) {
	if u.br.Load() != br {
		return // breakers were turned off and on by reloads: a stale timer
	}
	b.settle(u, "breaker", "")
}

// settleIfDirty publishes a breaker transition's effect on availability.
func (b *Balancer) settleIfDirty(u *upstream) {
	if u.dirty.Load() {
		b.settle(u, "breaker", "")
	}
}

// newBreaker is u's breaker, counting by cfg on the balancer's clock.
func (b *Balancer) newBreaker(u *upstream, cfg *breaker.Options) *breaker.Breaker {
	var br *breaker.Breaker
	br = breaker.New(u.name, cfg, &u.dirty, b.log, b.nanotime,
		func(d time.Duration, f func()) breaker.Timer { return b.clk.AfterFunc(d, f) },
		func() { b.expireOpen(u, br) })
	return br
}
