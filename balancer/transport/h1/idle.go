package h1

import "net"

// recordConn is the socket under a TLS connection. It follows the TLS
// record framing of the bytes the TLS layer reads from it, so that the
// idle check can tell whether that layer holds part of a record it has
// not decrypted yet (it reads ahead of the record it needs).
type recordConn struct {
	net.Conn
	hdr   [recordHeaderLen]byte
	hn    int  // bytes of the current record's header read so far
	left  int  // bytes of the current record's payload still to come
	probe bool // reads fail with errProbe without touching the socket
}

const recordHeaderLen = 5 // type, version, length (RFC 8446 section 5.1)

func (c *recordConn) Read(p []byte) (int, error) {
	if c.probe {
		return 0, errProbe
	}
	n, err := c.Conn.Read(p)
	c.follow(p[:n])
	return n, err
}

// follow advances the framing over b, the next bytes of the stream.
func (c *recordConn) follow(b []byte) {
	for len(b) > 0 {
		if c.left > 0 {
			k := min(c.left, len(b))
			c.left -= k
			b = b[k:]
			continue
		}
		k := copy(c.hdr[c.hn:], b)
		c.hn += k
		b = b[k:]
		if c.hn == recordHeaderLen {
			c.hn = 0
			c.left = int(c.hdr[3])<<8 | int(c.hdr[4])
		}
	}
}

// partial says whether the stream read so far ends inside a record.
func (c *recordConn) partial() bool { return c.hn > 0 || c.left > 0 }

// errProbe is what the socket under a TLS connection returns while the
// idle check looks at the TLS layer: a temporary error, which the TLS
// layer passes up without marking the connection broken.
var errProbe net.Error = &timeoutError{"h1: idle check"}

// tlsIdle says whether the TLS layer of a pooled connection holds
// nothing the upstream sent: no decrypted bytes waiting to be read, no
// whole record waiting to be decrypted, no part of one. A read while the
// socket below answers errProbe makes the TLS layer process what it holds
// without touching the socket: it returns bytes (stray application data),
// an end (a close_notify alert) or, when nothing is left but less than a
// record, errProbe; the record framing then says whether that "less" is
// nothing. Post-handshake messages (session tickets) are processed on the
// way and do not count. Any byte read here is stray, so consuming it is
// harmless: the connection is closed. Nothing here allocates or makes a
// system call; the socket itself is peeked next (alive).
func (pc *persistConn) tlsIdle() bool {
	pc.rec.probe = true
	n, err := pc.tc.Read(pc.peekBuf[:])
	pc.rec.probe = false
	return n == 0 && err == errProbe && !pc.rec.partial()
}
