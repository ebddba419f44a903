package h1

import "bufio"

// A connection's read and write buffers, held only while it uses them and
// otherwise pooled by the Transport.

// getWriter returns a write buffer over pc's connection, from the pool
// when it has one. Whoever gets it gives it back with putWriter once the
// request is written and flushed (or failed), and uses it no more.
func (pc *persistConn) getWriter() *bufio.Writer {
	if bw, _ := pc.t.writers.Get().(*bufio.Writer); bw != nil {
		bw.Reset(&pc.cw)
		return bw
	}
	return bufio.NewWriterSize(&pc.cw, bufferSize(pc.t.WriteBufferSize))
}

// putWriter gives a write buffer back to the pool. What it may still
// hold (after a failed write) is dropped.
func (pc *persistConn) putWriter(bw *bufio.Writer) {
	bw.Reset(nil) // holds no connection while pooled
	pc.t.writers.Put(bw)
}

// takeReader gives pc a read buffer, from the pool when it has one, if it
// has none: a new connection, or one taken from the pool (which gave its
// buffer back in pool.put).
func (pc *persistConn) takeReader() {
	if pc.br != nil {
		return
	}
	if br, _ := pc.t.readers.Get().(*bufio.Reader); br != nil {
		br.Reset(&pc.cr)
		pc.br = br
		return
	}
	pc.br = bufio.NewReaderSize(&pc.cr, bufferSize(pc.t.ReadBufferSize))
}

// bufferSize is a configured buffer size, or defaultBufferSize for 0.
func bufferSize(n int) int {
	if n <= 0 {
		return defaultBufferSize
	}
	return n
}

// releaseReader gives pc's read buffer back to the pool as pc goes idle.
// Only an empty buffer is given back: pool.put closes a connection with
// bytes buffered instead of pooling it.
func (pc *persistConn) releaseReader() {
	br := pc.br
	if br == nil || br.Buffered() > 0 {
		return
	}
	pc.br = nil
	br.Reset(nil)
	pc.t.readers.Put(br)
}
