package balancer

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/ringlb/ringlb/balancer/transport"

	"golang.org/x/net/http/httpguts"

	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/breaker"
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
// detected" (see loopToken). Upstream responses, 5xx included, pass through as they are;
// a response that breaks mid-body aborts the client connection
// (http.ErrAbortHandler) so the client sees it truncated.
func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s := b.snap.Load()
	rw := newResponseWriter(w)
	rw.no1xx, rw.send = !r.ProtoAtLeast(1, 1), s.send
	if s.requestID != "" {
		requestID(s, rw, r)
	}
	// With an access log, lr gathers what its line says.
	var lr logReq
	if msg := transport.CheckH2Head(r); msg != "" {
		plainError(rw, http.StatusBadRequest, msg)
		lr.decision = "rejected"
		b.accessLog(s, r, rw, nil, start, &lr, srcRejected, 0)
		return
	}
	if len(r.Header["Cdn-Loop"]) > 0 && looped(r.Header) {
		loopDetected(rw)
		lr.decision = "loop"
		b.accessLog(s, r, rw, nil, start, &lr, srcRejected, 0)
		return
	}
	var body *trackedBody
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		body = b.trackBody(s, w, r)
	}
	// src says where the key came from; s.keyLabel(src) names it in one
	// word ("json:prompt_cache_key") for log lines.
	pos, src, ok := b.position(s, rw, r)
	random := src == srcRandom
	if body != nil && body.prefix.Started() && expectsContinue(r) {
		// Reading the body for the key made the server send 100
		// Continue: the client must not get the upstream's as well.
		rw.continued = true
	}
	if !ok {
		lr.decision = "rejected"
		if src == srcBodyFailed {
			lr.decision = b.bodyFailed(rw, r, body)
			src = srcRejected
		}
		b.accessLog(s, r, rw, nil, start, &lr, src, pos)
		if body != nil {
			body.finish(false)
		}
		return
	}
	if body != nil {
		body.routed(r)
	}
	// With hold on, q is rule 11's decision for the key (see holdBegin).
	var hq holdReq
	var q *holdReq
	if s.hold != nil && !random {
		q = &hq
		b.holdBegin(s, r, pos, q)
	}
	// Trailer fields that must not be forwarded go, from those declared
	// (or, for a body read for the key, received) by now and from those
	// that arrive with the body's end (trackedBody).
	if len(r.Trailer) > 0 {
		transport.DropBadTrailers(r.Trailer)
	}
	// With retry_statuses, a bodiless GET, HEAD or OPTIONS may be retried
	// on a listed status too. The proxies' ModifyResponse judges the
	// status before anything is written to the client, and finds rw
	// through the request's context (the cost of which only such
	// requests pay).
	statusRetry := s.retryOn && !s.fail && body == nil && idempotent(r.Method)
	if statusRetry {
		r = r.WithContext(context.WithValue(r.Context(), retryWriterKey{}, rw))
	}
	// tried holds the members this request may not use: those that
	// failed it and those whose breaker refused it.
	var triedBuf [4]int
	tried := triedBuf[:0]
	var last *member
	defer func() {
		if rw.tunnel != nil { // the upgraded connection's copy is over
			b.tunnels.remove(rw.tunnel)
		}
		if q != nil && last != nil && (rw.err == nil || rw.wroteHeader) {
			b.holdRecord(s, q, last) // served: the key lives there now
		}
		b.account(s, rw, r, last, start)
		if s.accessLog != nil {
			if body != nil {
				lr.bytesIn = body.n.Load()
			}
			lr.decide(q, last, s)
			b.accessLog(s, r, rw, last, start, &lr, src, pos)
		}
		rw.sendRelease()
		if !random {
			sent := ""
			if last != nil {
				sent = last.u.name
			}
			b.hot.Add(pos, sent, b.nanotime())
		}
		if body != nil {
			body.finish(last != nil)
		}
		rw.recycle()
	}()
	for attempts := 0; ; {
		choice := b.choose(s, pos, tried, q)
		if s.accessLog != nil && attempts == 0 && last == nil {
			lr.first(b, s, pos, choice)
		}
		if choice.Member < 0 {
			if last == nil {
				lr.decision = "no-upstream"
				if s.fail {
					lr.decision = "fail-closed"
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
		if !m.count.take(s.upstreamMax) {
			if last == nil {
				lr.decision = "busy"
				b.busy(s, rw, m)
				return
			}
			break // a retry meets a busy upstream: the last failure is answered
		}
		done, trial, ok := b.allow(m.u)
		if !ok {
			// The breaker refused after the walk admitted it (a race with a
			// trip, or the half-open trial was taken): walk on.
			m.count.put()
			continue
		}
		countChoice(s, choice, last)
		last = m
		rw.err = nil
		if q != nil {
			rw.holdCookie = q.setCookie(s, m)
		}
		// A listed status fails this attempt only if a retry can follow:
		// one is left and another upstream would take the request.
		// Otherwise the response is passed on as it is.
		rw.retryStatus = statusRetry && attempts < s.retries && b.choose(s, pos, tried, q).Member >= 0
		b.attempt(s, m, rw, r, body, done, trial)
		attempts++
		lr.attempts = attempts
		if rw.err != nil {
			lr.cause = attemptCause(rw.err, r, body)
		}
		if !s.retry(rw, r, body, attempts) {
			break
		}
	}
	if rw.err != nil && !rw.wroteHeader {
		rw.holdCookie = "" // nothing was served: nothing to hold
		b.writeError(s, rw, r, body, last)
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
func (b *Balancer) attempt(s *snapshot, m *member, rw *responseWriter, r *http.Request, body *trackedBody, done func(error), trial bool) {
	u := m.u
	u.inflight.Add(1)
	b.inflight.Add(1)
	s.transport.begin()
	rw.trialSettled = false
	rw.up = u
	if trial {
		rw.onHead = func(code int) {
			rw.trialSettled = true
			// A trailers-only gRPC response carries its grpc-status in
			// the head.
			b.report(s, u, done, breaker.Outcome{Status: code, GRPC: s.failGRPC.FailedIn(rw.Header())})
		}
	}
	finished := false
	if body != nil {
		body.stalled = false
	}
	defer func() {
		m.count.put() // taken by ServeHTTP
		if rw.upTunnel {
			rw.upTunnel = false
			u.tunnels.Add(-1)
		}
		u.inflight.Add(-1)
		b.inflight.Add(-1)
		s.transport.end()
		if !finished {
			// The response broke off mid-body. The upstream is charged
			// only when ringlb was not held up by the client (see
			// responseWriter.clientBound and reqbody.ClientBody.stalled).
			if body != nil {
				body.stalled = body.client.Stalled()
			}
			gone := clientFault(r, body) || rw.clientBound()
			b.report(s, u, b.outcomeDone(u, rw, done, trial), breaker.Outcome{Status: rw.status, Err: http.ErrAbortHandler, Gone: gone})
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
	if body != nil && rw.err != nil {
		// The upstream's connection ended while ringlb waited on the
		// client for the body: it gave up on a body the client held
		// back.
		body.stalled = body.client.Stalled()
	}
	// recordError stores a statusError as it is: a type assertion, as
	// errors.As would make se escape (an allocation per request).
	if se, ok := rw.err.(*statusError); ok {
		// Not passed on, to be retried: it counts as the response it was.
		b.report(s, u, b.outcomeDone(u, rw, done, trial), breaker.Outcome{Status: se.code})
	} else if rw.err != nil {
		c := attemptCause(rw.err, r, body)
		b.report(s, u, b.outcomeDone(u, rw, done, trial), breaker.Outcome{Err: rw.err, Gone: transport.NotUpstreams(c, rw.err)})
		b.logFailure(u, c, rw.err, r)
	} else {
		// The grpc-status trailer has reached rw's header map by now.
		b.report(s, u, b.outcomeDone(u, rw, done, trial), breaker.Outcome{Status: rw.status, GRPC: s.failGRPC.FailedIn(rw.Header())})
	}
}

// outcomeDone returns where an attempt's final outcome goes: done, unless
// the attempt is a trial whose head settled it; then the outcome counts
// as an ordinary attempt of the breaker (see ordinaryAttempt).
func (b *Balancer) outcomeDone(u *upstream, rw *responseWriter, done func(error), trial bool) func(error) {
	if !trial {
		return done
	}
	rw.onHead = nil
	if rw.trialSettled {
		return b.ordinaryAttempt(u)
	}
	return done
}

// countChoice counts what the choice of an attempt says: that the request
// overflowed past its owner, full under bounded loads, and that it is a
// retry away from last, which failed it.
func countChoice(s *snapshot, choice ring.Choice, last *member) {
	if choice.Overflow >= 0 {
		s.members[choice.Overflow].u.metrics.overflow.Inc()
	}
	if last != nil {
		last.u.metrics.retries.Inc()
	}
}

// retry decides, after an attempt, whether the request goes on to the
// next upstream: only when the attempt failed before anything of a
// response reached the client, not because of the client (it left, its
// body could not be read, it asked for a list of upgrade protocols, a
// transport refused what it sent: refusal), under on_unavailable remap,
// with retries left, and when the request may be repeated (retryable).
// A failed attempt leaves nothing in the response header map:
// ReverseProxy writes a head whenever it fills the map, and clears it
// after a 1xx head, so the next attempt starts clean.
func (s *snapshot) retry(rw *responseWriter, r *http.Request, body *trackedBody, attempts int) bool {
	switch {
	case rw.err == nil, rw.wroteHeader, clientFault(r, body), transport.ByClient(rw.err), transport.Refused(rw.err):
		return false
	case transport.IsLocal(rw.err):
		return false // ringlb's own limit: another upstream would only move the key
	case s.fail, attempts > s.retries:
		return false
	}
	return retryable(rw.err, r, body)
}

// retryable says whether a failed attempt may be repeated elsewhere: any
// request whose connection was never made (and whose body is untouched),
// or a bodiless GET, HEAD or OPTIONS (a response with a status in
// retry_statuses fails only those).
func retryable(err error, r *http.Request, body *trackedBody) bool {
	var de *transport.DialError
	if errors.As(err, &de) {
		return body == nil || body.n.Load() == 0
	}
	return body == nil && idempotent(r.Method)
}

// idempotent reports whether a request of this method may be sent again
// after it reached an upstream (with no body).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// retryWriterKey is the request context key under which ServeHTTP puts
// its responseWriter for a request that a status in retry_statuses may
// fail; see statusError.
type retryWriterKey struct{}

// statusError is an upstream response whose status is in retry_statuses,
// to a request armed for it (responseWriter.retryStatus): the proxy's
// ModifyResponse turns it into this error, before anything is written to
// the client, and the request goes on to the next upstream.
type statusError struct{ code int }

func (e *statusError) Error() string {
	return "upstream answered " + strconv.Itoa(e.code) + " (in retry_statuses)"
}

// writeError answers a request whose last attempt failed before any byte
// of a response was written: 400 when the client's request body could not
// be read, the refusal's status (400, 501, 431) when a transport refused
// what the client sent, 504 for a timeout, 502 otherwise (always 502
// under on_unavailable fail). A departed client's connection is aborted,
// so it can never read an empty response as a success; it is counted as
// 499.
func (b *Balancer) writeError(s *snapshot, rw *responseWriter, r *http.Request, body *trackedBody, m *member) {
	if body != nil && (body.client.TimedOut() || body.stalled) {
		// The client held its body back: for longer than
		// timeouts.client_body, or until the upstream gave up on it.
		// (Over HTTP/1.1 a read timeout also cancels the request's
		// context: the client is still there to read this.)
		msg := "request timeout: the request body was silent for longer than timeouts.client_body\n"
		if !body.client.TimedOut() {
			msg = "request timeout: the upstream gave up waiting for the request body\n"
			body.client.Cut() // the transport may still be waiting on it
		}
		if r.ProtoMajor == 1 {
			rw.Header().Set("Connection", "close")
		}
		plainError(rw, http.StatusRequestTimeout, msg)
		return
	}
	if body != nil && body.bad.Load() {
		rw.Header().Set("Connection", "close")
		plainError(rw, http.StatusBadRequest, "bad request: the request body could not be read\n")
		return
	}
	if r.Context().Err() != nil {
		rw.status = 499
		panic(http.ErrAbortHandler)
	}
	if code, msg, ok := transport.Refusal(rw.err); ok {
		plainError(rw, code, msg)
		return
	}
	if se, ok := rw.err.(*statusError); ok {
		// The retry found nowhere to go after all (the other upstreams
		// became unavailable meanwhile): the status as the upstream
		// gave it, its body having been let go.
		msg := http.StatusText(se.code) + ": the upstream answered " + strconv.Itoa(se.code) + "\n"
		if s.header != "" {
			msg = http.StatusText(se.code) + ": upstream " + m.u.name + " answered " + strconv.Itoa(se.code) + "\n"
			rw.Header().Set(s.header, m.u.name)
		}
		plainError(rw, se.code, msg)
		return
	}
	// Upstream names stay internal unless upstream_header shows them.
	code, msg := http.StatusBadGateway, "bad gateway: the upstream failed\n"
	if s.header != "" {
		msg = "bad gateway: upstream " + m.u.name + " failed\n"
	}
	if transport.IsLocal(rw.err) {
		msg = "bad gateway: ringlb is out of its own resources (file descriptors, local ports or buffers)\n"
	} else if transport.ByClient(rw.err) {
		msg = "bad gateway: upgrade to one protocol at a time, not a list\n"
	} else if !s.fail && transport.IsTimeout(rw.err) {
		code, msg = http.StatusGatewayTimeout, "gateway timeout: the upstream timed out\n"
		if s.header != "" {
			msg = "gateway timeout: upstream " + m.u.name + " timed out\n"
		}
	}
	if s.header != "" {
		rw.Header().Set(s.header, m.u.name)
	}
	plainError(rw, code, msg)
}

// bodyFailed answers a request whose body the key scan could not read
// (reqbody.Prefix.failed), and returns its access log decision: 408 when the
// client left it silent for longer than timeouts.client_body, 503 at
// once when limits.body_memory could not hold more of it (counted in
// ringlb_body_memory_refused_total). An HTTP/1.1 connection is closed
// after the answer: what is left of the body is not read.
func (b *Balancer) bodyFailed(rw *responseWriter, r *http.Request, body *trackedBody) string {
	if r.ProtoMajor == 1 {
		rw.Header().Set("Connection", "close")
	}
	if body.prefix.Refused() {
		b.metrics.proc.bodyRefused.Inc()
		plainError(rw, http.StatusServiceUnavailable, "service unavailable: request bodies being read for keys hold limits.body_memory\n")
		return "body-memory"
	}
	plainError(rw, http.StatusRequestTimeout, "request timeout: the request body was silent for longer than timeouts.client_body\n")
	return "body-timeout"
}

// busy answers 503 for a request whose upstream holds
// limits.upstream_requests requests: at once, not elsewhere (the key would
// move for as long as the upstream is busy), and without a word to its
// breaker (being busy is not failing).
func (b *Balancer) busy(s *snapshot, rw *responseWriter, m *member) {
	m.u.metrics.limited.Inc()
	if s.header != "" {
		rw.Header().Set(s.header, m.u.name)
	}
	plainError(rw, http.StatusServiceUnavailable, "upstream busy\n")
}

// errBrokeOff stands for the error of a response that broke off mid-body
// (ReverseProxy's own log line names the read error).
var errBrokeOff = errors.New("the response broke off mid-body")

// logFailure writes a warning for a failed attempt on u: its cause, the
// error and the request, at most once per second for each upstream and
// cause (with the count of failures not logged since the last), and, for
// ringlb's own limits, once per second in all. A local failure is counted
// in ringlb_local_errors_total.
func (b *Balancer) logFailure(u *upstream, c transport.Cause, err error, r *http.Request) {
	l := &u.fails[c]
	if c == transport.CauseLocal {
		b.metrics.local.Inc()
		l = &b.localLog
	}
	ok, suppressed := l.allow(time.Now().UnixNano())
	if !ok {
		return
	}
	b.log.LogAttrs(r.Context(), slog.LevelWarn, "upstream attempt failed",
		slog.String("upstream", u.name), slog.String("cause", c.String()), slog.String("error", err.Error()),
		slog.String("method", r.Method), slog.String("uri", r.RequestURI), slog.Int64("suppressed", suppressed))
}

// noUpstream answers 503: nothing is available (saying so when it is
// because every upstream drains or is in maint), or, under
// on_unavailable fail, the key's owner is not, or drains, or is in maint
// (named only when upstream_header is set, as in writeError).
func (b *Balancer) noUpstream(s *snapshot, rw *responseWriter, r *http.Request, owner int) {
	b.metrics.noUpstream.Inc()
	msg := "no upstream available\n"
	switch {
	case s.fail && owner >= 0:
		u := s.members[owner].u
		who := "the upstream"
		if s.header != "" {
			who = "upstream " + u.name
		}
		switch u.adminState() {
		case StateDrain:
			msg = who + " for this key is draining\n"
		case StateMaint:
			msg = who + " for this key is in maint\n"
		default:
			msg = who + " for this key is unavailable\n"
		}
	default:
		switch s.everyNotReady() {
		case StateDrain:
			msg = "no upstream available: every upstream draining\n"
		case StateMaint:
			msg = "no upstream available: every upstream in maint\n"
		}
	}
	plainError(rw, http.StatusServiceUnavailable, msg)
}

func plainError(w http.ResponseWriter, code int, msg string) {
	hdr := w.Header()
	hdr.Del("Content-Length")
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// account records the request's metrics. It runs
// deferred, so it also sees requests aborted by http.ErrAbortHandler.
func (b *Balancer) account(s *snapshot, rw *responseWriter, r *http.Request, m *member, start time.Time) {
	code := rw.status
	if code == 0 {
		code = http.StatusOK
	}
	if m != nil {
		m.u.metrics.code(code).Inc()
		m.u.metrics.duration.Observe(time.Since(start).Seconds())
	}
}

func (b *Balancer) accessLog(s *snapshot, r *http.Request, rw *responseWriter, m *member, start time.Time, lr *logReq, src int, pos uint64) {
	if s.accessLog == nil {
		return
	}
	code := rw.status
	if code == 0 {
		code = http.StatusOK
		if rw.err != nil && !rw.wroteHeader {
			code = 499 // the client left before an answer
		}
	}
	e := accesslog.Entry{
		Time: start, Remote: r.RemoteAddr, Method: r.Method, Host: r.Host, URI: r.RequestURI, Proto: r.Proto,
		Status: code, BytesIn: lr.bytesIn, BytesOut: rw.bytesOut, Duration: time.Since(start),
		Referer: first(r.Header["Referer"]), UserAgent: first(r.Header["User-Agent"]),
		Pool: b.Pool(), Decision: lr.decision, Attempts: lr.attempts, RequestID: rw.requestID[0],
		TraceID: accesslog.TraceID(first(r.Header["Traceparent"])),
	}
	if rw.headAt != 0 {
		e.TTFB = rw.headAt - start.Sub(monoEpoch) // arithmetic on the monotonic readings
	}
	if m != nil {
		e.Upstream = m.u.name
	}
	if lr.cause != transport.CauseNone {
		e.Cause = lr.cause.String()
	}
	switch src {
	case srcRandom:
		e.KeySource = "random"
	case srcNewAffinity:
		e.KeySource = "generated"
	default:
		e.KeySource = s.keyLabel(src) // "" for srcRejected
	}
	if src != srcRandom && src != srcRejected {
		e.KeyHash = s.reportedHash(pos)
	}
	for _, sk := range lr.skipped {
		e.Skipped = append(e.Skipped, accesslog.Skip{Name: s.members[sk.Member].u.name, Reason: sk.Reason.String()})
	}
	s.accessLog.Log(&e)
}

// first is a header's first value, as Header.Get returns it, for a name
// given in canonical form (Get canonicalises its argument on every call).
func first(vs []string) string {
	if len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// logReq is what the access log line says of a request's routing.
type logReq struct {
	decision string
	attempts int
	cause    transport.Cause // of the last failed attempt
	bytesIn  int64
	choice   ring.Choice // the first pick
	skipped  []ring.Skip // why the first pick passed members over
}

// first notes the request's first choice and, when it is not the key's
// owner, the walk's reasons for passing the others over (one more walk,
// made only with an access log).
func (lr *logReq) first(b *Balancer, s *snapshot, pos uint64, c ring.Choice) {
	lr.choice = c
	if c.Member != c.Owner || c.Member < 0 {
		_, lr.skipped = b.pick(s, pos, nil, make([]ring.Skip, 0, 4))
	}
}

// decide names the decision once the request is over (unless an early
// answer named it): retry, held or cookie-held, overflow, or owner.
func (lr *logReq) decide(q *holdReq, last *member, s *snapshot) {
	switch {
	case lr.decision != "" || last == nil:
	case lr.attempts > 1:
		lr.decision = "retry"
	case q != nil && q.held >= 0 && last == &s.members[q.held]:
		lr.decision = "held"
		if q.ckOK {
			lr.decision = "cookie-held"
		}
	case lr.choice.Overflow >= 0:
		lr.decision = "overflow"
	default:
		lr.decision = "owner"
	}
}

// requestID passes the request's id on, or makes one (16 random bytes,
// hex) and sets it on the request, for the upstream; the response gets it
// too (responseWriter.head). A client's id is taken only when it is at
// most maxRequestID bytes of printable ASCII (validRequestID); another is
// replaced like a missing one, so that neither the log nor the upstream
// gets a value of the client's making of any length or content. A made id costs one allocation (madeID) and
// no system call: its bytes come from the runtime's per-thread generator
// (math/rand/v2's ChaCha8, seeded by the kernel). Neither the string nor
// the request's value may alias the responseWriter: HTTP/2's HPACK tables
// and an HTTP/2 upstream's keep header values for as long as their
// connection lives, and the responseWriter is reused once its request is
// over (recycle).
func requestID(s *snapshot, rw *responseWriter, r *http.Request) {
	h := s.requestID
	if vs := r.Header[h]; len(vs) > 0 && validRequestID(vs[0]) {
		rw.requestID[0] = vs[0]
	} else {
		var raw [16]byte
		binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(raw[8:], rand.Uint64())
		id := new(madeID)
		hex.Encode(id.b[:], raw[:])
		id.v[0] = unsafe.String(&id.b[0], len(id.b)) // b is not written again
		rw.requestID[0] = id.v[0]
		r.Header[h] = id.v[:] // cap 1: an append elsewhere copies
	}
	rw.requestIDHeader, rw.requestIDKey = h, h
	if r.ProtoMajor == 2 {
		rw.requestIDKey = s.requestIDH2
	}
}

// maxRequestID is the longest request id taken from a client, in bytes.
const maxRequestID = 128

// validRequestID reports whether a client's request id is taken as it
// is: 1 to maxRequestID bytes, each printable ASCII (space to '~').
func validRequestID(v string) bool {
	if v == "" || len(v) > maxRequestID {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

// madeID is a made request id: its digits, and the one-element value the
// request's header map holds, in one allocation.
type madeID struct {
	b [32]byte
	v [1]string
}

// expectsContinue reports whether the server took r for one that
// expects 100-continue, and so sent 100 Continue when the body was first
// read: as net/http decides it, the token 100-continue in any case, among
// others, in the first Expect line (HTTP/1.1: "100-Continue, foo" is one)
// or in any of them (HTTP/2).
func expectsContinue(r *http.Request) bool {
	vs := r.Header["Expect"]
	if r.ProtoMajor >= 2 {
		return httpguts.HeaderValuesContainsToken(vs, "100-continue")
	}
	return len(vs) > 0 && hasToken(vs[0], "100-continue")
}

// hasToken is net/http's: whether token (lower case) is in v, in any
// case, between spaces, tabs, commas or v's ends.
func hasToken(v, token string) bool {
	for sp := 0; sp+len(token) <= len(v); sp++ {
		if sp > 0 && !isTokenBoundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !isTokenBoundary(v[end]) {
			continue
		}
		if strings.EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

// clientFault reports whether the current attempt failed because of the
// client: it went away, its request body could not be read (or was
// silent for longer than timeouts.client_body), or the upstream gave up
// on a body the client held back (trackedBody.stalled). Such an attempt
// says nothing about the upstream and is not retried.
func clientFault(r *http.Request, body *trackedBody) bool {
	return r.Context().Err() != nil || (body != nil && (body.bad.Load() || body.stalled))
}
