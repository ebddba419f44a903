//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package h1

import (
	"syscall"
)

// initPeek prepares the idle check on the socket (under TLS too, which
// keeps it).
func (pc *persistConn) initPeek() {
	if sc, ok := pc.conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			pc.raw = raw
			pc.peekFn = pc.peek
		}
	}
}

// peek looks at the socket without blocking or consuming anything.
func (pc *persistConn) peek(fd uintptr) bool {
	pc.peekN, _, pc.peekErr = syscall.Recvfrom(int(fd), pc.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return true
}

// alive says whether a connection taken from the pool may carry a
// request: nothing is waiting to be read on it (neither bytes the upstream
// sent unasked, which would be read as the next response, nor the end of
// the stream, which means the upstream closed it). Over TLS, first what
// the TLS layer holds (tlsIdle), then, as over TCP, one non-blocking
// recv(MSG_PEEK) on the socket: any byte there, a TLS record of whatever
// kind, means the connection is not proven idle. A connection without a
// raw socket (a Dial returning something else) is assumed alive, and a
// failure later is retried as http.Transport does.
func (pc *persistConn) alive() bool {
	if pc.tc != nil && !pc.tlsIdle() {
		return false
	}
	if pc.raw == nil {
		return true
	}
	if err := pc.raw.Read(pc.peekFn); err != nil {
		return false
	}
	return pc.peekErr == syscall.EAGAIN || pc.peekErr == syscall.EWOULDBLOCK
}
