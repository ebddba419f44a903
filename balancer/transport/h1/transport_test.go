package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

func get(t *testing.T, tr http.RoundTripper, method, url string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	res.Body.Close()
	return res, string(b)
}

func TestReusesConnection(t *testing.T) {
	checkLeaks(t)
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	tr := newTransport(t)
	for i := range 5 {
		res, body := get(t, tr, "GET", u.URL+"/p"+strconv.Itoa(i), nil)
		if res.StatusCode != 200 || body != "hello /p"+strconv.Itoa(i) {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, body)
		}
	}
	if n := u.opened.Load(); n != 1 {
		t.Errorf("upstream accepted %d connections for 5 serial requests, want 1", n)
	}
	if n := tr.pool.idleCount(); n != 1 {
		t.Errorf("idle connections: %d, want 1", n)
	}
}

// echo answers with the request body, announcing and sending the
// request's trailers back as response trailers.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	for k := range r.Trailer {
		w.Header().Add("Trailer", "Echo-"+k)
	}
	w.Header().Set("X-Request-Length", strconv.FormatInt(r.ContentLength, 10))
	w.Header().Set("X-Request-TE", strings.Join(r.TransferEncoding, ","))
	w.Write(b)
	for k, v := range r.Trailer {
		w.Header()["Echo-"+k] = v
	}
})

// onlyReader hides a body's type so that its length is unknown and the
// request is sent chunked.
type onlyReader struct{ io.Reader }

func TestBodiesBothWays(t *testing.T) {
	checkLeaks(t)
	u := newUpstream(t, echo)
	tr := newTransport(t)
	payload := strings.Repeat("0123456789", 10000) // 100 kB: several writes

	t.Run("content-length", func(t *testing.T) {
		res, body := get(t, tr, "POST", u.URL, strings.NewReader(payload))
		if body != payload || res.Header.Get("X-Request-Length") != "100000" {
			t.Fatalf("length %s, te %q, body %d bytes", res.Header.Get("X-Request-Length"), res.Header.Get("X-Request-TE"), len(body))
		}
		if res.ContentLength != -1 || len(res.TransferEncoding) != 1 {
			t.Errorf("response framing: ContentLength %d, TransferEncoding %q; want chunked", res.ContentLength, res.TransferEncoding)
		}
	})
	t.Run("chunked with trailers", func(t *testing.T) {
		req, _ := http.NewRequest("PUT", u.URL, onlyReader{strings.NewReader(payload)})
		req.Trailer = http.Header{"Checksum": nil}
		req.Body = &trailerSetter{ReadCloser: io.NopCloser(onlyReader{strings.NewReader(payload)}), set: func() { req.Trailer.Set("Checksum", "abc") }}
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := res.Trailer["Echo-Checksum"]; !ok {
			t.Errorf("announced response trailers %v, want Echo-Checksum", res.Trailer)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || string(b) != payload {
			t.Fatalf("body %d bytes, %v", len(b), err)
		}
		if res.Header.Get("X-Request-TE") != "chunked" || res.Header.Get("X-Request-Length") != "-1" {
			t.Errorf("request framing seen upstream: TE %q, length %s", res.Header.Get("X-Request-TE"), res.Header.Get("X-Request-Length"))
		}
		if got := res.Trailer.Get("Echo-Checksum"); got != "abc" {
			t.Errorf("response trailer Echo-Checksum = %q, want abc (the request trailer, echoed)", got)
		}
	})
	t.Run("content-length response", func(t *testing.T) {
		u2 := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "fixed")
		}))
		res, body := get(t, tr, "GET", u2.URL, nil)
		if body != "fixed" || res.ContentLength != 5 {
			t.Fatalf("body %q, ContentLength %d", body, res.ContentLength)
		}
	})
	if n := u.opened.Load(); n != 1 {
		t.Errorf("upstream accepted %d connections, want 1 (each exchange ended cleanly)", n)
	}
}

// trailerSetter calls set when the body reaches EOF, as a server does
// when it has read a chunked body's trailers.
type trailerSetter struct {
	io.ReadCloser
	set func()
}

func (s *trailerSetter) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if err == io.EOF && s.set != nil {
		s.set()
		s.set = nil
	}
	return n, err
}

func TestBodilessResponses(t *testing.T) {
	checkLeaks(t)
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(204)
		case "/304":
			w.Header().Set("Etag", `"x"`)
			w.WriteHeader(304)
		default:
			w.Header().Set("Content-Length", "11")
			io.WriteString(w, "hello world")
		}
	}))
	tr := newTransport(t)
	for _, c := range []struct{ method, path string }{{"HEAD", "/"}, {"GET", "/204"}, {"GET", "/304"}, {"GET", "/"}} {
		res, body := get(t, tr, c.method, u.URL+c.path, nil)
		want := ""
		if c.method == "GET" && c.path == "/" {
			want = "hello world"
		}
		if body != want {
			t.Errorf("%s %s: body %q, want %q", c.method, c.path, body, want)
		}
		if c.method == "HEAD" && res.ContentLength != 11 {
			t.Errorf("HEAD: ContentLength %d, want 11", res.ContentLength)
		}
	}
	if n := u.opened.Load(); n != 1 {
		t.Errorf("upstream accepted %d connections, want 1: a bodiless response must leave the connection reusable", n)
	}
}

// An upstream that answers before reading a large request body must get
// its answer through without the transport waiting on the body write.
func TestAnswerBeforeBody(t *testing.T) {
	checkLeaks(t)
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	}))
	tr := newTransport(t)
	for _, chunked := range []bool{false, true} {
		var body io.Reader = io.LimitReader(zeros{}, 64<<20) // far beyond socket buffers
		n := int64(64 << 20)
		if chunked {
			body, n = onlyReader{body}, -1
		}
		req, _ := http.NewRequest("POST", u.URL, body)
		req.ContentLength = n
		done := make(chan error, 1)
		go func() {
			res, err := tr.RoundTrip(req)
			if err == nil {
				if res.StatusCode != 413 {
					err = fmt.Errorf("status %d, want 413", res.StatusCode)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			done <- err
		}()
		if err := within(t, done, "the 413 response"); err != nil {
			t.Fatalf("chunked=%v: %v", chunked, err)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// readHead reads one request head from a raw connection.
func readHead(br *bufio.Reader) (*http.Request, error) { return http.ReadRequest(br) }

func TestExpectContinue(t *testing.T) {
	checkLeaks(t)
	t.Run("body waits for 100", func(t *testing.T) {
		sent100 := make(chan struct{})
		u := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			req, err := readHead(br)
			if err != nil {
				return
			}
			close(sent100) // before the write: the client cannot see it earlier
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
			b, _ := io.ReadAll(req.Body)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
		})
		tr := newTransport(t)
		tr.ExpectContinueTimeout = time.Minute
		early := make(chan bool, 1)
		body := &firstRead{Reader: strings.NewReader("payload"), first: func() {
			select {
			case <-sent100:
				early <- false
			default:
				early <- true
			}
		}}
		req, _ := http.NewRequest("POST", u.URL, body)
		req.ContentLength = 7
		req.Header.Set("Expect", "100-continue")
		var got100, got1xx int
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got100Continue: func() { got100++ },
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error { got1xx++; return nil },
		}))
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != "payload" {
			t.Errorf("body %q", b)
		}
		if within(t, early, "the body read") {
			t.Error("the body was read before the upstream sent 100 Continue")
		}
		if got100 != 1 || got1xx != 1 {
			t.Errorf("Got100Continue %d, Got1xxResponse %d times; want 1, 1", got100, got1xx)
		}
	})
	t.Run("final answer with close: body withheld", func(t *testing.T) {
		u := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readHead(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno")
		})
		tr := newTransport(t)
		tr.ExpectContinueTimeout = time.Minute
		read := make(chan bool, 1)
		body := &firstRead{Reader: strings.NewReader("payload"), first: func() { read <- true }}
		req, _ := http.NewRequest("POST", u.URL, body)
		req.ContentLength = 7
		req.Header.Set("Expect", "100-continue")
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 417 || string(b) != "no" {
			t.Errorf("%d %q", res.StatusCode, b)
		}
		select {
		case <-read:
			t.Error("the body was read although the upstream refused it and closes")
		default:
		}
	})
	t.Run("final answer keep-alive: body sent", func(t *testing.T) {
		u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "unread") // answers without reading: net/http then discards the body
		}))
		tr := newTransport(t)
		tr.ExpectContinueTimeout = time.Minute
		for range 2 {
			req, _ := http.NewRequest("POST", u.URL, onlyReader{strings.NewReader("payload")})
			req.Header.Set("Expect", "100-continue")
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	})
}

type firstRead struct {
	io.Reader
	first func()
}

func (f *firstRead) Read(p []byte) (int, error) {
	if f.first != nil {
		f.first()
		f.first = nil
	}
	return f.Reader.Read(p)
}

func TestInformationalResponses(t *testing.T) {
	checkLeaks(t)
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "final")
	}))
	tr := newTransport(t)
	var seen []string
	req, _ := http.NewRequest("GET", u.URL, nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			seen = append(seen, fmt.Sprintf("%d %s", code, h.Get("Link")))
			return nil
		},
	}))
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "final" {
		t.Errorf("%d %q", res.StatusCode, b)
	}
	want := []string{"103 </style.css>; rel=preload", "103 "}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("1xx seen %q, want %q", seen, want)
	}

	// Without a hook, a few 1xx are skipped, an endless stream is refused.
	flood := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		for range 100 {
			io.WriteString(c, "HTTP/1.1 102 Processing\r\n\r\n")
		}
	})
	req, _ = http.NewRequest("GET", flood.URL, nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, errTooMany1xx) {
		t.Errorf("100 informational responses: err %v, want %v", err, errTooMany1xx)
	}
}

func TestSwitchingProtocols(t *testing.T) {
	checkLeaks(t)
	u := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		req, err := readHead(br)
		if err != nil || req.Header.Get("Upgrade") != "echo" {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nhi ")
		// Plain types: io.Copy between TCP connections would splice
		// through a pipe that net keeps cached (an fd the leak check sees).
		io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{br})
	})
	tr := newTransport(t)
	req, _ := http.NewRequest("GET", u.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	rwc, ok := res.Body.(io.ReadWriteCloser)
	if res.StatusCode != 101 || !ok {
		t.Fatalf("status %d, body %T: want 101 with an io.ReadWriteCloser", res.StatusCode, res.Body)
	}
	if _, err := io.WriteString(rwc, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(rwc, buf); err != nil || string(buf) != "hi ping" {
		t.Errorf("read %q, %v; want %q", buf, err, "hi ping")
	}
	rwc.Close()
	if n := tr.pool.idleCount(); n != 0 {
		t.Errorf("an upgraded connection was pooled (%d idle)", n)
	}
}

func TestConnectionClose(t *testing.T) {
	checkLeaks(t)
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, r.Header.Get("Connection"))
	}))
	tr := newTransport(t)
	get(t, tr, "GET", u.URL+"/close", nil) // upstream closes
	get(t, tr, "GET", u.URL, nil)
	if n := u.opened.Load(); n != 2 {
		t.Errorf("after a response with Connection: close, %d connections, want 2", n)
	}
	req, _ := http.NewRequest("GET", u.URL, nil)
	req.Close = true
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "close" {
		t.Errorf("upstream saw Connection %q, want close", b)
	}
	get(t, tr, "GET", u.URL, nil)
	if n := u.opened.Load(); n != 3 {
		t.Errorf("after a request with Close, %d connections, want 3", n)
	}

	// Connection: close in the header map, among other tokens, to an
	// upstream that would keep the connection open: the transport
	// closes it.
	raw := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	for i, conn := range [][]string{nil, {"keep-alive, Close"}, {"keep-alive"}, {"close"}} {
		req, _ = http.NewRequest("GET", raw.URL, nil)
		if conn != nil {
			req.Header["Connection"] = conn
		}
		res, err = tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		// Each request after one with close needs a new connection.
		if n, want := raw.conns.Load(), []int64{1, 1, 2, 2}[i]; n != want {
			t.Errorf("request %d (Connection %q): %d connections so far, want %d", i, conn, n, want)
		}
	}
}

func TestEarlyClose(t *testing.T) {
	checkLeaks(t)
	stall := make(chan struct{})
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Has("stall") {
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "0123456789")
			w.(http.Flusher).Flush()
			select {
			case <-stall:
			case <-r.Context().Done():
			}
			return
		}
		w.Write(bytes.Repeat([]byte("x"), n))
	}))
	t.Cleanup(func() { close(stall) })
	tr := newTransport(t)
	read10 := func(url string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(res.Body, make([]byte, 10)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res.Body.Close()
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Close took %v", d)
		}
		if _, err := res.Body.Read(make([]byte, 1)); err == nil {
			t.Error("Read after Close succeeded")
		}
	}
	read10(u.URL + "?n=1000") // the rest is drained: kept
	if n := tr.pool.idleCount(); n != 1 {
		t.Errorf("after closing a body with 990 bytes left: %d idle, want 1", n)
	}
	read10(u.URL + "?n=1000000") // too much left: closed
	if n := tr.pool.idleCount(); n != 0 {
		t.Errorf("after closing a body with ~1 MB left: %d idle, want 0", n)
	}
	read10(u.URL + "?stall=1") // the rest never comes: closed after the drain timeout
	if n := tr.pool.idleCount(); n != 0 {
		t.Errorf("after closing a stalled body: %d idle, want 0", n)
	}
	if n := u.opened.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

func TestCancel(t *testing.T) {
	checkLeaks(t)
	released := make(chan struct{})
	gone := make(chan struct{}, 2)
	arrived := make(chan struct{}, 2)
	u := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		if r.URL.Path == "/body" {
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "0123456789")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-released:
		}
	}))
	defer close(released)
	tr := newTransport(t)

	// While waiting for the head.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", u.URL+"/head", nil)
	errc := make(chan error, 1)
	go func() { _, err := tr.RoundTrip(req); errc <- err }()
	within(t, arrived, "the request upstream")
	cancel()
	if err := within(t, errc, "RoundTrip after cancel"); !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", err)
	}
	within(t, gone, "the upstream to see the connection close")

	// While reading the body.
	ctx, cancel = context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", u.URL+"/body", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(res.Body, make([]byte, 10))
	go cancel()
	if _, err := io.ReadAll(res.Body); !errors.Is(err, context.Canceled) {
		t.Errorf("body read err %v, want context.Canceled", err)
	}
	res.Body.Close()
	within(t, gone, "the upstream to see the connection close")
	if n := tr.pool.idleCount(); n != 0 {
		t.Errorf("%d idle after cancellations, want 0", n)
	}
}

func TestResponseBodyError(t *testing.T) {
	checkLeaks(t)
	u := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
	})
	tr := newTransport(t)
	req, _ := http.NewRequest("GET", u.URL, nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "short" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read %q, %v; want %q, %v", b, err, "short", io.ErrUnexpectedEOF)
	}
	if n := tr.pool.idleCount(); n != 0 {
		t.Errorf("%d idle after a truncated body, want 0", n)
	}
}

type markedDialError struct{ error }

func (e markedDialError) Unwrap() error { return e.error }

func TestTimeoutsAndDialErrors(t *testing.T) {
	checkLeaks(t)
	t.Run("response header", func(t *testing.T) {
		u := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
			readHead(br)
			br.ReadByte() // never answers
		})
		tr := newTransport(t)
		tr.ResponseHeaderTimeout = 50 * time.Millisecond
		req, _ := http.NewRequest("GET", u.URL, nil)
		_, err := tr.RoundTrip(req)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("err %v, want a net.Error with Timeout()", err)
		}
	})
	t.Run("dial timeout", func(t *testing.T) {
		tr := newTransport(t)
		tr.DialTimeout = 50 * time.Millisecond
		tr.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			<-ctx.Done() // a dial that hangs until its deadline
			return nil, markedDialError{ctx.Err()}
		}
		req, _ := http.NewRequest("GET", "http://127.0.0.1:1/", nil)
		_, err := tr.RoundTrip(req)
		var me markedDialError
		if !errors.As(err, &me) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v, want the Dial's own error carrying DeadlineExceeded", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		addr := testnet.RefusedAddr(t)
		tr := newTransport(t)
		var d net.Dialer
		tr.Dial = func(ctx context.Context, network, a string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, a)
			if err != nil {
				return nil, markedDialError{err}
			}
			return c, nil
		}
		req, _ := http.NewRequest("POST", "http://"+addr+"/", strings.NewReader("x"))
		_, err := tr.RoundTrip(req)
		var me markedDialError
		if !errors.As(err, &me) {
			t.Errorf("err %v, want the Dial's marked error", err)
		}
	})
}

func TestIdleLimits(t *testing.T) {
	checkLeaks(t)
	release := make(chan struct{})
	var arrived sync.WaitGroup
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			arrived.Done()
			<-release
		}
		io.WriteString(w, "ok")
	})
	u1, u2 := newUpstream(t, h), newUpstream(t, h)
	tr := newTransport(t)
	tr.MaxIdleConnsPerHost = 2
	tr.MaxIdleConns = 3
	tr.IdleConnTimeout = 200 * time.Millisecond

	// Four requests at once to each upstream: four connections each.
	var wg sync.WaitGroup
	arrived.Add(8)
	for _, u := range []*upstream{u1, u2} {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("GET", u.URL+"/hold", nil)
				res, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}()
		}
	}
	arrived.Wait()
	close(release)
	wg.Wait()
	if n := tr.pool.idleCount(); n != 3 {
		t.Errorf("idle %d, want 3 (2 per host, 3 in all)", n)
	}
	for _, k := range []connKey{{host: strings.TrimPrefix(u1.URL, "http://")}, {host: strings.TrimPrefix(u2.URL, "http://")}} {
		tr.pool.mu.Lock()
		if n := len(tr.pool.idle[k]); n > 2 {
			t.Errorf("%s: %d idle, want <= 2", k.host, n)
		}
		tr.pool.mu.Unlock()
	}
	// The idle timeout empties the pool on its own.
	deadline := time.Now().Add(5 * time.Second)
	for tr.pool.idleCount() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := tr.pool.idleCount(); n != 0 {
		t.Errorf("idle %d long after IdleConnTimeout, want 0", n)
	}
	if o, c := u1.opened.Load()+u2.opened.Load(), u1.closed.Load()+u2.closed.Load(); o != 8 {
		t.Errorf("opened %d, want 8", o)
	} else {
		for c < o && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			c = u1.closed.Load() + u2.closed.Load()
		}
		if c != o {
			t.Errorf("upstreams saw %d of %d connections closed", c, o)
		}
	}

	// CloseIdleConnections.
	get(t, tr, "GET", u1.URL, nil)
	if n := tr.pool.idleCount(); n != 1 {
		t.Fatalf("idle %d, want 1", n)
	}
	tr.CloseIdleConnections()
	if n := tr.pool.idleCount(); n != 0 {
		t.Errorf("idle %d after CloseIdleConnections", n)
	}
}

func TestTLS(t *testing.T) {
	checkLeaks(t)
	u := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}))
	u.EnableHTTP2 = true // the transport must still speak HTTP/1.1
	u.StartTLS()
	t.Cleanup(u.Close)
	pool := x509.NewCertPool()
	pool.AddCert(u.Certificate())
	tr := newTransport(t)
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: "example.com"}
	tr.TLSHandshakeTimeout = 5 * time.Second
	for range 2 {
		res, body := get(t, tr, "GET", u.URL, nil)
		if body != "HTTP/1.1" || res.TLS == nil || !res.TLS.HandshakeComplete {
			t.Errorf("body %q, TLS %v", body, res.TLS)
		}
	}
	if n := tr.pool.idleCount(); n != 1 {
		t.Errorf("idle %d, want 1", n)
	}

	// A wrong root fails the handshake.
	bad := newTransport(t)
	req, _ := http.NewRequest("GET", u.URL, nil)
	if _, err := bad.RoundTrip(req); err == nil {
		t.Error("an unverified certificate was accepted")
	}

	// An upstream that never speaks TLS times out.
	silent := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) { br.ReadByte(); io.Copy(io.Discard, br) })
	slow := newTransport(t)
	slow.TLSHandshakeTimeout = 50 * time.Millisecond
	req, _ = http.NewRequest("GET", strings.Replace(silent.URL, "http:", "https:", 1), nil)
	_, err := slow.RoundTrip(req)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("silent TLS upstream: err %v, want a timeout", err)
	}
}

func TestBadRequests(t *testing.T) {
	tr := newTransport(t)
	for _, c := range []struct {
		name string
		mod  func(r *http.Request)
	}{
		{"scheme", func(r *http.Request) { r.URL.Scheme = "ftp" }},
		{"no host", func(r *http.Request) { r.URL.Host = "" }},
		{"method", func(r *http.Request) { r.Method = "GE T" }},
		{"header name", func(r *http.Request) { r.Header["Bad Name"] = []string{"x"} }},
		{"header value", func(r *http.Request) { r.Header["X"] = []string{"a\r\nInjected: yes"} }},
		{"nil header", func(r *http.Request) { r.Header = nil }},
	} {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:1/", nil)
		c.mod(req)
		if _, err := tr.RoundTrip(req); err == nil || !strings.HasPrefix(err.Error(), "h1: ") {
			t.Errorf("%s: err %v, want an h1: error", c.name, err)
		}
	}
}

func TestResponseHeaderLimit(t *testing.T) {
	checkLeaks(t)
	u := newRawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: ")
		io.Copy(c, io.LimitReader(strings.NewReader(strings.Repeat("a", 1<<20)), 1<<20))
		io.WriteString(c, "\r\nContent-Length: 0\r\n\r\n")
	})
	tr := newTransport(t)
	tr.MaxResponseHeaderBytes = 64 << 10
	req, _ := http.NewRequest("GET", u.URL, nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, errHeaderTooLarge) {
		t.Errorf("1 MiB header with a 64 KiB limit: err %v, want %v", err, errHeaderTooLarge)
	}
	tr.MaxResponseHeaderBytes = 2 << 20
	if res, body := get(t, tr, "GET", u.URL, nil); len(res.Header.Get("X-Big")) != 1<<20 || body != "" {
		t.Errorf("1 MiB header with a 2 MiB limit: X-Big %d bytes", len(res.Header.Get("X-Big")))
	}
}
