package h1

import (
	"net/http"
	"sync"
	"time"
)

// connKey names a pool: connections are shared by requests to the same
// scheme and URL host (as written, port included or not).
type connKey struct {
	tls  bool
	host string
}

// pool holds idle connections, a LIFO stack per key so that the most
// recently used connection is reused first and the others age out.
type pool struct {
	mu    sync.Mutex
	idle  map[connKey][]*persistConn
	n     int         // idle connections in all stacks
	sweep *time.Timer // closes expired connections; nil until needed
	armed bool        // sweep is scheduled
}

// get pops the most recently pooled connection for key, closing those
// idle for longer than timeout (0: no limit).
func (p *pool) get(key connKey, timeout time.Duration) *persistConn {
	p.mu.Lock()
	stack := p.idle[key]
	if len(stack) == 0 {
		p.mu.Unlock()
		return nil
	}
	pc := stack[len(stack)-1]
	stack[len(stack)-1] = nil
	p.n--
	if timeout > 0 && time.Since(pc.idleAt) >= timeout {
		// The top is the youngest: everything below has expired too.
		expired := append(stack[:0:0], stack[:len(stack)-1]...)
		clear(stack)
		p.n -= len(expired)
		delete(p.idle, key)
		p.mu.Unlock()
		pc.close()
		for _, c := range expired {
			c.close()
		}
		return nil
	}
	p.idle[key] = stack[:len(stack)-1]
	p.mu.Unlock()
	pc.reused = true
	return pc
}

// put pools pc, or closes it when a limit is reached or when bytes the
// upstream sent beyond its last response are waiting in its buffer.
func (p *pool) put(pc *persistConn) {
	t := pc.t
	perHost := t.MaxIdleConnsPerHost
	if perHost == 0 {
		perHost = http.DefaultMaxIdleConnsPerHost
	}
	if perHost < 0 || (pc.br != nil && pc.br.Buffered() > 0) {
		pc.close()
		return
	}
	// Idle, the connection needs no read buffer: nothing is buffered, and
	// the check when it is taken out (alive) looks at the socket (and the
	// TLS layer) without one.
	pc.releaseReader()
	var now time.Time
	if t.IdleConnTimeout > 0 {
		now = time.Now()
	}
	p.mu.Lock()
	stack := p.idle[pc.key]
	if len(stack) >= perHost || (t.MaxIdleConns > 0 && p.n >= t.MaxIdleConns) {
		p.mu.Unlock()
		pc.close()
		return
	}
	if p.idle == nil {
		p.idle = make(map[connKey][]*persistConn)
	}
	pc.idleAt = now
	p.idle[pc.key] = append(stack, pc)
	p.n++
	if t.IdleConnTimeout > 0 && !p.armed {
		p.armed = true
		if p.sweep == nil {
			p.sweep = time.AfterFunc(t.IdleConnTimeout, func() { p.expire(t.IdleConnTimeout) })
		} else {
			p.sweep.Reset(t.IdleConnTimeout)
		}
	}
	p.mu.Unlock()
}

// expire closes the connections idle for timeout or longer and schedules
// itself again for the oldest of the rest.
func (p *pool) expire(timeout time.Duration) {
	var dead []*persistConn
	p.mu.Lock()
	now := time.Now()
	next := time.Duration(-1)
	for key, stack := range p.idle {
		// Oldest at the bottom: expired connections are a prefix.
		i := 0
		for i < len(stack) && now.Sub(stack[i].idleAt) >= timeout {
			i++
		}
		if i > 0 {
			dead = append(dead, stack[:i]...)
			n := copy(stack, stack[i:])
			clear(stack[n:])
			stack = stack[:n]
			p.idle[key] = stack
			p.n -= i
		}
		if len(stack) == 0 {
			delete(p.idle, key)
			continue
		}
		if left := timeout - now.Sub(stack[0].idleAt); next < 0 || left < next {
			next = left
		}
	}
	if next >= 0 {
		p.sweep.Reset(next)
	} else {
		p.armed = false
	}
	p.mu.Unlock()
	for _, pc := range dead {
		pc.close()
	}
}

// closeAll closes every idle connection.
func (p *pool) closeAll() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.n = 0
	p.mu.Unlock()
	for _, stack := range idle {
		for _, pc := range stack {
			pc.close()
		}
	}
}

// idleCount returns the number of idle connections (for tests).
func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}
