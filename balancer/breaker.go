package balancer

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// statusSet is a set of HTTP status codes (100-599), O(1) to query.
type statusSet [10]uint64

func newStatusSet(codes []int) statusSet {
	var s statusSet
	for _, c := range codes {
		if c >= 0 && c < 640 {
			s[c>>6] |= 1 << (uint(c) & 63)
		}
	}
	return s
}

func (s *statusSet) has(c int) bool {
	return c >= 0 && c < 640 && s[c>>6]&(1<<(uint(c)&63)) != 0
}

// Outcomes handed to a breaker's done function.
var (
	errFailed     = errors.New("upstream failed")
	errNotCounted = errors.New("client went away")
)

// breaker is one upstream's circuit breaker: a gobreaker two-step breaker
// does the counting, the trip decision, the single half-open trial and
// the close or re-open on its outcome; the open period is kept here, on
// the balancer's clock, because it doubles from trip to trip (gobreaker's
// Timeout is fixed per breaker and reads the wall clock).
//
// gobreaker's own Timeout is therefore 1ns: its open state lasts until the
// next call. New requests do not call it while our open period runs: the
// ring walk skips the upstream, and allow refuses before calling Allow.
// Requests that raced the trip still may: the outcome of one admitted
// before it (gobreaker checks the timeout before it drops the stale
// outcome), or the Allow of one judged while the breaker was closed. Both
// move gobreaker to half-open early. onStateChange then keeps the state
// open here, and allow hands an early admission back uncounted, so the
// half-open slot waits, free, for the first request after the open
// period, which becomes the trial.
//
// state, openUntil and trial are what the request path reads; they are
// written in onStateChange, under gobreaker's mutex, and by allow for the
// request that becomes the trial. trips and closedAt belong to
// onStateChange alone, so gobreaker's mutex guards them.
type breaker struct {
	cb  *gobreaker.TwoStepCircuitBreaker[struct{}]
	cfg atomic.Pointer[BreakerOptions]

	state     atomic.Int32 // breakerClosed, breakerHalfOpen or breakerOpen
	openUntil atomic.Int64 // end of the open period, balancer clock
	trial     atomic.Bool  // the half-open trial is in flight

	trips    int   // consecutive trips so far
	closedAt int64 // when it last closed after a trip (balancer clock); 0: never
}

func (b *Balancer) newBreaker(u *Upstream, cfg *BreakerOptions) *breaker {
	br := &breaker{}
	br.cfg.Store(cfg)
	br.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        u.name,
		MaxRequests: 1,               // one half-open trial
		Interval:    0,               // counts are never cleared while closed: failures must be consecutive anyway
		Timeout:     time.Nanosecond, // the open period is ours (see breaker)
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return int(c.ConsecutiveFailures) >= br.cfg.Load().ConsecutiveFailures
		},
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return err == errNotCounted },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			b.onStateChange(u, br, from, to)
		},
	})
	return br
}

// onStateChange mirrors a gobreaker transition into the atomics the
// request path reads, and logs it. It runs under the breaker's mutex, so
// it takes no lock: the availability bookkeeping (log line, ejection
// metric, available weight) happens in settle, which whoever called the
// breaker runs next, seeing u.dirty.
func (b *Balancer) onStateChange(u *Upstream, br *breaker, from, to gobreaker.State) {
	now := b.clock()
	switch to {
	case gobreaker.StateOpen:
		cfg := br.cfg.Load()
		if from == gobreaker.StateClosed && br.closedAt != 0 && now-br.closedAt >= 2*int64(cfg.MaxOpenTimeout) {
			br.trips = 0
		}
		br.trips++
		d := cfg.openPeriod(br.trips)
		br.openUntil.Store(now + int64(d))
		br.trial.Store(false)
		br.state.Store(breakerOpen)
		why := fmt.Sprintf("%d consecutive failures", cfg.ConsecutiveFailures)
		if from == gobreaker.StateHalfOpen {
			why = "half-open trial failed"
		}
		b.log.Warn("circuit breaker open", "upstream", u.name, "reason", why, "open_for", d, "trip", br.trips)
		time.AfterFunc(d, func() { b.expireOpen(u, br) })
	case gobreaker.StateHalfOpen:
		if now < br.openUntil.Load() {
			return // touched early by a request that raced the trip; allow hands its slot back
		}
		br.state.Store(breakerHalfOpen)
		b.log.Info("circuit breaker half-open: one trial request", "upstream", u.name)
	case gobreaker.StateClosed:
		br.closedAt = now
		br.trial.Store(false)
		br.state.Store(breakerClosed)
		b.log.Info("circuit breaker closed: trial request succeeded", "upstream", u.name)
	}
	u.dirty.Store(true)
}

// expireOpen runs when an open period is over (a timer set at the trip)
// and publishes its end without waiting for a request; see endOpenLocked.
func (b *Balancer) expireOpen(u *Upstream, br *breaker) {
	if u.br.Load() != br {
		return // breakers were turned off and on by reloads: a stale timer
	}
	b.settle(u, "breaker", "")
}

// endOpenLocked ends u's open period when it is over and the health check
// (if any) says up: the breaker shows half-open and settle then makes the
// upstream available, so /debug/ring, /readyz and the metrics agree with
// /debug/lookup, which already judges the upstream eligible. The next
// request for its keys is the trial. settleLocked calls it on every
// change, so the end of an open period is handled whichever comes last:
// the period's timer, or the health check saying up again (after an
// outage that stopped all traffic, nothing else would). Callers hold b.mu.
func (b *Balancer) endOpenLocked(u *Upstream) {
	br := u.br.Load()
	if br == nil || br.state.Load() != breakerOpen || u.down.Load() || b.clock() < br.openUntil.Load() {
		return
	}
	// gobreaker's own timeout has long passed: asking its state moves it
	// to half-open, and onStateChange mirrors that, unless a request that
	// raced the trip had moved it there already.
	if br.cb.State() == gobreaker.StateHalfOpen && br.state.CompareAndSwap(breakerOpen, breakerHalfOpen) {
		b.log.Info("circuit breaker half-open: one trial request", "upstream", u.name)
	}
}

// allow asks u's breaker whether a request may go to u now; false means
// skip u (its breaker is open, or its half-open trial is taken or waits
// for the health check). When true, done is the function to hand the
// attempt's outcome to (nil without a breaker), and trial says that the
// request is the half-open trial.
func (b *Balancer) allow(u *Upstream) (done func(error), trial, ok bool) {
	br := u.br.Load()
	if br == nil {
		return nil, false, true
	}
	if br.state.Load() != breakerClosed && (b.clock() < br.openUntil.Load() || u.down.Load()) {
		return nil, false, false
	}
	finish, err := br.cb.Allow()
	if err != nil {
		return nil, false, false
	}
	if br.state.Load() == breakerClosed {
		return finish, false, true
	}
	// Admitted while not closed: either this request raced a trip, or it
	// is the half-open trial.
	if b.clock() < br.openUntil.Load() || u.down.Load() {
		finish(errNotCounted)
		return nil, false, false
	}
	if br.state.CompareAndSwap(breakerOpen, breakerHalfOpen) {
		// gobreaker went half-open early (see breaker): the state only
		// shows it now.
		b.log.Info("circuit breaker half-open: one trial request", "upstream", u.name)
		u.dirty.Store(true)
	}
	br.trial.Store(true)
	b.settleIfDirty(u)
	return func(err error) {
		finish(err)
		br.trial.Store(false) // an uncounted trial leaves it half-open: the next request tries
	}, true, true
}

// ordinaryAttempt returns the done function of one attempt counted by
// u's closed breaker, for the body of a trial whose head closed it; nil
// when the breaker is not closed (the head was a failure, or others
// re-opened it since): the body's outcome is then not counted.
func (b *Balancer) ordinaryAttempt(u *Upstream) func(error) {
	br := u.br.Load()
	if br == nil || br.state.Load() != breakerClosed {
		return nil
	}
	finish, err := br.cb.Allow()
	if err != nil {
		return nil
	}
	return finish
}

// report hands one attempt's outcome to u's breaker (done from allow):
// transport errors (connection, timeout, a response broken mid-body) and
// FailureStatuses are failures, a departed client is not counted, the
// rest are successes.
func (b *Balancer) report(s *snapshot, u *Upstream, done func(error), o outcome) {
	if done == nil {
		return
	}
	switch {
	case o.gone:
		done(errNotCounted)
	case o.err != nil, s.failStatus.has(o.status):
		done(errFailed)
	default:
		done(nil)
	}
	b.settleIfDirty(u)
}

// settleIfDirty publishes a breaker transition's effect on availability.
func (b *Balancer) settleIfDirty(u *Upstream) {
	if u.dirty.Load() {
		b.settle(u, "breaker", "")
	}
}

// Breaker states as ringlb_breaker_state and /debug/ring report them.
const (
	breakerClosed   int32 = 0
	breakerHalfOpen int32 = 1
	breakerOpen     int32 = 2
)

var breakerNames = [...]string{"closed", "half-open", "open"}

// outcome is what one attempt against an upstream came to.
type outcome struct {
	status int   // status received from the upstream, 0 if none
	err    error // transport error, nil if a response arrived
	gone   bool  // the client went away first: says nothing about the upstream
}
