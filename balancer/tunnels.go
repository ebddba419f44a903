package balancer

import (
	"context"
	"net"
	"sync"
)

// tunnels tracks the connections handed over for protocol upgrades
// (WebSocket tunnels): http.Server.Shutdown forgets hijacked connections,
// so without this a shutdown would cut them at once.
type tunnels struct {
	mu    sync.Mutex
	n     int                   // tunnels open or opening
	conns map[net.Conn]struct{} // the open ones
	idle  chan struct{}         // closed when n drops to 0; nil until waited for
}

func (t *tunnels) opening() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tunnels) opened(c net.Conn) {
	t.mu.Lock()
	if t.conns == nil {
		t.conns = map[net.Conn]struct{}{}
	}
	t.conns[c] = struct{}{}
	t.mu.Unlock()
}

// remove ends a tunnel counted by opening (c nil: one that never opened).
func (t *tunnels) remove(c net.Conn) {
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

// WaitTunnels waits until every upgraded connection (a WebSocket tunnel,
// which http.Server.Shutdown does not wait for) has closed, or ctx is
// done; then it closes those still open and returns ctx's error. Call it
// after the proxy server's Shutdown, with the same deadline.
func (b *Balancer) WaitTunnels(ctx context.Context) error {
	t := &b.tunnels
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
