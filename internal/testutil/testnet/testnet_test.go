package testnet

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s succeeded", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a listener could take %s", addr)
	}
}
