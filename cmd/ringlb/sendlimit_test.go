package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestLimitsSendClosesStalledHTTP2Connection: an h2c client grants huge
// flow-control windows, keeps asking for large bodies on new streams and
// never reads its socket. ringlb's writes to that socket stop making progress,
// and with send: 1s the connection is closed: reading it afterwards ends
// in an error (end of stream or reset) instead of waiting.
func TestLimitsSendClosesStalledHTTP2Connection(t *testing.T) {
	up := startBigUpstream(t, 64<<20)
	r := startServe(t, writeConfig(t, listenersYAML+keyedYAML+"h2c: true\n"+
		"limits:\n  send: 1s\n"+
		"upstreams:\n  - name: a\n    url: "+up.URL+"\n"))
	addr := strings.TrimPrefix(r.proxy, "http://")
	c := dialSmallWindow(t, addr, 4096)
	fr := http2.NewFramer(c, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteWindowUpdate(0, 1<<30); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	// A new stream every 200 ms for 4 s (the limit, up to an eighth more,
	// and then some), while not reading: each one is data ringlb must
	// write, so the socket's writes never stop for lack of any (streams
	// already cut by their own per-write watch have none left).
	for i := range 20 {
		buf.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", addr}, {":path", "/big"}, {"x-key", fmt.Sprint("s", i)}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			break // closed already
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection was still open 15 s after the client began reading, 4 s after it stopped (%d bytes read); want it closed after limits.send", n)
	}
	t.Logf("read %d bytes, then %v", n, err)
}

// TestLimitsSendLeavesTunnelsAlone: an upgraded connection (a WebSocket
// tunnel) is not held to limits.send: a client that reads nothing for
// several times the limit while the upstream sends 8 MiB into the tunnel
// still gets all of it.
func TestLimitsSendLeavesTunnelsAlone(t *testing.T) {
	const size = 8 << 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "test" {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		brw.Flush()
		chunk := bytes.Repeat([]byte("y"), 32<<10)
		for left := size; left > 0; left -= len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
		io.Copy(io.Discard, c) // until the client closes
	}))
	t.Cleanup(up.Close)
	r := startServe(t, writeConfig(t, listenersYAML+"limits:\n  send: 1s\n"+
		"upstreams:\n  - name: a\n    url: "+up.URL+"\n"))
	c := dialSmallWindow(t, strings.TrimPrefix(r.proxy, "http://"), 4096)
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	time.Sleep(4 * time.Second)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", res.StatusCode)
	}
	n, err := io.CopyN(io.Discard, br, size)
	if n != size {
		t.Fatalf("got %d of the tunnel's %d bytes: %v; want all (tunnels are not held to limits.send)", n, size, err)
	}
}
