package process

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// TestLimitsSendClosesStalledHTTP2Connection, over h2c and over TLS: a client grants huge
// flow-control windows, keeps asking for large bodies on new streams and
// never reads its socket. ringlb's writes to that socket stop making progress,
// and with send: 1s the connection is closed: reading it afterwards ends
// in an error (end of stream or reset) instead of waiting.
func TestLimitsSendClosesStalledHTTP2Connection(t *testing.T) {
	t.Run("h2c", func(t *testing.T) { testLimitsSendClosesStalled(t, false) })
	t.Run("tls", func(t *testing.T) { testLimitsSendClosesStalled(t, true) })
}

func testLimitsSendClosesStalled(t *testing.T, overTLS bool) {
	up := startBigUpstream(t, 64<<20)
	front, ca := sendFront(t, overTLS, "h2c: true\n")
	r := startServeAddr(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+keyedYAML+front+
		"limits:\n  send: 1s\n"+
		"upstreams:\n  - name: a\n    url: "+up.URL+"\n"))
	addr, scheme := r.proxy, "http"
	if overTLS {
		scheme = "https"
	}
	c := sendDial(t, addr, ca, "h2")
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
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", scheme}, {":authority", addr}, {":path", "/big"}, {"x-key", fmt.Sprint("s", i)}} {
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

// TestLimitsSendLeavesTunnelsAlone, over TCP and TLS: an upgraded connection (a WebSocket
// tunnel) is not held to limits.send: a client that reads nothing for
// several times the limit while the upstream sends 8 MiB into the tunnel
// still gets all of it.
func TestLimitsSendLeavesTunnelsAlone(t *testing.T) {
	t.Run("tcp", func(t *testing.T) { testLimitsSendLeavesTunnelsAlone(t, false) })
	t.Run("tls", func(t *testing.T) { testLimitsSendLeavesTunnelsAlone(t, true) })
}

func testLimitsSendLeavesTunnelsAlone(t *testing.T, overTLS bool) {
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
	front, ca := sendFront(t, overTLS, "")
	r := startServeAddr(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+front+"limits:\n  send: 1s\n"+
		"upstreams:\n  - name: a\n    url: "+up.URL+"\n"))
	c := sendDial(t, r.proxy, ca, "http/1.1")
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

// sendFront returns the config lines of the proxy listener: plain (plus
// plain, e.g. "h2c: true") or TLS with a certificate of a new CA's, whose
// roots it returns.
func sendFront(t *testing.T, overTLS bool, plain string) (string, *x509.CertPool) {
	t.Helper()
	if !overTLS {
		return plain, nil
	}
	ca := certstest.NewCA(t)
	cert, key := ca.Issue(t, certstest.Options{}).Write(t, t.TempDir(), "tls")
	return "tls:\n  cert_file: " + cert + "\n  key_file: " + key + "\n", ca.Pool()
}

// sendDial connects to addr with a small receive buffer (dialSmallWindow),
// over TLS offering proto when roots is not nil.
func sendDial(t *testing.T, addr string, roots *x509.CertPool, proto string) net.Conn {
	t.Helper()
	c := dialSmallWindow(t, addr, 4096)
	if roots == nil {
		return c
	}
	tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{proto}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if got := tc.ConnectionState().NegotiatedProtocol; got != proto {
		t.Fatalf("negotiated %q, want %q", got, proto)
	}
	return tc
}
