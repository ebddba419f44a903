package reqbody

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// A prefix read for a key is replayed, then the rest of the body follows
// as the client sends it: the reader gets the body byte for byte, and the
// buffer's bytes go back to the account once replayed.
func TestPrefixReplaysTheBody(t *testing.T) {
	body := strings.Repeat("0123456789", 1000) // 10 000 bytes
	var mem Memory
	mem.SetLimit(64 << 10)
	var p Prefix
	p.Init(io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), -1, 6000, &mem)
	for p.More() {
	}
	if n := len(p.Bytes()); n != 6000 {
		t.Fatalf("read %d bytes for the key, want the limit, 6000", n)
	}
	if mem.Held() != 8<<10 {
		t.Fatalf("account holds %d bytes, want the 8 KiB buffer", mem.Held())
	}
	got, err := io.ReadAll(&p)
	if err != nil || !bytes.Equal(got, []byte(body)) {
		t.Fatalf("replayed %d bytes (err %v), want the %d sent", len(got), err, len(body))
	}
	if mem.Held() != 0 {
		t.Fatalf("account holds %d bytes after the replay, want 0", mem.Held())
	}
	p.Done(true)
}

// A buffer the account cannot hold is refused: the scan stops and the
// prefix says why.
func TestPrefixRefusedByTheAccount(t *testing.T) {
	var mem Memory
	mem.SetLimit(6 << 10)
	var p Prefix
	p.Init(io.NopCloser(strings.NewReader(strings.Repeat("x", 10000))), 10000, 64<<10, &mem)
	for p.More() {
	}
	if !p.Refused() || !p.Failed() || len(p.Bytes()) != 4<<10 {
		t.Fatalf("refused %v failed %v after %d bytes; want refused at 4 KiB", p.Refused(), p.Failed(), len(p.Bytes()))
	}
	p.Done(false)
	if mem.Held() != 0 {
		t.Fatalf("account holds %d bytes after Done, want 0", mem.Held())
	}
}
