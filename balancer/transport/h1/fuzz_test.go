package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzUpstreamResponse has a fake upstream on loopback answer a first
// request with arbitrary bytes, then asks a second request. Whatever the
// first answer was (valid, truncated, oversized, followed by a forged
// response, 1xx, 101, garbage), the second request must get its own
// response, identified by a nonce the input cannot know, and nothing may
// panic. That is: no input desynchronises the pool. Each input runs over
// plain TCP and over TLS, where stray bytes hide in the TLS layer's
// buffers rather than in the socket.
func FuzzUpstreamResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nX-Id: forged\r\nContent-Length: 6\r\n\r\nforged",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: v\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nextra",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n",
		"garbage\r\n\r\n",
		"",
		// A forged response behind one longer than the connection's read
		// buffer: what is left of it sits below that buffer, in the socket
		// or, over TLS, in the TLS layer's.
		"HTTP/1.1 200 OK\r\nContent-Length: 6000\r\n\r\n" + strings.Repeat("z", 6000) + "HTTP/1.1 200 OK\r\nX-Id: forged\r\nContent-Length: 6\r\n\r\nforged",
	} {
		f.Add([]byte(s))
	}
	var payload atomic.Pointer[[]byte]
	written := make(chan string, 16)
	var nonce atomic.Int64
	srvTLS, cliTLS := testTLS(f)
	var wg sync.WaitGroup
	defer wg.Wait()
	url := map[string]string{}
	for _, scheme := range schemes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Fatal(err)
		}
		defer ln.Close()
		url[scheme] = scheme + "://" + ln.Addr().String() + "/"
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if scheme == "https" {
					c = tls.Server(c, srvTLS)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					fuzzServe(c, &payload, written)
				}()
			}
		}()
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		// Nothing may hang either: a stuck exchange panics with every
		// goroutine's stack, which the fuzzer records as a crasher.
		watchdog := time.AfterFunc(10*time.Second, func() {
			buf := make([]byte, 1<<20)
			panic(fmt.Sprintf("hung on %q\n%s", data, buf[:runtime.Stack(buf, true)]))
		})
		defer watchdog.Stop()
		payload.Store(&data)
		for _, scheme := range schemes {
			fuzzExchange(t, url[scheme], cliTLS, data, written, nonce.Add(1))
		}
	})
}

// fuzzServe answers requests on c: one whose X-Id starts with "first-"
// with the fuzzer's bytes (then it sends the X-Id on written), any other
// with its X-Id as the body.
func fuzzServe(c net.Conn, payload *atomic.Pointer[[]byte], written chan<- string) {
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		id := req.Header.Get("X-Id")
		if strings.HasPrefix(id, "first-") {
			writeApart(c, *payload.Load())
			select {
			case written <- id:
			default:
			}
			continue
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Id: %s\r\nContent-Length: %d\r\n\r\n%s", id, len(id), id)
	}
}

// writeApart writes data with one write for each part that starts with
// "HTTP/" (and one for what comes before the first), as an upstream
// sending a forged response after its own does: over TLS each write is a
// record of its own, which arrives after the TLS layer has handed over
// the response before it.
func writeApart(c net.Conn, data []byte) {
	for len(data) > 0 {
		i := bytes.Index(data[1:], []byte("HTTP/"))
		if i < 0 {
			c.Write(data)
			return
		}
		c.Write(data[:i+1])
		data = data[i+1:]
	}
}

// fuzzExchange sends url a first request answered with the fuzzer's data,
// then, once the upstream has written all of that (bytes arriving after
// the second request is sent cannot be told from its response, by any
// client), a second that must get its own answer.
func fuzzExchange(t *testing.T, url string, cfg *tls.Config, data []byte, written <-chan string, n int64) {
	// The second request's answer comes at once, but a loaded machine may
	// take a while to deliver it: the watchdog bounds it.
	tr := &Transport{MaxIdleConnsPerHost: 1, ResponseHeaderTimeout: 5 * time.Second, TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()

	// The first request may fail or hang on an incomplete answer:
	// bounded by its context.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	first := fmt.Sprintf("first-%d", n)
	req.Header.Set("X-Id", first)
	if res, err := tr.RoundTrip(req); err == nil {
		if res.StatusCode != http.StatusSwitchingProtocols {
			io.Copy(io.Discard, res.Body) // a 101's body is the connection: never ends
		}
		res.Body.Close()
	}
	cancel()
	timeout := time.After(2 * time.Second)
	for done := false; !done; {
		select {
		case id := <-written:
			done = id == first
		case <-timeout:
			done = true
		}
	}

	want := fmt.Sprintf("second-%d", n)
	req, _ = http.NewRequest("GET", url, nil)
	req.Header.Set("X-Id", want)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("second request after %q: %v", data, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.Header.Get("X-Id") != want || string(b) != want {
		t.Fatalf("second request after %q: got X-Id %q, body %q, err %v; want %q", data, res.Header.Get("X-Id"), b, err, want)
	}
}
