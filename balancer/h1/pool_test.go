package h1

import (
	"net"
	"testing"
	"time"
)

// TestPoolExpireKeepsTheYoung: a sweep that closes the older connections
// of a host leaves exactly the younger ones in its stack, so the next get
// returns a live connection and then none (it once left the stack at its
// old length, with nil entries where the expired ones had been).
func TestPoolExpireKeepsTheYoung(t *testing.T) {
	key := connKey{host: "upstream:80"}
	conn := func() *persistConn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return &persistConn{key: key, conn: a}
	}
	now := time.Now()
	old, young := conn(), conn()
	old.idleAt, young.idleAt = now.Add(-time.Hour), now
	var p pool
	p.idle = map[connKey][]*persistConn{key: {old, young}}
	p.n = 2
	p.sweep = time.NewTimer(time.Hour) // expire re-arms it
	defer p.sweep.Stop()

	p.expire(time.Minute)
	if n := p.idleCount(); n != 1 {
		t.Fatalf("%d idle after the sweep, want 1", n)
	}
	if got := p.get(key, 0); got != young {
		t.Fatalf("get returned %p, want the young connection %p", got, young)
	}
	if got := p.get(key, 0); got != nil {
		t.Fatalf("second get returned %p, want none", got)
	}
}
