package balancer

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/h1"
	"github.com/ringlb/ringlb/cmd/ringlb/certs/certstest"
	"github.com/ringlb/ringlb/internal/testnet"
)

// transportCase is one upstream behaviour and one client request, sent
// through a Balancer.
type transportCase struct {
	name string
	// The upstream: a handler, or raw for one that gets the connection.
	handler http.Handler
	raw     func(c net.Conn, br *bufio.Reader)
	// request is what the client sends, raw; "{host}" is the front's
	// address. It asks to close, so that the client reads to EOF.
	request string
	body    []byte // sent after request, while the response is read
	// then, if set, is a second raw request sent on a new client
	// connection once the first is answered and wait (if set) returned:
	// it may reuse the first's upstream connection.
	then string
	wait func(t *testing.T)
}

func transportCases() []transportCase {
	big := bytes.Repeat([]byte("abcdefghij"), 100_000)
	ok := func(c net.Conn, br *bufio.Reader, answer string) {
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(c, answer)
		}
	}
	sent := make(chan struct{}, 1)
	return []transportCase{
		{name: "get", handler: testnet.EchoRequest, request: "GET /get?q=1;x=%zz HTTP/1.1\r\nHost: {host}\r\nX-A: 1\r\nX-A: 2\r\nX-Forwarded-For: 203.0.113.9\r\nConnection: close\r\n\r\n"},
		{name: "head", handler: testnet.EchoRequest, request: "HEAD /head HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "204", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }),
			request: "GET /204 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "304", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Etag", `"v1"`)
			w.WriteHeader(304)
		}), request: "GET /304 HTTP/1.1\r\nHost: {host}\r\nIf-None-Match: \"v1\"\r\nConnection: close\r\n\r\n"},
		{name: "post-length", handler: testnet.EchoRequest, request: "POST /post-length HTTP/1.1\r\nHost: {host}\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world"},
		{name: "post-chunked-trailers", handler: testnet.EchoRequest, request: "POST /post-chunked-trailers HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nTrailer: X-Check\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-Check: 42\r\n\r\n"},
		{name: "expect-continue", handler: testnet.EchoRequest, request: "PUT /expect-continue HTTP/1.1\r\nHost: {host}\r\nContent-Length: 7\r\nExpect: 100-continue\r\nConnection: close\r\n\r\npayload"},
		{name: "early-hints", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "after hints")
		}), request: "GET /early-hints HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "upstream-close", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}), request: "GET /upstream-close HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "http10-until-eof", raw: func(c net.Conn, br *bufio.Reader) {
			ok(c, br, "HTTP/1.0 200 OK\r\nContent-Type: application/x-test\r\nX-Old: yes\r\n\r\nbody until the end")
		}, request: "GET /http10-until-eof HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "chunked-trailers-raw", raw: func(c net.Conn, br *bufio.Reader) {
			ok(c, br, "HTTP/1.1 200 OK\r\nContent-Type: application/x-test\r\nTrailer: X-T1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T1: one\r\nX-Unannounced: two\r\n\r\n")
		}, request: "GET /chunked-trailers-raw HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "413-early", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "too big", http.StatusRequestEntityTooLarge)
		}), request: fmt.Sprintf("POST /413-early HTTP/1.1\r\nHost: {host}\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(big)), body: big},
		{name: "big-response", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write(big)
		}), request: "GET /big-response HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "upgrade", raw: func(c net.Conn, br *bufio.Reader) {
			if r, err := http.ReadRequest(br); err == nil && r.Header.Get("Upgrade") == "echo" {
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nupgraded and done")
			}
		}, request: "GET /upgrade HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"},
		{name: "upgrade-mismatch", raw: func(c net.Conn, br *bufio.Reader) {
			ok(c, br, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		}, request: "GET /upgrade-mismatch HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade, close\r\nUpgrade: websocket, foo\r\n\r\n"},
		{name: "garbage", raw: func(c net.Conn, br *bufio.Reader) {
			ok(c, br, "this is not http\r\n\r\n")
		}, request: "GET /garbage HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "no-answer", raw: func(c net.Conn, br *bufio.Reader) {
			http.ReadRequest(br) // and close
		}, request: "POST /no-answer HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"},
		{name: "slow-head", raw: func(c net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err == nil {
				br.ReadByte() // never answers: the response header timeout
			}
		}, request: "GET /slow-head HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "head-then-body", raw: func(c net.Conn, br *bufio.Reader) {
			// A body after the head of a HEAD's answer (some frameworks
			// send one), holding a forged response: the next request,
			// whoever sends it, must get its own answer.
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
		}, request: "HEAD /headbody HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
			then: "GET /account?tag=victim HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
			wait: func(t *testing.T) {
				select {
				case <-sent:
				case <-time.After(10 * time.Second):
					t.Fatal("the body after the HEAD was not sent")
				}
			}},
		{name: "truncated", raw: func(c net.Conn, br *bufio.Reader) {
			ok(c, br, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
		}, request: "GET /truncated HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
		{name: "silent-body", raw: func(c net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err == nil {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
				br.ReadByte() // then nothing: timeouts.read cuts it
			}
		}, request: "GET /silent-body HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"},
	}
}

// TestTransportsAgree sends the same requests through a Balancer whose
// http1 upstreams use h1.Transport and through one that uses net/http's
// Transport, to the same upstreams over plain TCP and over TLS, and
// compares what the client received (status lines, headers but Date,
// bodies, trailers, 1xx responses, and whether the connection was cut).
func TestTransportsAgree(t *testing.T) {
	ca := certstest.NewCA(t)
	leaf := ca.Issue(t, certstest.Options{})
	for _, secure := range []bool{false, true} {
		var srv *tls.Config
		var roots *x509.CertPool
		scheme := "http"
		if secure {
			srv, roots, scheme = &tls.Config{Certificates: []tls.Certificate{leaf.Pair(t)}}, ca.Pool(), "https"
		}
		for _, c := range transportCases() {
			t.Run(scheme+"/"+c.name, func(t *testing.T) {
				target := caseUpstream(t, c, srv)
				got := throughBalancer(t, target, roots, c, false)
				want := throughBalancer(t, target, roots, c, true)
				// net/http's reader may still be decrypting the bytes sent after the
				// first answer when the second request comes, which it then takes
				// for that request's answer (a loaded machine shows it): try again.
				for i := 0; i < 3 && c.then != "" && !strings.Contains(want, "you are victim"); i++ {
					t.Logf("net/http gave the second request the stray bytes; again")
					want = throughBalancer(t, target, roots, c, true)
				}
				agree(t, c, got, want)
			})
		}
	}
}

func agree(t *testing.T, c transportCase, got, want string) {
	// With net/http's Transport the client sometimes gets two 100
	// Continue: its writer may read the body (the front's server
	// then sends its own 100) before its reader forwards the
	// upstream's. h1 forwards first, so one, always.
	want = strings.Replace(want, "HTTP/1.1 100 Continue\nHTTP/1.1 100 Continue\n", "HTTP/1.1 100 Continue\n", 1)
	if got != want {
		t.Errorf("responses differ\nh1:\n%s\nnet/http:\n%s", got, want)
	}
	if c.then != "" && !strings.Contains(want, "you are victim") {
		t.Errorf("net/http's second response:\n%s", want)
	}
}

// caseUpstream starts c's upstream, over TLS with srv when srv is not nil,
// and returns its URL.
func caseUpstream(t *testing.T, c transportCase, srv *tls.Config) string {
	t.Helper()
	if c.handler != nil {
		u := httptest.NewUnstartedServer(c.handler)
		t.Cleanup(u.Close)
		if srv != nil {
			u.TLS = srv
			u.StartTLS()
		} else {
			u.Start()
		}
		return u.URL
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				if srv != nil {
					tc := tls.Server(conn, srv)
					if tc.Handshake() != nil {
						return
					}
					defer tc.Close()
					c.raw(tc, bufio.NewReader(tc))
					return
				}
				c.raw(conn, bufio.NewReader(conn))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, conn := range conns {
			conn.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	if srv != nil {
		return "https://" + ln.Addr().String()
	}
	return "http://" + ln.Addr().String()
}

// throughBalancer serves a Balancer with target as its one upstream,
// sends c's request to it and returns the response as
// testnet.CanonicalResponse renders it (and then c.then's response, if
// any). std picks net/http's Transport for the upstream; roots verify an
// https upstream.
func throughBalancer(t *testing.T, target string, roots *x509.CertPool, c transportCase, std bool) string {
	t.Helper()
	u := mustURL(t, target)
	opts := baseOptions([]UpstreamOptions{{Name: "u", URL: u, Addr: u.Host, Weight: 1}})
	opts.UpstreamTLS.RootCAs = roots
	opts.Timeouts.ResponseHeader = 300 * time.Millisecond
	opts.Timeouts.Read = 300 * time.Millisecond
	defer func(was bool) { stdHTTP1 = was }(stdHTTP1)
	stdHTTP1 = std
	b, err := New(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	switch rt := b.transport.For(ProtocolHTTP1).(type) {
	case *h1.Transport:
		if std {
			t.Fatalf("transport %T, want net/http's", rt)
		}
	case *http.Transport:
		if !std {
			t.Fatalf("transport %T, want h1's", rt)
		}
	default:
		t.Fatalf("transport %T", rt)
	}
	front := httptest.NewUnstartedServer(b)
	front.Config.ErrorLog = log.New(io.Discard, "", 0)
	front.Start()
	defer front.Close()
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	out := testnet.RawExchange(t, front.Listener.Addr().String(), strings.ReplaceAll(c.request, "{host}", "front.example"), body)
	if c.then != "" {
		if c.wait != nil {
			c.wait(t)
		}
		out += "\nthen:\n" + testnet.RawExchange(t, front.Listener.Addr().String(), strings.ReplaceAll(c.then, "{host}", "front.example"), nil)
	}
	return out
}
