package balancer

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/reqbody"
	"github.com/ringlb/ringlb/balancer/transport"
)

// Retries: whether a failed attempt may go on to the next upstream, and
// the status a retry_statuses response fails its attempt with.

// retry decides, after an attempt, whether the request goes on to the
// next upstream: only when the attempt failed before anything of a
// response reached the client, not because of the client (it left, its
// body could not be read, it asked for a list of upgrade protocols, a
// transport refused what it sent: refusal), under on_unavailable remap,
// with retries left, and when the request may be repeated (retryable).
// A failed attempt leaves nothing in the response header map:
// ReverseProxy writes a head whenever it fills the map, and clears it
// after a 1xx head, so the next attempt starts clean.
func (s *snapshot) retry(rw *downstream.Writer, r *http.Request, body *reqbody.Tracked, attempts int) bool {
	switch {
	case rw.Err == nil, rw.WroteHeader(), clientFault(r, body), transport.ByClient(rw.Err), transport.Refused(rw.Err):
		return false
	case transport.IsLocal(rw.Err):
		return false // ringlb's own limit: another upstream would only move the key
	case s.fail, attempts > s.retries:
		return false
	}
	return retryable(rw.Err, r, body)
}

// retryable says whether a failed attempt may be repeated elsewhere: any
// request whose connection was never made (and whose body is untouched),
// or a bodiless GET, HEAD or OPTIONS (a response with a status in
// retry_statuses fails only those).
func retryable(err error, r *http.Request, body *reqbody.Tracked) bool {
	var de *transport.DialError
	if errors.As(err, &de) {
		return body == nil || body.BytesRead() == 0
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
// its downstream.Writer for a request that a status in retry_statuses may
// fail; see statusError.
type retryWriterKey struct{}

// statusError is an upstream response whose status is in retry_statuses,
// to a request armed for it (downstream.Writer.RetryStatus): the proxy's
// ModifyResponse turns it into this error, before anything is written to
// the client, and the request goes on to the next upstream.
type statusError struct{ code int }

func (e *statusError) Error() string {
	return "upstream answered " + strconv.Itoa(e.code) + " (in retry_statuses)"
}
