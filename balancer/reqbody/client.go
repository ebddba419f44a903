// Package reqbody reads request bodies for the proxy: the prefix a key
// source reads, held to the process's memory account, the client-body
// timeout on every read, the trailers a body may carry, and the body the
// upstreams read (Tracked).
package reqbody

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlb/ringlb/internal/mono"
)

// A request body is read from the client by two readers in turn: the key
// scan (Prefix, on the handler's goroutine, while the request is
// routed) and the upstream's transport (through Tracked, on a
// goroutine of its own, which may outlive the handler). Both read it
// through its ClientBody, which holds each read to timeouts.client_body
// and notes when a read waits on the client, so that an upstream that
// gives up on a body the client holds back is not blamed for it
// (stalled).

// ErrClientTimeout ends a read of a request body that waited longer
// than timeouts.client_body for the client.
var ErrClientTimeout = &clientTimeoutError{}

type clientTimeoutError struct{}

func (*clientTimeoutError) Error() string {
	return "request body silent for longer than timeouts.client_body"
}
func (*clientTimeoutError) Timeout() bool { return true }

// MinStall is the least time a read of the client's body must have
// waited, when an upstream's connection ends under it, for the end to be
// put down to the client. An upstream's own body timeout is seconds
// (nginx's client_body_timeout is 60 s by default, Apache's
// RequestReadTimeout 20 s); a client that is sending leaves gaps of
// milliseconds, so a crash while it sends is still the upstream's.
const MinStall = 250 * time.Millisecond

// ClientBody is the client's request body as ringlb reads it. Each read
// may wait at most d for the client (0: no limit): a read that waits
// longer sets the read deadline of the client's connection (HTTP/1.1)
// or stream (HTTP/2) in the past, which ends it, and the body then
// fails with ErrClientTimeout: the request gets 408 and its upstream
// request is cut. Only time spent in a read counts, not time the
// transport spends writing to the upstream.
type ClientBody struct {
	rc io.ReadCloser
	// w is the server's writer for the request, through which a read is
	// cut.
	w http.ResponseWriter
	// watch times the reads (nil when d is 0). It is set before any
	// read and never changes.
	watch *bodyWatch

	since    atomic.Int64 // mono.Now() when the read in progress began; 0: none
	timedOut atomic.Bool
	ended    atomic.Bool // a read returned an error (io.EOF at the end): no read will wait again
}

// Init makes c the reader of the server's body rc for the request that
// w answers, timed to d (0: not timed).
func (c *ClientBody) Init(rc io.ReadCloser, w http.ResponseWriter, r *http.Request, d time.Duration) {
	c.rc, c.w = rc, w
	if d > 0 {
		bw, _ := bodyWatches.Get().(*bodyWatch)
		if bw == nil {
			bw = &bodyWatch{}
			bw.t = time.AfterFunc(time.Hour, bw.fire)
			bw.t.Stop()
		}
		bw.c, bw.d, bw.h2 = c, d, r.ProtoMajor == 2
		c.watch = bw
	}
}

func (c *ClientBody) Read(p []byte) (int, error) {
	if c.timedOut.Load() {
		return 0, ErrClientTimeout
	}
	c.since.Store(int64(mono.Now()))
	bw := c.watch
	timed := bw != nil && bw.arm()
	n, err := c.rc.Read(p)
	if timed {
		bw.disarm()
	}
	c.since.Store(0)
	if err != nil {
		c.ended.Store(true)
		if c.timedOut.Load() {
			err = ErrClientTimeout
		}
	}
	return n, err
}

// Close closes the server's body; ringlb's transports never reach it
// (Tracked ignores Close).
func (c *ClientBody) Close() error { return c.rc.Close() }

// Stalled reports whether a read of the body has been waiting on the
// client for at least MinStall: an upstream whose connection ends now
// gave up on a body the client holds back (its own body timeout), which
// is not its fault.
func (c *ClientBody) Stalled() bool {
	s := c.since.Load()
	return s != 0 && mono.Now()-time.Duration(s) >= MinStall
}

// cut ends the read in progress, and every later one: the read deadline
// of the client's connection or stream is set in the past. Over
// HTTP/1.1 the server then closes the connection once the request is
// answered; over HTTP/2 only the stream ends. The caller holds the
// handler (or the watch's lock while it is attached, see bodyWatch).
func (c *ClientBody) cut() {
	_ = http.NewResponseController(c.w).SetReadDeadline(time.Unix(1, 0))
}

// Finish detaches the watch once the handler is done with the request;
// sent says an upstream's transport was given the body, which it may
// still be reading.
func (c *ClientBody) Finish(sent bool) {
	if bw := c.watch; bw != nil {
		bw.finish(sent && !c.ended.Load())
	}
}

// bodyWatch is the timer of a ClientBody's reads. It is armed while a
// read waits and, when it goes off, cuts the read (ClientBody.cut) under
// its lock, which finish takes to detach it from the request: over
// HTTP/2 the server's writer may not be touched once the handler has
// returned. Watches are pooled, so a request allocates none; one that
// went off, or that a read may still use, is dropped, since its timer's
// function may still run.
type bodyWatch struct {
	t  *time.Timer
	d  time.Duration // timeouts.client_body
	h2 bool          // the request came over HTTP/2: see finish

	mu      sync.Mutex
	c       *ClientBody   // the body whose reads it cuts; nil once detached
	reading bool          // a read is timed now
	due     time.Duration // mono.Now() when the timed read is due to be cut
	fired   bool          // the timer went off: it is not pooled again
}

var bodyWatches sync.Pool

// arm starts timing a read; false when the watch is detached.
func (bw *bodyWatch) arm() bool {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	if bw.c == nil {
		return false
	}
	bw.reading, bw.due = true, mono.Now()+bw.d
	bw.t.Reset(bw.d)
	return true
}

// disarm stops timing the read that arm started.
func (bw *bodyWatch) disarm() {
	bw.mu.Lock()
	bw.reading = false
	if !bw.t.Stop() {
		bw.fired = true
	}
	bw.mu.Unlock()
}

func (bw *bodyWatch) fire() {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	// A timer that went off just as its read ended may run while the
	// next read is timed: that one is not due yet.
	if c := bw.c; c != nil && bw.reading && mono.Now() >= bw.due {
		c.timedOut.Store(true)
		c.cut()
	}
}

// finish detaches the watch from c, whose handler is returning; reading
// says the transport may still read c. Over HTTP/1.1 such a read keeps
// the watch: the server waits for it to end before it goes on with the
// connection, so cutting it through the server's writer stays sound,
// and it is what frees a connection whose client stalled after the
// upstream answered. Over HTTP/2 the server ends the stream when the
// handler returns, which ends the read; the writer is gone.
func (bw *bodyWatch) finish(reading bool) {
	if reading && !bw.h2 {
		return
	}
	bw.mu.Lock()
	bw.c = nil
	idle := !bw.reading && !bw.fired && !reading
	bw.mu.Unlock()
	if idle {
		bodyWatches.Put(bw)
	}
}

// TimedOut says a read waited longer than the timeout and was cut.
func (c *ClientBody) TimedOut() bool { return c.timedOut.Load() }

// Cut ends the read in progress, and every later one (see cut).
func (c *ClientBody) Cut() { c.cut() }
