// Package transport speaks to upstreams: one round tripper per protocol
// (HTTP/1.1 through h1, h2c and h2 through net/http's), with the dial and
// TLS settings they share, the refusals that are the client's fault, and
// the read timeout of their response bodies.
package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Protocol is how ringlb speaks to an upstream (upstreams[].protocol).
type Protocol uint8

// The protocols. The zero value is HTTP1.
const (
	// HTTP1 is HTTP/1.1, over TLS for an https URL.
	HTTP1 Protocol = iota
	// H2C is cleartext HTTP/2 with prior knowledge (gRPC servers
	// without TLS speak it); the URL is http.
	H2C
	// H2 is HTTP/2 over TLS, negotiated by ALPN; the URL is https,
	// and an upstream that does not offer h2 fails the request.
	H2
)

// ParseProtocol reads a protocol as the config writes it: http1, h2c or h2.
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case "http1":
		return HTTP1, nil
	case "h2c":
		return H2C, nil
	case "h2":
		return H2, nil
	}
	return 0, fmt.Errorf("unknown protocol %q; want http1, h2c or h2", s)
}

// String returns the protocol as the config writes it.
func (p Protocol) String() string {
	switch p {
	case HTTP1:
		return "http1"
	case H2C:
		return "h2c"
	case H2:
		return "h2"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// UpstreamTLS says how https upstreams are verified (upstream_tls).
type UpstreamTLS struct {
	// RootCAs verifies upstream certificates; nil uses the system's roots.
	RootCAs *x509.CertPool
	// ServerName is sent as SNI and verified in every https upstream's
	// certificate; "" uses each URL's host.
	ServerName string
	// InsecureSkipVerify accepts any certificate.
	InsecureSkipVerify bool
}

// Options are what the transports of all protocols share.
type Options struct {
	// DialTimeout bounds connecting (and, when > 0, the TLS handshake);
	// ResponseHeaderTimeout bounds the wait for response headers once the
	// request is written; IdleConnTimeout closes unused connections. 0
	// means no limit (a TLS handshake then gets 10s).
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	IdleConnTimeout       time.Duration
	// TLS applies to every https upstream, whatever its protocol.
	TLS UpstreamTLS
}

// Set holds one transport per Protocol, built with the same
// timeouts and TLS settings, so that upstreams of one protocol share
// connections pools and one config change rebuilds them all. A dial that
// fails returns an error wrapping *DialError (nothing was sent: the
// request may go elsewhere whatever its method).
type Set struct {
	byProto [3]RoundTripper
}

// NewSet builds the three transports: HTTP/1.1 through
// h1.Transport (see newHTTP1RoundTripper), HTTP/2 through net/http's
// (h2Transport marks the requests it refuses). A request a transport
// refuses for what it holds, before sending anything of it, fails with
// an error that refusal recognises.
func NewSet(o Options) *Set {
	ts := &Set{}
	for p := range ts.byProto {
		if Protocol(p) == HTTP1 {
			ts.byProto[p] = newHTTP1RoundTripper(o)
			continue
		}
		ts.byProto[p] = h2Transport{newProtocolTransport(o, Protocol(p))}
	}
	return ts
}

// For returns the transport for p (HTTP1's for an unknown value).
func (ts *Set) For(p Protocol) http.RoundTripper {
	if int(p) >= len(ts.byProto) {
		p = HTTP1
	}
	return ts.byProto[p]
}

// CloseIdleConnections closes every transport's idle connections, as when
// the transports are replaced.
func (ts *Set) CloseIdleConnections() {
	for _, t := range ts.byProto {
		t.CloseIdleConnections()
	}
}

// newProtocolTransport builds the transport of one protocol. Each speaks
// only its own protocol: no transport falls back to another, so an
// upstream declared h2 that does not offer h2 fails loudly instead of
// silently losing trailers and multiplexing.
func newProtocolTransport(o Options, p Protocol) *http.Transport {
	protos := new(http.Protocols)
	switch p {
	case H2C:
		protos.SetUnencryptedHTTP2(true)
	case H2:
		protos.SetHTTP2(true)
	default:
		protos.SetHTTP1(true)
	}
	return &http.Transport{
		Proxy:                 nil, // never send upstream traffic through $HTTP_PROXY
		DialContext:           markDialErrors(&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}),
		TLSClientConfig:       o.TLS.config(),
		Protocols:             protos,
		MaxIdleConns:          maxIdleConns,
		MaxIdleConnsPerHost:   maxIdleConnsPerHost,
		IdleConnTimeout:       o.IdleConnTimeout,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		TLSHandshakeTimeout:   o.handshakeTimeout(),
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// Idle connection limits shared by every upstream transport.
const (
	maxIdleConns        = 16384
	maxIdleConnsPerHost = 1024
)

// markDialErrors dials with d and wraps a failure in *DialError: nothing
// was sent, so the request may go elsewhere whatever its method.
func markDialErrors(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, &DialError{err}
		}
		return c, nil
	}
}

// handshakeTimeout bounds a TLS handshake: DialTimeout, or 10s when that
// is 0 (no limit on dialling).
func (o Options) handshakeTimeout() time.Duration {
	if o.DialTimeout == 0 {
		return 10 * time.Second
	}
	return o.DialTimeout
}

// config is the client TLS configuration for https upstreams.
func (t UpstreamTLS) config() *tls.Config {
	return &tls.Config{RootCAs: t.RootCAs, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
}

// DialError marks an error from dialling an upstream: nothing was sent,
// so the request may go elsewhere whatever its method.
type DialError struct{ Err error }

func (e *DialError) Error() string { return e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }
