//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package h1

import (
	"syscall"
)

// initPeek prepares the idle check for a plain TCP connection.
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
// the stream, which means the upstream closed it). One non-blocking
// recv(MSG_PEEK); a connection without a raw socket (TLS) is assumed
// alive, and a failure later is retried as http.Transport does.
func (pc *persistConn) alive() bool {
	if pc.raw == nil {
		return true
	}
	if err := pc.raw.Read(pc.peekFn); err != nil {
		return false
	}
	return pc.peekErr == syscall.EAGAIN || pc.peekErr == syscall.EWOULDBLOCK
}
