package reqbody

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ringlb/ringlb/balancer/transport"
)

// Tracked counts the request body bytes read, so a retry happens only
// when nothing was sent; notes whether reading the client's body failed
// (a malformed chunk, a connection closed short of Content-Length, a
// silence longer than timeouts.client_body), which is the client's fault
// and never the upstream's; and ignores Close, so an attempt's transport
// cannot close the body a retry still needs (net/http closes it after the
// handler returns). The transport reads it on its own goroutine, hence
// the atomics.
//
// It holds the body's other readers, in one allocation: the client's
// body as ringlb reads it (Client), and the prefix the key scan read
// (Prefix, for a JSON body when a key source reads bodies). It reads the
// prefix (viaPrefix) once the scan read from it, else Client.
type Tracked struct {
	n   atomic.Int64
	bad atomic.Bool
	// Stalled says the current attempt failed while a read of the body
	// had long waited on the client (ClientBody.Stalled): the upstream
	// gave up on a body the client held back. Set by the attempt.
	Stalled   bool
	viaPrefix bool
	// trailer is the request's trailer map, which the server fills as
	// the body ends, before the transport writes it: the fields that must
	// not be forwarded are dropped then (transport.DropBadTrailers).
	trailer http.Header
	// trailers keeps the declared trailers of a body that no key source
	// read (see TrailerGate).
	trailers TrailerGate

	Client ClientBody
	Prefix Prefix
}

// Track gives r's body (which it must have) its Tracked, each read of
// the client's body held to d (timeouts.client_body), and r the reader
// the key scan reads: the prefix when scan says it may scan the body
// (up to limit bytes, held to mem), else the client's body. Once the
// request is routed, Routed makes the Tracked r's body.
func Track(w http.ResponseWriter, r *http.Request, d time.Duration, scan bool, limit int, mem *Memory) *Tracked {
	t := new(Tracked)
	t.trailer = r.Trailer
	t.Client.Init(r.Body, w, r, d)
	r.Body = &t.Client
	if scan {
		t.Prefix.Init(&t.Client, r.ContentLength, limit, mem)
		t.Prefix.Trailers = NewTrailerGate(r)
		r.Body = &t.Prefix
	} else if len(r.Trailer) > 0 {
		t.trailers = NewTrailerGate(r)
	}
	return t
}

// Routed makes t r's body, reading the prefix first if the key scan
// read any of it.
func (t *Tracked) Routed(r *http.Request) {
	t.viaPrefix = t.Prefix.Started()
	r.Body = t
}

// Finish ends the body's part in a request that is over: the prefix's
// memory goes back to limits.body_memory and the client's reads are no
// longer timed, except one an upstream's transport may still make (sent
// says one was given the body; see bodyWatch.finish).
func (t *Tracked) Finish(sent bool) {
	t.Prefix.Done(sent)
	t.Client.Finish(sent)
}

// BytesRead is the count of body bytes read so far.
func (t *Tracked) BytesRead() int64 { return t.n.Load() }

// Bad reports whether a read of the client's body failed.
func (t *Tracked) Bad() bool { return t.bad.Load() }

// Read reads the prefix, then the client's body, counting what it read.
func (t *Tracked) Read(p []byte) (int, error) {
	var n int
	var err error
	if t.viaPrefix {
		n, err = t.Prefix.Read(p)
	} else {
		n, err = t.Client.Read(p)
	}
	t.n.Add(int64(n))
	if err == io.EOF {
		t.trailers.Close()
		if len(t.trailer) > 0 {
			transport.DropBadTrailers(t.trailer)
		}
	} else if err != nil {
		t.bad.Store(true)
	}
	return n, err
}

// Close does nothing: the body outlives an attempt's transport.
func (t *Tracked) Close() error { return nil }
