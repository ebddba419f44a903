package balancer

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerOptions configures the per-upstream circuit breakers, the
// passive half of ejection: real traffic trips them.
//
// A breaker counts an upstream's attempts. Connection errors, timeouts,
// a response that breaks off mid-body, and responses whose status is in
// FailureStatuses are failures; anything else that got a response is a
// success; an attempt whose client went away first counts as neither.
// Only the upstream's own faults count: a response that breaks off
// mid-body while ringlb was held up writing to the client (at least half
// of the time since the response head blocked on the client, or a write
// to it failed) counts as neither, since an upstream with a write
// deadline gives up on a client that does not read.
// After ConsecutiveFailures failures in a row the breaker opens: the
// upstream is unavailable and its keys go clockwise (or get 503 under
// on_unavailable fail). When the open period ends the next request for
// the upstream is its one half-open trial, admitted only while the
// active health check (if any) says up; every other request keeps
// skipping the upstream until the trial's outcome is known. A success
// closes the breaker; a failure opens it again.
//
// Open periods: the k-th consecutive trip keeps the breaker open for
// min(OpenTimeout × 2^(k-1), MaxOpenTimeout). A failed half-open trial is
// always a consecutive trip; a trip from the closed state is consecutive
// unless the breaker had stayed closed for at least 2 × MaxOpenTimeout
// since it last closed, in which case k starts again at 1.
//
// A reload that changes these options keeps every breaker's state and
// counts; the new values apply from the next trip. ConsecutiveFailures 0
// removes the breakers (an open one closes).
type BreakerOptions struct {
	// ConsecutiveFailures is how many failures in a row trip a breaker;
	// 0 turns breakers off.
	ConsecutiveFailures int
	// FailureStatuses are the response statuses counted as failures, in
	// addition to transport errors and timeouts. The response still
	// reaches the client as it is.
	FailureStatuses []int
	// OpenTimeout is the first open period; > 0 when breakers are on.
	OpenTimeout time.Duration
	// MaxOpenTimeout caps the doubling; 0 means OpenTimeout (no doubling).
	MaxOpenTimeout time.Duration
}

// validate checks o and returns it with MaxOpenTimeout filled in.
func (o BreakerOptions) validate() (BreakerOptions, error) {
	if o.ConsecutiveFailures < 0 {
		return o, fmt.Errorf("balancer: breaker consecutive_failures must be >= 0, got %d", o.ConsecutiveFailures)
	}
	for _, c := range o.FailureStatuses {
		if c < 100 || c > 599 {
			return o, fmt.Errorf("balancer: breaker failure_statuses: %d is not an HTTP status", c)
		}
	}
	if o.ConsecutiveFailures == 0 {
		return o, nil
	}
	if o.OpenTimeout <= 0 {
		return o, fmt.Errorf("balancer: breaker open_timeout must be > 0, got %v", o.OpenTimeout)
	}
	if o.MaxOpenTimeout == 0 {
		o.MaxOpenTimeout = o.OpenTimeout
	}
	if o.MaxOpenTimeout < o.OpenTimeout {
		return o, fmt.Errorf("balancer: breaker max_open_timeout (%v) must be >= open_timeout (%v)", o.MaxOpenTimeout, o.OpenTimeout)
	}
	return o, nil
}

// openPeriod is how long the k-th consecutive trip (k >= 1) stays open.
func (o *BreakerOptions) openPeriod(k int) time.Duration {
	d := o.OpenTimeout
	for i := 1; i < k && d < o.MaxOpenTimeout; i++ {
		d *= 2
	}
	return min(d, o.MaxOpenTimeout)
}

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

// settle publishes u's availability if it changed: one log line, the
// ejection metric (reason cause, or whichever of health and breaker is
// down), slow start on return, and the available weight. It is the only
// writer of u.ejected, and its CompareAndSwap makes each real transition
// count once however many callers race to report it.
func (b *Balancer) settle(u *Upstream, cause, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settleLocked(u, cause, reason)
}

func (b *Balancer) settleLocked(u *Upstream, cause, reason string) {
	if b.ups[u.name] == u {
		b.endOpenLocked(u) // may mark u dirty: this settle covers it
	}
	u.dirty.Store(false)
	if b.ups[u.name] != u {
		return // removed by a reload
	}
	down := u.down.Load()
	st := u.breakerState()
	avail := !down && st != breakerOpen
	if !u.ejected.CompareAndSwap(avail, !avail) {
		return
	}
	if avail {
		if reason == "" {
			reason = "circuit breaker " + breakerNames[st]
		}
		if s := b.snap.Load(); s.slowStart > 0 {
			u.warmSince.Store(b.clock())
		}
		u.ejection.Store(nil)
		b.log.Info("upstream available", "upstream", u.name, "cause", cause, "reason", reason)
	} else {
		switch {
		case down && st == breakerOpen: // both: keep the caller's cause
		case down:
			cause = "health"
		default:
			cause = "breaker"
		}
		if reason == "" {
			reason = "circuit breaker " + breakerNames[st]
		}
		if cause == "health" {
			u.m.ejectH.Inc()
		} else {
			u.m.ejectB.Inc()
		}
		u.warmSince.Store(0) // a trial or return starts its own slow start
		u.ejection.Store(&Ejection{Since: b.now(), Cause: cause, Reason: reason})
		b.log.Warn("upstream unavailable", "upstream", u.name, "cause", cause, "reason", reason)
	}
	b.recomputeLocked()
}
