package balancer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

// TestUpgradeMismatchIsTheClients: a client asks to upgrade to a token
// list ("websocket, foo") and the upstream, as common WebSocket servers
// do, answers 101 with one of them; ReverseProxy refuses the switch. The
// client asked for it: the upstream's breaker does not count it, the
// request is not retried elsewhere, and the upstream connection is
// closed at once rather than held until a garbage collection.
func TestUpgradeMismatchIsTheClients(t *testing.T) {
	a, other := newBackend(t, "a"), newBackend(t, "b")
	closed := make(chan struct{}, 8)
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := brw.ReadByte(); errors.Is(err, io.EOF) {
			closed <- struct{}{} // ringlb let go of the connection
		}
	}
	opts := baseOptions(upstreamsOf(t, a, other))
	opts.Ring.LoadFactor = 0
	opts.Breaker = breaker.Options{ConsecutiveFailures: 1, FailureStatuses: []int{502, 503, 504}, OpenTimeout: time.Minute}
	b, reg, front := proxy(t, opts)
	key := keyOwnedBy(t, b, "a")
	for i := range 3 {
		req, _ := http.NewRequest(http.MethodGet, front.URL+"/ws?user="+key, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket, foo")
		res, err := front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadGateway {
			t.Errorf("request %d: %d, want 502", i, res.StatusCode)
		}
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("request %d: the upstream connection is still open", i)
		}
	}
	if st := status(t, b, "a"); !st.Available || st.Breaker != "closed" {
		t.Errorf("a: %+v, want available and closed", st)
	}
	if n := other.hits.Load(); n != 0 {
		t.Errorf("retried on b %d times", n)
	}
	if v := metric(t, reg, "ringlb_retries_total", "upstream=a"); v != 0 {
		t.Errorf("ringlb_retries_total{a} = %v", v)
	}
}

// TestReplacedTransportClosesReturnedConns: a reload that rebuilds the
// transport (new timeouts) closes the old one's idle connections, and
// again once its last request is done, so connections that requests in
// flight give back (here a retry's) do not linger until idle_conn.
func TestReplacedTransportClosesReturnedConns(t *testing.T) {
	a := newBackend(t, "a")
	var open atomic.Int64 // b's open connections
	bb := &backend{name: "b"}
	bb.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bb.hits.Add(1)
		io.WriteString(w, "b")
	}))
	bb.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	bb.srv.Start()
	t.Cleanup(bb.srv.Close)
	arrived, release := make(chan struct{}), make(chan struct{})
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		panic(http.ErrAbortHandler) // no response: the GET goes on to b
	}
	opts := baseOptions(upstreamsOf(t, a, bb))
	opts.Ring.LoadFactor = 0
	opts.Timeouts.IdleConn = time.Minute
	b, _, front := proxy(t, opts)
	key := keyOwnedBy(t, b, "a")
	done := make(chan int)
	go func() {
		res, err := front.Client().Get(front.URL + "/?user=" + key)
		if err != nil {
			done <- 0
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		done <- res.StatusCode
	}()
	<-arrived
	opts.Timeouts.IdleConn = 2 * time.Minute // a new transport
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	close(release)
	if code := <-done; code != 200 || bb.hits.Load() != 1 {
		t.Fatalf("retry on b: %d, b hit %d times", code, bb.hits.Load())
	}
	if !testenv.Poll(5*time.Second, func() bool { return open.Load() == 0 }) {
		t.Fatalf("%d connections to b still open in the replaced transport", open.Load())
	}
}

// TestReadTimeoutCutsSilentBody: an upstream that sends its head and a
// few bytes, then nothing, is cut after timeouts.read: the client sees a
// truncated response and the upstream's breaker counts a failure. A body
// whose reads never wait that long is not cut, however long it takes.
func TestReadTimeoutCutsSilentBody(t *testing.T) {
	a := newBackend(t, "a")
	stop := make(chan struct{})
	defer close(stop)
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		if r.URL.Path == "/trickle" { // a byte every 40ms: never silent for 200ms
			for range 20 {
				w.Write([]byte("x"))
				w.(http.Flusher).Flush()
				time.Sleep(40 * time.Millisecond)
			}
			w.Write(make([]byte, 980))
			return
		}
		w.Write([]byte("0123456789"))
		w.(http.Flusher).Flush()
		select { // stall
		case <-stop:
		case <-r.Context().Done():
		}
	}
	opts := baseOptions(upstreamsOf(t, a))
	opts.Timeouts.Read = 200 * time.Millisecond
	opts.Breaker = breaker.Options{ConsecutiveFailures: 2, FailureStatuses: []int{502, 503, 504}, OpenTimeout: time.Minute}
	b, _, front := proxy(t, opts)
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Get(front.URL + "/trickle")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || len(body) != 1000 {
		t.Fatalf("trickling body: %d bytes, %v; want all 1000", len(body), err)
	}
	res, err = c.Get(front.URL + "/stall")
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) || string(body) != "0123456789" {
		t.Fatalf("silent body: %d, %q, %v; want 200 cut after 10 bytes", res.StatusCode, body, err)
	}
	if st := status(t, b, "a"); st.Breaker != "closed" {
		t.Fatalf("after one failure: %+v", st)
	}
	c.Get(front.URL + "/stall") // the second failure in a row opens it
	if st := status(t, b, "a"); st.Breaker != "open" {
		t.Errorf("two silent bodies: %+v, want the breaker open", st)
	}
}

func TestForwardingHeaders(t *testing.T) {
	be := newBackend(t, "a")
	type seen struct {
		host, xff, proto, fhost, foo, conn, keepAlive string
	}
	got := make(chan seen, 1)
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Host, strings.Join(r.Header.Values("X-Forwarded-For"), "|"),
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"),
			r.Header.Get("X-Foo"), r.Header.Get("Connection"), r.Header.Get("Keep-Alive")}
		w.Header().Set("X-Upstream", "spoofed")
		io.WriteString(w, "ok")
	}
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/x", nil)
	req.Host = "shop.example"
	req.Header.Add("X-Forwarded-For", "198.51.100.1")
	req.Header.Add("X-Forwarded-For", "198.51.100.2, 198.51.100.3")
	req.Header.Set("Connection", "X-Foo")
	req.Header.Set("X-Foo", "hop")
	req.Header.Set("Keep-Alive", "timeout=5")
	res, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	s := <-got
	want := seen{host: "shop.example", xff: "198.51.100.1, 198.51.100.2, 198.51.100.3, 127.0.0.1",
		proto: "http", fhost: "shop.example"}
	if s != want {
		t.Errorf("upstream saw %+v\nwant           %+v", s, want)
	}
	if v := res.Header.Values("X-Upstream"); len(v) != 1 || v[0] != "a" {
		t.Errorf("X-Upstream %q, want [a]", v)
	}
}

func TestSSEStreams(t *testing.T) {
	be := newBackend(t, "a")
	release := make(chan struct{})
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", "31") // not chunked: only the SSE rule flushes
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: two-and-more\n\n")
	}
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/events", nil)
	res, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(release) // the second event exists only now
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: two-and-more\n\n" {
		t.Fatalf("rest: %q, %v", rest, err)
	}
}

func TestWebSocketUpgrade(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
			http.Error(w, "not an upgrade", 400)
			return
		}
		echoUpgrade(w, r)
	}
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	conn := dialRaw(t, front, 10*time.Second)
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: ws.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("X-Upstream") != "a" {
		t.Fatalf("status %d, X-Upstream %q", res.StatusCode, res.Header.Get("X-Upstream"))
	}
	for _, msg := range []string{"hello", "again"} {
		io.WriteString(conn, msg)
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo %q: %q, %v", msg, buf, err)
		}
	}
}

// TestQueryForwardedAsReceived: the request target's query reaches the
// upstream exactly as the client sent it, also when it holds ";", a bad
// "%" escape or more parameters than net/url parses (ReverseProxy would
// re-encode it: drop pairs and sort the rest, breaking signed URLs).
func TestQueryForwardedAsReceived(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.RequestURI) }
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	many := strings.Repeat("p=1&", 10001) + "user=u"
	for _, target := range []string{
		"/s?sig=abc;def&expires=1",
		"/s?z=1&a=2&x=%zz",
		"/s?b=2&a=1&a=%41",
		"/s?" + many,
		"/s?",
	} {
		conn := dialRaw(t, front, 10*time.Second)
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		conn.Close()
		if string(got) != target {
			show := func(s string) string {
				if len(s) > 60 {
					return s[:60] + "..."
				}
				return s
			}
			t.Errorf("sent %q, upstream got %q", show(target), show(string(got)))
		}
	}
}

// echoUpgrade is a WebSocket-like upstream: it switches protocols and
// echoes what it reads.
func echoUpgrade(w http.ResponseWriter, r *http.Request) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	buf := make([]byte, 64)
	for {
		n, err := brw.Read(buf)
		if err != nil {
			return
		}
		conn.Write(buf[:n])
	}
}

// TestUpgradeKeepsBytesSentWithRequest: bytes a client sends right
// behind its upgrade request, in the same write, reach the upstream.
func TestUpgradeKeepsBytesSentWithRequest(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = echoUpgrade
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	conn := dialRaw(t, front, 5*time.Second)
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nearly")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("%v %v", res, err)
	}
	buf := make([]byte, len("early"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "early" {
		t.Fatalf("echo of the early bytes: %q, %v", buf, err)
	}
}

// TestNo1xxToHTTP10: an HTTP/1.0 client never gets a 1xx (RFC 9110
// 15.2): an nginx in front, speaking HTTP/1.0 by default, would take it
// as the final response.
func TestNo1xxToHTTP10(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "final")
	}
	_, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	for _, proto := range []string{"HTTP/1.0", "HTTP/1.1"} {
		conn := dialRaw(t, front, 5*time.Second)
		fmt.Fprintf(conn, "GET / %s\r\nHost: x\r\nConnection: close\r\n\r\n", proto)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := 200
		if proto == "HTTP/1.1" {
			want = http.StatusEarlyHints // 1.1 clients do get it
		}
		if res.StatusCode != want {
			t.Errorf("%s: first response %d, want %d", proto, res.StatusCode, want)
		}
	}
}

// dialRaw opens a connection to front for raw HTTP, with a deadline d
// for everything on it; it is closed when the test ends, if not before.
func dialRaw(t *testing.T, front *httptest.Server, d time.Duration) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(d))
	return conn
}

// TestNoHost: a request without a Host value (HTTP/1.0 without Host, an
// empty Host, HTTP/2 without :authority) reaches the upstream with the
// address the client reached as its Host, over every protocol, never the
// upstream's own address; X-Forwarded-Host stays empty, as the client
// sent it. A request with a Host keeps it.
func TestNoHost(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%q xfh=%q", r.Host, r.Header.Get("X-Forwarded-Host"))
	}
	b, _, front := proxy(t, baseOptions(upstreamsOf(t, be)))
	addr := front.Listener.Addr().String()
	for _, tc := range []struct{ name, req, want string }{
		{"HTTP/1.0 without Host", "GET /a HTTP/1.0\r\n\r\n", fmt.Sprintf("host=%q xfh=\"\"", addr)},
		{"HTTP/1.1, empty Host", "GET /a HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n", fmt.Sprintf("host=%q xfh=\"\"", addr)},
		{"HTTP/1.0 with a Host", "GET /a HTTP/1.0\r\nHost: shop.example\r\n\r\n", `host="shop.example" xfh="shop.example"`},
	} {
		got := testnet.RawExchange(t, addr, tc.req, nil)
		if !strings.Contains(got, fmt.Sprintf("body %q", tc.want)) {
			t.Errorf("%s: upstream %s saw other than %s:\n%s", tc.name, be.srv.Listener.Addr(), tc.want, got)
		}
	}

	// HTTP/2 without :authority, over TLS.
	tfront, c := tlsFront(t, b, true)
	status, body := h2Exchange(t, tfront, c, ":method", "GET", ":scheme", "https", ":path", "/a")
	if want := fmt.Sprintf("host=%q xfh=\"\"", tfront.Listener.Addr()); status != "200" || string(body) != want {
		t.Errorf("HTTP/2 without :authority: %s, upstream saw %s, want %s", status, body, want)
	}
}

// h2Exchange sends one HTTP/2 request made of exactly the given header
// fields (name, value, ...), in that order and unchecked, with no body,
// to front (a TLS server offering h2; c trusts it), and returns the
// response's status and body ("RST" or "GOAWAY" and nil when the server
// refused the stream).
func h2Exchange(t *testing.T, front *httptest.Server, c *http.Client, fields ...string) (string, []byte) {
	t.Helper()
	conf := c.Transport.(*http.Transport).TLSClientConfig.Clone()
	conf.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", front.Listener.Addr().String(), conf)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	status, body, ended := testnet.H2Request(t, conn, fields...)
	switch {
	case strings.HasPrefix(ended, "stream reset"):
		return "RST", nil
	case ended != "":
		return "GOAWAY", nil
	}
	return strconv.Itoa(status), body
}
