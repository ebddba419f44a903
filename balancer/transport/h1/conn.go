package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// persistConn is one upstream connection. It is used by one exchange at
// a time: taken from the pool (or dialled), then pooled or closed when
// the exchange ends.
type persistConn struct {
	t      *Transport
	key    connKey
	conn   net.Conn
	raw    syscall.RawConn // the socket (under TLS too), for the idle peek; nil when unavailable
	tls    *tls.ConnectionState
	tc     *tls.Conn   // conn, over TLS; nil for plain TCP
	rec    *recordConn // the socket under tc
	cr     connReader
	cw     connWriter
	br     *bufio.Reader // nil out of an exchange, as while pooled (see takeReader)
	abort  func()        // pc.close, bound once
	reused bool          // taken from the pool for the current exchange
	idleAt time.Time

	peekFn  func(fd uintptr) bool // pc.peek, bound once
	peekBuf [1]byte
	peekN   int
	peekErr error
}

// connReader counts the bytes read from the connection and, while a
// response head is read, limits them.
type connReader struct {
	c     net.Conn
	n     int64 // bytes read since the current exchange started
	limit int64
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.limit <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > r.limit {
		p = p[:r.limit]
	}
	n, err := r.c.Read(p)
	r.n += int64(n)
	r.limit -= int64(n)
	return n, err
}

// connWriter counts the bytes written to the connection and keeps the
// first error writing them: an error of (*http.Request).Write that is not
// this one (nor the request body's) is Write refusing the request.
type connWriter struct {
	c   net.Conn
	n   int64
	err error
}

func (w *connWriter) Write(p []byte) (int, error) {
	n, err := w.c.Write(p)
	w.n += int64(n)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

func (pc *persistConn) close() { pc.conn.Close() }

// exchange states, as bits: each side of an exchange sets its bit when
// done; whichever completes the pair pools or closes the connection.
const (
	readDone  = 1 << iota // the response was read to its end (or abandoned)
	writeDone             // the request was written (or abandoned)
	broken                // the connection must not be reused
)

// exchange is one request and its response on a connection. It is also
// the response body the caller reads.
type exchange struct {
	pc    *persistConn
	req   *http.Request
	res   *http.Response
	body  io.ReadCloser // from http.ReadResponse
	stop  func() bool   // stops the context's AfterFunc; nil if none
	state atomic.Uint32
	keep  bool // neither side asked to close the connection

	// rs is the body's state (bodyIdle etc.). Read and Close may be
	// called from different goroutines at once (a read timeout closes a
	// body another goroutine is reading): whoever moves rs out of
	// bodyIdle owns body, rerr and the read side's finish.
	rs   atomic.Int32
	rerr error // what Read returns in bodyFailed, set before rs

	// got counts the body bytes Read returned; ready says the next Read
	// cannot wait on the connection (see Ready). Both belong to the
	// reading goroutine: set when the body is handed out and by Read.
	got   int64
	ready bool
	whole bool // the whole body was buffered when it was handed out (see Whole)

	w *bodyWriter // nil for a bodiless request

	// The response header timeout, like http.Transport's, starts once the
	// whole request is written; with a body, that is on the writer's
	// goroutine, while the reader may already have the head. headMu
	// orders the two: the deadline is set only before the head is read.
	headMu   sync.Mutex
	headDone bool
}

// finish records that one side of the exchange is over; ok false means
// the connection must not be reused, closeNow that it must be closed
// without waiting for the other side.
func (e *exchange) finish(bit uint32, ok, closeNow bool) {
	if !ok {
		bit |= broken
	}
	s := e.state.Or(bit) | bit
	if s&(readDone|writeDone) != readDone|writeDone {
		if closeNow {
			e.pc.close()
		}
		return
	}
	if e.stop != nil && !e.stop() {
		s |= broken // the context fired: its AfterFunc closes the conn
	}
	// Both sides are over: neither touches the read buffer again.
	if s&broken != 0 || !e.keep {
		e.pc.close()
		e.pc.releaseReader()
		return
	}
	e.pc.t.pool.put(e.pc)
}

// roundTrip runs one exchange on pc, for req whose header map validate
// gathered into hd. An error of type retryError means the request may be
// sent again on a fresh connection.
func (pc *persistConn) roundTrip(req *http.Request, hd *head) (*http.Response, error) {
	ctx := req.Context()
	e := &exchange{pc: pc, req: req, keep: !req.Close && !hasToken(hd.connection, "close")}
	if ctx.Done() != nil {
		e.stop = context.AfterFunc(ctx, pc.abort)
	}
	pc.takeReader()
	pc.cr.n, pc.cw.n, pc.cw.err = 0, 0, nil
	pc.cr.limit = pc.t.maxHeaderBytes()
	trace := traceOf(req)

	hasBody := req.Body != nil && req.Body != http.NoBody
	if hasBody {
		e.w = newBodyWriter(e, req)
		go e.w.run()
	} else {
		bw := pc.getWriter()
		err := writeRequest(bw, req, hd)
		if err == nil {
			err = bw.Flush()
		}
		pc.putWriter(bw)
		if err != nil {
			e.finish(readDone|writeDone, false, true)
			if pc.cw.err == nil {
				// Write refused the request: it would refuse it again.
				return nil, &invalidRequestError{err}
			}
			if pc.reused && (pc.cw.n == 0 || replayable(req) || isClosed(err)) && ctx.Err() == nil {
				return nil, retryError{err}
			}
			return nil, err
		}
		e.state.Or(writeDone)
	}

	res, err := e.readHead(trace)
	if err != nil {
		e.finish(readDone, false, true)
		if hasBody && e.w.refused.Load() {
			// Write refused the request and the writer closed the
			// connection, which ended the read (with an EOF, over TLS,
			// when the upstream answered the close_notify first).
			<-e.w.done
			return nil, e.w.err
		}
		// On a reused connection, an end before any byte of a response
		// means the upstream closed it while idle and the request
		// crossed the close: the request is sent again on a fresh
		// connection when that cannot repeat anything the upstream
		// acted on (no body, or a body not read yet, as when waiting
		// for 100 Continue), and is otherwise failed with an error
		// that says so (ErrClosedIdle).
		idle := ctx.Err() == nil && pc.reused && pc.cr.n == 0 && !isTimeout(err)
		closed := idle && isClosed(err)
		if idle && !hasBody && (closed || replayable(req)) {
			return nil, retryError{err}
		}
		if hasBody && e.w.held.Load() {
			// The writer was waiting for 100 Continue: it is told not to
			// send and ends at once, leaving an unread body open.
			<-e.w.done
			if e.w.kept {
				if closed {
					return nil, retryError{err}
				}
				e.w.rc.Close()
			}
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if closed {
			return nil, &closedIdleError{err}
		}
		if e.w != nil && errors.Is(err, net.ErrClosed) {
			// Closed by the writer after the request body failed.
			<-e.w.done
			if e.w.err != nil {
				return nil, e.w.err
			}
		}
		return nil, err
	}
	res.TLS = pc.tls
	e.res = res
	e.keep = e.keep && !res.Close
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The connection now belongs to the caller.
		if e.stop != nil && !e.stop() {
			pc.close()
			return nil, ctx.Err()
		}
		res.Body = &upgradeBody{br: pc.br, conn: pc.conn}
		return res, nil
	}
	if res.Body == http.NoBody {
		e.finish(readDone, true, false)
		return res, nil
	}
	e.body = res.Body
	e.ready = e.readyNow()
	e.whole = len(res.TransferEncoding) == 0 && res.ContentLength >= 0 && int64(pc.br.Buffered()) >= res.ContentLength
	res.Body = e
	return res, nil
}

// readHead reads the response head, handling 1xx responses on the way.
func (e *exchange) readHead(trace *httptrace.ClientTrace) (*http.Response, error) {
	pc := e.pc
	if d := pc.t.ResponseHeaderTimeout; d > 0 {
		if e.w == nil {
			// The request is written: the wait starts now. With a body,
			// the writer starts it once the body is written.
			pc.conn.SetReadDeadline(time.Now().Add(d))
		}
		defer e.headRead()
	}
	n1xx := 0
	for {
		res, err := http.ReadResponse(pc.br, e.req)
		if err != nil {
			e.w.abandon()
			if ne, ok := err.(net.Error); ok && ne.Timeout() && pc.t.ResponseHeaderTimeout > 0 && e.req.Context().Err() == nil {
				return nil, errHeaderTimeout
			}
			return nil, err
		}
		code := res.StatusCode
		if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
			// The hook runs before the body writer is released: a proxy
			// forwarding this 100 to its client does so before its
			// server, seeing the body read, sends one of its own.
			if trace != nil && trace.Got1xxResponse != nil {
				if err := trace.Got1xxResponse(code, textproto.MIMEHeader(res.Header)); err != nil {
					e.w.abandon()
					return nil, err
				}
				pc.cr.limit = pc.t.maxHeaderBytes()
				n1xx = 0
			} else if n1xx++; n1xx > max1xx {
				e.w.abandon()
				return nil, errTooMany1xx
			}
			if code == http.StatusContinue && e.w.signal(true) && trace != nil && trace.Got100Continue != nil {
				trace.Got100Continue()
			}
			continue
		}
		// A final answer without 100 Continue: the body is sent if the
		// connection is kept, so that it stays in step, and not otherwise.
		e.w.signal(!res.Close && e.keep)
		pc.cr.limit = math.MaxInt64
		return res, nil
	}
}

// Response body states (exchange.rs).
const (
	bodyIdle    int32 = iota // no Read in progress
	bodyReading              // a Read is in progress
	bodyEOF                  // Read saw the clean end
	bodyFailed               // Read failed with rerr
	bodyClosed               // Close was called while no Read was in progress
	bodyAborted              // Close was called during a Read: the connection is closed
)

// headRead ends the response header timeout: the head was read (or
// could not be).
func (e *exchange) headRead() {
	e.headMu.Lock()
	e.headDone = true
	e.pc.conn.SetReadDeadline(time.Time{})
	e.headMu.Unlock()
}

// bodyWritten starts the response header timeout of a request with a
// body, once the body is written, unless the head was read already.
func (e *exchange) bodyWritten() {
	d := e.pc.t.ResponseHeaderTimeout
	if d <= 0 {
		return
	}
	e.headMu.Lock()
	if !e.headDone {
		e.pc.conn.SetReadDeadline(time.Now().Add(d))
	}
	e.headMu.Unlock()
}

// Read reads the response body. At its clean end the connection goes back
// to the pool (once the request body is written too).
func (e *exchange) Read(p []byte) (int, error) {
	if !e.rs.CompareAndSwap(bodyIdle, bodyReading) {
		switch e.rs.Load() {
		case bodyEOF:
			return 0, io.EOF
		case bodyFailed:
			return 0, e.rerr
		case bodyReading:
			return 0, errConcurrentRead
		}
		return 0, errBodyClosed
	}
	n, err := e.body.Read(p)
	e.got += int64(n)
	if err == nil {
		e.ready = e.readyNow()
		if !e.rs.CompareAndSwap(bodyReading, bodyIdle) {
			e.finish(readDone, false, true) // Close came meanwhile
		}
		return n, nil
	}
	if err == io.EOF {
		if e.w != nil {
			e.w.await()
		}
		if e.rs.CompareAndSwap(bodyReading, bodyEOF) {
			e.finish(readDone, true, false)
		} else {
			e.finish(readDone, false, true)
		}
		return n, io.EOF
	}
	if cerr := e.req.Context().Err(); cerr != nil {
		err = cerr
	}
	e.rerr = err
	if !e.rs.CompareAndSwap(bodyReading, bodyFailed) {
		err = errBodyClosed // the Close that came meanwhile ended the read
	}
	e.finish(readDone, false, true)
	return n, err
}

// Ready reports whether the next Read returns without waiting on the
// connection: the body is over, or it is framed by its length or by the
// connection's end (not chunked, whose framing may need more bytes) and
// bytes of it are buffered already, or all its Content-Length was read
// (the next Read says io.EOF). A caller that times its reads (ringlb's
// timeouts.read) need not time such a Read. Like Read, it is for the
// reading goroutine.
func (e *exchange) Ready() bool { return e.ready || e.rs.Load() > bodyReading }

// Whole reports whether the whole body (framed by its Content-Length)
// was in the connection's buffer when the response was handed out: then
// no Read of it can wait on the connection, and a caller need not time
// any.
func (e *exchange) Whole() bool { return e.whole }

// readyNow is Ready's answer for the body's current position; only the
// goroutine that reads the body may call it (it looks at the buffer).
func (e *exchange) readyNow() bool {
	res := e.res
	if len(res.TransferEncoding) > 0 {
		return false
	}
	return e.pc.br.Buffered() > 0 || (res.ContentLength >= 0 && e.got >= res.ContentLength)
}

// Close ends the response body. Before its end, up to drainBytes of what
// remains are read for at most drainTimeout; the connection is kept only
// if that reaches the end. Close may be called while another goroutine is
// in Read: the connection is then closed, which ends that Read with an
// error, and is not reused.
func (e *exchange) Close() error {
	for {
		switch s := e.rs.Load(); s {
		case bodyIdle:
			if !e.rs.CompareAndSwap(bodyIdle, bodyClosed) {
				continue
			}
			ok := e.keep && e.state.Load()&broken == 0 && e.req.Context().Err() == nil && e.drain()
			e.finish(readDone, ok, !ok)
			return nil
		case bodyReading:
			if !e.rs.CompareAndSwap(bodyReading, bodyAborted) {
				continue
			}
			e.pc.close() // the Read ends and finishes the exchange
			return nil
		case bodyEOF, bodyFailed:
			if !e.rs.CompareAndSwap(s, bodyClosed) {
				continue
			}
			return nil
		default:
			return nil
		}
	}
}

func (e *exchange) drain() bool {
	c := e.pc.conn
	if c.SetReadDeadline(time.Now().Add(drainTimeout)) != nil {
		return false
	}
	n, err := io.CopyN(io.Discard, e.body, drainBytes+1)
	if err != io.EOF || n > drainBytes {
		return false
	}
	return c.SetReadDeadline(time.Time{}) == nil
}

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

type closedIdleError struct{ err error }

func (e *closedIdleError) Error() string        { return ErrClosedIdle.Error() + ": " + e.err.Error() }
func (e *closedIdleError) Unwrap() error        { return e.err }
func (e *closedIdleError) Is(target error) bool { return target == ErrClosedIdle }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// upgradeBody is a 101 response's body: the connection itself, after
// what is already buffered.
type upgradeBody struct {
	br   *bufio.Reader
	conn net.Conn
}

func (u *upgradeBody) Read(p []byte) (int, error)  { return u.br.Read(p) }
func (u *upgradeBody) Write(p []byte) (int, error) { return u.conn.Write(p) }
func (u *upgradeBody) Close() error                { return u.conn.Close() }

// bodyWriter writes a request that has a body, on a goroutine of its own.
type bodyWriter struct {
	e    *exchange
	req  http.Request // a shallow copy of the request, Body replaced
	rc   io.ReadCloser
	cont chan bool     // Expect: 100-continue: whether to send; nil otherwise
	sent bool          // the reader has signalled cont (reader side only)
	wait bool          // the writer has yet to wait on cont (writer side only)
	done chan struct{} // closed when the write is over
	err  error         // the write's error, set before done is closed

	readErr error // from rc (writer side only)
	notSent bool  // the body was withheld after a final response
	touched bool  // rc was read from (writer side only)
	// kept: Close left rc open, as it was never read; read by the reader
	// only after done. held: the reader, failing while the writer waited
	// for 100 Continue, takes rc over if kept (to retry or close it);
	// otherwise the writer closes a kept rc itself.
	kept bool
	held atomic.Bool
	// refused: Write refused the request; set before the writer closes
	// the connection, so the reader, whose read that ends, returns err.
	refused atomic.Bool
}

// abandon tells a writer waiting for 100 Continue not to send, because
// the exchange failed: the reader then owns an unread body (see held).
// Safe on a nil writer.
func (w *bodyWriter) abandon() {
	if w != nil && w.cont != nil && !w.sent {
		w.held.Store(true)
	}
	w.signal(false)
}

func newBodyWriter(e *exchange, req *http.Request) *bodyWriter {
	w := &bodyWriter{e: e, req: *req, rc: req.Body, done: make(chan struct{})}
	w.req.Body = w
	if e.pc.t.ExpectContinueTimeout > 0 && hasToken(req.Header.Get("Expect"), "100-continue") {
		w.cont, w.wait = make(chan bool, 1), true
	}
	return w
}

// signal tells a writer waiting for 100 Continue whether to send the
// body; only the first call counts. It reports whether this call was the
// first. Safe on a nil writer (a bodiless request).
func (w *bodyWriter) signal(send bool) bool {
	if w == nil || w.cont == nil || w.sent {
		return false
	}
	w.sent = true
	w.cont <- send
	return true
}

func (w *bodyWriter) run() {
	pc := w.e.pc
	// The write buffer is this goroutine's until the request is written,
	// however long its body takes, and given back before the exchange can
	// pool the connection (finish), so the next exchange gets another.
	bw := pc.getWriter()
	err := w.req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	pc.putWriter(bw)
	refused := false
	switch {
	case w.notSent:
		err = nil
	case w.readErr != nil:
		err = w.readErr
	case err != nil && pc.cw.err == nil:
		// Neither the body nor the connection failed: Write refused the
		// request (see ErrInvalidRequest).
		err, refused = &invalidRequestError{err}, true
		w.refused.Store(true)
	}
	w.err = err
	if w.kept && !w.held.Load() {
		w.rc.Close()
	}
	w.e.bodyWritten()
	// A failed body read or a refused request leaves the request
	// unfinished: the upstream will not answer, so close now (the reader,
	// its read ended, returns w.err). A failed connection write leaves
	// the response to be read (the upstream may have answered already).
	w.e.finish(writeDone, err == nil && !w.notSent, w.readErr != nil || refused)
	close(w.done)
}

// writerGrace is how long the end of a response body waits for the
// request body's writer to finish, so that the connection is back in the
// pool when the caller sees EOF. An upstream normally answers after
// reading the whole body, so the writer is only returning from its last
// write; past this bound the writer pools the connection itself.
const writerGrace = 50 * time.Millisecond

// await waits up to writerGrace for the request body's writer.
func (w *bodyWriter) await() {
	select {
	case <-w.done:
		return
	default:
	}
	t := time.NewTimer(writerGrace)
	select {
	case <-w.done:
	case <-t.C:
	}
	t.Stop()
}

// Read reads the request body, first waiting for 100 Continue if asked to.
func (w *bodyWriter) Read(p []byte) (int, error) {
	if w.wait {
		w.wait = false
		t := time.NewTimer(w.e.pc.t.ExpectContinueTimeout)
		send := true
		select {
		case send = <-w.cont:
		case <-t.C:
		}
		t.Stop()
		if !send {
			w.notSent = true
			return 0, errBodyNotSent
		}
	}
	w.touched = true
	n, err := w.rc.Read(p)
	if err != nil && err != io.EOF {
		w.readErr = err
	}
	return n, err
}

// Close closes the request body, unless it was never read: then it stays
// whole, and open, for a retry (see held).
func (w *bodyWriter) Close() error {
	if !w.touched {
		w.kept = true
		return nil
	}
	return w.rc.Close()
}
