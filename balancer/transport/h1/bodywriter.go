package h1

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// The request body's writer: a request with a body is written on a
// goroutine of its own while the response is read, waiting first for 100
// Continue when the request expects it.

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

// newBodyWriter returns the writer of req's body for exchange e.
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

// run writes the request and its body, then finishes the exchange's
// write side.
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
