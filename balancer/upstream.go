package balancer

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/transport"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/state"
)

// upstream is the live state of one upstream, identified by its name. It
// outlives reloads for as long as its name stays in the config, so its
// in-flight count, health verdict and breaker carry over; an upstream
// removed by a reload drains its in-flight requests and is then dropped.
//
// All state is in atomics: the request path reads it without locks. The
// health verdict and the breaker state change first; settle then
// publishes the resulting availability through a CompareAndSwap on
// ejected, so that logs and metrics fire once per real transition. An
// upstream must not be copied.
type upstream struct {
	name string

	inflight atomic.Int64
	// down is the active health check's verdict; the zero value (up) is
	// what an upstream counts as before its first probe or without checks.
	down atomic.Bool
	// absent says a discovered upstream is missing from its source's
	// answer: unavailable, but not ejected.
	absent atomic.Bool
	// br is the circuit breaker; nil when breakers are off.
	br atomic.Pointer[breaker.Breaker]
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
	// state is the admin state (a state.Admin), a second axis beside
	// availability: the walk's judge reads it, written under
	// Balancer.mu. cfgState is the state the config said at the last
	// install (guarded by Balancer.mu): a reload overrides a state set
	// through the API only when it changes that word.
	state    atomic.Uint32
	cfgState state.Admin
	// tunnels counts the upgraded connections (WebSocket) open to the
	// upstream; each is also one of inflight.
	tunnels downstream.TunnelCount

	metrics *metrics.Upstream

	// fails rate-limits the warnings for failed attempts, per cause.
	fails [transport.NumCauses]failLog
}

// Ejection is why and since when an upstream is unavailable.
type Ejection struct {
	Since  time.Time
	Cause  string // "health", "breaker" or "absent" (missing from its discovery source's answer)
	Reason string // the health check's or the breaker's words, e.g. "status 503"
}

// available reports whether the upstream may take requests: its health
// check (if any) says up and its breaker is not open (a half-open breaker
// counts as available, though only its one trial request gets through).
// A slow-starting upstream is available.
func (u *upstream) available() bool { return !u.ejected.Load() }

// endWarmup ends u's slow start if it is over at now (balancer clock)
// under a slow start of slowStart nanoseconds. The walk takes an upstream
// whose slow start is over as fully active either way; this spares it the
// arithmetic.
func (u *upstream) endWarmup(now, slowStart int64) {
	if ws := u.warmSince.Load(); ws != 0 && slowStart > 0 && now-ws >= slowStart {
		u.warmSince.CompareAndSwap(ws, 0)
	}
}

// breakerState returns breaker.Closed, breaker.HalfOpen or breaker.Open
// (closed without a breaker).
func (u *upstream) breakerState() int32 {
	if br := u.br.Load(); br != nil {
		return br.State()
	}
	return breaker.Closed
}

// recomputeLocked refreshes the current snapshot's available weight (of
// the members that take new keys: available and ready) and its count of
// draining members. Callers hold b.mu and call it after every change of
// availability or admin state, so the last recomputation sees every
// change.
func (b *Balancer) recomputeLocked() {
	s := b.snap.Load()
	w := 0.0
	drains := int32(0)
	for i := range s.members {
		u := s.members[i].u
		switch u.adminState() {
		case state.Ready:
			if u.available() {
				w += s.members[i].weight
			}
		case state.Drain:
			drains++
		}
	}
	s.availW.Store(math.Float64bits(w))
	s.drains.Store(drains)
}

// HealthReporter is one health checker's line into a Balancer; it
// implements healthcheck.Reporter. Get one from Balancer.HealthReporter
// for each checker started.
type HealthReporter struct {
	b   *Balancer
	gen uint64 // Balancer.healthGen when handed out
}

// HealthReporter returns a reporter for a health checker about to start.
// An Update that turns Options.HealthChecks off resets every verdict to
// up and revokes every reporter handed out before it: reports that a
// checker being shut down still sends do nothing. A checker started
// later gets a reporter of its own.
func (b *Balancer) HealthReporter() *HealthReporter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &HealthReporter{b: b, gen: b.healthGen}
}

// SetHealthy records a health check's verdict for the upstream called
// name; reason says why (it goes to the log). A verdict that changes the
// upstream's availability logs one line; an ejection counts in
// ringlb_ejections_total{reason="health"}; an upstream that becomes
// available again slow-starts when slow start is on. An upstream whose
// breaker is open stays unavailable whatever the check says until its
// open period is over; after it, a verdict of up makes it available at
// once (half-open: the next request for its keys is the trial). Names not
// in the current ring (say, just removed by a reload) are ignored, and so
// is every report of a revoked reporter.
func (r *HealthReporter) SetHealthy(name string, up bool, reason string) {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.ups[name]
	if u == nil || r.gen != b.healthGen {
		return
	}
	if !u.down.CompareAndSwap(up, !up) {
		return
	}
	b.settleLocked(u, "health", reason)
}

// settle publishes u's availability if it changed: one log line, the
// ejection metric (reason cause, or whichever of health and breaker is
// down), slow start on return, and the available weight. It is the only
// writer of u.ejected, and its CompareAndSwap makes each real transition
// count once however many callers race to report it.
func (b *Balancer) settle(u *upstream, cause, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settleLocked(u, cause, reason)
}

func (b *Balancer) settleLocked(u *upstream, cause, reason string) {
	if br := u.br.Load(); br != nil && b.ups[u.name] == u {
		// The end of an open period is handled whichever comes last: the
		// period's timer, or the health check saying up again (after an
		// outage that stopped all traffic, nothing else would). It may mark
		// u dirty: this settle covers it.
		br.EndOpen(b.nanotime(), u.down.Load())
	}
	u.dirty.Store(false)
	if b.ups[u.name] != u {
		return // removed by a reload
	}
	down, absent := u.down.Load(), u.absent.Load()
	st := u.breakerState()
	avail := !down && !absent && st != breaker.Open
	if !u.ejected.CompareAndSwap(avail, !avail) {
		return
	}
	if avail {
		if reason == "" {
			reason = "circuit breaker " + breaker.Names[st]
		}
		if s := b.snap.Load(); s.slowStart > 0 {
			u.warmSince.Store(b.nanotime())
		}
		b.returnedLocked()
		// A return from absence is discovery's to log (one line per change).
		if e := u.ejection.Swap(nil); e == nil || e.Cause != "absent" {
			b.log.Info("upstream available", "upstream", u.name, "cause", cause, "reason", reason)
		}
	} else {
		switch {
		case absent: // not an ejection: not counted
			cause, reason = "absent", "missing from its discovery source's answer"
		case down && st == breaker.Open: // both: keep the caller's cause
		case down:
			cause = "health"
		default:
			cause = "breaker"
		}
		if reason == "" {
			reason = "circuit breaker " + breaker.Names[st]
		}
		switch cause {
		case "health":
			u.metrics.EjectH.Inc()
		case "breaker":
			u.metrics.EjectB.Inc()
		}
		u.warmSince.Store(0) // a trial or return starts its own slow start
		u.ejection.Store(&Ejection{Since: b.clk.Now(), Cause: cause, Reason: reason})
		if !absent {
			b.log.Warn("upstream unavailable", "upstream", u.name, "cause", cause, "reason", reason)
		}
	}
	b.recomputeLocked()
}
