package transport

import (
	"io"
	"sync/atomic"
	"time"
)

// errReadTimeout ends a read of an upstream's response body that waited
// longer than timeouts.read.
var errReadTimeout = &readTimeoutError{}

type readTimeoutError struct{}

func (*readTimeoutError) Error() string {
	return "upstream response body silent for longer than timeouts.read"
}
func (*readTimeoutError) Timeout() bool { return true }

func (*readTimeoutError) Temporary() bool { return false }

// silenceBody is an upstream response body each of whose reads may wait
// at most d for data. A read that waits longer closes the body, which
// ends it (and the connection) with errReadTimeout. Only time spent in a
// read counts: time ringlb spends writing to the client does not. A read
// that cannot wait (the body says so: readier) is not timed, which spares
// the common response whose body came in with its head a timer
// altogether.
type silenceBody struct {
	rc      io.ReadCloser
	ready   readier // rc, when it can tell; nil otherwise
	d       time.Duration
	timer   *time.Timer
	expired atomic.Bool
}

// readier is a response body that knows when its next Read cannot wait
// on the connection (transport/h1's bodies).
type readier interface{ Ready() bool }

// Whole reports whether body says that all of it arrived with the head
// (transport/h1's bodies can): no read of it can wait, so timeouts.read
// need not wrap it (NewSilenceBody).
func Whole(body io.ReadCloser) bool {
	w, ok := body.(interface{ Whole() bool })
	return ok && w.Whole()
}

// NewSilenceBody wraps an upstream's response body rc so that each of its
// reads may wait at most d for data (timeouts.read); one that waits
// longer ends the body, and its connection, with a timeout error.
func NewSilenceBody(rc io.ReadCloser, d time.Duration) io.ReadCloser {
	b := &silenceBody{rc: rc, d: d}
	b.ready, _ = rc.(readier)
	return b
}

func (b *silenceBody) Read(p []byte) (int, error) {
	timed := b.ready == nil || !b.ready.Ready()
	if timed {
		if b.timer == nil {
			b.timer = time.AfterFunc(b.d, b.expire)
		} else {
			b.timer.Reset(b.d)
		}
	}
	n, err := b.rc.Read(p)
	if timed {
		b.timer.Stop()
	}
	if err != nil && b.expired.Load() {
		err = errReadTimeout
	}
	return n, err
}

func (b *silenceBody) expire() {
	b.expired.Store(true)
	b.rc.Close() // the transport closes the connection: the read ends
}

func (b *silenceBody) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	return b.rc.Close()
}
