package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tinyUpstream answers every request head (a bodiless request) with a
// two-byte body, once n heads have arrived on n connections, so that a
// client ends up with n connections at once. It keeps next to nothing per
// connection on the heap (a 64-byte read buffer), so that the heap a test
// sees grow is the client's.
func tinyUpstream(t *testing.T, n int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		conns   []net.Conn
		arrived atomic.Int64
		all     = make(chan struct{})
	)
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 64)
				matched := 0 // bytes of "\r\n\r\n" matched at the end of what was read
				for {
					k, err := c.Read(buf)
					for _, b := range buf[:k] {
						switch {
						case b == "\r\n\r\n"[matched]:
							matched++
						case b == '\r':
							matched = 1
						default:
							matched = 0
						}
						if matched < 4 {
							continue
						}
						matched = 0
						if arrived.Add(1) == int64(n) {
							close(all)
						}
						<-all
						if _, err := c.Write(resp); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// heapAlloc is the live heap after a full collection (two, so that the
// buffers sync.Pools hold are gone too).
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// getAll sends n GETs to url at once and reads each response to its end.
func getAll(t *testing.T, tr *Transport, url string, n int) {
	t.Helper()
	errs := make(chan error, n)
	for range n {
		go func() {
			req, _ := http.NewRequest("GET", url, nil)
			res, err := tr.RoundTrip(req)
			if err == nil {
				var b []byte
				b, err = io.ReadAll(res.Body)
				res.Body.Close()
				if err == nil && string(b) != "ok" {
					err = fmt.Errorf("body %q", b)
				}
			}
			errs <- err
		}()
	}
	for range n {
		if err := within(t, errs, "a response"); err != nil {
			t.Fatal(err)
		}
	}
}

// An idle pooled connection holds neither a write nor a read buffer: the
// write buffer is the exchange's while it writes the request, the read
// buffer the connection's from the start of an exchange until it is
// pooled. Measured on the heap, over many idle connections: each used to
// hold 4 KiB of each. Taken out of the pool again, the connections work
// (they get buffers back) and nothing is dialled anew.
func TestIdleConnectionsHoldNoBuffers(t *testing.T) {
	checkLeaks(t)
	const n = 64
	url := tinyUpstream(t, n)
	tr := &Transport{MaxIdleConnsPerHost: n}
	t.Cleanup(tr.CloseIdleConnections)
	before := heapAlloc()
	getAll(t, tr, url, n)
	if got := tr.pool.idleCount(); got != n {
		t.Fatalf("%d idle connections, want %d", got, n)
	}
	after := heapAlloc()
	perConn := (int64(after) - int64(before)) / n
	t.Logf("heap: %d -> %d bytes, %d per idle connection (client and server sides)", before, after, perConn)
	// A connection's own objects (client and server side, sockets,
	// goroutine) come to about 2 KiB; either 4 KiB buffer kept would
	// make it more than 4 KiB.
	if perConn >= 4<<10 {
		t.Errorf("%d heap bytes per idle connection, want less than %d: the connections keep buffers while idle", perConn, 4<<10)
	}
	tr.pool.mu.Lock()
	for _, stack := range tr.pool.idle {
		for _, pc := range stack {
			if pc.br != nil {
				t.Errorf("a pooled connection holds a read buffer")
				break
			}
		}
	}
	tr.pool.mu.Unlock()

	// Again, on the pooled connections.
	opened := tr.pool.idleCount()
	getAll(t, tr, url, n)
	if got := tr.pool.idleCount(); got != opened {
		t.Errorf("%d idle connections after a second round, want %d (reused)", got, opened)
	}
}

// Over TLS too, a pooled connection gives its read buffer back (the idle
// check reads the TLS layer and the socket, not the buffer) and works
// once taken out again.
func TestIdleTLSConnectionHoldsNoReadBuffer(t *testing.T) {
	checkLeaks(t)
	u, cfg := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	tr := newTransport(t)
	tr.TLSClientConfig = cfg
	for i := range 3 {
		res, b := get(t, tr, "GET", u.URL, nil)
		if res.StatusCode != 200 || b != "ok" {
			t.Fatalf("round %d: %d %q", i, res.StatusCode, b)
		}
		tr.pool.mu.Lock()
		for _, stack := range tr.pool.idle {
			for _, pc := range stack {
				if pc.br != nil {
					t.Errorf("round %d: a pooled TLS connection holds a read buffer", i)
				}
			}
		}
		tr.pool.mu.Unlock()
	}
	if n := u.opened.Load(); n != 1 {
		t.Errorf("%d connections, want 1 (reused)", n)
	}
}

// bodyPattern is the request body of exchange id: n bytes that say which
// exchange they belong to, so that bytes of another request's buffer show.
func bodyPattern(id, n int) []byte {
	unit := []byte(fmt.Sprintf("<%06d>", id))
	return bytes.Repeat(unit, n/len(unit)+1)[:n]
}

// The write buffers come from a pool: one given back while its writer
// still used it, or handed to two writers at once, would mix bytes of
// different requests (and, under -race, show as a race). Many exchanges
// at once, over http and https, each in one of these ways:
//   - early: the upstream answers before reading the body, and the body is
//     produced only after the client read the whole response (the
//     exchange's writer ends after its reader);
//   - abort: the request's context is cancelled while its body is being
//     written;
//   - refused: Expect: 100-continue answered by a final response that
//     closes, so the body is never sent;
//   - plain: a body, then the answer; and a bodiless GET.
//
// The upstream checks that every body it reads whole is the one its
// request announced.
func TestWriteBuffersNotShared(t *testing.T) {
	checkLeaks(t)
	for _, scheme := range schemes {
		t.Run(scheme, func(t *testing.T) { writeBuffersNotShared(t, scheme) })
	}
}

func writeBuffersNotShared(t *testing.T, scheme string) {
	var bad atomic.Int64
	var badMsg atomic.Value
	u := newRawUpstreamOver(t, scheme, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			id, _ := strconv.Atoi(req.Header.Get("X-Id"))
			n, _ := strconv.Atoi(req.Header.Get("X-Len"))
			ok := "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n" + fmt.Sprintf("%06d", id)
			switch req.Header.Get("X-Mode") {
			case "early":
				if _, err := io.WriteString(c, ok); err != nil {
					return
				}
			case "refused":
				io.WriteString(c, "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
				return
			}
			b, err := io.ReadAll(req.Body)
			if err != nil {
				return // an aborted exchange
			}
			if !bytes.Equal(b, bodyPattern(id, n)) {
				bad.Add(1)
				badMsg.Store(fmt.Sprintf("request %d: %d body bytes, want %d of its own pattern; starts %.40q", id, len(b), n, b))
			}
			switch req.Header.Get("X-Mode") {
			case "early", "abort":
			default:
				if _, err := io.WriteString(c, ok); err != nil {
					return
				}
			}
		}
	})
	tr := newTransport(t)
	tr.TLSClientConfig = u.TLS
	tr.ExpectContinueTimeout = time.Minute
	const workers, rounds = 6, 12
	modes := []string{"early", "plain", "abort", "get", "refused", "early"}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				id := w*rounds + r
				mode := modes[(w+r)%len(modes)]
				n := 1 + (id*7919)%20000 // up to about five write buffers
				if err := bufferExchange(tr, u.URL, mode, id, n); err != nil {
					errs <- fmt.Errorf("request %d (%s, %d bytes): %w", id, mode, n, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if k := bad.Load(); k > 0 {
		t.Errorf("%d request bodies arrived wrong; last: %s", k, badMsg.Load())
	}
}

// bufferExchange runs one exchange of writeBuffersNotShared.
func bufferExchange(tr *Transport, url, mode string, id, n int) error {
	want := fmt.Sprintf("%06d", id)
	body := bodyPattern(id, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if mode == "get" {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Header.Set("X-Id", strconv.Itoa(id))
		res, err := tr.RoundTrip(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err == nil && string(b) != want {
			err = fmt.Errorf("response %q, want %q", b, want)
		}
		return err
	}
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, pr)
	req.Header.Set("X-Id", strconv.Itoa(id))
	req.Header.Set("X-Len", strconv.Itoa(n))
	req.Header.Set("X-Mode", mode)
	if mode == "refused" {
		req.Header.Set("Expect", "100-continue")
	}
	// feed writes the body in pieces of up to 3000 bytes, and reports the
	// first failed write (the transport closed the body).
	feed := func(b []byte) error {
		for len(b) > 0 {
			k := min(len(b), 3000)
			if _, err := pw.Write(b[:k]); err != nil {
				return err
			}
			b = b[k:]
		}
		return nil
	}
	type result struct {
		res *http.Response
		err error
	}
	rc := make(chan result, 1)
	go func() {
		res, err := tr.RoundTrip(req)
		rc <- result{res, err}
	}()
	switch mode {
	case "early":
		// The whole response first, then the body.
		r := <-rc
		if r.err != nil {
			pw.Close()
			return r.err
		}
		b, err := io.ReadAll(r.res.Body)
		r.res.Body.Close()
		if err == nil && string(b) != want {
			err = fmt.Errorf("response %q, want %q", b, want)
		}
		if ferr := feed(body); ferr != nil && err == nil {
			err = fmt.Errorf("writing the body after the response: %w", ferr)
		}
		pw.Close()
		return err
	case "abort":
		// Half the body, the cancel, then the rest until the transport
		// gives up on it.
		feed(body[:n/2])
		cancel()
		feed(body[n/2:])
		pw.CloseWithError(errors.New("aborted"))
		r := <-rc
		if r.err == nil {
			r.res.Body.Close()
			return errors.New("an aborted exchange returned a response")
		}
		return nil
	case "refused":
		r := <-rc
		pw.Close()
		if r.err != nil {
			return r.err
		}
		r.res.Body.Close()
		if r.res.StatusCode != 417 {
			return fmt.Errorf("status %d, want 417", r.res.StatusCode)
		}
		return nil
	default: // plain
		err := feed(body)
		pw.Close()
		r := <-rc
		if r.err != nil {
			return r.err
		}
		b, rerr := io.ReadAll(r.res.Body)
		r.res.Body.Close()
		if err == nil {
			err = rerr
		}
		if err == nil && string(b) != want {
			err = fmt.Errorf("response %q, want %q", b, want)
		}
		return err
	}
}
