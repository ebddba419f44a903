// Package h1 is an HTTP/1.1 client transport for a reverse proxy.
//
// A Transport is an [http.RoundTripper] that does, on the caller's
// goroutine, what [http.Transport] spreads over three: it takes a pooled
// connection (or dials one), writes the request, reads the response head
// and returns. The response body is read from the connection by whoever
// reads Response.Body, and the connection goes back to the pool when that
// body hits a clean EOF. Only a request with a body starts a goroutine, to
// write the body while the response is read (an upstream may answer before
// it has read the body, say 413). There is no background read on idle
// connections; instead a pooled connection is checked with one
// non-blocking peek when it is taken out of the pool.
//
// HTTP/1.1 framing is the standard library's: the request is written as
// (*http.Request).Write writes it, byte for byte (a bodiless GET or HEAD
// with an ordinary header by the Transport itself, from the fields that
// RoundTrip's one pass over the header map checked and collected;
// anything else by Write), and the response is read with
// http.ReadResponse, over a bufio.Writer and a bufio.Reader that a
// connection holds only while it uses them: the writer while a request is
// written, the reader from the start of an exchange until the connection
// is pooled again. Both come from pools of the Transport's, so an idle
// connection holds neither and a busy one no writer once its request is
// sent.
//
//	rp := &httputil.ReverseProxy{
//		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
//		Transport: &h1.Transport{ResponseHeaderTimeout: 30 * time.Second},
//	}
//
// What it does like http.Transport: keep-alive pools per scheme and host
// with per-host and total idle limits and an idle timeout; dial and TLS
// handshake timeouts; a response header timeout; Expect: 100-continue;
// 1xx responses reported through httptrace.ClientTrace.Got1xxResponse;
// 101 Switching Protocols with a writable Response.Body; request and
// response trailers; Connection: close from either side; a bodiless
// request retried once on a fresh connection when a pooled one turns out
// to have been closed by the upstream before it answered anything; the
// request's context cancelling the exchange at any point.
//
// What it does not do: proxies (HTTP_PROXY is never consulted), HTTP/2,
// compression (no Accept-Encoding is added and nothing is decompressed),
// Request.GetBody rewinding, alternate protocols.
package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// Transport is an HTTP/1.1 RoundTripper with a connection pool. Its zero
// value is usable. Fields must be set before the first RoundTrip and not
// changed afterwards; a Transport must not be copied after first use. It
// is safe for concurrent use.
type Transport struct {
	// Dial opens a connection to addr ("host:port") over network "tcp".
	// nil: a net.Dialer with a 30s TCP keep-alive. Whatever Dial returns
	// as an error reaches RoundTrip's caller unchanged (possibly wrapped
	// with %w), so Dial can mark its errors, say as "nothing was sent".
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// DialTimeout bounds each call to Dial (through its context).
	// 0: no bound other than the request's context.
	DialTimeout time.Duration

	// TLSClientConfig configures connections to https URLs. nil: the
	// zero tls.Config. ServerName, when empty, is the URL's host; the
	// only protocol offered by ALPN is http/1.1.
	TLSClientConfig *tls.Config

	// TLSHandshakeTimeout bounds the TLS handshake. 0: no bound other
	// than the request's context.
	TLSHandshakeTimeout time.Duration

	// ResponseHeaderTimeout bounds the wait for the response head (and any
	// 1xx responses before it) once the whole request, body included, was
	// written, as http.Transport's does: a long upload is not cut by it.
	// 0: no bound. An expiry is an error whose Timeout() is true.
	ResponseHeaderTimeout time.Duration

	// ExpectContinueTimeout is how long a request with "Expect:
	// 100-continue" and a body waits for the upstream's 100 Continue
	// before it sends the body anyway. 0: the body is sent at once.
	ExpectContinueTimeout time.Duration

	// IdleConnTimeout closes connections idle in the pool for longer.
	// 0: no limit.
	IdleConnTimeout time.Duration

	// MaxIdleConns limits idle connections in total; a connection that
	// would exceed it is closed rather than pooled. 0: no limit.
	MaxIdleConns int

	// MaxIdleConnsPerHost limits idle connections per scheme and host.
	// 0: http.DefaultMaxIdleConnsPerHost (2); negative: nothing is pooled.
	MaxIdleConnsPerHost int

	// MaxResponseHeaderBytes limits the bytes of a response head,
	// counting 1xx heads not handed to a Got1xxResponse hook. 0: 1 MiB.
	MaxResponseHeaderBytes int64

	// ReadBufferSize and WriteBufferSize size each connection's buffers.
	// 0: 4 KiB.
	ReadBufferSize, WriteBufferSize int

	pool pool

	// readers and writers hold the buffers of connections not using them
	// (see getWriter, getReader).
	readers, writers sync.Pool
}

// timeoutError is a net.Error that timed out.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

var (
	errHeaderTimeout    error = &timeoutError{"h1: timeout awaiting response headers"}
	errHandshakeTimeout       = &timeoutError{"h1: TLS handshake timeout"}
	errHeaderTooLarge         = errors.New("h1: response headers exceed MaxResponseHeaderBytes")
	errBodyClosed             = errors.New("h1: read on closed response body")
	errConcurrentRead         = errors.New("h1: concurrent reads of a response body")
	errBodyNotSent            = errors.New("h1: request body not sent: the upstream answered without 100 Continue")
	errTooMany1xx             = errors.New("h1: too many 1xx responses")
)

const (
	defaultMaxHeaderBytes = 1 << 20
	defaultBufferSize     = 4 << 10
	// A response body closed before its EOF is read on for at most this
	// many bytes and this long, so that its connection can be reused;
	// past either bound the connection is closed instead.
	drainBytes   = 64 << 10
	drainTimeout = 50 * time.Millisecond
	// max1xx bounds 1xx responses not handed to a Got1xxResponse hook.
	max1xx = 5
)

// RoundTrip sends req over a pooled or new connection and returns the
// response once its head is read. Response.Body reads from the connection;
// the connection returns to the pool when the body reaches EOF, the
// response does not close the connection, and the request body was fully
// written. Closing the body earlier drains a little of it (64 KiB, 50 ms)
// and closes the connection if that does not reach EOF. A 101 response's
// Body is an io.ReadWriteCloser over the connection, which then belongs to
// the caller.
//
// The request body, if any, is written by a goroutine of its own while the
// response is read, and closed when written (possibly after RoundTrip has
// returned). Errors from the request's context are returned as they are
// (context.Canceled, context.DeadlineExceeded); the response header
// timeout is a net.Error whose Timeout() is true.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var hd head
	if err := validate(req, &hd); err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	key := connKey{tls: req.URL.Scheme == "https", host: req.URL.Host}
	fresh := false
	for {
		pc, err := t.getConn(ctx, key, fresh)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		res, err := pc.roundTrip(req, &hd)
		if err == nil {
			return res, nil
		}
		if rerr, ok := err.(retryError); ok {
			fresh = true
			if ctx.Err() == nil {
				continue
			}
			err = rerr.err
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
}

// CloseIdleConnections closes every idle connection. Connections in use
// are not affected; they are pooled again when their exchange ends.
func (t *Transport) CloseIdleConnections() { t.pool.closeAll() }

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

func (t *Transport) maxHeaderBytes() int64 {
	if t.MaxResponseHeaderBytes > 0 {
		return t.MaxResponseHeaderBytes
	}
	return defaultMaxHeaderBytes
}

// getConn returns an idle connection for key, or dials one; fresh skips
// the pool.
func (t *Transport) getConn(ctx context.Context, key connKey, fresh bool) (*persistConn, error) {
	if !fresh {
		for {
			pc := t.pool.get(key, t.IdleConnTimeout)
			if pc == nil {
				break
			}
			if pc.alive() {
				return pc, nil
			}
			pc.close()
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.dial(ctx, key)
}

var _ http.RoundTripper = (*Transport)(nil)

// traceOf returns the request's client trace, if any.
func traceOf(req *http.Request) *httptrace.ClientTrace {
	return httptrace.ContextClientTrace(req.Context())
}
