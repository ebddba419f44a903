// Package testnet holds what tests need from the network beyond
// net/http/httptest.
package testnet

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback address ("127.0.0.1:port") where every
// connection is refused, for as long as the test runs.
//
// Closing a listener to get such an address is not enough: the kernel may
// hand the port to the next listener, in this process (the proxy under
// test, which then forwards to itself) or in another test binary running
// beside it. RefusedAddr keeps the port bound by a socket that never
// listens, so no one else can take it and a SYN to it is answered with a
// reset.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("testnet: socket: %v", err)
	}
	syscall.CloseOnExec(fd) // test binaries start child processes
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testnet: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testnet: getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
