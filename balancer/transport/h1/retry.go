package h1

import (
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
)

// Which failures of an exchange on a pooled connection may be sent again
// on a fresh one, and the errors that say so.

// retryError is the error of an exchange on a pooled connection that the
// upstream had closed: the request may be sent again on a fresh one.
type retryError struct{ err error }

func (e retryError) Error() string { return e.err.Error() }

// replayable says whether req may be sent again after a pooled connection
// failed: it has no body and either nothing of it was written or it is
// idempotent, as http.Transport decides.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, ok := req.Header["Idempotency-Key"]
	if !ok {
		_, ok = req.Header["X-Idempotency-Key"]
	}
	return ok
}

// isClosed says whether err is a connection's end: a clean or early EOF
// (over TLS, a close_notify too), a reset, or a write to a closed socket.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// ErrClosedIdle is what the error of a request that found its pooled
// connection closed (an end before any byte of a response, on a reused
// connection) matches with errors.Is, when the request could not be sent
// again: the upstream closed an idle connection as the request crossed
// it, which says nothing of the upstream's health.
var ErrClosedIdle = errors.New("h1: pooled connection closed by the upstream while idle")

// closedIdleError is a failure that matches ErrClosedIdle; its text
// follows ErrClosedIdle's with the failure's own.
type closedIdleError struct{ err error }

func (e *closedIdleError) Error() string        { return ErrClosedIdle.Error() + ": " + e.err.Error() }
func (e *closedIdleError) Unwrap() error        { return e.err }
func (e *closedIdleError) Is(target error) bool { return target == ErrClosedIdle }

// isTimeout says whether err is a net.Error that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
