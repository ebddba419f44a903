// Package downstream is the client side of an exchange: the
// ResponseWriter a request's attempts write through, with its send
// timeouts and its tunnels, and the plain answers ringlb gives itself.
package downstream

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/ringlb/ringlb/internal/mono"
)

// Writer notes the status sent to the client and the error of the
// current attempt, and passes Flush and Hijack through. It also times the
// writes to the client, so that a response that breaks off mid-body can
// be put down to the side that held it up (ClientBound). The fields the
// Balancer sets for a request or an attempt are exported; what the
// Writer records, it reports through methods.
type Writer struct {
	http.ResponseWriter
	// Status is the final status sent to the client (0: none yet); 499
	// when the client left before an answer.
	Status      int
	wroteHeader bool
	// Err is the current attempt's error, left by its proxy's
	// ErrorHandler (RecordError); nil when it succeeded.
	Err error

	// OnHead, when set, is called once with the final status as the head
	// is written; the Balancer sets it for a half-open trial, and
	// TrialSettled records that it ran.
	OnHead       func(code int)
	TrialSettled bool
	// Cookie, when not empty, is a Set-Cookie value added to the final
	// head only: a 1xx sends the header map and ReverseProxy then clears
	// it, so anything put there before proxying would miss the response.
	Cookie string
	// HoldCookie is the hold cookie's Set-Cookie value for the current
	// attempt, added to the final head the same way; "" for none.
	HoldCookie string
	// RetryStatus says that the current attempt fails on a status in
	// retry_statuses rather than passing it on.
	RetryStatus bool
	// No1xx drops informational responses: the client speaks HTTP/1.0,
	// which has none (RFC 9110 section 15.2).
	No1xx bool
	// Continued drops a 100 Continue: the server sent one already, when
	// the body was read for the key.
	Continued bool
	// upTunnel says the current attempt became a tunnel, counted in Up
	// until the attempt ends (EndAttempt).
	upTunnel bool
	// Up is the current attempt's upstream's count of tunnels. Its All
	// field (the Balancer's tunnels) tracks the connection once Hijack
	// hands it over; tunnel is that connection, removed from there when
	// the request is over. (Reached through Up, so that Writer, which
	// every request uses and Recycle clears, does not grow by a
	// pointer.)
	Up     *TunnelCount
	tunnel net.Conn

	headAt     time.Duration // when the final head was written (mono; 0: not yet)
	clientWait time.Duration // time spent in writes and flushes to the client
	clientErr  bool          // a write or flush to the client failed

	// Send is limits.send (0: none); watch times each write and flush
	// against it, from the first one on; sendFired says it went off, and
	// sending that a write or flush is being timed (its timer is set).
	Send      time.Duration
	watch     *sendWatch
	sendFired bool
	sending   bool

	// bytesOut counts the response body bytes written to the client;
	// requestID[0], when set, goes on the final head unless the upstream
	// set the header (requestIDHeader) itself (see SetRequestID), under
	// requestIDKey: the canonical name, or over HTTP/2 the lower-case one
	// HTTP/2 sends, which its server then need not make for every
	// response.
	bytesOut        int64
	requestID       [1]string
	requestIDHeader string
	requestIDKey    string
}

// writers holds Writers of finished requests for new ones: the largest
// object ringlb allocates for every request, and one that lives no
// longer than its ServeHTTP.
var writers sync.Pool

// NewWriter returns a cleared Writer for w.
func NewWriter(w http.ResponseWriter) *Writer {
	rw, _ := writers.Get().(*Writer)
	if rw == nil {
		rw = new(Writer)
	}
	rw.ResponseWriter = w
	return rw
}

// Recycle gives w back for another request once ServeHTTP is done with
// it, unless something may still reach it: a send watch that went off
// or is still set (its timer's function reads w), or a tunnel.
// Everything else that holds w (ReverseProxy's writers, its flush timer
// and its 1xx callback, a retry's request context) is done with it when
// ServeHTTP returns, and the servers copy the response's header map when
// the head is written; the request id and the request's value for it
// are allocated apart from w (forward.RequestID).
func (w *Writer) Recycle() {
	if w.sendFired || w.sending || w.tunnel != nil {
		return
	}
	*w = Writer{}
	writers.Put(w)
}

// SetRequestID puts id on the final head under key (the canonical
// header, or the lower-case name HTTP/2 sends), unless the upstream set
// header itself. id must not alias memory of w's, which is reused
// (Recycle) while HTTP/2's header tables may keep the value.
func (w *Writer) SetRequestID(id, header, key string) {
	w.requestID[0] = id
	w.requestIDHeader, w.requestIDKey = header, key
}

// RequestID is the request's id as SetRequestID set it ("" for none).
func (w *Writer) RequestID() string { return w.requestID[0] }

// WroteHeader reports whether the final head was written.
func (w *Writer) WroteHeader() bool { return w.wroteHeader }

// HeadAt is when the final head was written, on the mono clock (0: not
// yet).
func (w *Writer) HeadAt() time.Duration { return w.headAt }

// BytesOut is the count of response body bytes written to the client.
func (w *Writer) BytesOut() int64 { return w.bytesOut }

// WriteHeader writes a head: an informational one passes unless the
// client cannot take it (No1xx, Continued), and the final one gets what
// belongs on it first.
func (w *Writer) WriteHeader(code int) {
	if !w.wroteHeader {
		if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
			if !w.No1xx && !(code == http.StatusContinue && w.Continued) {
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
func (w *Writer) head(code int) {
	if w.Cookie != "" {
		w.Header().Add("Set-Cookie", w.Cookie)
	}
	if w.HoldCookie != "" {
		w.Header().Add("Set-Cookie", w.HoldCookie)
	}
	if w.requestID[0] != "" {
		if h := w.Header(); len(h[w.requestIDHeader]) == 0 {
			h[w.requestIDKey] = w.requestID[:1:1] // cap 1: an append elsewhere copies
		}
	}
	w.Status, w.wroteHeader = code, true
	w.headAt = mono.Now()
	if f := w.OnHead; f != nil {
		w.OnHead = nil
		f(code)
	}
}

// Write writes body bytes to the client, timed against Send.
func (w *Writer) Write(p []byte) (int, error) {
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
func (w *Writer) FlushError() error {
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

// ClientBound reports whether a response that broke off mid-body is put
// down to the client rather than the upstream: a write to the client
// failed, or ringlb spent at least half of the time since the response
// head (and at least minClientWait) blocked writing to the client. Then
// the client, not the upstream, set the pace, and an upstream that gave
// up (a write deadline, a send timeout) gave up waiting on the client:
// ringlb could not read while it could not write. A client that reads
// slowly on purpose must not be able to eject an upstream.
func (w *Writer) ClientBound() bool {
	if w.clientErr {
		return true
	}
	if w.headAt == 0 || w.clientWait < minClientWait {
		return false
	}
	return 2*w.clientWait >= mono.Now()-w.headAt
}

// Flush implements http.Flusher.
func (w *Writer) Flush() { _ = w.FlushError() }

// Unwrap lets http.ResponseController reach the server's writer.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
