package downstream

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

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
	rw atomic.Pointer[Writer]
}

var sendWatches sync.Pool

func (sw *sendWatch) fire() {
	if rw := sw.rw.Load(); rw != nil {
		_ = http.NewResponseController(rw.ResponseWriter).SetWriteDeadline(time.Unix(1, 0))
	}
}

// sendStart starts timing a write or flush to the client.
func (w *Writer) sendStart() {
	if w.Send <= 0 || w.sendFired {
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
	sw.t.Reset(w.Send)
	w.sending = true
}

// sendEnd stops timing; err is the write's, replaced by errSendTimeout
// when the watch went off (the write, if it returned no error, ended just
// as the deadline was set: the next one fails anyway).
func (w *Writer) sendEnd(err error) error {
	if sw := w.watch; sw != nil && !w.sendFired && !sw.t.Stop() {
		w.sendFired = true
	}
	w.sending = false
	if w.sendFired {
		return errSendTimeout
	}
	return err
}

// SendRelease gives the watch back once the request is over.
func (w *Writer) SendRelease() {
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
