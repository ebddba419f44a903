package balancer

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlb/ringlb/internal/mono"
	"github.com/ringlb/ringlb/internal/sendlimit"
)

// responseWriter notes the status sent to the client and the error of
// the current attempt, and passes Flush and Hijack through. It also
// times the writes to the client, so that a response that breaks off
// mid-body can be put down to the side that held it up (clientBound).
type responseWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	err         error

	// onHead, when set, is called once with the final status as the head
	// is written; attempt sets it for a half-open trial, and trialSettled
	// records that it ran.
	onHead       func(code int)
	trialSettled bool
	// setCookie, when not empty, is a Set-Cookie value added to the final
	// head only: a 1xx sends the header map and ReverseProxy then clears
	// it, so anything put there before proxying would miss the response.
	setCookie string
	// holdCookie is the hold cookie's Set-Cookie value for the current
	// attempt, added to the final head the same way; "" for none.
	holdCookie string
	// retryStatus says that the current attempt fails on a status in
	// retry_statuses (statusError) rather than passing it on.
	retryStatus bool
	// no1xx drops informational responses: the client speaks HTTP/1.0,
	// which has none (RFC 9110 section 15.2).
	no1xx bool
	// continued drops a 100 Continue: the server sent one already, when
	// the body was read for the key.
	continued bool
	// upTunnel says the current attempt became a tunnel, counted in
	// up.tunnels until the attempt ends.
	upTunnel bool
	// up is the current attempt's upstream. Its all field (the
	// Balancer's tunnels) tracks the connection once Hijack hands it
	// over; tunnel is that connection, removed from there when ServeHTTP
	// returns. (Reached through up, so that responseWriter, which every
	// request uses and recycle clears, does not grow by a pointer.)
	up     *upstream
	tunnel net.Conn

	headAt     time.Duration // when the final head was written (mono; 0: not yet)
	clientWait time.Duration // time spent in writes and flushes to the client
	clientErr  bool          // a write or flush to the client failed

	// send is limits.send (0: none); watch times each write and flush
	// against it, from the first one on; sendFired says it went off, and
	// sending that a write or flush is being timed (its timer is set).
	send      time.Duration
	watch     *sendWatch
	sendFired bool
	sending   bool

	// bytesOut counts the response body bytes written to the client;
	// requestID[0], when set, goes on the final head unless the upstream
	// set the header (requestIDHeader) itself (see requestID), under
	// requestIDKey: the canonical name, or over HTTP/2 the lower-case one
	// HTTP/2 sends, which its server then need not make for every
	// response.
	bytesOut        int64
	requestID       [1]string
	requestIDHeader string
	requestIDKey    string
}

// errSendTimeout ends a write to the client that made no progress for
// limits.send.
var errSendTimeout = &sendTimeoutError{}

type sendTimeoutError struct{}

func (*sendTimeoutError) Error() string {
	return "client accepted no data for longer than limits.send"
}

func (*sendTimeoutError) Timeout() bool { return true }

// sendWatch is the timer that cuts a write to the client blocked for
// longer than limits.send. When it goes off it sets the client's write
// deadline in the past: over HTTP/1.1 the blocked write on the connection
// returns at once, over HTTP/2 the stream is reset (a stream waiting on
// flow control blocks no socket write, so only this ends it). Watches
// are pooled, so a request allocates none; one that went off is dropped,
// since its timer's function may still be running.
type sendWatch struct {
	t  *time.Timer
	rw atomic.Pointer[responseWriter]
}

var sendWatches sync.Pool

func (sw *sendWatch) fire() {
	if rw := sw.rw.Load(); rw != nil {
		_ = http.NewResponseController(rw.ResponseWriter).SetWriteDeadline(time.Unix(1, 0))
	}
}

// sendStart starts timing a write or flush to the client.
func (w *responseWriter) sendStart() {
	if w.send <= 0 || w.sendFired {
		return
	}
	sw := w.watch
	if sw == nil {
		sw, _ = sendWatches.Get().(*sendWatch)
		if sw == nil {
			sw = &sendWatch{}
			sw.t = time.AfterFunc(time.Hour, sw.fire)
			sw.t.Stop()
		}
		sw.rw.Store(w)
		w.watch = sw
	}
	sw.t.Reset(w.send)
	w.sending = true
}

// sendEnd stops timing; err is the write's, replaced by errSendTimeout
// when the watch went off (the write, if it returned no error, ended just
// as the deadline was set: the next one fails anyway).
func (w *responseWriter) sendEnd(err error) error {
	if sw := w.watch; sw != nil && !w.sendFired && !sw.t.Stop() {
		w.sendFired = true
	}
	w.sending = false
	if w.sendFired {
		return errSendTimeout
	}
	return err
}

// sendRelease gives the watch back once the request is over.
func (w *responseWriter) sendRelease() {
	sw := w.watch
	if sw == nil {
		return
	}
	w.watch = nil
	if !w.sendFired {
		sw.rw.Store(nil)
		sendWatches.Put(sw)
	}
}

// responseWriters holds responseWriters of finished requests for new
// ones: the largest object ringlb allocates for every request, and one
// that lives no longer than its ServeHTTP.
var responseWriters sync.Pool

// newResponseWriter returns a cleared responseWriter for w.
func newResponseWriter(w http.ResponseWriter) *responseWriter {
	rw, _ := responseWriters.Get().(*responseWriter)
	if rw == nil {
		rw = new(responseWriter)
	}
	rw.ResponseWriter = w
	return rw
}

// recycle gives w back for another request once ServeHTTP is done with
// it, unless something may still reach it: a send watch that went off
// or is still set (its timer's function reads w), or a tunnel.
// Everything else that holds w (ReverseProxy's writers, its flush timer
// and its 1xx callback, a retry's request context) is done with it when
// ServeHTTP returns, and the servers copy the response's header map when
// the head is written; the request id and the request's value for it
// are allocated apart from w (madeID).
func (w *responseWriter) recycle() {
	if w.sendFired || w.sending || w.tunnel != nil {
		return
	}
	*w = responseWriter{}
	responseWriters.Put(w)
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
			if !w.no1xx && !(code == http.StatusContinue && w.continued) {
				w.ResponseWriter.WriteHeader(code) // informational: more to come
			}
			return
		}
		w.head(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

// head records the final status, before it is written, and adds what
// belongs on the final head.
func (w *responseWriter) head(code int) {
	if w.setCookie != "" {
		w.Header().Add("Set-Cookie", w.setCookie)
	}
	if w.holdCookie != "" {
		w.Header().Add("Set-Cookie", w.holdCookie)
	}
	if w.requestID[0] != "" {
		if h := w.Header(); len(h[w.requestIDHeader]) == 0 {
			h[w.requestIDKey] = w.requestID[:1:1] // cap 1: an append elsewhere copies
		}
	}
	w.status, w.wroteHeader = code, true
	w.headAt = mono.Now()
	if f := w.onHead; f != nil {
		w.onHead = nil
		f(code)
	}
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.head(http.StatusOK)
	}
	t := mono.Now()
	w.sendStart()
	n, err := w.ResponseWriter.Write(p)
	w.bytesOut += int64(n)
	err = w.sendEnd(err)
	w.clientWait += mono.Now() - t
	if err != nil {
		w.clientErr = true
	}
	return n, err
}

// FlushError flushes buffered data to the client (http.ResponseController
// and ReverseProxy's streaming use it).
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.head(http.StatusOK)
	}
	t := mono.Now()
	w.sendStart()
	err := w.sendEnd(http.NewResponseController(w.ResponseWriter).Flush())
	w.clientWait += mono.Now() - t
	if err != nil {
		w.clientErr = true
	}
	return err
}

// minClientWait is the least time blocked on the client that can make a
// broken-off response the client's doing; below it, writes merely took
// their usual microseconds.
const minClientWait = 10 * time.Millisecond

// clientBound reports whether a response that broke off mid-body is put
// down to the client rather than the upstream: a write to the client
// failed, or ringlb spent at least half of the time since the response
// head (and at least minClientWait) blocked writing to the client. Then
// the client, not the upstream, set the pace, and an upstream that gave
// up (a write deadline, a send timeout) gave up waiting on the client:
// ringlb could not read while it could not write. A client that reads
// slowly on purpose must not be able to eject an upstream.
func (w *responseWriter) clientBound() bool {
	if w.clientErr {
		return true
	}
	if w.headAt == 0 || w.clientWait < minClientWait {
		return false
	}
	return 2*w.clientWait >= mono.Now()-w.headAt
}

// Flush implements http.Flusher.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// Hijack takes over the connection, for protocol upgrades.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	// Counted before the server lets go of the connection, so a
	// Shutdown that sees no active connection also sees this tunnel.
	if w.up == nil { // only an attempt's proxy hijacks
		return nil, nil, http.ErrNotSupported
	}
	all := w.up.all
	all.opening()
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		all.remove(nil)
		return c, brw, err
	}
	sendlimit.Release(c) // limits.send does not apply to tunnels
	w.tunnel = c
	all.opened(c)
	w.up.tunnels.Add(1)
	w.upTunnel = true
	w.head(http.StatusSwitchingProtocols)
	// ReverseProxy copies from the connection itself: bytes the client
	// sent right behind its request, already in the server's buffer,
	// must come first.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		c = &bufferedConn{Conn: c, early: bytes.Clone(early)}
	}
	return c, brw, nil
}

// bufferedConn is a hijacked connection whose first reads return the
// bytes the server had already buffered.
type bufferedConn struct {
	net.Conn
	early []byte
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(p, c.early)
		c.early = c.early[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection when it can, as ReverseProxy does
// to the client's connection once the upstream is done sending.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
