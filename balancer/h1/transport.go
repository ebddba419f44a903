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
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
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

// validate checks req before anything is sent and gathers its header
// map into hd (a zero head) for writeRequest, in one pass over the map.
func validate(req *http.Request, hd *head) error {
	if req.URL == nil {
		return errors.New("h1: nil Request.URL")
	}
	if req.Header == nil {
		return errors.New("h1: nil Request.Header")
	}
	if s := req.URL.Scheme; s != "http" && s != "https" {
		return fmt.Errorf("h1: unsupported protocol scheme %q", s)
	}
	if req.URL.Host == "" {
		return errors.New("h1: no Host in request URL")
	}
	if req.Method != "" && !isToken(req.Method) {
		return &invalidRequestError{fmt.Errorf("h1: invalid method %q", req.Method)}
	}
	if err := gather(req.Header, hd); err != nil {
		return &invalidRequestError{err}
	}
	if len(req.Trailer) == 0 {
		return nil // (a range over an empty map is not free)
	}
	for k := range req.Trailer {
		if !isToken(k) {
			return &invalidRequestError{fmt.Errorf("h1: invalid trailer field name %q", k)}
		}
	}
	return nil
}

// ErrInvalidRequest is what the error of a request the Transport refused
// to send matches with errors.Is: its method, a field of its header or
// trailer, or its framing cannot be written as HTTP/1.1, by the
// Transport's own checks or by (*http.Request).Write's (a Trailer naming
// Content-Length, Transfer-Encoding or Trailer, say). Such a request was
// not sent: nothing of it reached the connection, or, when Write refused
// it after a buffer's worth of its head had gone out, the connection was
// closed under the part sent. Either way the upstream was asked nothing
// it could answer, and the request is the caller's to fix; it is not
// sent again on another connection.
var ErrInvalidRequest = errors.New("h1: invalid request, not sent")

// invalidRequestError is a refusal that matches ErrInvalidRequest; its
// text is the refusal's own.
type invalidRequestError struct{ err error }

func (e *invalidRequestError) Error() string        { return e.err.Error() }
func (e *invalidRequestError) Unwrap() error        { return e.err }
func (e *invalidRequestError) Is(target error) bool { return target == ErrInvalidRequest }

// gather checks the header map h and gathers it into hd (a zero head),
// for writeRequest: validate's one pass over the map. The error is that
// of the first field in the map's order with an invalid name or, failing
// that, an invalid value.
func gather(h http.Header, hd *head) error {
	for k, vv := range h {
		if !isToken(k) {
			return fmt.Errorf("h1: invalid header field name %q", k)
		}
		vbytes := 0
		for _, v := range vv {
			if !validHeaderValue(v) {
				return fmt.Errorf("h1: invalid header field value for %q", k)
			}
			vbytes += len(v)
		}
		hd.add(k, vv, vbytes)
	}
	return nil
}

// isToken says whether s is a non-empty RFC 9110 token. Strings of eight
// bytes or more are read eight bytes at a time while those are letters,
// digits and '-' (as most field names are), the last eight overlapping
// the eight before them; from the first eight that are not, byte by byte.
func isToken(s string) bool {
	n := len(s)
	if n < 8 {
		return n > 0 && tokenBytes(s)
	}
	for i := 0; i < n-8; i += 8 {
		if !alnumDash(word(s, i)) {
			return tokenBytes(s[i:])
		}
	}
	return alnumDash(word(s, n-8)) || tokenBytes(s[n-8:])
}

// tokenBytes says whether every byte of s is a tchar.
func tokenBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenTable[s[i]] {
			return false
		}
	}
	return true
}

// tokenTable says which bytes are RFC 9110 tchars.
var tokenTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// validHeaderValue rejects control characters other than horizontal tab,
// as http.Transport does. Values of eight bytes or more are read eight
// bytes at a time (the last eight overlapping the eight before them)
// while none is below 0x20 or 0x7f (DEL); from the first eight that
// hold one (a tab, say), byte by byte.
func validHeaderValue(v string) bool {
	n := len(v)
	if n < 8 {
		return !controlBytes(v)
	}
	for i := 0; i < n-8; i += 8 {
		if controlOrDEL(word(v, i)) {
			return !controlBytes(v[i:])
		}
	}
	return !controlOrDEL(word(v, n-8)) || !controlBytes(v[n-8:])
}

// controlBytes says whether s holds a byte below 0x20 other than tab, or
// 0x7f.
func controlBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return true
		}
	}
	return false
}

// Eight bytes in a uint64: each byte times ones, and the high bit of each.
const ones, highs = 0x0101010101010101, 0x8080808080808080

// word is s[i:i+8], the first byte lowest (one load where the CPU allows
// unaligned loads).
func word(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// controlOrDEL says whether a byte of x is below 0x20 or is 0x7f.
//
// (x-n*ones)&^x&highs, for n <= 0x80, is zero if and only if no byte of
// x is below n: with none below n no byte borrows, and each b-n has its
// high bit clear where b has it clear; the lowest byte below n wraps and
// has it set, its b clear. A byte 0x7f is a zero byte of x^(0x7f*ones),
// below 1.
func controlOrDEL(x uint64) bool {
	d := x ^ 0x7f*ones
	return ((x-0x20*ones)&^x|(d-ones)&^d)&highs != 0
}

// alnumDash says whether every byte of x is an ASCII letter, digit or
// '-'. With every byte below 0x80, b+k (k < 0x80) carries into no other
// byte, and its high bit says b >= 0x80-k: each range test is two such
// sums, per byte.
func alnumDash(x uint64) bool {
	if x&highs != 0 {
		return false
	}
	l := x | 0x20*ones // a letter's lower case
	alpha := (l + (0x80-'a')*ones) &^ (l + (0x7f-'z')*ones)
	digit := (x + (0x80-'0')*ones) &^ (x + (0x7f-'9')*ones)
	dash := ^((x ^ '-'*ones) + 0x7f*ones) // high bit set where b^'-' is 0
	return (alpha|digit|dash)&highs == highs
}

// hasToken says whether the comma-separated header value v holds token
// (ASCII case-insensitive).
func hasToken(v, token string) bool {
	for v != "" {
		var part string
		part, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(strings.TrimSpace(part), token) {
			return true
		}
	}
	return false
}

// dial opens a new connection for key.
func (t *Transport) dial(ctx context.Context, key connKey) (*persistConn, error) {
	addr := key.host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		port := "80"
		if key.tls {
			port = "443"
		}
		addr = net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"), port)
	}
	dctx := ctx
	if t.DialTimeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, t.DialTimeout)
		defer cancel()
	}
	var c net.Conn
	var err error
	if t.Dial != nil {
		c, err = t.Dial(dctx, "tcp", addr)
	} else {
		d := net.Dialer{KeepAlive: 30 * time.Second}
		c, err = d.DialContext(dctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	pc := t.newConn(c, key)
	if key.tls {
		if err := pc.handshake(ctx, t, addr); err != nil {
			c.Close()
			return nil, err
		}
	}
	return pc, nil
}

// handshake replaces pc's connection with a TLS client over it.
func (pc *persistConn) handshake(ctx context.Context, t *Transport, addr string) error {
	var cfg *tls.Config
	if t.TLSClientConfig != nil {
		cfg = t.TLSClientConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"http/1.1"}
	rec := &recordConn{Conn: pc.conn}
	tc := tls.Client(rec, cfg)
	hctx := ctx
	if t.TLSHandshakeTimeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, t.TLSHandshakeTimeout)
		defer cancel()
	}
	if err := tc.HandshakeContext(hctx); err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return errHandshakeTimeout
		}
		return err
	}
	st := tc.ConnectionState()
	if p := st.NegotiatedProtocol; p != "" && p != "http/1.1" {
		return fmt.Errorf("h1: upstream negotiated protocol %q", p)
	}
	pc.conn = tc
	pc.cr.c = tc
	pc.cw.c = tc
	pc.tc, pc.rec = tc, rec // pc.raw stays the socket's: the idle peek still looks at it
	pc.tls = &st
	return nil
}

// newConn wraps c for the pool.
func (t *Transport) newConn(c net.Conn, key connKey) *persistConn {
	pc := &persistConn{t: t, key: key, conn: c}
	pc.cr.c = c
	pc.cw.c = c
	pc.abort = pc.close
	pc.initPeek()
	return pc
}

// getWriter returns a write buffer over pc's connection, from the pool
// when it has one. Whoever gets it gives it back with putWriter once the
// request is written and flushed (or failed), and uses it no more.
func (pc *persistConn) getWriter() *bufio.Writer {
	if bw, _ := pc.t.writers.Get().(*bufio.Writer); bw != nil {
		bw.Reset(&pc.cw)
		return bw
	}
	return bufio.NewWriterSize(&pc.cw, bufferSize(pc.t.WriteBufferSize))
}

// putWriter gives a write buffer back to the pool. What it may still
// hold (after a failed write) is dropped.
func (pc *persistConn) putWriter(bw *bufio.Writer) {
	bw.Reset(nil) // holds no connection while pooled
	pc.t.writers.Put(bw)
}

// takeReader gives pc a read buffer, from the pool when it has one, if it
// has none: a new connection, or one taken from the pool (which gave its
// buffer back in pool.put).
func (pc *persistConn) takeReader() {
	if pc.br != nil {
		return
	}
	if br, _ := pc.t.readers.Get().(*bufio.Reader); br != nil {
		br.Reset(&pc.cr)
		pc.br = br
		return
	}
	pc.br = bufio.NewReaderSize(&pc.cr, bufferSize(pc.t.ReadBufferSize))
}

// bufferSize is a configured buffer size, or defaultBufferSize for 0.
func bufferSize(n int) int {
	if n <= 0 {
		return defaultBufferSize
	}
	return n
}

// releaseReader gives pc's read buffer back to the pool as pc goes idle.
// Only an empty buffer is given back: pool.put closes a connection with
// bytes buffered instead of pooling it.
func (pc *persistConn) releaseReader() {
	br := pc.br
	if br == nil || br.Buffered() > 0 {
		return
	}
	pc.br = nil
	br.Reset(nil)
	pc.t.readers.Put(br)
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
