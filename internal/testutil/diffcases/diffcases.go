// Package diffcases is the table of upstream behaviours and client
// requests that the differential tests send through ringlb's HTTP/1.1
// transport and through net/http's, to compare what the client receives:
// the transport's own test (balancer/transport/h1) and the Balancer's.
package diffcases

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

// Case is one upstream behaviour and one client request.
type Case struct {
	Name string
	// The upstream answers on path "/"+Name: Handler, or Raw for one that
	// gets the connection.
	Handler http.Handler
	Raw     func(c net.Conn, br *bufio.Reader)
	// Request is what the client sends, raw; "{host}" is the front's
	// address. It asks to close, so that the client reads to EOF.
	Request string
	Body    []byte // sent after Request, while the response is read
	// Aborted: the front aborts the client connection without a byte.
	Aborted bool
	// Then, if set, is a second raw request sent on a new client
	// connection once the first is answered and Wait (if set) returned:
	// it may reuse the first's upstream connection.
	Then string
	Wait func(t testing.TB)
}

// Answer is a raw upstream that reads one request and writes answer.
func Answer(answer string) func(c net.Conn, br *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(c, answer)
		}
	}
}

// Common returns the cases every differential test sends. Raw upstreams
// whose bodies have no length send a Content-Type: without one, whether
// the front's server sniffs one depends on a race inside ReverseProxy
// (its first flush timer against the first body write), not on the
// transport.
func Common() []Case {
	big := bytes.Repeat([]byte("abcdefghij"), 100_000)
	sent := make(chan struct{}, 1)
	return []Case{
		{Name: "head", Handler: testnet.EchoRequest, Request: "HEAD /head HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{Name: "204", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }),
			Request: "GET /204 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{Name: "304", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Etag", `"v1"`)
			w.WriteHeader(304)
		}), Request: "GET /304 HTTP/1.1\r\nHost: {host}\r\nIf-None-Match: \"v1\"\r\nConnection: close\r\n\r\n"},
		{Name: "post-length", Handler: testnet.EchoRequest, Request: "POST /post-length HTTP/1.1\r\nHost: {host}\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world"},
		{Name: "post-chunked-trailers", Handler: testnet.EchoRequest, Request: "POST /post-chunked-trailers HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nTrailer: X-Check\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-Check: 42\r\n\r\n"},
		{Name: "expect-continue", Handler: testnet.EchoRequest, Request: "PUT /expect-continue HTTP/1.1\r\nHost: {host}\r\nContent-Length: 7\r\nExpect: 100-continue\r\nConnection: close\r\n\r\npayload"},
		{Name: "early-hints", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "after hints")
		}), Request: "GET /early-hints HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{Name: "upstream-close", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}), Request: "GET /upstream-close HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{Name: "http10-until-eof", Raw: Answer("HTTP/1.0 200 OK\r\nContent-Type: application/x-test\r\nX-Old: yes\r\n\r\nbody until the end"),
			Request: "GET /http10-until-eof HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{Name: "chunked-trailers-raw", Raw: Answer("HTTP/1.1 200 OK\r\nContent-Type: application/x-test\r\nTrailer: X-T1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T1: one\r\nX-Unannounced: two\r\n\r\n"),
			Request: "GET /chunked-trailers-raw HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{Name: "413-early", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "too big", http.StatusRequestEntityTooLarge)
		}), Request: fmt.Sprintf("POST /413-early HTTP/1.1\r\nHost: {host}\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(big)), Body: big},
		{Name: "big-response", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write(big)
		}), Request: "GET /big-response HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{Name: "upgrade", Raw: func(c net.Conn, br *bufio.Reader) {
			if r, err := http.ReadRequest(br); err == nil && r.Header.Get("Upgrade") == "echo" {
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nupgraded and done")
			}
		}, Request: "GET /upgrade HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"},
		{Name: "garbage", Raw: Answer("this is not http\r\n\r\n"),
			Request: "GET /garbage HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{Name: "head-then-body", Raw: headThenBody(sent), Request: "HEAD /headbody HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
			Then: "GET /account?tag=victim HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
			Wait: func(t testing.TB) {
				select {
				case <-sent:
				case <-time.After(10 * time.Second):
					t.Fatal("the body after the HEAD was not sent")
				}
			}},
		{Name: "truncated", Raw: Answer("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"),
			Request: "GET /truncated HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n", Aborted: true},
	}
}

// headThenBody is an upstream that answers HEAD with a head announcing a
// body and then sends that body anyway (some frameworks do), a forged
// response, and reports on sent when it is written; other requests get
// "you are TAG": the next request, whoever sends it, must get its own
// answer.
func headThenBody(sent chan<- struct{}) func(c net.Conn, br *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		forged := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 15\r\n\r\nyou are mallory"
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.Method == "HEAD" {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", len(forged))
				io.WriteString(c, forged)
				sent <- struct{}{}
				continue
			}
			you := "you are " + req.URL.Query().Get("tag")
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(you), you)
		}
	}
}

// Exchange sends c's request (and its follow-up, after c.Wait) to the
// front at addr as host, on raw connections, and returns what came back.
func Exchange(t testing.TB, addr, host string, c Case) string {
	t.Helper()
	var body io.Reader
	if c.Body != nil {
		body = bytes.NewReader(c.Body)
	}
	out := testnet.RawExchange(t, addr, strings.ReplaceAll(c.Request, "{host}", host), body)
	if c.Then != "" {
		if c.Wait != nil {
			c.Wait(t)
		}
		out += "\nthen:\n" + testnet.RawExchange(t, addr, strings.ReplaceAll(c.Then, "{host}", host), nil)
	}
	return out
}
