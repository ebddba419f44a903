package balancer

import (
	"net/http"
	"time"

	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/forward"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/reqbody"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/internal/mono"
	"github.com/ringlb/ringlb/ring"
)

// account records the request's metrics. It runs
// deferred, so it also sees requests aborted by http.ErrAbortHandler.
func (b *Balancer) account(s *snapshot, rw *downstream.Writer, r *http.Request, m *member, start time.Time) {
	code := rw.Status
	if code == 0 {
		code = http.StatusOK
	}
	if m != nil {
		m.u.metrics.Code(code).Inc()
		m.u.metrics.Duration.Observe(time.Since(start).Seconds())
	}
}

func (b *Balancer) accessLog(s *snapshot, r *http.Request, rw *downstream.Writer, m *member, start time.Time, lr *logReq, src int, pos uint64) {
	if s.accessLog == nil {
		return
	}
	code := rw.Status
	if code == 0 {
		code = http.StatusOK
		if rw.Err != nil && !rw.WroteHeader() {
			code = 499 // the client left before an answer
		}
	}
	e := accesslog.Entry{
		Time: start, Remote: r.RemoteAddr, Method: r.Method, Host: r.Host, URI: r.RequestURI, Proto: r.Proto,
		Status: code, BytesIn: lr.bytesIn, BytesOut: rw.BytesOut(), Duration: time.Since(start),
		Referer: first(r.Header["Referer"]), UserAgent: first(r.Header["User-Agent"]),
		Pool: b.Pool(), Decision: lr.decision, Attempts: lr.attempts, RequestID: rw.RequestID(),
		TraceID: accesslog.TraceID(first(r.Header["Traceparent"])),
	}
	if at := rw.HeadAt(); at != 0 {
		e.TTFB = at - start.Sub(mono.Epoch) // arithmetic on the monotonic readings
	}
	if m != nil {
		e.Upstream = m.u.name
	}
	if lr.cause != transport.CauseNone {
		e.Cause = lr.cause.String()
	}
	e.HandoffFrom = lr.handoffFrom
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
	handoffFrom string // rule 17's previous upstream named to the upstream; "" for none
	decision    string
	attempts    int
	cause       transport.Cause // of the last failed attempt
	bytesIn     int64
	choice      ring.Choice // the first pick
	skipped     []ring.Skip // why the first pick passed members over
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
// answer named it): retry, held or cookie-held, overflow, next (the first
// pick passed the owner over: unhealthy, draining, ...), or owner.
func (lr *logReq) decide(q *hold.Request, last *member, s *snapshot) {
	switch {
	case lr.decision != "" || last == nil:
	case lr.attempts > 1:
		lr.decision = "retry"
	case q != nil && q.Held >= 0 && q.Shown && last == &s.members[q.Held]:
		lr.decision = "held"
		if q.CookieOK {
			lr.decision = "cookie-held"
		}
	case lr.choice.Overflow >= 0:
		lr.decision = "overflow"
	case lr.choice.Member != lr.choice.Owner:
		lr.decision = "next"
	default:
		lr.decision = "owner"
	}
}

// requestID gives the request its id (forward.RequestID), and the
// response head too, under the canonical name or, over HTTP/2, the
// lower-case one (downstream.Writer.SetRequestID).
func requestID(s *snapshot, rw *downstream.Writer, r *http.Request) {
	key := s.requestID
	if r.ProtoMajor == 2 {
		key = s.requestIDH2
	}
	rw.SetRequestID(forward.RequestID(r, s.requestID), s.requestID, key)
}

// clientFault reports whether the current attempt failed because of the
// client: it went away, its request body could not be read (or was
// silent for longer than timeouts.client_body), or the upstream gave up
// on a body the client held back (reqbody.Tracked.Stalled). Such an attempt
// says nothing about the upstream and is not retried.
func clientFault(r *http.Request, body *reqbody.Tracked) bool {
	return r.Context().Err() != nil || (body != nil && (body.Bad() || body.Stalled))
}
