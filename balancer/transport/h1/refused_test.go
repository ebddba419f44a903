package h1

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// A request the Transport refuses for what it holds (its own checks, or
// (*http.Request).Write's) fails at once with an error matching
// ErrInvalidRequest, and nothing of it reaches the upstream: not on the
// pooled connection, not on a new one. (Before: the errors were plain;
// a refusal by Write of a request with a body left the exchange waiting
// for a response head that could never come, until
// ResponseHeaderTimeout; one of a bodiless request on a pooled
// connection was tried again on a new connection.)
func TestRefusedRequestIsNotSent(t *testing.T) {
	for _, scheme := range schemes {
		t.Run(scheme, func(t *testing.T) {
			var got atomic.Int64 // request bytes the upstream read
			up := newRawUpstreamOver(t, scheme, func(c net.Conn, _ *bufio.Reader) {
				br := bufio.NewReader(countingReader{c, &got})
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			tr := newTransport(t)
			tr.ResponseHeaderTimeout = 5 * time.Second
			tr.TLSClientConfig = up.TLS
			send := func(req *http.Request) error {
				res, err := tr.RoundTrip(req)
				if err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				return err
			}
			ok := func() {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, up.URL+"/", nil)
				if err := send(req); err != nil {
					t.Fatalf("a valid request: %v", err)
				}
			}
			ok() // a pooled connection
			for _, c := range []struct {
				name string
				req  func() *http.Request
			}{
				{"method not a token", func() *http.Request {
					req, _ := http.NewRequest(http.MethodGet, up.URL+"/", nil)
					req.Method = "G(T"
					return req
				}},
				{"header field name", func() *http.Request {
					req, _ := http.NewRequest(http.MethodGet, up.URL+"/", nil)
					req.Header["X A"] = []string{"1"}
					return req
				}},
				{"header field value", func() *http.Request {
					req, _ := http.NewRequest(http.MethodGet, up.URL+"/", nil)
					req.Header["X-A"] = []string{"1\x00"}
					return req
				}},
				{"trailer field name", func() *http.Request {
					req, _ := http.NewRequest(http.MethodPost, up.URL+"/", strings.NewReader("abc"))
					req.Trailer = http.Header{"X A": {"1"}}
					return req
				}},
				{"Write: a trailer naming Content-Length, with a body", func() *http.Request {
					req, _ := http.NewRequest(http.MethodPost, up.URL+"/", io.MultiReader(strings.NewReader("abc")))
					req.ContentLength = -1
					req.Trailer = http.Header{"Content-Length": {"3"}}
					return req
				}},
				{"Write: a control byte in the query, no body", func() *http.Request {
					req, _ := http.NewRequest(http.MethodGet, up.URL+"/", nil)
					req.URL.RawQuery = "a=\x01"
					return req
				}},
			} {
				conns, bytes := up.conns.Load(), got.Load()
				start := time.Now()
				err := send(c.req())
				if took := time.Since(start); took > time.Second {
					t.Errorf("%s: refused after %v", c.name, took)
				}
				if !errors.Is(err, ErrInvalidRequest) {
					t.Errorf("%s: error %v, want one matching ErrInvalidRequest", c.name, err)
				}
				time.Sleep(20 * time.Millisecond) // anything sent has arrived
				if n := up.conns.Load() - conns; n > 0 {
					t.Errorf("%s: %d connections dialled for it", c.name, n)
				}
				if n := got.Load() - bytes; n > 0 {
					t.Errorf("%s: the upstream read %d bytes of it", c.name, n)
				}
				ok() // the Transport still works
			}
		})
	}
}
