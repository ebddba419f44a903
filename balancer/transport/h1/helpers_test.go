package h1

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// checkLeaks fails the test if, once its other cleanups have run,
// goroutines or open file descriptors do not return to what they were
// when checkLeaks was called. Call it first, so that it runs last.
func checkLeaks(t *testing.T) {
	t.Helper()
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close() // the netpoller's own descriptors exist from here on
	}
	g0, f0 := runtime.NumGoroutine(), openFDs()
	names0 := fdNames()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			g, f := runtime.NumGoroutine(), openFDs()
			if g <= g0 && f <= f0 {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("leak: goroutines %d -> %d, fds %d -> %d %v -> %v\n%s", g0, g, f0, f, names0, fdNames(), buf)
				return
			}
			<-tick.C
		}
	})
}

func fdNames() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var names []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		names = append(names, l)
	}
	return names
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0 // not Linux: fds are not checked
	}
	return len(ents)
}

// upstream is an httptest.Server that counts the connections it accepted
// and closed.
type upstream struct {
	*httptest.Server
	opened, closed atomic.Int64
}

func newUpstream(t *testing.T, h http.Handler) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewUnstartedServer(h)
	u.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.closed.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// newTLSUpstream is newUpstream over TLS (HTTP/1.1 only), with the client
// configuration that verifies it.
func newTLSUpstream(t *testing.T, h http.Handler) (*upstream, *tls.Config) {
	t.Helper()
	srv, cli := testTLS(t)
	u := &upstream{}
	u.Server = httptest.NewUnstartedServer(h)
	u.TLS = srv
	u.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.closed.Add(1)
		}
	}
	u.StartTLS()
	t.Cleanup(u.Close)
	return u, cli
}

// testTLS returns a server configuration with a certificate for
// 127.0.0.1 and localhost from a throwaway CA, and a client configuration
// trusting that CA.
func testTLS(t testing.TB) (server, client *tls.Config) {
	ca := certstest.NewCA(t)
	leaf := ca.Issue(t, certstest.Options{})
	return &tls.Config{Certificates: []tls.Certificate{leaf.Pair(t)}}, &tls.Config{RootCAs: ca.Pool()}
}

// schemes are the two ways to reach an upstream: tests of what crosses
// the connection run over both.
var schemes = []string{"http", "https"}

// newTransport returns a Transport whose idle connections are closed when
// the test ends.
func newTransport(t *testing.T) *Transport {
	tr := &Transport{MaxIdleConnsPerHost: 16, ResponseHeaderTimeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// rawUpstream is a loopback listener whose connections are handed to
// serve, one goroutine each, for upstreams that must misbehave in ways
// net/http's server will not.
type rawUpstream struct {
	ln     net.Listener
	URL    string
	TLS    *tls.Config // for a client of an https upstream; nil for http
	conns  atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	active []net.Conn
}

func newRawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *rawUpstream {
	return newRawUpstreamOver(t, "http", serve)
}

// newRawUpstreamOver is newRawUpstream for scheme http or https; over
// https, serve gets the connection after the TLS handshake, as a
// *tls.Conn, and u.TLS is the client configuration that verifies it.
func newRawUpstreamOver(t *testing.T, scheme string, serve func(c net.Conn, br *bufio.Reader)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, URL: scheme + "://" + ln.Addr().String()}
	if scheme == "https" {
		var srv *tls.Config
		srv, u.TLS = testTLS(t)
		serve = overTLS(srv, serve)
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			u.mu.Lock()
			u.active = append(u.active, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for _, c := range u.active {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

// overTLS wraps serve so that it gets the TLS server side of each
// connection, once the handshake succeeded.
func overTLS(cfg *tls.Config, serve func(c net.Conn, br *bufio.Reader)) func(c net.Conn, br *bufio.Reader) {
	return func(c net.Conn, _ *bufio.Reader) {
		tc := tls.Server(c, cfg)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.Handshake() != nil {
			return
		}
		tc.SetDeadline(time.Time{})
		defer tc.Close()
		serve(tc, bufio.NewReader(tc))
	}
}

// halfClose ends the upstream's side of c (plain or TLS: a close_notify
// then a FIN) and leaves the client's side open.
func halfClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// within fails the test unless ch delivers before the deadline.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
