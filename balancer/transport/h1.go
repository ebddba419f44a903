package transport

import (
	"net"
	"net/http"
	"time"

	"github.com/ringlb/ringlb/balancer/transport/h1"
)

// RoundTripper is what a member's ReverseProxy sends requests through:
// the transport of the upstream's protocol.
type RoundTripper interface {
	http.RoundTripper
	CloseIdleConnections()
}

// StdHTTP1 makes http1 upstreams go through net/http's Transport instead
// of h1.Transport. It exists only so that tests and benchmarks can compare
// the two in one process; nothing outside tests sets it.
var StdHTTP1 = false

// newHTTP1RoundTripper returns the transport for http1 upstreams: an
// h1.Transport (or, under StdHTTP1, net/http's).
func newHTTP1RoundTripper(o Options) RoundTripper {
	if StdHTTP1 {
		return newProtocolTransport(o, HTTP1)
	}
	return NewH1(o)
}

// NewH1 builds the transport for HTTP/1.1 upstreams (http and
// https URLs). It writes the request and reads the response head on the
// calling goroutine over a pooled connection, where net/http's Transport
// hands each request to two goroutines of its own. Its settings are those
// of the other protocols' transports: a failed dial returns an error
// wrapping *DialError; at most 1024 idle connections per upstream and
// 16384 in all; the TLS handshake gets DialTimeout, or 10s when that is
// 0; a request with Expect: 100-continue sends its body after 1s without
// an answer; no proxy, no compression.
func NewH1(o Options) *h1.Transport {
	return &h1.Transport{
		Dial:                  markDialErrors(&net.Dialer{KeepAlive: 30 * time.Second}), // DialTimeout applies it
		DialTimeout:           o.DialTimeout,
		TLSClientConfig:       o.TLS.config(),
		TLSHandshakeTimeout:   o.handshakeTimeout(),
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       o.IdleConnTimeout,
		MaxIdleConns:          maxIdleConns,
		MaxIdleConnsPerHost:   maxIdleConnsPerHost,
	}
}
