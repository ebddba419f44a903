package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

// TestReady: a response body says its next Read cannot wait on the
// connection when bytes of a length-framed body are buffered, or the whole
// length has been read; not while the rest of it has yet to come, and
// never for a chunked body (whose framing may need more bytes). Whole says
// that all of a length-framed body came with the head.
func TestReady(t *testing.T) {
	checkLeaks(t)
	more := make(chan struct{})
	u := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			switch req.URL.Path {
			case "/whole":
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
			case "/parts":
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
				<-more
				io.WriteString(c, "defghij")
			case "/chunked":
				io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
			}
		}
	})
	tr := newTransport(t)
	type readier interface {
		Ready() bool
		Whole() bool
	}
	open := func(path string) (*http.Response, readier) {
		t.Helper()
		req, _ := http.NewRequest("GET", u.URL+path, nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		rd, ok := res.Body.(readier)
		if !ok {
			t.Fatalf("%s: body %T has no Ready or Whole", path, res.Body)
		}
		return res, rd
	}
	readN := func(r io.Reader, n int) string {
		t.Helper()
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	res, rd := open("/whole") // head and body in one write
	if !rd.Ready() || !rd.Whole() {
		t.Errorf("/whole: body buffered with its head, Ready %v, Whole %v", rd.Ready(), rd.Whole())
	}
	if s := readN(res.Body, 5); s != "hello" || !rd.Ready() {
		t.Errorf("/whole read to its length: %q, Ready %v; want Ready (the next Read is io.EOF)", s, rd.Ready())
	}
	res.Body.Close()

	res, rd = open("/parts")
	if rd.Whole() {
		t.Error("/parts: Whole with 7 bytes to come")
	}
	if s := readN(res.Body, 3); s != "abc" || rd.Ready() {
		t.Errorf("/parts after the 3 bytes sent: %q, Ready %v; want false (7 bytes to come)", s, rd.Ready())
	}
	close(more)
	if s := readN(res.Body, 7); s != "defghij" || !rd.Ready() {
		t.Errorf("/parts read to its length: %q, Ready %v; want true", s, rd.Ready())
	}
	if n, err := res.Body.Read(make([]byte, 1)); n != 0 || err != io.EOF || !rd.Ready() {
		t.Errorf("/parts at its end: %d, %v, Ready %v; want 0, EOF, true", n, err, rd.Ready())
	}
	res.Body.Close()

	res, rd = open("/chunked")
	if rd.Ready() || rd.Whole() {
		t.Errorf("/chunked: before any Read, Ready %v, Whole %v; want false", rd.Ready(), rd.Whole())
	}
	if b, err := io.ReadAll(res.Body); string(b) != "hello" || err != nil || !rd.Ready() {
		t.Errorf("/chunked read to its end: %q, %v, Ready %v; want Ready once over", b, err, rd.Ready())
	}
	res.Body.Close()
}
