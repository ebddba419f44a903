package balancer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ringlb/ringlb/balancer/h1"
)

// cause is the class of a failed attempt's error, as the logs name it: what
// went wrong, in the few words an operator acts on.
type cause uint8

const (
	causeNone        cause = iota // no error
	causeRefused                  // the connection could not be made: refused, unreachable, no such host
	causeReset                    // the connection ended under the request: reset, closed, broken pipe
	causeTimeout                  // dialling, the TLS handshake, the response head or the body took too long
	causeTLS                      // the TLS handshake failed: certificate, protocol, alert
	causeBadResponse              // the upstream answered something that is not a valid response
	causeLocal                    // ringlb's own limits: no file descriptor, no local port, no buffer
	causeClient                   // the client went away, or its request (body, upgrade, a field no transport sends) was at fault
	numCauses
)

var causeNames = [numCauses]string{"", "refused", "reset", "timeout", "tls", "bad response", "local", "client"}

func (c cause) String() string {
	if c < numCauses {
		return causeNames[c]
	}
	return "unknown"
}

// causeOf classifies the error of a failed attempt (nil: causeNone). It
// looks at the error alone; an attempt whose client went away or whose
// body could not be read is causeClient whatever its error (see
// attemptCause). Order matters: a dial that failed for want of a file
// descriptor is local, not refused; a TLS handshake that timed out is a
// timeout.
func causeOf(err error) cause {
	switch {
	case err == nil:
		return causeNone
	case errors.Is(err, context.Canceled), byClient(err), refused(err):
		return causeClient
	case isLocal(err):
		return causeLocal
	case isTimeout(err):
		return causeTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTDOWN):
		return causeRefused
	case isTLS(err):
		return causeTLS
	case errors.Is(err, h1.ErrClosedIdle), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, http.ErrAbortHandler), errors.Is(err, net.ErrClosed):
		return causeReset
	}
	var de *dialError
	var dns *net.DNSError
	if errors.As(err, &de) || errors.As(err, &dns) {
		return causeRefused // nothing was sent: some other failure to connect
	}
	return causeBadResponse
}

// attemptCause is the cause of a failed attempt: causeClient when the
// client went away or its body could not be read, else causeOf(err).
func attemptCause(err error, r *http.Request, body *trackedBody) cause {
	if clientFault(r, body) {
		return causeClient
	}
	return causeOf(err)
}

// isLocal says whether err is ringlb running out of its own resources
// (rule 13): such a failure is never the upstream's.
func isLocal(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENOBUFS)
}

// isTLS says whether err comes from a TLS handshake or record layer.
func isTLS(err error) bool {
	var (
		rh    tls.RecordHeaderError
		alert tls.AlertError
		cv    *tls.CertificateVerificationError
		ua    x509.UnknownAuthorityError
		host  x509.HostnameError
		inv   x509.CertificateInvalidError
	)
	if errors.As(err, &rh) || errors.As(err, &alert) || errors.As(err, &cv) ||
		errors.As(err, &ua) || errors.As(err, &host) || errors.As(err, &inv) {
		return true
	}
	// crypto/tls reports most handshake failures as plain errors, and a
	// remote alert as a *net.OpError around an unexported type, all
	// reading "tls: ..."; h1 names a protocol negotiated by ALPN that
	// is not HTTP/1.1.
	msg := err.Error()
	return strings.Contains(msg, "tls: ") || strings.Contains(msg, "negotiated protocol")
}

// notUpstreams says whether an attempt that failed with cause c says
// nothing about its upstream, so that its breaker does not count it: the
// client's doing, ringlb's own limits, or a pooled connection the
// upstream had closed while idle (the request crossed the close; rule 13).
func notUpstreams(c cause, err error) bool {
	return c == causeClient || c == causeLocal || errors.Is(err, h1.ErrClosedIdle)
}

// logEvery is the least time between two warnings for the same upstream
// and cause; failures in between are counted and reported with the next.
const logEvery = time.Second

// failLog rate-limits the warnings of one upstream and cause.
type failLog struct {
	last       atomic.Int64 // Unix nanoseconds of the last warning
	suppressed atomic.Int64 // failures not logged since
}

// allow says whether a warning may be written at now, and how many were
// held back since the last one.
func (l *failLog) allow(now int64) (bool, int64) {
	last := l.last.Load()
	if now-last < int64(logEvery) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}
