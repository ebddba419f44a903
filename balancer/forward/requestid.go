package forward

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"unsafe"
)

// RequestID passes the request's id on, or makes one (16 random bytes,
// hex) and sets it on the request under header (canonical), for the
// upstream; it returns the id, for the response too
// (downstream.Writer.SetRequestID). A client's id is taken only when it
// is at most maxRequestID bytes of printable ASCII (validRequestID);
// another is replaced like a missing one, so that neither the log nor
// the upstream gets a value of the client's making of any length or
// content. A made id costs one allocation (madeID) and no system call:
// its bytes come from the runtime's per-thread generator (math/rand/v2's
// ChaCha8, seeded by the kernel). Neither the string nor the request's
// value may alias the response writer: HTTP/2's HPACK tables and an
// HTTP/2 upstream's keep header values for as long as their connection
// lives, and the response writer is reused once its request is over
// (downstream.Writer.Recycle).
func RequestID(r *http.Request, header string) string {
	if vs := r.Header[header]; len(vs) > 0 && validRequestID(vs[0]) {
		return vs[0]
	}
	var raw [16]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(raw[8:], rand.Uint64())
	id := new(madeID)
	hex.Encode(id.b[:], raw[:])
	id.v[0] = unsafe.String(&id.b[0], len(id.b)) // b is not written again
	r.Header[header] = id.v[:]                   // cap 1: an append elsewhere copies
	return id.v[0]
}

// maxRequestID is the longest request id taken from a client, in bytes.
const maxRequestID = 128

// validRequestID reports whether a client's request id is taken as it
// is: 1 to maxRequestID bytes, each printable ASCII (space to '~').
func validRequestID(v string) bool {
	if v == "" || len(v) > maxRequestID {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

// madeID is a made request id: its digits, and the one-element value the
// request's header map holds, in one allocation.
type madeID struct {
	b [32]byte
	v [1]string
}
