// Package keyhash makes the key hashes ringlb reports, from ring
// positions: the access log's key_hash, /debug/hotkeys' hashes, and the
// names of the shared hold store's records.
//
// Without a salt the reported hash of a key is its ring position (hex of
// xxhash64 of the key, or nginx's 32-bit hash), which anyone who reads
// it can reverse by hashing candidate keys: every IPv4 address of an ip
// key, every number of a numeric user id. With hash.salt_file's salt it
// is HMAC-SHA256 of the ring position (8 bytes, big-endian) keyed with
// the salt, cut to its first 64 bits: without the salt a candidate key
// cannot be checked against it, and a key, its position and its
// reported hash known together (one's own IP in the log) say nothing of
// another key's. The salt never reaches the ring: placement, and
// /debug/lookup's "hash" (the ring position), stay as they are.
//
//	pos := ring.Hash(key)         // placement, unchanged
//	rep := salted.Sum(pos)        // what the log, hot keys and the store show
//
// A Salted computes without allocating: two SHA-256 sums of stack
// buffers (the HMAC pads are made once, by New).
package keyhash

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
)

// blockSize is SHA-256's block size, HMAC's pad length.
const blockSize = 64

// Salted reports key hashes keyed with one salt. It is immutable and
// safe for concurrent use.
type Salted struct {
	ipad, opad [blockSize]byte // the HMAC key xor 0x36, xor 0x5c
	id         [sha256.Size]byte
}

// New returns the Salted of salt, or nil for an empty salt (reported
// hashes are then ring positions).
func New(salt []byte) *Salted {
	if len(salt) == 0 {
		return nil
	}
	var key [blockSize]byte
	if len(salt) > blockSize { // as HMAC keys a long key: by its hash
		sum := sha256.Sum256(salt)
		copy(key[:], sum[:])
	} else {
		copy(key[:], salt)
	}
	s := &Salted{id: sha256.Sum256(salt)}
	for i, k := range key {
		s.ipad[i], s.opad[i] = k^0x36, k^0x5c
	}
	return s
}

// Sum is the reported hash of the key at ring position pos: the first 8
// bytes, big-endian, of HMAC-SHA256(salt, pos as 8 bytes big-endian).
func (s *Salted) Sum(pos uint64) uint64 {
	var in [blockSize + 8]byte
	copy(in[:], s.ipad[:])
	binary.BigEndian.PutUint64(in[blockSize:], pos)
	inner := sha256.Sum256(in[:])
	var out [blockSize + sha256.Size]byte
	copy(out[:], s.opad[:])
	copy(out[blockSize:], inner[:])
	mac := sha256.Sum256(out[:])
	return binary.BigEndian.Uint64(mac[:8])
}

// Same reports whether s and o are keyed with the same salt (both nil
// counts as the same).
func (s *Salted) Same(o *Salted) bool {
	if s == nil || o == nil {
		return s == o
	}
	return subtle.ConstantTimeCompare(s.id[:], o.id[:]) == 1
}

// Hex is h as 16 lower-case hex digits, the form a salted reported hash
// takes everywhere.
func Hex(h uint64) string {
	var b [16]byte
	return string(AppendHex(b[:0], h))
}

// AppendHex appends h as 16 lower-case hex digits.
func AppendHex(b []byte, h uint64) []byte {
	const digits = "0123456789abcdef"
	for i := 60; i >= 0; i -= 4 {
		b = append(b, digits[(h>>uint(i))&0xf])
	}
	return b
}
