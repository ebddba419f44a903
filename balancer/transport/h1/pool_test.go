package h1

import (
	"net"
	"testing"
	"time"
)

// TestExpireSomeOfAStack: when the idle sweep closes the older connections
// of a host and keeps the younger ones, the pool hands out exactly the
// younger ones, youngest first, and then nothing. (The sweep used to leave
// the expired slots in the stack as nils: the next get returned nil and
// panicked with the pool locked, which hung every later request.)
func TestExpireSomeOfAStack(t *testing.T) {
	checkLeaks(t)
	tr := &Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Hour}
	t.Cleanup(tr.CloseIdleConnections)
	key := connKey{host: "upstream.example:80"}
	var conns []*persistConn
	for range 5 {
		c1, c2 := net.Pipe()
		t.Cleanup(func() { c2.Close() })
		pc := tr.newConn(c1, key)
		tr.pool.put(pc)
		conns = append(conns, pc)
	}
	// The three oldest have been idle past the timeout, the two youngest not.
	now := time.Now()
	for i, pc := range conns {
		if i < 3 {
			pc.idleAt = now.Add(-2 * time.Hour)
		} else {
			pc.idleAt = now
		}
	}
	tr.pool.expire(time.Hour)
	if n := tr.pool.idleCount(); n != 2 {
		t.Fatalf("%d idle after the sweep, want 2", n)
	}
	tr.pool.mu.Lock()
	stack := tr.pool.idle[key]
	tr.pool.mu.Unlock()
	if len(stack) != 2 || stack[0] != conns[3] || stack[1] != conns[4] {
		t.Fatalf("stack after the sweep %v, want the two youngest %v", stack, conns[3:])
	}
	for _, want := range []*persistConn{conns[4], conns[3], nil} {
		if got := tr.pool.get(key, tr.IdleConnTimeout); got != want {
			t.Fatalf("get returned %p, want %p", got, want)
		}
	}
	for _, pc := range conns[3:] {
		pc.close()
	}
}
