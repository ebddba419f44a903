package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/ringlb/ringlb/balancer/transport/h1"
)

// Cause is the class of a failed attempt's error, as the logs name it: what
// went wrong, in the few words an operator acts on.
type Cause uint8

const (
	CauseNone        Cause = iota // no error
	CauseRefused                  // the connection could not be made: refused, unreachable, no such host
	CauseReset                    // the connection ended under the request: reset, closed, broken pipe
	CauseTimeout                  // dialling, the TLS handshake, the response head or the body took too long
	CauseTLS                      // the TLS handshake failed: certificate, protocol, alert
	CauseBadResponse              // the upstream answered something that is not a valid response
	CauseLocal                    // ringlb's own limits: no file descriptor, no local port, no buffer
	CauseClient                   // the client went away, or its request (body, upgrade, a field no transport sends) was at fault
	NumCauses
)

var causeNames = [NumCauses]string{"", "refused", "reset", "timeout", "tls", "bad response", "local", "client"}

func (c Cause) String() string {
	if c < NumCauses {
		return causeNames[c]
	}
	return "unknown"
}

// CauseOf classifies the error of a failed attempt (nil: CauseNone). It
// looks at the error alone; an attempt whose client went away or whose
// body could not be read is CauseClient whatever its error (see
// the balancer's attemptCause). Order matters: a dial that failed for want of a file
// descriptor is local, not refused; a TLS handshake that timed out is a
// timeout.
func CauseOf(err error) Cause {
	switch {
	case err == nil:
		return CauseNone
	case errors.Is(err, context.Canceled), ByClient(err), Refused(err):
		return CauseClient
	case IsLocal(err):
		return CauseLocal
	case IsTimeout(err):
		return CauseTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTDOWN):
		return CauseRefused
	case isTLS(err):
		return CauseTLS
	case errors.Is(err, h1.ErrClosedIdle), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, http.ErrAbortHandler), errors.Is(err, net.ErrClosed):
		return CauseReset
	}
	var de *DialError
	var dns *net.DNSError
	if errors.As(err, &de) || errors.As(err, &dns) {
		return CauseRefused // nothing was sent: some other failure to connect
	}
	return CauseBadResponse
}

// isLocal says whether err is ringlb running out of its own resources
// (rule 13): such a failure is never the upstream's.
func IsLocal(err error) bool {
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

// NotUpstreams says whether an attempt that failed with cause c says
// nothing about its upstream, so that its breaker does not count it: the
// client's doing, ringlb's own limits, or a pooled connection the
// upstream had closed while idle (the request crossed the close; rule 13).
func NotUpstreams(c Cause, err error) bool {
	return c == CauseClient || c == CauseLocal || errors.Is(err, h1.ErrClosedIdle)
}

func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
