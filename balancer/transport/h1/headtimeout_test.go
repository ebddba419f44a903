package h1

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestResponseHeaderTimeoutStartsAfterBody: as with http.Transport, the
// response header timeout counts from the end of the request body, so an
// upload that takes longer than the timeout is not cut; once the body is
// written, an upstream that does not answer still times out.
func TestResponseHeaderTimeoutStartsAfterBody(t *testing.T) {
	checkLeaks(t)
	const timeout = 100 * time.Millisecond
	t.Run("slow upload", func(t *testing.T) {
		u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.Copy(io.Discard, r.Body)
			io.WriteString(w, strings.Repeat("n", int(n)))
		}))
		tr := newTransport(t)
		tr.ResponseHeaderTimeout = timeout
		pr, pw := io.Pipe()
		go func() {
			// The body takes 4 timeouts to send.
			for range 8 {
				pw.Write([]byte("x"))
				time.Sleep(timeout / 2)
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", u.URL, pr)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("slow upload: %v", err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || string(b) != "nnnnnnnn" {
			t.Errorf("body %q, %v", b, err)
		}
	})
	t.Run("no answer after the body", func(t *testing.T) {
		u := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			if r, err := http.ReadRequest(br); err == nil {
				io.Copy(io.Discard, r.Body)
				br.ReadByte() // never answers
			}
		})
		tr := newTransport(t)
		tr.ResponseHeaderTimeout = timeout
		req, _ := http.NewRequest("POST", u.URL, strings.NewReader("body"))
		start := time.Now()
		_, err := tr.RoundTrip(req)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("err %v, want a net.Error with Timeout()", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("timed out after %v", d)
		}
	})
}
