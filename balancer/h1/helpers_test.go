package h1

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
	conns  atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	active []net.Conn
}

func newRawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, URL: "http://" + ln.Addr().String()}
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
