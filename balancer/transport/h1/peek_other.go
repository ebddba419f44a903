//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package h1

func (pc *persistConn) initPeek() {}

// alive cannot look at the socket here, only at what the TLS layer holds:
// a connection the upstream closed while idle is found when the request
// fails, and retried.
func (pc *persistConn) alive() bool { return pc.tc == nil || pc.tlsIdle() }
