package keyhash

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"testing"
)

// TestSumIsHMAC: Sum is HMAC-SHA256 of the position under the salt, cut
// to 64 bits, for salts shorter and longer than a block.
func TestSumIsHMAC(t *testing.T) {
	for _, salt := range [][]byte{[]byte("0123456789abcdef"), bytes.Repeat([]byte("s"), 64), bytes.Repeat([]byte("long salt "), 20)} {
		s := New(salt)
		for _, pos := range []uint64{0, 1, 0xdeadbeef, 1<<63 | 12345, ^uint64(0)} {
			m := hmac.New(sha256.New, salt)
			var p [8]byte
			binary.BigEndian.PutUint64(p[:], pos)
			m.Write(p[:])
			if want := binary.BigEndian.Uint64(m.Sum(nil)); s.Sum(pos) != want {
				t.Errorf("%d-byte salt, position %x: %x, want %x", len(salt), pos, s.Sum(pos), want)
			}
		}
	}
}

func TestNewAndSame(t *testing.T) {
	if New(nil) != nil || New([]byte{}) != nil {
		t.Error("an empty salt made a Salted")
	}
	a, b, c := New([]byte("salt-number-one!")), New([]byte("salt-number-one!")), New([]byte("salt-number-two!"))
	if !a.Same(b) || a.Same(c) || a.Same(nil) || !(*Salted)(nil).Same(nil) {
		t.Error("Same")
	}
	if a.Sum(7) == c.Sum(7) {
		t.Error("two salts gave one hash")
	}
	if got := Hex(0x00ab); got != "00000000000000ab" {
		t.Errorf("Hex: %s", got)
	}
}

// TestSumDoesNotAllocate: the request path may call Sum once per request.
func TestSumDoesNotAllocate(t *testing.T) {
	s := New([]byte("a salt of some length"))
	var sink uint64
	if n := testing.AllocsPerRun(1000, func() { sink += s.Sum(sink) }); n != 0 {
		t.Errorf("Sum: %v allocations", n)
	}
}

func BenchmarkSum(b *testing.B) {
	s := New([]byte("a salt of some length"))
	var sink uint64
	b.ReportAllocs()
	for b.Loop() {
		sink = s.Sum(sink)
	}
	_ = sink
}
