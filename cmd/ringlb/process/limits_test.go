package process

// The limits block (issue 19, item 3): what one upstream, one HTTP/2
// connection and one client that stops reading may hold, driven against a
// real ringlb on loopback.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// bigUpstream answers every request with size bytes, 32 KiB a write, and
// counts the handlers running (a handler ends when its body is written or
// the connection to it is closed) and the connections open to it. /block
// instead waits for release (or for the request to end) and answers
// "done".
type bigUpstream struct {
	*httptest.Server
	size    int
	running atomic.Int64
	peak    atomic.Int64
	hits    atomic.Int64
	conns   atomic.Int64 // open connections
	release chan struct{}
}

func startBigUpstream(t *testing.T, size int) *bigUpstream {
	t.Helper()
	u := &bigUpstream{size: size, release: make(chan struct{})}
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		n := u.running.Add(1)
		defer u.running.Add(-1)
		for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
		}
		if r.URL.Path == "/block" {
			select {
			case <-u.release:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "done")
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(u.size))
		for left := u.size; left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return
			}
		}
	}))
	u.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			u.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.conns.Add(-1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// waitReleased waits until the upstream has made hits requests and holds
// none: no handler running, no connection open (a cut request's upstream
// connection is closed, not pooled).
func (u *bigUpstream) waitReleased(t *testing.T, hits int64, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		if h, n, c := u.hits.Load(), u.running.Load(), u.conns.Load(); h != hits || n != 0 || c != 0 {
			return fmt.Errorf("%d of %d requests made, %d running, %d connections open", h, hits, n, c)
		}
		return nil
	})
}

func (u *bigUpstream) waitRunning(t *testing.T, want int64, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		if n := u.running.Load(); n != want {
			return fmt.Errorf("%d upstream requests running, want %d", n, want)
		}
		return nil
	})
}

type lookupView struct {
	Chosen  *string
	Skipped []struct{ Name, Reason string }
}

// TestLimitsUpstreamRequests fills one upstream to limits.upstream_requests:
// the next request for it gets 503 "upstream busy" at once, is not sent to
// the other upstream (its key would move), trips no breaker (one failure
// would), counts in ringlb_limited_total, and /debug/lookup says busy.
// Then a slot frees and the key is served again.
func TestLimitsUpstreamRequests(t *testing.T) {
	a, b := startBigUpstream(t, 10), startBigUpstream(t, 10)
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+keyedYAML+
		"limits:\n  upstream_requests: 3\nbreaker:\n  consecutive_failures: 1\nretries: 1\n"+
		"upstreams:\n  - name: a\n    url: "+a.URL+"\n  - name: b\n    url: "+b.URL+"\n"))
	key := ""
	for i := 0; key == "" && i < 100; i++ {
		if lookupChosen(t, r.admin, fmt.Sprint("k", i)) == "a" {
			key = fmt.Sprint("k", i)
		}
	}
	if key == "" {
		t.Fatal("no key of the first 100 goes to a")
	}
	c := &http.Client{Timeout: 20 * time.Second}
	var wg sync.WaitGroup
	results := make(chan string, 3)
	for range 3 {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", r.proxy+"/block", nil)
			req.Header.Set("X-Key", key)
			res, err := c.Do(req)
			if err != nil {
				results <- err.Error()
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			results <- fmt.Sprint(res.StatusCode, " ", string(body))
		})
	}
	a.waitRunning(t, 3, 10*time.Second)

	// The fourth: at once, 503, nowhere else.
	start := time.Now()
	got := fetch(t, c, "GET", r.proxy+"/block", "X-Key", key)
	if got.status != http.StatusServiceUnavailable || got.body != "upstream busy\n" {
		t.Errorf("fourth request: %d %q, want 503 \"upstream busy\\n\"", got.status, got.body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("fourth request took %v: it waited instead of being refused", d)
	}
	if n := b.hits.Load(); n != 0 {
		t.Errorf("upstream b got %d requests: the busy key moved", n)
	}
	var l lookupView
	if err := json.Unmarshal([]byte(fetch(t, http.DefaultClient, "GET", r.admin+"/debug/lookup?key="+key).body), &l); err != nil {
		t.Fatal(err)
	}
	if l.Chosen != nil || len(l.Skipped) != 1 || l.Skipped[0].Name != "a" || l.Skipped[0].Reason != "busy" {
		t.Errorf("/debug/lookup while a is busy: chosen %v, skipped %+v; want null and [a busy]", l.Chosen, l.Skipped)
	}
	if v := ringlbtest.MetricValue(t, r.admin, `ringlb_limited_total{pool="default",upstream="a"}`); v != 1 {
		t.Errorf("ringlb_limited_total{upstream=\"a\"} = %v, want 1", v)
	}
	if v := ringlbtest.MetricValue(t, r.admin, `ringlb_breaker_state{pool="default",upstream="a"}`); v != 0 {
		t.Errorf("breaker of a is %v after a busy answer, want 0 (closed)", v)
	}

	close(a.release)
	wg.Wait()
	close(results)
	for res := range results {
		if res != "200 done" {
			t.Errorf("a request in flight got %q, want 200 done", res)
		}
	}
	if got := fetch(t, c, "GET", r.proxy+"/", "X-Key", key); got.status != 200 {
		t.Errorf("after the slots freed: %d, want 200", got.status)
	}
}

// h2Client is a raw HTTP/2 client connection that advertises a zero
// initial stream window: the server may send a response's head but not
// one byte of its body, for as long as the client likes.
type h2Client struct {
	c        net.Conn
	fr       *http2.Framer
	mu       sync.Mutex // serialises writes
	settings chan http2.SettingsFrame
	resets   atomic.Int64
	closed   chan struct{}
	err      error // why reading ended; set before closed is closed
}

func dialZeroWindow(t *testing.T, addr string) *h2Client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &h2Client{c: c, fr: http2.NewFramer(c, c), settings: make(chan http2.SettingsFrame, 1), closed: make(chan struct{})}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(h.closed)
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				h.err = err
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					h.mu.Lock()
					h.fr.WriteSettingsAck()
					h.mu.Unlock()
					select {
					case h.settings <- *f:
					default:
					}
				}
			case *http2.RSTStreamFrame:
				h.resets.Add(1)
			}
		}
	}()
	return h
}

// open starts n GET streams for path, each with its own X-Key.
func (h *h2Client) open(t *testing.T, authority, path string, n int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := range n {
		buf.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", authority}, {":path", path}, {"x-key", fmt.Sprint("s", i)}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLimitsZeroWindowStreams opens 40 streams with a zero flow-control
// window on one h2c connection. streams_per_connection: 10 lets 10 of
// them reach the upstream (the other 30 are refused), and send: 1s cuts
// each after a second of no progress, closing its upstream connection:
// the upstream ends up holding nothing, though the client keeps the
// connection open and never reads. The 64 MiB bodies are more than the
// socket buffers between upstream and ringlb hold, so an upstream handler
// ends only when its connection does. (Before the limits block: 40
// upstream requests, held as long as the client liked.)
func TestLimitsZeroWindowStreams(t *testing.T) {
	up := startBigUpstream(t, 64<<20)
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+keyedYAML+"h2c: true\n"+
		"limits:\n  streams_per_connection: 10\n  send: 1s\n"+
		"upstreams:\n  - name: a\n    url: "+up.URL+"\n"))
	addr := strings.TrimPrefix(r.proxy, "http://")
	h := dialZeroWindow(t, addr)
	select {
	case s := <-h.settings:
		if v, ok := s.Value(http2.SettingMaxConcurrentStreams); !ok || v != 10 {
			t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent %v), want 10", v, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no SETTINGS from the server")
	}
	h.open(t, addr, "/big", 40)
	// Every admitted stream is cut and its upstream request ends.
	up.waitReleased(t, 10, 20*time.Second)
	if p := up.peak.Load(); p > 10 {
		t.Errorf("one connection had %d upstream requests in flight at once, want at most 10", p)
	}
	// Each stream is refused or cut by a reset (should the whole
	// connection go instead, that cuts them too).
	testenv.Eventually(t, 10*time.Second, func() error {
		select {
		case <-h.closed:
			t.Logf("the connection ended (%v) after %d stream resets", h.err, h.resets.Load())
			return nil
		default:
		}
		if n := h.resets.Load(); n != 40 {
			return fmt.Errorf("%d of 40 streams reset, the connection open", n)
		}
		return nil
	})
	// The attempts end as their upstream connections close, a moment after
	// the upstream's handlers return.
	testenv.Eventually(t, 10*time.Second, func() error {
		if v := ringlbtest.MetricValue(t, r.admin, `ringlb_upstream_inflight{pool="default",upstream="a"}`); v != 0 {
			return fmt.Errorf("ringlb_upstream_inflight = %v, want 0", v)
		}
		return nil
	})
}

// dialSmallWindow connects with a receive buffer of rcvbuf bytes, so that
// a client that reads slowly or never sets the pace of the server's
// writes soon.
func dialSmallWindow(t *testing.T, addr string, rcvbuf int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf) })
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLimitsClientThatNeverReads sends 8 HTTP/1.1 requests for a large
// body and never reads the answers: with send: 1s each is cut a second
// after its writes stall, and its upstream request ends. (Before: all 8
// held until the client went away.)
func TestLimitsClientThatNeverReads(t *testing.T) {
	up := startBigUpstream(t, 32<<20)
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+"limits:\n  send: 1s\n"+
		"upstreams:\n  - name: a\n    url: "+up.URL+"\n"))
	addr := strings.TrimPrefix(r.proxy, "http://")
	for i := range 8 {
		c := dialSmallWindow(t, addr, 4096)
		fmt.Fprintf(c, "GET /big?n=%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	up.waitReleased(t, 8, 20*time.Second)
}

// TestLimitsSlowReaderIsNotCut reads an 8 MiB answer slowly but steadily
// (64 KiB every 20 ms), taking longer than limits.send in all: each write
// that completes restarts the wait, so the whole body arrives.
func TestLimitsSlowReaderIsNotCut(t *testing.T) {
	const size = 8 << 20
	up := startBigUpstream(t, size)
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+"limits:\n  send: 1s\n"+
		"upstreams:\n  - name: a\n    url: "+up.URL+"\n"))
	c := dialSmallWindow(t, strings.TrimPrefix(r.proxy, "http://"), 64<<10)
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	start := time.Now()
	buf := make([]byte, 64<<10)
	total := 0
	for i := 0; i < 10000; i++ {
		time.Sleep(20 * time.Millisecond)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		total += n
		if err != nil {
			break
		}
	}
	took := time.Since(start)
	if total < size {
		t.Errorf("got %d bytes in %v, want the %d-byte body and its head", total, took.Round(time.Millisecond), size)
	}
	if took < 2*time.Second {
		t.Errorf("the read took %v, less than twice limits.send: the test tested nothing", took)
	}
}
