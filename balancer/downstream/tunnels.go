package downstream

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/ringlb/ringlb/internal/sendlimit"
)

// Tunnels tracks the connections handed over for protocol upgrades
// (WebSocket tunnels): http.Server.Shutdown forgets hijacked connections,
// so without this a shutdown would cut them at once.
type Tunnels struct {
	mu    sync.Mutex
	n     int                   // tunnels open or opening
	conns map[net.Conn]struct{} // the open ones
	idle  chan struct{}         // closed when n drops to 0; nil until waited for
}

func (t *Tunnels) opening() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *Tunnels) opened(c net.Conn) {
	t.mu.Lock()
	if t.conns == nil {
		t.conns = map[net.Conn]struct{}{}
	}
	t.conns[c] = struct{}{}
	t.mu.Unlock()
}

// Remove ends a tunnel counted by opening (c nil: one that never opened).
func (t *Tunnels) Remove(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c != nil {
		delete(t.conns, c)
	}
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// Wait waits until every tunnel has closed, or ctx is done; then it
// closes those still open and returns ctx's error.
func (t *Tunnels) Wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	return ctx.Err()
}

// TunnelCount counts the upgraded connections (WebSocket) open to one
// upstream; All is the record of every tunnel of the Balancer, for
// shutdown.
type TunnelCount struct {
	atomic.Int64
	All *Tunnels
}

// Tunnel is the connection Hijack handed over (nil: none), which the
// Balancer removes from its Tunnels once the request is over.
func (w *Writer) Tunnel() net.Conn { return w.tunnel }

// EndAttempt takes the attempt's tunnel, if it became one, off its
// upstream's count: the attempt is over.
func (w *Writer) EndAttempt() {
	if w.upTunnel {
		w.upTunnel = false
		w.Up.Add(-1)
	}
}

// Hijack takes over the connection, for protocol upgrades.
func (w *Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	// Counted before the server lets go of the connection, so a
	// Shutdown that sees no active connection also sees this tunnel.
	if w.Up == nil { // only an attempt's proxy hijacks
		return nil, nil, http.ErrNotSupported
	}
	all := w.Up.All
	all.opening()
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		all.Remove(nil)
		return c, brw, err
	}
	sendlimit.Release(c) // limits.send does not apply to tunnels
	w.tunnel = c
	all.opened(c)
	w.Up.Add(1)
	w.upTunnel = true
	w.head(http.StatusSwitchingProtocols)
	// ReverseProxy copies from the connection itself: bytes the client
	// sent right behind its request, already in the server's buffer,
	// must come first.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		c = &bufferedConn{Conn: c, early: bytes.Clone(early)}
	}
	return c, brw, nil
}

// bufferedConn is a hijacked connection whose first reads return the
// bytes the server had already buffered.
type bufferedConn struct {
	net.Conn
	early []byte
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(p, c.early)
		c.early = c.early[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection when it can, as ReverseProxy does
// to the client's connection once the upstream is done sending.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
