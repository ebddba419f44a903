package h1

import (
	"bufio"
	"io"
	"net"
	"time"
)

// The response body: an exchange is the body its caller reads, and a 101
// response's body is the connection itself.

// Response body states (exchange.rs).
const (
	bodyIdle    int32 = iota // no Read in progress
	bodyReading              // a Read is in progress
	bodyEOF                  // Read saw the clean end
	bodyFailed               // Read failed with rerr
	bodyClosed               // Close was called while no Read was in progress
	bodyAborted              // Close was called during a Read: the connection is closed
)

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

// drain reads on to the body's end, at most drainBytes for drainTimeout,
// and reports whether it got there (and could clear the deadline).
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

// upgradeBody is a 101 response's body: the connection itself, after
// what is already buffered.
type upgradeBody struct {
	br   *bufio.Reader
	conn net.Conn
}

func (u *upgradeBody) Read(p []byte) (int, error)  { return u.br.Read(p) }
func (u *upgradeBody) Write(p []byte) (int, error) { return u.conn.Write(p) }
func (u *upgradeBody) Close() error                { return u.conn.Close() }
