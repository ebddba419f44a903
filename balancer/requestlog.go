package balancer

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
	"unsafe"

	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/internal/mono"
	"github.com/ringlb/ringlb/ring"
	"golang.org/x/net/http/httpguts"
)

// account records the request's metrics. It runs
// deferred, so it also sees requests aborted by http.ErrAbortHandler.
func (b *Balancer) account(s *snapshot, rw *responseWriter, r *http.Request, m *member, start time.Time) {
	code := rw.status
	if code == 0 {
		code = http.StatusOK
	}
	if m != nil {
		m.u.metrics.Code(code).Inc()
		m.u.metrics.Duration.Observe(time.Since(start).Seconds())
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
		e.TTFB = rw.headAt - start.Sub(mono.Epoch) // arithmetic on the monotonic readings
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
