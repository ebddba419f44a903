// Package sendlimit cuts a client connection whose socket takes no byte
// for a while: the write that waits on it fails with
// os.ErrDeadlineExceeded, as with net.Conn.SetWriteDeadline, and a write
// that makes progress is waited for again. net/http's HTTP/2 server can
// do the same (HTTP2Config.WriteByteTimeout), but it sets and clears the
// socket's deadline around every write: two runtime timer changes a
// write, several per request. Here the deadline is pushed forward at most
// once an eighth of the limit, so a busy connection's writes cost a clock
// read each, and a blocked write fails between the limit and an eighth
// more after it started.
package sendlimit

import (
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Listener wraps every connection it accepts in a Conn that shares the
// listener's limit.
type Listener struct {
	net.Listener
	limit *atomic.Int64 // nanoseconds; 0: none
}

// NewListener limits the connections accepted from ln by *limit, read at
// every write, so that a change applies to connections already open.
func NewListener(ln net.Listener, limit *atomic.Int64) *Listener {
	return &Listener{Listener: ln, limit: limit}
}

// Accept waits for the next connection and wraps it.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, limit: l.limit}, nil
}

// epoch anchors the monotonic clock that next is kept on.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }

// held is next's value while a deadline set from outside is in force, or
// after Release: no write pushes the deadline then.
const held = math.MaxInt64

// Conn is an accepted connection whose writes are limited.
type Conn struct {
	net.Conn
	limit *atomic.Int64
	// next is when (on now's clock) a write must push the deadline
	// forward again; 0: no deadline of ours is set; held: see above.
	next atomic.Int64
	mu   sync.Mutex // orders pushes against SetDeadline, SetWriteDeadline and Release
	// released says Release was called (set under mu).
	released atomic.Bool
}

// Write writes p, failing once no byte of it could be written for the
// limit.
func (c *Conn) Write(p []byte) (int, error) {
	n := 0
	for {
		c.push()
		m, err := c.Conn.Write(p[n:])
		n += m
		v := c.next.Load()
		if err == nil || m == 0 || n == len(p) || !errors.Is(err, os.ErrDeadlineExceeded) || v == held {
			return n, err
		}
		// Some of p went before our deadline: wait for the rest anew
		// (unless a deadline from outside comes meanwhile).
		c.next.CompareAndSwap(v, 1)
	}
}

// push sets the write deadline limit plus an eighth ahead when the last
// one set is more than an eighth old, so that a write starting now has at
// least the limit to make progress.
func (c *Conn) push() {
	d, next := c.limit.Load(), c.next.Load()
	if d <= 0 && next == 0 || next == held {
		return
	}
	t := now()
	if d > 0 && t < next {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next.Load() == held {
		return
	}
	if d <= 0 { // the limit was turned off
		c.Conn.SetWriteDeadline(time.Time{})
		c.next.Store(0)
		return
	}
	slack := d / 8
	c.Conn.SetWriteDeadline(time.Now().Add(time.Duration(d + slack)))
	c.next.Store(t + slack)
}

// SetWriteDeadline sets the write deadline, which stands in for the
// limit until it is cleared (the zero time). Clearing when no deadline
// from outside is in force does nothing: the limit's stays. (net/http's
// HTTP/1.1 server clears the write deadline after every request.)
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if t.IsZero() && c.next.Load() != held {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !t.IsZero() || c.released.Load():
		c.next.Store(held)
	default:
		c.next.Store(0) // the limit's deadline is set at the next write
	}
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines; the write one as SetWriteDeadline does.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// Release stops limiting c's writes and clears its write deadline: the
// connection has a new owner (an upgraded connection, a tunnel) that
// times its writes itself, or not at all.
func (c *Conn) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released.Store(true)
	c.next.Store(held)
	c.Conn.SetWriteDeadline(time.Time{})
}

// ReadFrom copies r into the connection. Once released (a tunnel) it is
// the socket's own, so that io.Copy between two sockets can use the
// kernel's splice as it could before the wrapping; until then the copy
// goes through Write, which the limit times.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok && c.released.Load() {
		return rf.ReadFrom(r)
	}
	return io.Copy(writer{c}, r)
}

// WriteTo copies the connection's input to w: the socket's own, since
// reading is not limited.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := c.Conn.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, c.Conn)
}

// writer hides a Conn's ReadFrom from io.Copy.
type writer struct{ w io.Writer }

func (w writer) Write(p []byte) (int, error) { return w.w.Write(p) }

// CloseWrite half-closes the connection when the one underneath can.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// Release releases c, or the connection under it when it is a *tls.Conn,
// if that is a *Conn; anything else is left alone.
func Release(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if sc, ok := c.(*Conn); ok {
		sc.Release()
	}
}
