package sendlimit

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pair accepts one connection through a Listener limited by limit and
// returns its server side and the client side, whose receive buffer is
// small so that a client that does not read soon blocks the server's
// writes.
func pair(t *testing.T, limit *atomic.Int64) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, limit)
	t.Cleanup(func() { l.Close() })
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	cc, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return sc.(*Conn), cc
}

func limitOf(d time.Duration) *atomic.Int64 {
	var l atomic.Int64
	l.Store(int64(d))
	return &l
}

// write writes n bytes to c in one Write and reports how long it took.
func write(c net.Conn, n int) (time.Duration, int, error) {
	start := time.Now()
	m, err := c.Write(make([]byte, n))
	return time.Since(start), m, err
}

// A client that never reads: the write fails with the deadline error, no
// sooner than the limit (and well before a write left to itself would).
func TestNeverReadingClientIsCut(t *testing.T) {
	const limit = 300 * time.Millisecond
	sc, _ := pair(t, limitOf(limit))
	took, n, err := write(sc, 64<<20)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write of 64 MiB to a client that never reads: %d bytes, %v; want a deadline error", n, err)
	}
	if took < limit || took > 20*limit {
		t.Errorf("cut after %v; want between the limit (%v) and much less than 20 times it", took, limit)
	}
}

// A client that reads slowly but steadily: every write that makes
// progress waits anew, so a write taking many times the limit completes.
func TestSteadyReaderIsNotCut(t *testing.T) {
	const limit = 100 * time.Millisecond
	sc, cc := pair(t, limitOf(limit))
	sc.Conn.(*net.TCPConn).SetWriteBuffer(4096) // so that the write waits on the reader
	const size = 256 << 10
	done := make(chan int64)
	go func() {
		buf := make([]byte, 64<<10)
		var total int64
		for total < size {
			time.Sleep(limit / 4)
			cc.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := cc.Read(buf)
			total += int64(n)
			if err != nil {
				break
			}
		}
		done <- total
	}()
	took, n, err := write(sc, size)
	if err != nil || n != size {
		t.Fatalf("write to a steady reader: %d of %d bytes in %v, %v", n, size, took, err)
	}
	if got := <-done; got != size {
		t.Errorf("reader got %d bytes, want %d", got, size)
	}
	if took < 2*limit {
		t.Errorf("the write took %v, less than twice the limit: the test tested nothing", took)
	}
}

// A deadline set from outside stands in for the limit (a deadline in the
// past fails the next write at once, whatever the limit) until it is
// cleared; then the limit applies again.
func TestOutsideDeadlineWins(t *testing.T) {
	sc, cc := pair(t, limitOf(time.Hour))
	sc.SetWriteDeadline(time.Unix(1, 0))
	if _, _, err := write(sc, 1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write after a deadline in the past: %v; want the deadline error", err)
	}
	sc.SetWriteDeadline(time.Time{})
	if _, _, err := write(sc, 1); err != nil {
		t.Fatalf("write after the deadline was cleared: %v", err)
	}
	sc.Conn.(*net.TCPConn).SetWriteDeadline(time.Time{})
	_ = cc
	sc.limit.Store(int64(200 * time.Millisecond))
	sc.next.Store(1) // as if the hour's deadline were old
	if _, n, err := write(sc, 64<<20); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a client that never reads after the deadline was cleared: %d bytes, %v; want a deadline error", n, err)
	}
}

// A released connection is not limited: a client that stops reading for
// several times the limit, then reads, gets everything.
func TestReleasedIsNotCut(t *testing.T) {
	const limit = 100 * time.Millisecond
	sc, cc := pair(t, limitOf(limit))
	write(sc, 1) // sets a deadline of the limit's
	Release(sc)
	const size = 8 << 20
	res := make(chan error, 1)
	go func() {
		_, n, err := write(sc, size)
		if err == nil && n != size {
			err = io.ErrShortWrite
		}
		res <- err
	}()
	time.Sleep(5 * limit)
	cc.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.CopyN(io.Discard, cc, size+1)
	if got != size+1 {
		t.Fatalf("read %d of %d bytes: %v", got, size+1, err)
	}
	if err := <-res; err != nil {
		t.Errorf("write to a released connection: %v", err)
	}
}

// A limit turned off (0) clears the deadline already set: the write then
// waits for a client that stops reading for several times the old limit.
func TestLimitTurnedOff(t *testing.T) {
	const limit = 100 * time.Millisecond
	l := limitOf(limit)
	sc, cc := pair(t, l)
	write(sc, 1)
	l.Store(0)
	const size = 8 << 20
	res := make(chan error, 1)
	go func() {
		_, _, err := write(sc, size)
		res <- err
	}()
	time.Sleep(5 * limit)
	cc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if got, err := io.CopyN(io.Discard, cc, size+1); got != size+1 {
		t.Fatalf("read %d of %d bytes: %v", got, size+1, err)
	}
	if err := <-res; err != nil {
		t.Errorf("write with the limit off: %v", err)
	}
}

// Clearing the write deadline when none from outside is in force (as
// net/http's HTTP/1.1 server does after every request) leaves the limit's
// deadline alone: it is not set again at the next write, and a client that
// stops reading is still cut.
func TestClearKeepsLimit(t *testing.T) {
	const limit = 200 * time.Millisecond
	sc, _ := pair(t, limitOf(limit))
	write(sc, 1)
	next := sc.next.Load()
	sc.SetWriteDeadline(time.Time{})
	if got := sc.next.Load(); got != next {
		t.Fatalf("after a clear with no deadline from outside, next push at %d, want %d as before", got, next)
	}
	if _, n, err := write(sc, 64<<20); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a client that never reads after a clear: %d bytes, %v; want a deadline error", n, err)
	}
}

// io.Copy into a Conn is timed by the limit until the Conn is released (a
// client that never reads is cut, as with Write), and passes everything
// on after (the socket's own ReadFrom, which may splice).
func TestReadFrom(t *testing.T) {
	const limit = 200 * time.Millisecond
	sc, _ := pair(t, limitOf(limit))
	res := make(chan error, 1)
	go func() {
		_, err := io.Copy(sc, io.LimitReader(zeros{}, 64<<20))
		res <- err
	}()
	select {
	case err := <-res:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("copy to a client that never reads: %v; want a deadline error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("copy to a client that never reads still blocked after 20 s: ReadFrom went around the limit")
	}

	sc, cc := pair(t, limitOf(limit))
	Release(sc)
	src, dst := pair(t, limitOf(0)) // a socket to copy from, as a tunnel's upstream
	const size = 4 << 20
	go func() {
		dst.Write(make([]byte, size))
		dst.Close()
	}()
	go func() {
		_, err := io.Copy(sc, src.Conn)
		sc.CloseWrite()
		res <- err
	}()
	time.Sleep(3 * limit) // the client reads nothing for a while: no cut
	cc.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.Copy(io.Discard, cc)
	if got != size || err != nil {
		t.Fatalf("read %d of %d bytes through a released connection: %v", got, size, err)
	}
	if err := <-res; err != nil {
		t.Errorf("copy into a released connection: %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
