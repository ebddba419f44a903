package balancer

import (
	"context"
	"net/http"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/forward"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/reqbody"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/ring"
)

// ServeHTTP proxies one request. It loads the current snapshot once,
// hashes the request's key (400 when on_missing is reject and there is
// none), picks an upstream (503 "no upstream available" when nothing is),
// and forwards. An attempt that fails before any response byte reached
// the client is retried on the next distinct available upstream clockwise,
// up to Options.Retries times: always when the connection was refused or
// the dial timed out, otherwise only for bodiless GET, HEAD and OPTIONS.
// When no retry is left the client gets 504 for a timeout and 502
// otherwise. A request whose upstream already holds
// limits.upstream_requests requests gets 503 "upstream busy" at once,
// and one that already carries this process's CDN-Loop entry 508 "loop
// detected" (see forward.LoopToken). Upstream responses, 5xx included, pass through as they are;
// a response that breaks mid-body aborts the client connection
// (http.ErrAbortHandler) so the client sees it truncated.
func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var st serving
	st.start, st.s, st.r, st.from = time.Now(), b.snap.Load(), r, -1
	st.rw = downstream.NewWriter(w)
	st.rw.No1xx, st.rw.Send = !r.ProtoAtLeast(1, 1), st.s.send
	if st.s.requestID != "" {
		requestID(st.s, st.rw, r)
	}
	if !b.admit(&st) || !b.route(&st, w) {
		return
	}
	defer b.finish(&st)
	b.forward(&st)
}

// serving is one request's way through ServeHTTP: what the routing found
// and what the attempts did, which the access log and hold read at the
// end (finish).
type serving struct {
	s     *snapshot
	rw    *downstream.Writer
	r     *http.Request
	start time.Time
	// With an access log, lr gathers what its line says.
	lr   logReq
	body *reqbody.Tracked
	// src says where the key came from; s.keyLabel(src) names it in one
	// word ("json:prompt_cache_key") for log lines.
	pos    uint64
	src    int
	random bool
	// With hold on (held), hq is rule 11's decision for the key (see
	// holdBegin).
	hq   hold.Request
	held bool
	last *member
	// from is rule 17's previous upstream of the key (-1: none, or
	// handoff off); carried says an attempt's request named it.
	from    int
	carried bool
}

// hold is the request's rule 11 decision; nil when hold is off or the
// position is random. (A pointer kept in serving itself would move it
// to the heap.)
func (st *serving) hold() *hold.Request {
	if st.held {
		return &st.hq
	}
	return nil
}

// admit refuses, before anything else is read, a request that no upstream
// may be sent (an HTTP/2 head net/http would send malformed: 400) or that
// went round a loop back to this process (508); false when it answered.
func (b *Balancer) admit(st *serving) bool {
	s, rw, r := st.s, st.rw, st.r
	if msg := transport.CheckH2Head(r); msg != "" {
		downstream.PlainError(rw, http.StatusBadRequest, msg)
		st.lr.decision = "rejected"
		b.accessLog(s, r, rw, nil, st.start, &st.lr, srcRejected, 0)
		return false
	}
	if len(r.Header["Cdn-Loop"]) > 0 && forward.Looped(r.Header) {
		downstream.PlainError(rw, http.StatusLoopDetected, "loop detected\n")
		st.lr.decision = "loop"
		b.accessLog(s, r, rw, nil, st.start, &st.lr, srcRejected, 0)
		return false
	}
	return true
}

// route finds the request's ring position (reading the body for a json
// key) and, with hold on, rule 11's decision for it; false when the
// request was answered instead (no key under on_missing reject, or a body
// that could not be read).
func (b *Balancer) route(st *serving, w http.ResponseWriter) bool {
	s, rw, r := st.s, st.rw, st.r
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		st.body = reqbody.Track(w, r, s.clientBody, s.bodyKeys && key.IsJSONBody(r.Header), s.bodyLimit, &b.proc.Body)
	}
	body := st.body
	pos, src, ok := b.position(s, rw, r)
	st.pos, st.src, st.random = pos, src, src == srcRandom
	if body != nil && body.Prefix.Started() && forward.ExpectsContinue(r) {
		// Reading the body for the key made the server send 100
		// Continue: the client must not get the upstream's as well.
		rw.Continued = true
	}
	if !ok {
		st.lr.decision = "rejected"
		if src == srcBodyFailed {
			st.lr.decision = b.bodyFailed(rw, r, body)
			src = srcRejected
		}
		b.accessLog(s, r, rw, nil, st.start, &st.lr, src, pos)
		if body != nil {
			body.Finish(false)
		}
		return false
	}
	if body != nil {
		body.Routed(r)
	}
	if s.hold != nil && !st.random {
		st.held = true
		b.holdBegin(s, r, pos, &st.hq)
	}
	if s.handoff != nil {
		b.handoffBegin(st)
	}
	// Trailer fields that must not be forwarded go, from those declared
	// (or, for a body read for the key, received) by now and from those
	// that arrive with the body's end (reqbody.Tracked).
	if len(r.Trailer) > 0 {
		transport.DropBadTrailers(r.Trailer)
	}
	return true
}

// finish ends a routed request: its upgraded connection's tracking, its
// hold record (the key lives where it was served), its metrics, access
// log line and hot-key count, and its body and writer.
func (b *Balancer) finish(st *serving) {
	s, rw, r, last, body, q := st.s, st.rw, st.r, st.last, st.body, st.hold()
	if c := rw.Tunnel(); c != nil { // the upgraded connection's copy is over
		b.tunnels.Remove(c)
	}
	if q != nil && last != nil && (rw.Err == nil || rw.WroteHeader()) {
		s.hold.Record(q, last.u.name, b.nanotime(), b.clk) // served: the key lives there now
	}
	b.account(s, rw, r, last, st.start)
	if st.carried {
		b.metrics.Handoffs.Inc()
		st.lr.handoffFrom = s.members[st.from].u.name
	}
	if s.accessLog != nil {
		if body != nil {
			st.lr.bytesIn = body.BytesRead()
		}
		st.lr.decide(q, last, s)
		b.accessLog(s, r, rw, last, st.start, &st.lr, st.src, st.pos)
	}
	rw.SendRelease()
	if !st.random {
		sent := ""
		if last != nil {
			sent = last.u.name
		}
		b.hot.Add(st.pos, sent, b.nanotime())
	}
	if body != nil {
		body.Finish(last != nil)
	}
	rw.Recycle()
}

// forward sends the request to its upstream and, on a failure that may
// be retried, to the next one clockwise, then answers the last failure if
// nothing was written.
func (b *Balancer) forward(st *serving) {
	s, rw, body, q, pos := st.s, st.rw, st.body, st.hold(), st.pos
	// With retry_statuses, a bodiless GET, HEAD or OPTIONS may be retried
	// on a listed status too. The proxies' ModifyResponse judges the
	// status before anything is written to the client, and finds rw
	// through the request's context (the cost of which only such
	// requests pay).
	statusRetry := s.retryOn && !s.fail && body == nil && idempotent(st.r.Method)
	if statusRetry {
		st.r = st.r.WithContext(context.WithValue(st.r.Context(), retryWriterKey{}, rw))
	}
	r := st.r
	// tried holds the members this request may not use: those that
	// failed it and those whose breaker refused it.
	var triedBuf [4]int
	tried := triedBuf[:0]
	for attempts := 0; ; {
		choice := b.choose(s, pos, tried, q)
		if s.accessLog != nil && attempts == 0 && st.last == nil {
			st.lr.first(b, s, pos, choice)
		}
		if choice.Member < 0 {
			if st.last == nil {
				st.lr.decision = "no-upstream"
				if s.fail {
					st.lr.decision = "fail-closed"
				}
				b.noUpstream(s, rw, r, choice.Owner)
				return
			}
			break // nowhere else to go: the last failure is answered below
		}
		m := &s.members[choice.Member]
		tried = append(tried, choice.Member) // whatever comes of it, m is done with this request
		// The limit comes before the breaker, so that a busy upstream's
		// half-open trial is not spent on a request that never goes.
		if !m.count.Take(s.upstreamMax) {
			if st.last == nil {
				st.lr.decision = "busy"
				b.busy(s, rw, m)
				return
			}
			break // a retry meets a busy upstream: the last failure is answered
		}
		done, trial, ok := b.allow(m.u)
		if !ok {
			// The breaker refused after the walk admitted it (a race with a
			// trip, or the half-open trial was taken): walk on.
			m.count.Put()
			continue
		}
		countChoice(s, choice, st.last)
		st.last = m
		rw.Err = nil
		if q != nil {
			rw.HoldCookie = s.hold.SetCookie(q, m.u.name)
		}
		// A listed status fails this attempt only if a retry can follow:
		// one is left and another upstream would take the request.
		// Otherwise the response is passed on as it is.
		rw.RetryStatus = statusRetry && attempts < s.retries && b.choose(s, pos, tried, q).Member >= 0
		if s.handoff != nil && s.handoff.Attempt(r, st.from, choice.Member) {
			st.carried = true
		}
		b.attempt(s, m, rw, r, body, done, trial)
		attempts++
		st.lr.attempts = attempts
		if rw.Err != nil {
			st.lr.cause = attemptCause(rw.Err, r, body)
		}
		if !s.retry(rw, r, body, attempts) {
			break
		}
	}
	if rw.Err != nil && !rw.WroteHeader() {
		rw.HoldCookie = "" // nothing was served: nothing to hold
		b.writeError(s, rw, r, body, st.last)
	}
}

// attempt forwards the request to one upstream, holding its in-flight
// slot until the response is finished, also when the copy panics with
// http.ErrAbortHandler (which is left to reach net/http). The outcome goes
// to the upstream's breaker through done (from allow; nil without one).
// A half-open trial (trial true) is settled by the response head (or the
// 101), so that a long body (a stream, a download, a tunnel) does not
// keep the upstream's other keys away; the body's outcome then counts as
// an ordinary attempt of the closed breaker.
func (b *Balancer) attempt(s *snapshot, m *member, rw *downstream.Writer, r *http.Request, body *reqbody.Tracked, done func(error), trial bool) {
	u := m.u
	u.inflight.Add(1)
	b.inflight.Add(1)
	s.transport.begin()
	rw.TrialSettled = false
	rw.Up = &u.tunnels
	if trial {
		rw.OnHead = func(code int) {
			rw.TrialSettled = true
			// A trailers-only gRPC response carries its grpc-status in
			// the head.
			b.report(s, u, done, breaker.Outcome{Status: code, GRPC: s.failGRPC.FailedIn(rw.Header())})
		}
	}
	finished := false
	if body != nil {
		body.Stalled = false
	}
	defer func() {
		m.count.Put() // taken by ServeHTTP
		rw.EndAttempt()
		u.inflight.Add(-1)
		b.inflight.Add(-1)
		s.transport.end()
		if !finished {
			// The response broke off mid-body. The upstream is charged
			// only when ringlb was not held up by the client (see
			// downstream.Writer.ClientBound and reqbody.ClientBody.Stalled).
			if body != nil {
				body.Stalled = body.Client.Stalled()
			}
			gone := clientFault(r, body) || rw.ClientBound()
			b.report(s, u, b.outcomeDone(u, rw, done, trial), breaker.Outcome{Status: rw.Status, Err: http.ErrAbortHandler, Gone: gone})
			c := transport.CauseReset
			if gone {
				c = transport.CauseClient
			}
			b.logFailure(u, c, errBrokeOff, r)
			// What was received goes out before the connection is
			// aborted, so the client sees a truncated response (never a
			// complete-looking one: the length or last chunk is missing).
			_ = http.NewResponseController(rw.ResponseWriter).Flush()
		}
	}()
	m.proxy.ServeHTTP(rw, r)
	finished = true
	if body != nil && rw.Err != nil {
		// The upstream's connection ended while ringlb waited on the
		// client for the body: it gave up on a body the client held
		// back.
		body.Stalled = body.Client.Stalled()
	}
	// downstream.RecordError stores a statusError as it is: a type assertion, as
	// errors.As would make se escape (an allocation per request).
	if se, ok := rw.Err.(*statusError); ok {
		// Not passed on, to be retried: it counts as the response it was.
		b.report(s, u, b.outcomeDone(u, rw, done, trial), breaker.Outcome{Status: se.code})
	} else if rw.Err != nil {
		c := attemptCause(rw.Err, r, body)
		b.report(s, u, b.outcomeDone(u, rw, done, trial), breaker.Outcome{Err: rw.Err, Gone: transport.NotUpstreams(c, rw.Err)})
		b.logFailure(u, c, rw.Err, r)
	} else {
		// The grpc-status trailer has reached rw's header map by now.
		b.report(s, u, b.outcomeDone(u, rw, done, trial), breaker.Outcome{Status: rw.Status, GRPC: s.failGRPC.FailedIn(rw.Header())})
	}
}

// outcomeDone returns where an attempt's final outcome goes: done, unless
// the attempt is a trial whose head settled it; then the outcome counts
// as an ordinary attempt of the breaker (see ordinaryAttempt).
func (b *Balancer) outcomeDone(u *upstream, rw *downstream.Writer, done func(error), trial bool) func(error) {
	if !trial {
		return done
	}
	rw.OnHead = nil
	if rw.TrialSettled {
		return b.ordinaryAttempt(u)
	}
	return done
}

// countChoice counts what the choice of an attempt says: that the request
// overflowed past its owner, full under bounded loads, and that it is a
// retry away from last, which failed it.
func countChoice(s *snapshot, choice ring.Choice, last *member) {
	if choice.Overflow >= 0 {
		s.members[choice.Overflow].u.metrics.Overflow.Inc()
	}
	if last != nil {
		last.u.metrics.Retries.Inc()
	}
}
