package balancer

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/reqbody"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/balancer/transport"
)

// writeError answers a request whose last attempt failed before any byte
// of a response was written: 400 when the client's request body could not
// be read, the refusal's status (400, 501, 431) when a transport refused
// what the client sent, 504 for a timeout, 502 otherwise (always 502
// under on_unavailable fail). A departed client's connection is aborted,
// so it can never read an empty response as a success; it is counted as
// 499.
func (b *Balancer) writeError(s *snapshot, rw *downstream.Writer, r *http.Request, body *reqbody.Tracked, m *member) {
	if body != nil && (body.Client.TimedOut() || body.Stalled) {
		// The client held its body back: for longer than
		// timeouts.client_body, or until the upstream gave up on it.
		// (Over HTTP/1.1 a read timeout also cancels the request's
		// context: the client is still there to read this.)
		msg := "request timeout: the request body was silent for longer than timeouts.client_body\n"
		if !body.Client.TimedOut() {
			msg = "request timeout: the upstream gave up waiting for the request body\n"
			body.Client.Cut() // the transport may still be waiting on it
		}
		if r.ProtoMajor == 1 {
			rw.Header().Set("Connection", "close")
		}
		downstream.PlainError(rw, http.StatusRequestTimeout, msg)
		return
	}
	if body != nil && body.Bad() {
		rw.Header().Set("Connection", "close")
		downstream.PlainError(rw, http.StatusBadRequest, "bad request: the request body could not be read\n")
		return
	}
	if r.Context().Err() != nil {
		rw.Status = 499
		panic(http.ErrAbortHandler)
	}
	if code, msg, ok := transport.Refusal(rw.Err); ok {
		downstream.PlainError(rw, code, msg)
		return
	}
	if se, ok := rw.Err.(*statusError); ok {
		// The retry found nowhere to go after all (the other upstreams
		// became unavailable meanwhile): the status as the upstream
		// gave it, its body having been let go.
		msg := http.StatusText(se.code) + ": the upstream answered " + strconv.Itoa(se.code) + "\n"
		if s.header != "" {
			msg = http.StatusText(se.code) + ": upstream " + m.u.name + " answered " + strconv.Itoa(se.code) + "\n"
			rw.Header().Set(s.header, m.u.name)
		}
		downstream.PlainError(rw, se.code, msg)
		return
	}
	// Upstream names stay internal unless upstream_header shows them.
	code, msg := http.StatusBadGateway, "bad gateway: the upstream failed\n"
	if s.header != "" {
		msg = "bad gateway: upstream " + m.u.name + " failed\n"
	}
	if transport.IsLocal(rw.Err) {
		msg = "bad gateway: ringlb is out of its own resources (file descriptors, local ports or buffers)\n"
	} else if transport.ByClient(rw.Err) {
		msg = "bad gateway: upgrade to one protocol at a time, not a list\n"
	} else if !s.fail && transport.IsTimeout(rw.Err) {
		code, msg = http.StatusGatewayTimeout, "gateway timeout: the upstream timed out\n"
		if s.header != "" {
			msg = "gateway timeout: upstream " + m.u.name + " timed out\n"
		}
	}
	if s.header != "" {
		rw.Header().Set(s.header, m.u.name)
	}
	downstream.PlainError(rw, code, msg)
}

// bodyFailed answers a request whose body the key scan could not read
// (reqbody.Prefix.failed), and returns its access log decision: 408 when the
// client left it silent for longer than timeouts.client_body, 503 at
// once when limits.body_memory could not hold more of it (counted in
// ringlb_body_memory_refused_total). An HTTP/1.1 connection is closed
// after the answer: what is left of the body is not read.
func (b *Balancer) bodyFailed(rw *downstream.Writer, r *http.Request, body *reqbody.Tracked) string {
	if r.ProtoMajor == 1 {
		rw.Header().Set("Connection", "close")
	}
	if body.Prefix.Refused() {
		b.proc.BodyRefused.Inc()
		downstream.PlainError(rw, http.StatusServiceUnavailable, "service unavailable: request bodies being read for keys hold limits.body_memory\n")
		return "body-memory"
	}
	downstream.PlainError(rw, http.StatusRequestTimeout, "request timeout: the request body was silent for longer than timeouts.client_body\n")
	return "body-timeout"
}

// busy answers 503 for a request whose upstream holds
// limits.upstream_requests requests: at once, not elsewhere (the key would
// move for as long as the upstream is busy), and without a word to its
// breaker (being busy is not failing).
func (b *Balancer) busy(s *snapshot, rw *downstream.Writer, m *member) {
	m.u.metrics.Limited.Inc()
	if s.header != "" {
		rw.Header().Set(s.header, m.u.name)
	}
	downstream.PlainError(rw, http.StatusServiceUnavailable, "upstream busy\n")
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
		b.metrics.Local.Inc()
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
func (b *Balancer) noUpstream(s *snapshot, rw *downstream.Writer, r *http.Request, owner int) {
	b.metrics.NoUpstream.Inc()
	msg := "no upstream available\n"
	switch {
	case s.fail && owner >= 0:
		u := s.members[owner].u
		who := "the upstream"
		if s.header != "" {
			who = "upstream " + u.name
		}
		switch u.adminState() {
		case state.Drain:
			msg = who + " for this key is draining\n"
		case state.Maint:
			msg = who + " for this key is in maint\n"
		default:
			msg = who + " for this key is unavailable\n"
		}
	default:
		switch s.everyNotReady() {
		case state.Drain:
			msg = "no upstream available: every upstream draining\n"
		case state.Maint:
			msg = "no upstream available: every upstream in maint\n"
		}
	}
	downstream.PlainError(rw, http.StatusServiceUnavailable, msg)
}
