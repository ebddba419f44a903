// Package breaker is one upstream's circuit breaker: gobreaker's counting
// and half-open trial, with open periods that double from trip to trip on
// the balancer's clock.
package breaker

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// StatusSet is a set of HTTP status codes (100-599), O(1) to query.
type StatusSet [10]uint64

func NewStatusSet(codes []int) StatusSet {
	var s StatusSet
	for _, c := range codes {
		if c >= 0 && c < 640 {
			s[c>>6] |= 1 << (uint(c) & 63)
		}
	}
	return s
}

func (s *StatusSet) Has(c int) bool {
	return c >= 0 && c < 640 && s[c>>6]&(1<<(uint(c)&63)) != 0
}

// Outcomes handed to a breaker's done function.
var (
	ErrFailed     = errors.New("upstream failed")
	ErrNotCounted = errors.New("client went away")
)

// Breaker states as ringlb_breaker_state and /debug/ring report them.
const (
	Closed   int32 = 0
	HalfOpen int32 = 1
	Open     int32 = 2
)

var Names = [...]string{"closed", "half-open", "open"}

// Breaker is one upstream's circuit breaker: a gobreaker two-step breaker
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
type Breaker struct {
	cb  *gobreaker.TwoStepCircuitBreaker[struct{}]
	cfg atomic.Pointer[Options]

	state     atomic.Int32 // Closed, HalfOpen or Open
	openUntil atomic.Int64 // end of the open period, balancer clock
	trial     atomic.Bool  // the half-open trial is in flight

	trips    int   // consecutive trips so far
	closedAt int64 // when it last closed after a trip (balancer clock); 0: never

	name  string
	dirty *atomic.Bool // the upstream's: a transition awaits settle
	log   *slog.Logger
	now   func() int64                      // the balancer's clock
	after func(time.Duration, func()) Timer // a Timer on that clock
	// expired runs when an open period is over, to publish its end
	// without waiting for a request.
	expired func()

	timerMu sync.Mutex
	timer   Timer // the running open period's; nil when none
}

// New is the breaker of the upstream name, counting by cfg. It marks
// dirty on every transition, logs to log, reads the time from now and
// sets its open periods' timers with after; expired runs when an open
// period is over.
func New(name string, cfg *Options, dirty *atomic.Bool, log *slog.Logger, now func() int64, after func(time.Duration, func()) Timer, expired func()) *Breaker {
	br := &Breaker{name: name, dirty: dirty, log: log, now: now, after: after, expired: expired}
	br.cfg.Store(cfg)
	br.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,               // one half-open trial
		Interval:    0,               // counts are never cleared while closed: failures must be consecutive anyway
		Timeout:     time.Nanosecond, // the open period is ours (see Breaker)
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return int(c.ConsecutiveFailures) >= br.cfg.Load().ConsecutiveFailures
		},
		IsSuccessful:  func(err error) bool { return err == nil },
		IsExcluded:    func(err error) bool { return err == ErrNotCounted },
		OnStateChange: func(_ string, from, to gobreaker.State) { br.onStateChange(from, to) },
	})
	return br
}

// State is the breaker's state: Closed, HalfOpen or Open.
func (br *Breaker) State() int32 { return br.state.Load() }

// SetOptions makes cfg the options the breaker counts by from now on;
// its state and counts stay.
func (br *Breaker) SetOptions(cfg *Options) { br.cfg.Store(cfg) }

// Counts are gobreaker's counts.
func (br *Breaker) Counts() gobreaker.Counts { return br.cb.Counts() }

// Timer is a timer an open period sets.
type Timer interface {
	Stop() bool
}

// Eligible is the one rule for whether the breaker lets a request through
// at now (balancer clock): it is closed, or its open period is over (the
// request becomes the half-open trial), or it is half-open and its one
// trial is not taken. The ring walk, admission (allow) and the end of an
// open period (endOpen) all use it. The health check is the caller's:
// the walk skips an upstream whose check says down in any state, and a
// breaker that is not closed admits a trial only while the check says up.
func (br *Breaker) Eligible(now int64) bool {
	switch br.state.Load() {
	case Open:
		return now >= br.openUntil.Load()
	case HalfOpen:
		return !br.trial.Load()
	}
	return true
}

// onStateChange mirrors a gobreaker transition into the atomics the
// request path reads, logs it and marks the upstream dirty. It runs under
// gobreaker's mutex, so it takes no lock: the availability bookkeeping
// (log line, ejection metric, available weight) happens in settle, which
// whoever called the breaker runs next.
func (br *Breaker) onStateChange(from, to gobreaker.State) {
	now := br.now()
	switch to {
	case gobreaker.StateOpen:
		cfg := br.cfg.Load()
		if from == gobreaker.StateClosed && br.closedAt != 0 && now-br.closedAt >= 2*int64(cfg.MaxOpenTimeout) {
			br.trips = 0
		}
		br.trips++
		d := cfg.OpenPeriod(br.trips)
		br.openUntil.Store(now + int64(d))
		br.trial.Store(false)
		br.state.Store(Open)
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
		br.state.Store(HalfOpen)
		br.log.Info("circuit breaker half-open: one trial request", "upstream", br.name)
	case gobreaker.StateClosed:
		br.closedAt = now
		br.trial.Store(false)
		br.state.Store(Closed)
		br.log.Info("circuit breaker closed: trial request succeeded", "upstream", br.name)
	}
	br.dirty.Store(true)
}

// setTimer replaces the open period's Timer, stopping the previous one.
func (br *Breaker) setTimer(t Timer) {
	br.timerMu.Lock()
	defer br.timerMu.Unlock()
	if br.timer != nil {
		br.timer.Stop()
	}
	br.timer = t
}

// Stop stops the open period's Timer, if one runs.
func (br *Breaker) Stop() { br.setTimer(nil) }

// EndOpen ends an open period that is over, when the health check (if
// any) says up (down false): the breaker shows half-open, so that
// /debug/ring, /readyz and the metrics agree with /debug/lookup, which
// already judges the upstream eligible, and the next request for the
// upstream is its trial. Its caller settles the upstream next.
func (br *Breaker) EndOpen(now int64, down bool) {
	if br.state.Load() != Open || down || !br.Eligible(now) {
		return
	}
	// gobreaker's own timeout has long passed: asking its state moves it
	// to half-open, and onStateChange mirrors that, unless a request that
	// raced the trip had moved it there already.
	if br.cb.State() == gobreaker.StateHalfOpen && br.state.CompareAndSwap(Open, HalfOpen) {
		br.log.Info("circuit breaker half-open: one trial request", "upstream", br.name)
	}
}

// Allow asks whether a request may go to the upstream at now; down is its
// health verdict. false means skip the upstream (the breaker is open, or
// its half-open trial is taken or waits for the health check). When true,
// done is the function to hand the attempt's outcome to, and trial says
// that the request is the half-open trial.
func (br *Breaker) Allow(now int64, down bool) (done func(error), trial, ok bool) {
	if br.state.Load() != Closed && (down || !br.Eligible(now)) {
		return nil, false, false
	}
	finish, err := br.cb.Allow()
	if err != nil {
		return nil, false, false
	}
	if br.state.Load() == Closed {
		return finish, false, true
	}
	// Admitted while not closed: either this request raced a trip, or it
	// is the half-open trial.
	if down || !br.Eligible(now) {
		finish(ErrNotCounted)
		return nil, false, false
	}
	if br.state.CompareAndSwap(Open, HalfOpen) {
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

// OrdinaryAttempt returns the done function of one attempt counted by the
// closed breaker, for the body of a trial whose head closed it; nil when
// the breaker is not closed (the head was a failure, or others re-opened
// it since): the body's outcome is then not counted.
func (br *Breaker) OrdinaryAttempt() func(error) {
	if br.state.Load() != Closed {
		return nil
	}
	finish, err := br.cb.Allow()
	if err != nil {
		return nil
	}
	return finish
}

// Outcome is what one attempt against an upstream came to.
type Outcome struct {
	Status int   // status received from the upstream, 0 if none
	Err    error // transport error, nil if a response arrived
	Gone   bool  // the client went away first: says nothing about the upstream
	GRPC   bool  // it carried a grpc-status in breaker.failure_grpc_statuses
}

// Verdict is what a breaker's done function is told about o: transport
// errors (connection, timeout, a response broken mid-body) and statuses in
// fail are failures, a departed client is not counted, the rest are
// successes.
func (o Outcome) Verdict(fail *StatusSet) error {
	switch {
	case o.Gone:
		return ErrNotCounted
	case o.Err != nil, o.GRPC, fail.Has(o.Status):
		return ErrFailed
	}
	return nil
}

// Options configures the per-upstream circuit breakers, the
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
//
// It is the breaker block of the config file, which decodes into it (see
// package balancer/options).
type Options struct {
	// ConsecutiveFailures is consecutive_failures, how many failures in a
	// row trip a breaker; default 5; >= 0, 0 (or less) turning breakers
	// off.
	ConsecutiveFailures int `yaml:"consecutive_failures" default:"5"`
	// FailureStatuses is failure_statuses, the response statuses counted
	// as failures, in addition to transport errors and timeouts; default
	// [502, 503, 504]; each 100-599. The response still reaches the
	// client as it is.
	FailureStatuses []int `yaml:"failure_statuses" default:"[502, 503, 504]"`
	// FailureGRPCStatuses is failure_grpc_statuses, the gRPC status codes
	// counted as failures when a response carries one in its grpc-status
	// trailer, or in its headers when it has no body (a trailers-only
	// response); default [14] (UNAVAILABLE); each 0-16.
	FailureGRPCStatuses []int `yaml:"failure_grpc_statuses" default:"[14]"`
	// OpenTimeout is open_timeout, the first open period; default 5s;
	// > 0.
	OpenTimeout time.Duration `yaml:"open_timeout" default:"5s"`
	// MaxOpenTimeout is max_open_timeout, which caps the doubling;
	// default 60s; >= OpenTimeout (less, 0 included, means OpenTimeout:
	// no doubling).
	MaxOpenTimeout time.Duration `yaml:"max_open_timeout" default:"60s"`
}

// Compiled returns o as the breakers read it: MaxOpenTimeout at least
// OpenTimeout.
func (o Options) Compiled() Options {
	o.MaxOpenTimeout = max(o.MaxOpenTimeout, o.OpenTimeout)
	return o
}

// OpenPeriod is how long the k-th consecutive trip (k >= 1) stays open.
func (o *Options) OpenPeriod(k int) time.Duration {
	d := o.OpenTimeout
	for i := 1; i < k && d < o.MaxOpenTimeout; i++ {
		d *= 2
	}
	return min(d, o.MaxOpenTimeout)
}
