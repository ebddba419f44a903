package balancer

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
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

// Breaker states as ringlb_breaker_state and /debug/ring report them.
const (
	breakerClosed   int32 = 0
	breakerHalfOpen int32 = 1
	breakerOpen     int32 = 2
)

var breakerNames = [...]string{"closed", "half-open", "open"}

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
//
// A breaker reports its transitions by marking its upstream dirty; whoever
// called it then settles the upstream (see Balancer.settle).
type breaker struct {
	cb  *gobreaker.TwoStepCircuitBreaker[struct{}]
	cfg atomic.Pointer[BreakerOptions]

	state     atomic.Int32 // breakerClosed, breakerHalfOpen or breakerOpen
	openUntil atomic.Int64 // end of the open period, balancer clock
	trial     atomic.Bool  // the half-open trial is in flight

	trips    int   // consecutive trips so far
	closedAt int64 // when it last closed after a trip (balancer clock); 0: never

	name  string
	dirty *atomic.Bool // the upstream's: a transition awaits settle
	log   *slog.Logger
	now   func() int64                      // the balancer's clock
	after func(time.Duration, func()) timer // a timer on that clock
	// expired runs when an open period is over, to publish its end
	// without waiting for a request.
	expired func()

	timerMu sync.Mutex
	timer   timer // the running open period's; nil when none
}

func (b *Balancer) newBreaker(u *upstream, cfg *BreakerOptions) *breaker {
	br := &breaker{name: u.name, dirty: &u.dirty, log: b.log, now: b.nanotime,
		after: func(d time.Duration, f func()) timer { return b.clk.AfterFunc(d, f) }}
	br.expired = func() { b.expireOpen(u, br) }
	br.cfg.Store(cfg)
	br.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        u.name,
		MaxRequests: 1,               // one half-open trial
		Interval:    0,               // counts are never cleared while closed: failures must be consecutive anyway
		Timeout:     time.Nanosecond, // the open period is ours (see breaker)
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return int(c.ConsecutiveFailures) >= br.cfg.Load().ConsecutiveFailures
		},
		IsSuccessful:  func(err error) bool { return err == nil },
		IsExcluded:    func(err error) bool { return err == errNotCounted },
		OnStateChange: func(_ string, from, to gobreaker.State) { br.onStateChange(from, to) },
	})
	return br
}

// eligible is the one rule for whether the breaker lets a request through
// at now (balancer clock): it is closed, or its open period is over (the
// request becomes the half-open trial), or it is half-open and its one
// trial is not taken. The ring walk, admission (allow) and the end of an
// open period (endOpen) all use it. The health check is the caller's:
// the walk skips an upstream whose check says down in any state, and a
// breaker that is not closed admits a trial only while the check says up.
func (br *breaker) eligible(now int64) bool {
	switch br.state.Load() {
	case breakerOpen:
		return now >= br.openUntil.Load()
	case breakerHalfOpen:
		return !br.trial.Load()
	}
	return true
}

// onStateChange mirrors a gobreaker transition into the atomics the
// request path reads, logs it and marks the upstream dirty. It runs under
// gobreaker's mutex, so it takes no lock: the availability bookkeeping
// (log line, ejection metric, available weight) happens in settle, which
// whoever called the breaker runs next.
func (br *breaker) onStateChange(from, to gobreaker.State) {
	now := br.now()
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
		br.log.Warn("circuit breaker open", "upstream", br.name, "reason", why, "open_for", d, "trip", br.trips)
		br.setTimer(br.after(d, br.expired))
	case gobreaker.StateHalfOpen:
		if now < br.openUntil.Load() {
			return // touched early by a request that raced the trip; allow hands its slot back
		}
		br.state.Store(breakerHalfOpen)
		br.log.Info("circuit breaker half-open: one trial request", "upstream", br.name)
	case gobreaker.StateClosed:
		br.closedAt = now
		br.trial.Store(false)
		br.state.Store(breakerClosed)
		br.log.Info("circuit breaker closed: trial request succeeded", "upstream", br.name)
	}
	br.dirty.Store(true)
}

// setTimer replaces the open period's timer, stopping the previous one.
func (br *breaker) setTimer(t timer) {
	br.timerMu.Lock()
	defer br.timerMu.Unlock()
	if br.timer != nil {
		br.timer.Stop()
	}
	br.timer = t
}

// stop stops the open period's timer, if one runs.
func (br *breaker) stop() { br.setTimer(nil) }

// endOpen ends an open period that is over, when the health check (if
// any) says up (down false): the breaker shows half-open, so that
// /debug/ring, /readyz and the metrics agree with /debug/lookup, which
// already judges the upstream eligible, and the next request for the
// upstream is its trial. Its caller settles the upstream next.
func (br *breaker) endOpen(now int64, down bool) {
	if br.state.Load() != breakerOpen || down || !br.eligible(now) {
		return
	}
	// gobreaker's own timeout has long passed: asking its state moves it
	// to half-open, and onStateChange mirrors that, unless a request that
	// raced the trip had moved it there already.
	if br.cb.State() == gobreaker.StateHalfOpen && br.state.CompareAndSwap(breakerOpen, breakerHalfOpen) {
		br.log.Info("circuit breaker half-open: one trial request", "upstream", br.name)
	}
}

// allow asks whether a request may go to the upstream at now; down is its
// health verdict. false means skip the upstream (the breaker is open, or
// its half-open trial is taken or waits for the health check). When true,
// done is the function to hand the attempt's outcome to, and trial says
// that the request is the half-open trial.
func (br *breaker) allow(now int64, down bool) (done func(error), trial, ok bool) {
	if br.state.Load() != breakerClosed && (down || !br.eligible(now)) {
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
	if down || !br.eligible(now) {
		finish(errNotCounted)
		return nil, false, false
	}
	if br.state.CompareAndSwap(breakerOpen, breakerHalfOpen) {
		// gobreaker went half-open early (see breaker): the state only
		// shows it now.
		br.log.Info("circuit breaker half-open: one trial request", "upstream", br.name)
		br.dirty.Store(true)
	}
	br.trial.Store(true)
	return func(err error) {
		finish(err)
		br.trial.Store(false) // an uncounted trial leaves it half-open: the next request tries
	}, true, true
}

// ordinaryAttempt returns the done function of one attempt counted by the
// closed breaker, for the body of a trial whose head closed it; nil when
// the breaker is not closed (the head was a failure, or others re-opened
// it since): the body's outcome is then not counted.
func (br *breaker) ordinaryAttempt() func(error) {
	if br.state.Load() != breakerClosed {
		return nil
	}
	finish, err := br.cb.Allow()
	if err != nil {
		return nil
	}
	return finish
}

// outcome is what one attempt against an upstream came to.
type outcome struct {
	status int   // status received from the upstream, 0 if none
	err    error // transport error, nil if a response arrived
	gone   bool  // the client went away first: says nothing about the upstream
}

// verdict is what a breaker's done function is told about o: transport
// errors (connection, timeout, a response broken mid-body) and statuses in
// fail are failures, a departed client is not counted, the rest are
// successes.
func (o outcome) verdict(fail *statusSet) error {
	switch {
	case o.gone:
		return errNotCounted
	case o.err != nil, fail.has(o.status):
		return errFailed
	}
	return nil
}

// allow asks u's breaker whether a request may go to u now (see
// breaker.allow; without a breaker it always may, and done is nil), and
// publishes what that changed.
func (b *Balancer) allow(u *upstream) (done func(error), trial, ok bool) {
	br := u.br.Load()
	if br == nil {
		return nil, false, true
	}
	done, trial, ok = br.allow(b.nanotime(), u.down.Load())
	if trial {
		b.settleIfDirty(u)
	}
	return done, trial, ok
}

// ordinaryAttempt is u's breaker's ordinaryAttempt; nil without one.
func (b *Balancer) ordinaryAttempt(u *upstream) func(error) {
	if br := u.br.Load(); br != nil {
		return br.ordinaryAttempt()
	}
	return nil
}

// report hands one attempt's outcome to u's breaker (done from allow; nil
// without a breaker) and publishes what that changed.
func (b *Balancer) report(s *snapshot, u *upstream, done func(error), o outcome) {
	if done == nil {
		return
	}
	done(o.verdict(&s.failStatus))
	b.settleIfDirty(u)
}

// expireOpen runs when an open period is over (the timer set at the trip)
// and publishes its end without waiting for a request; see settleLocked.
func (b *Balancer) expireOpen(u *upstream, br *breaker) {
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
