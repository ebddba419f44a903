package reqbody

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// Prefix is a request body of which the first bytes were read for
// the key: Read returns those bytes again, then the rest of the body as
// the client sends it, and the error that ended the client's body where
// it ended.
//
// Its buffer grows as the bytes arrive, never for what Content-Length
// declares: it starts at minPrefixBuf bytes and doubles when full, up to
// the limit (a declared length only lowers the limit). With an
// account (mem), the buffer's bytes are counted there from the moment
// it is taken; a buffer that would take the account beyond its limit is
// not taken (refused: the request gets 503), and the buffer's bytes are
// given back once (free), when Read has returned them all or when the
// request is over, whichever comes first.
//
// A key may point into the buffer (lent) until the request is routed: a
// buffer outgrown while none does goes back to prefixBufs at once, one
// outgrown after a key pointed into it is left to the collector. Once
// Read has returned all of it, the buffer goes back to prefixBufs. buf
// is not written once the body is handed to a transport (Read, on the
// transport's goroutine, then reads it while the handler's may free).
type Prefix struct {
	rc  io.ReadCloser
	buf []byte // read from rc so far; at most limit bytes
	// limit is what may be read: the key sources' limit, or the declared
	// length and one byte, if smaller (so the read that finds the end
	// has room).
	limit int
	err   error // what ended reading rc (io.EOF at its end); nil while more may come
	off   int   // bytes of buf Read has returned
	// pooled is buf's array when it came from prefixBufs.
	pooled *[]byte
	// mem is the account buf is counted in; nil: none.
	mem *Memory
	// started says rc was read from: with Expect: 100-continue, the
	// server sent 100 Continue then.
	started bool
	// replaying says Read was called: the prefix no longer grows.
	replaying bool
	// lent says a key points into buf.
	lent bool
	// refused says mem refused a larger buffer.
	refused bool
	// freed says buf's bytes went back to mem.
	freed atomic.Bool
	// trailers keeps the request's declared trailers when rc ends.
	Trailers TrailerGate
	// scratch is the buffer a key made from the body (rather than a
	// slice of it) is written in; it goes back to scratchBufs when buf
	// goes back or the request is over, whichever comes first.
	scratch atomic.Pointer[[]byte]
}

// scratchBufs lends the buffers keys are made in (Scratch); one that
// grew beyond maxScratch is left to the collector.
var scratchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1<<10); return &b }}

const maxScratch = 256 << 10

// Scratch returns an empty buffer that a key made from the body may be
// written in (appending to it as it needs); KeepScratch then records the
// buffer as it grew, and the key stays valid until the request is
// routed.
func (p *Prefix) Scratch() []byte {
	bp := p.scratch.Load()
	if bp == nil {
		bp = scratchBufs.Get().(*[]byte)
		p.scratch.Store(bp)
	}
	return (*bp)[:0]
}

// KeepScratch records b, grown from what Scratch returned, as p's
// scratch buffer.
func (p *Prefix) KeepScratch(b []byte) {
	if bp := p.scratch.Load(); bp != nil {
		*bp = b
	}
}

// putScratch gives the scratch buffer back, once: Read (on the
// transport's goroutine) and Done (on the handler's) may both call it.
func (p *Prefix) putScratch() {
	if bp := p.scratch.Swap(nil); bp != nil && cap(*bp) <= maxScratch {
		*bp = (*bp)[:0]
		scratchBufs.Put(bp)
	}
}

// ErrMemory ends the key scan of a body whose next buffer
// limits.body_memory refused.
var ErrMemory = errors.New("request bodies being read for keys hold limits.body_memory")

// Prefix buffers are pooled by size class: class c holds buffers of
// minPrefixBuf<<c bytes, up to 1 MiB; larger ones are not pooled.
const (
	minPrefixBuf  = 4 << 10
	prefixClasses = 9
)

var prefixBufs [prefixClasses]sync.Pool

func prefixClass(n int) int {
	c := 0
	for minPrefixBuf<<c < n {
		c++
	}
	return c
}

// putBuf gives a pooled array back to its class.
func putBuf(b *[]byte) { prefixBufs[prefixClass(len(*b))].Put(b) }

// bufBytes is the size of the array a buffer of capacity n takes: what
// it holds in memory, and what the account counts for it.
func bufBytes(n int) int64 {
	if c := prefixClass(n); c < prefixClasses {
		return minPrefixBuf << c
	}
	return int64(n)
}

// Init makes p the prefix of the body rc, of declared length
// contentLength (-1: unknown), read up to limit bytes, its buffer
// counted in mem (nil: none). It takes no buffer yet.
func (p *Prefix) Init(rc io.ReadCloser, contentLength int64, limit int, mem *Memory) {
	p.rc, p.limit, p.mem = rc, limit, mem
	if contentLength > 0 && contentLength < int64(limit) {
		p.limit = int(contentLength) + 1
	}
}

// grow gives p a buffer twice as large (the first: minPrefixBuf), within
// the limit, holding what it read; false when the account refuses it.
func (p *Prefix) grow() bool {
	old := p.buf
	n := min(max(2*cap(old), minPrefixBuf), p.limit)
	if p.mem != nil {
		d := bufBytes(n)
		if cap(old) > 0 {
			d -= bufBytes(cap(old))
		}
		if !p.mem.Take(d) {
			p.refused, p.err = true, ErrMemory
			return false
		}
	}
	oldPooled := p.pooled
	p.pooled = nil
	if c := prefixClass(n); c >= prefixClasses {
		p.buf = make([]byte, 0, n)
	} else {
		b, _ := prefixBufs[c].Get().(*[]byte)
		if b == nil {
			nb := make([]byte, minPrefixBuf<<c)
			b = &nb
		}
		p.pooled = b
		p.buf = (*b)[:0:n]
	}
	p.buf = append(p.buf, old...)
	if oldPooled != nil && !p.lent {
		putBuf(oldPooled)
	}
	return true
}

// maxEmptyReads bounds the reads in a row that return nothing, from a
// body that misbehaves.
const maxEmptyReads = 100

// More reads more of the body into buf; false when nothing more can
// come: the body ended or failed, the limit is reached, or the account
// refused a larger buffer.
func (p *Prefix) More() bool {
	if p.err != nil || p.replaying || len(p.buf) >= p.limit {
		return false
	}
	if len(p.buf) == cap(p.buf) && !p.grow() {
		return false
	}
	p.started = true
	for range maxEmptyReads {
		n, err := p.rc.Read(p.buf[len(p.buf):cap(p.buf)])
		p.buf = p.buf[:len(p.buf)+n]
		if err != nil {
			p.err = err
			if err == io.EOF {
				p.Trailers.Close()
			}
		}
		if n > 0 {
			return true
		}
		if err != nil {
			return false
		}
	}
	p.err = io.ErrNoProgress
	return false
}

func (p *Prefix) Read(b []byte) (int, error) {
	p.replaying = true
	if p.off < len(p.buf) {
		n := copy(b, p.buf[p.off:])
		p.off += n
		if p.off == len(p.buf) {
			// Returned whole: the array goes back (buf, which is not
			// read again, still points at it), and its bytes.
			p.free()
			if p.pooled != nil {
				putBuf(p.pooled)
				p.pooled = nil
			}
			p.putScratch()
		}
		return n, nil
	}
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.rc.Read(b)
	if err == io.EOF {
		p.Trailers.Close()
	}
	return n, err
}

func (p *Prefix) Close() error { return p.rc.Close() }

// free gives buf's bytes back to the account, once: Read (on the
// transport's goroutine) and done (on the handler's) may both call it.
func (p *Prefix) free() {
	if p.mem != nil && cap(p.buf) > 0 && p.freed.CompareAndSwap(false, true) {
		p.mem.Put(bufBytes(cap(p.buf)))
	}
}

// Done ends p's part in a request that is over: buf's bytes go back to
// the account (if Read has not given them back already), the scratch
// buffer to its pool, and, when no upstream's transport was given the
// body (sent false), which could still be reading it, its array goes
// back to prefixBufs.
func (p *Prefix) Done(sent bool) {
	p.free()
	p.putScratch()
	if !sent && p.pooled != nil {
		putBuf(p.pooled)
		p.pooled, p.buf = nil, nil
	}
}

// Failed says the key scan could not go on for the request's sake: the
// body was silent for longer than timeouts.client_body, or
// limits.body_memory refused a buffer. The request is answered at once
// (408, 503) without a key.
func (p *Prefix) Failed() bool {
	return p.refused || p.err == ErrClientTimeout
}

// Bytes is what p read of the body so far. A key that points into it
// must be declared with Lend.
func (p *Prefix) Bytes() []byte { return p.buf }

// Lend records that a key points into p's buffer until the request is
// routed: the buffer is not reused when it is outgrown.
func (p *Prefix) Lend() { p.lent = true }

// Refused says the memory account refused p a larger buffer.
func (p *Prefix) Refused() bool { return p.refused }

// Started says the body was read from.
func (p *Prefix) Started() bool { return p.started }
