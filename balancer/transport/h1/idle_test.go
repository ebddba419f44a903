package h1

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// A pooled connection the upstream closed while idle is not used: the
// idle check sees its end (over TLS, the close_notify and the FIN) and a
// new connection is dialled.
func TestIdleClosedByUpstream(t *testing.T) {
	for _, scheme := range schemes {
		t.Run(scheme, func(t *testing.T) {
			checkLeaks(t)
			closed := make(chan struct{}, 1)
			u := newRawUpstreamOver(t, scheme, func(c net.Conn, br *bufio.Reader) {
				if _, err := readHead(br); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				halfClose(c)
				closed <- struct{}{}
				br.ReadByte() // until the client closes
			})
			tr := newTransport(t)
			tr.TLSClientConfig = u.TLS
			for i := range 3 {
				if _, body := get(t, tr, "POST", u.URL, strings.NewReader("x")); body != "ok" {
					t.Fatalf("request %d: body %q", i, body)
				}
				// The close lands while the connection is idle, not
				// while the next request crosses it.
				within(t, closed, "the upstream's close")
			}
			if n := u.conns.Load(); n != 3 {
				t.Errorf("%d connections, want 3", n)
			}
		})
	}
}

// A pooled connection that dies while a request is on it (the upstream
// closed it just after the idle check) is retried once on a fresh
// connection when the request is replayable, and not otherwise.
func TestStaleConnectionRetry(t *testing.T) {
	for _, scheme := range schemes {
		t.Run(scheme, func(t *testing.T) {
			checkLeaks(t)
			// Each connection answers its first request and drops the
			// second without a byte, as an upstream closing an idle
			// connection does when the request crosses the close.
			u := newRawUpstreamOver(t, scheme, func(c net.Conn, br *bufio.Reader) {
				for i := 0; ; i++ {
					req, err := readHead(br)
					if err != nil || i == 1 {
						return
					}
					io.Copy(io.Discard, req.Body)
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			tr := newTransport(t)
			tr.TLSClientConfig = u.TLS
			get(t, tr, "GET", u.URL, nil)
			if _, body := get(t, tr, "GET", u.URL, nil); body != "ok" {
				t.Errorf("GET on a dying pooled connection: body %q", body)
			}
			if n := u.conns.Load(); n != 2 {
				t.Errorf("%d connections, want 2 (one retry)", n)
			}
			// The retry left a pooled connection whose next request dies:
			// a POST with a body is not replayable.
			req, _ := http.NewRequest("POST", u.URL, strings.NewReader("body"))
			if _, err := tr.RoundTrip(req); err == nil {
				t.Error("POST with a body on a dying pooled connection succeeded; want its error, not a retry")
			}
			if n := u.conns.Load(); n != 2 {
				t.Errorf("%d connections, want 2 (no retry of a POST)", n)
			}
		})
	}
}

// Bytes the upstream sends beyond a response must never be read as the
// next request's response, whether they land in the socket, in the TLS
// layer's buffer or in the connection's own: sent on their own after the
// response, or in the same write as a response long enough that reading
// its body to the end leaves them above the socket (over TLS, decrypted
// in the same record).
func TestUnsolicitedBytes(t *testing.T) {
	long := strings.Repeat("x", 9000)
	for _, scheme := range schemes {
		for _, same := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/same-write=%v", scheme, same), func(t *testing.T) {
				checkLeaks(t)
				wrote := make(chan struct{}, 2)
				var n int
				var mu sync.Mutex
				u := newRawUpstreamOver(t, scheme, func(c net.Conn, br *bufio.Reader) {
					for {
						req, err := readHead(br)
						if err != nil {
							return
						}
						mu.Lock()
						n++
						id := n
						mu.Unlock()
						stale := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
						switch {
						case req.URL.Path != "/extra":
							fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d", id)
						case same:
							fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s%s", len(long), long, stale)
							wrote <- struct{}{}
						default:
							fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(long), long)
							// Sent separately, after the response: lands while idle.
							io.WriteString(c, stale)
							wrote <- struct{}{}
						}
					}
				})
				tr := newTransport(t)
				tr.TLSClientConfig = u.TLS
				if _, body := get(t, tr, "GET", u.URL+"/extra", nil); body != long {
					t.Fatalf("first body of %d bytes", len(body))
				}
				within(t, wrote, "the extra bytes")
				if _, body := get(t, tr, "GET", u.URL, nil); body != "2" {
					t.Errorf("second body %q, want 2: the upstream's extra bytes were taken for the response", body)
				}
			})
		}
	}
}

// An upstream that writes a body after its answer to a HEAD (some
// frameworks do) must not hand the next client that body, or, when the
// body is itself a response, that forged response: each client gets its
// own answer. The body goes out once the HEAD's answer was read, so it
// lands while the connection is idle in the pool; in a TLS record of its
// own, under TLS.
func TestHeadWithBody(t *testing.T) {
	for _, scheme := range schemes {
		t.Run(scheme, func(t *testing.T) {
			checkLeaks(t)
			read := make(chan struct{})
			wrote := make(chan struct{}, 1)
			forged := "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nyou are mallory"
			u := newRawUpstreamOver(t, scheme, func(c net.Conn, br *bufio.Reader) {
				for {
					req, err := readHead(br)
					if err != nil {
						return
					}
					if req.Method == "HEAD" {
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(forged))
						<-read
						io.WriteString(c, forged)
						wrote <- struct{}{}
						continue
					}
					you := "you are " + req.URL.Query().Get("tag")
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(you), you)
				}
			})
			tr := newTransport(t)
			tr.TLSClientConfig = u.TLS
			res, _ := get(t, tr, "HEAD", u.URL+"/headbody", nil)
			if res.ContentLength != int64(len(forged)) {
				t.Fatalf("HEAD: Content-Length %d", res.ContentLength)
			}
			close(read)
			within(t, wrote, "the body after the HEAD")
			if _, body := get(t, tr, "GET", u.URL+"/account?tag=victim", nil); body != "you are victim" {
				t.Errorf("victim got %q, want its own response", body)
			}
			if _, body := get(t, tr, "GET", u.URL+"/account?tag=mallory", nil); body != "you are mallory" {
				t.Errorf("the next client got %q, want its own response", body)
			}
		})
	}
}

// The TLS layer reads ahead: with the last record of a response it may
// take the first bytes of a record the upstream sent after it. A pooled
// connection holding part of a record is not idle, even though nothing
// is in the socket and nothing has been decrypted: the rest of that
// record, arriving once the next request is sent, would be read as its
// response.
func TestPartialRecordWhileIdle(t *testing.T) {
	checkLeaks(t)
	srv, cli := testTLS(t)
	forged := "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nyou are mallory"
	u := newRawUpstream(t, func(c net.Conn, _ *bufio.Reader) {
		sc := &splitConn{Conn: c}
		tc := tls.Server(sc, srv)
		defer tc.Close()
		br := bufio.NewReader(tc)
		for {
			req, err := readHead(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/first" {
				// The response's record goes out with the first 3 bytes
				// of the next one; the rest of that waits for a request.
				sc.mu.Lock()
				sc.hold = true
				sc.mu.Unlock()
				io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
				io.WriteString(tc, forged)
				continue
			}
			sc.release()
			you := "you are " + req.URL.Query().Get("tag")
			fmt.Fprintf(tc, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(you), you)
		}
	})
	url := strings.Replace(u.URL, "http:", "https:", 1)
	tr := newTransport(t)
	tr.TLSClientConfig = cli
	if _, body := get(t, tr, "GET", url+"/first", nil); body != "first" {
		t.Fatalf("first body %q", body)
	}
	if _, body := get(t, tr, "GET", url+"/account?tag=victim", nil); body != "you are victim" {
		t.Errorf("victim got %q, want its own response", body)
	}
}

// splitConn is the server's socket in TestPartialRecordWhileIdle: once
// hold is set, it keeps one write back and sends it with the first 3
// bytes of the next, keeping the rest of that until release.
type splitConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	held []byte
	rest []byte
}

func (c *splitConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.hold:
		return c.Conn.Write(p)
	case c.held == nil:
		c.held = append([]byte(nil), p...)
		return len(p), nil
	}
	c.hold = false
	c.rest = append([]byte(nil), p[3:]...)
	if _, err := c.Conn.Write(append(c.held, p[:3]...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *splitConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rest != nil {
		c.Conn.Write(c.rest)
		c.rest = nil
	}
}

// A request that finds its pooled connection closed (the upstream closed
// it while idle and the request crossed the close: an end before any
// byte of a response) is sent again on a fresh connection when that
// repeats nothing the upstream could have acted on: a bodiless request
// of any method, or one whose body was not read yet (waiting for 100
// Continue). Otherwise its error says ErrClosedIdle.
func TestClosedWhileIdleRetry(t *testing.T) {
	for _, scheme := range schemes {
		t.Run(scheme, func(t *testing.T) {
			checkLeaks(t)
			// Each connection answers its first request, echoing the
			// body, and drops the second without a byte.
			u := newRawUpstreamOver(t, scheme, func(c net.Conn, br *bufio.Reader) {
				for i := 0; ; i++ {
					req, err := readHead(br)
					if err != nil || i == 1 {
						return
					}
					if req.Header.Get("Expect") == "100-continue" {
						io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
					}
					b, _ := io.ReadAll(req.Body)
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\nok%s", len(b)+2, b)
				}
			})
			tr := newTransport(t)
			tr.TLSClientConfig = u.TLS
			tr.ExpectContinueTimeout = 10 * time.Second
			get(t, tr, "GET", u.URL, nil) // leaves a dying connection in the pool
			if _, body := get(t, tr, "POST", u.URL, nil); body != "ok" {
				t.Errorf("bodiless POST on a dying pooled connection: body %q", body)
			}
			if n := u.conns.Load(); n != 2 {
				t.Errorf("%d connections, want 2 (one retry)", n)
			}
			req, _ := http.NewRequest("PUT", u.URL, strings.NewReader("payload"))
			req.Header.Set("Expect", "100-continue")
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("PUT with Expect: 100-continue on a dying pooled connection: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if string(b) != "okpayload" {
				t.Errorf("PUT with Expect: 100-continue on a dying pooled connection: body %q, want the whole body echoed", b)
			}
			if n := u.conns.Load(); n != 3 {
				t.Errorf("%d connections, want 3 (one more retry)", n)
			}
			// A body already sent cannot be sent again.
			req, _ = http.NewRequest("POST", u.URL, strings.NewReader("body"))
			_, err = tr.RoundTrip(req)
			if !errors.Is(err, ErrClosedIdle) {
				t.Errorf("POST with a body on a dying pooled connection: err %v, want ErrClosedIdle", err)
			}
			if n := u.conns.Load(); n != 3 {
				t.Errorf("%d connections, want 3 (no retry of a sent body)", n)
			}
		})
	}
}

// A TLS connection that is idle passes the idle check: it is reused, not
// redialled (the check must not mistake the TLS layer's state for bytes).
func TestReusesTLSConnection(t *testing.T) {
	checkLeaks(t)
	u, cfg := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	tr := newTransport(t)
	tr.TLSClientConfig = cfg
	for i := range 5 {
		if _, body := get(t, tr, "GET", u.URL, nil); body != "ok" {
			t.Fatalf("request %d: body %q", i, body)
		}
	}
	if n := u.opened.Load(); n != 1 {
		t.Errorf("%d connections for 5 sequential requests, want 1", n)
	}
}
