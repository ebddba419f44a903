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
	} else if err := e.writeBodiless(hd); err != nil {
		return nil, err
	}

	res, err := e.readHead(trace)
	if err != nil {
		e.finish(readDone, false, true)
		return nil, e.headFailed(err, hasBody)
	}
	return e.handOut(res)
}

// writeBodiless writes a request without a body on this goroutine. If that
// fails, the exchange is over, and the error says whether the request may
// be sent again (retryError) or was refused (invalidRequestError).
func (e *exchange) writeBodiless(hd *head) error {
	pc, req := e.pc, e.req
	bw := pc.getWriter()
	err := writeRequest(bw, req, hd)
	if err == nil {
		err = bw.Flush()
	}
	pc.putWriter(bw)
	if err == nil {
		e.state.Or(writeDone)
		return nil
	}
	e.finish(readDone|writeDone, false, true)
	if pc.cw.err == nil {
		// Write refused the request: it would refuse it again.
		return &invalidRequestError{err}
	}
	if pc.reused && (pc.cw.n == 0 || replayable(req) || isClosed(err)) && req.Context().Err() == nil {
		return retryError{err}
	}
	return err
}

// headFailed returns the error of an exchange whose response head could
// not be read (err), once the request body's writer, if any, has said
// what it knows: a retryError when the request may be sent again.
func (e *exchange) headFailed(err error, hasBody bool) error {
	pc, ctx := e.pc, e.req.Context()
	if hasBody && e.w.refused.Load() {
		// Write refused the request and the writer closed the
		// connection, which ended the read (with an EOF, over TLS,
		// when the upstream answered the close_notify first).
		<-e.w.done
		return e.w.err
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
	if idle && !hasBody && (closed || replayable(e.req)) {
		return retryError{err}
	}
	if hasBody && e.w.held.Load() {
		// The writer was waiting for 100 Continue: it is told not to
		// send and ends at once, leaving an unread body open.
		<-e.w.done
		if e.w.kept {
			if closed {
				return retryError{err}
			}
			e.w.rc.Close()
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if closed {
		return &closedIdleError{err}
	}
	if e.w != nil && errors.Is(err, net.ErrClosed) {
		// Closed by the writer after the request body failed.
		<-e.w.done
		if e.w.err != nil {
			return e.w.err
		}
	}
	return err
}

// handOut returns the response whose head was read: its body is the
// exchange, or the connection itself after a 101.
func (e *exchange) handOut(res *http.Response) (*http.Response, error) {
	pc := e.pc
	res.TLS = pc.tls
	e.res = res
	e.keep = e.keep && !res.Close
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The connection now belongs to the caller.
		if e.stop != nil && !e.stop() {
			pc.close()
			return nil, e.req.Context().Err()
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
