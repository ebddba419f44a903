package balancer

import (
	"sync/atomic"
	"time"
)

// Breaker states as ringlb_breaker_state and /debug/ring report them.
const (
	breakerClosed   int32 = 0
	breakerHalfOpen int32 = 1
	breakerOpen     int32 = 2
)

var breakerNames = [...]string{"closed", "half-open", "open"}

// Upstream is the live state of one upstream, identified by its name. It
// outlives reloads for as long as its name stays in the config, so its
// in-flight count, health verdict and breaker carry over; an upstream
// removed by a reload drains its in-flight requests and is then dropped.
//
// All state is in atomics: the request path reads it without locks. The
// health verdict and the breaker state change first; settle then
// publishes the resulting availability through a CompareAndSwap on
// ejected, so that logs and metrics fire once per real transition. An
// Upstream must not be copied.
type Upstream struct {
	name string

	inflight atomic.Int64
	// down is the active health check's verdict; the zero value (up) is
	// what an upstream counts as before its first probe or without checks.
	down atomic.Bool
	// br is the circuit breaker; nil when breakers are off.
	br atomic.Pointer[breaker]
	// ejected is the published availability (false: available), written
	// only by settle.
	ejected atomic.Bool
	// dirty says a breaker transition awaits settle.
	dirty atomic.Bool
	// warmSince is when slow start began, in nanoseconds on the
	// balancer's clock; 0 when the upstream is fully active.
	warmSince atomic.Int64
	// ejection says since when and why the upstream is unavailable; nil
	// while it is available. Written by settle with the flip it reports.
	ejection atomic.Pointer[Ejection]

	m *upstreamMetrics
}

// Ejection is why and since when an upstream is unavailable.
type Ejection struct {
	Since  time.Time
	Cause  string // "health" or "breaker"
	Reason string // the health check's or the breaker's words, e.g. "status 503"
}

// Name returns the upstream's name.
func (u *Upstream) Name() string { return u.name }

// Available reports whether the upstream may take requests: its health
// check (if any) says up and its breaker is not open (a half-open breaker
// counts as available, though only its one trial request gets through).
// A slow-starting upstream is available.
func (u *Upstream) Available() bool { return !u.ejected.Load() }

// Inflight returns the number of requests in flight to the upstream.
func (u *Upstream) Inflight() int64 { return u.inflight.Load() }

// breakerState returns breakerClosed, breakerHalfOpen or breakerOpen
// (closed without a breaker).
func (u *Upstream) breakerState() int32 {
	if br := u.br.Load(); br != nil {
		return br.state.Load()
	}
	return breakerClosed
}

// outcome is what one attempt against an upstream came to.
type outcome struct {
	status int   // status received from the upstream, 0 if none
	err    error // transport error, nil if a response arrived
	gone   bool  // the client went away first: says nothing about the upstream
}
