package balancer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/nginxtest"
)

// upload is a raw HTTP/1.1 request whose body the test sends as it
// pleases: start sent the head, declaring a body of a given length, and
// the body's first bytes.
type upload struct {
	conn  net.Conn
	br    *bufio.Reader
	start time.Time
}

func startUpload(t testing.TB, addr, head string, declared int, sent string) *upload {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	u := &upload{conn: conn, br: bufio.NewReader(conn), start: time.Now()}
	fmt.Fprintf(conn, "%sContent-Length: %d\r\n\r\n%s", head, declared, sent)
	return u
}

// status reads the response, waiting at most wait, and returns its
// status (0 when the connection ended, or wait passed, without one), its
// body, and how long after start it came.
func (u *upload) status(wait time.Duration) (int, string, time.Duration) {
	u.conn.SetReadDeadline(time.Now().Add(wait))
	res, err := http.ReadResponse(u.br, nil)
	if err != nil {
		return 0, err.Error(), time.Since(u.start)
	}
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), time.Since(u.start)
}

// nginxBodyUpstream runs a real nginx that reads request bodies whole
// before it proxies them (proxy_request_buffering, its default) to a
// backend that answers "ok", and gives up on a body silent for longer
// than bodyTimeout (its client_body_timeout: it then closes the
// connection without an answer). The backend's srv.URL is nginx's.
func nginxBodyUpstream(t *testing.T, bodyTimeout string) *backend {
	t.Helper()
	be := newBackend(t, "nginx")
	addr := nginxtest.Start(t, func(addr string) string {
		return fmt.Sprintf(`    server {
        listen %s;
        client_body_timeout %s;
        location / { proxy_pass %s; }
    }
`, addr, bodyTimeout, be.srv.URL)
	})
	be.srv.URL = "http://" + addr
	return be
}

// TestNginxBodyTimeoutStalledUpload: 8 clients that declare a body of
// 100 bytes, send 10 and stop, keyed to a real nginx whose
// client_body_timeout is 1s. Without timeouts.client_body (and with one
// longer than nginx's) nginx gives up on each body and closes its
// connection while ringlb waits on the client for the rest: that is the
// client's doing. With a shorter one ringlb gives up first. Either way
// the clients get 408, nginx's breaker (5 consecutive failures) never
// opens, nothing is retried on the other upstream, and nginx still
// serves.
func TestNginxBodyTimeoutStalledUpload(t *testing.T) {
	for _, tc := range []struct {
		name       string
		clientBody time.Duration
		max        time.Duration // the 408 comes sooner than this
	}{
		{"nginx gives up, no client_body", 0, 5 * time.Second},
		{"nginx gives up before client_body", 10 * time.Second, 5 * time.Second},
		{"client_body before nginx", 300 * time.Millisecond, 900 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ngx := nginxBodyUpstream(t, "1s")
			other := newBackend(t, "other")
			opts := baseOptions(upstreamsOf(t, ngx, other))
			opts.Ring.LoadFactor = 0
			opts.Breaker = breaker.Options{ConsecutiveFailures: 5, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 5 * time.Second, MaxOpenTimeout: time.Minute}
			opts.Timeouts.ClientBody = tc.clientBody
			b, reg, front := proxy(t, opts)
			key := keyOwnedBy(t, b, "nginx")
			head := "POST /upload HTTP/1.1\r\nHost: front\r\nX-User-ID: " + key + "\r\n"
			const clients = 8
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					code, msg, took := startUpload(t, front.Listener.Addr().String(), head, 100, strings.Repeat("x", 10)).status(10 * time.Second)
					if code != http.StatusRequestTimeout || took > tc.max {
						t.Errorf("client %d: %d %q after %v; want 408 within %v", i, code, msg, took, tc.max)
					}
				})
			}
			wg.Wait()
			if n := metric(t, reg, "ringlb_ejections_total", "upstream=nginx", "reason=breaker"); n > 0 {
				t.Errorf("nginx was ejected %v times by its breaker; want never", n)
			}
			if st := status(t, b, "nginx"); st.Breaker != "closed" || !st.Available {
				t.Errorf("after %d stalled uploads nginx's breaker is %s (available %v); want closed, available", clients, st.Breaker, st.Available)
			}
			if n := other.hits.Load(); n != 0 {
				t.Errorf("the other upstream got %d requests; want none (nothing retried elsewhere)", n)
			}
			req, _ := http.NewRequest(http.MethodPost, front.URL+"/upload", strings.NewReader(strings.Repeat("y", 100)))
			req.Header.Set("X-User-ID", key)
			res, err := front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || res.Header.Get("X-Upstream") != "nginx" {
				t.Errorf("a whole upload afterwards: %d from %q, want 200 from nginx", res.StatusCode, res.Header.Get("X-Upstream"))
			}
		})
	}
}

// bodyReader is an upstream that reads request bodies through and
// reports, on reads, how each read ended (nil for a whole body).
func bodyReader(t *testing.T, name string) (*backend, chan error) {
	be := newBackend(t, name)
	reads := make(chan error, 100)
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		reads <- err
		io.WriteString(w, "ok")
	}
	return be, reads
}

// TestClientBodyTimeout: with timeouts.client_body 300ms, uploads whose
// client stops sending get 408 about 300ms after their last byte, over
// HTTP/1.1 and HTTP/2; the upstream's request is cut (its read of the
// body fails), and the upstream's breaker counts none of it. A client
// that sends a byte every 100 ms for longer than that is not cut: only
// the silence between two reads counts.
func TestClientBodyTimeout(t *testing.T) {
	be, reads := bodyReader(t, "a")
	opts := baseOptions(upstreamsOf(t, be))
	opts.Breaker = breaker.Options{ConsecutiveFailures: 2, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 5 * time.Second, MaxOpenTimeout: time.Minute}
	opts.Timeouts.ClientBody = 300 * time.Millisecond
	b, _, front := proxy(t, opts)
	head := "POST /upload HTTP/1.1\r\nHost: front\r\n"
	for i := range 4 {
		code, msg, took := startUpload(t, front.Listener.Addr().String(), head, 100, strings.Repeat("x", 10)).status(10 * time.Second)
		if code != http.StatusRequestTimeout || took < 300*time.Millisecond || took > 3*time.Second {
			t.Errorf("HTTP/1.1 upload %d: %d %q after %v; want 408 after 300ms", i, code, msg, took)
		}
		select {
		case err := <-reads:
			if err == nil {
				t.Errorf("HTTP/1.1 upload %d: the upstream read a whole body; want its request cut", i)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("HTTP/1.1 upload %d: the upstream's request still runs 5 s later", i)
		}
	}

	tfront, client := tlsFront(t, b, true)
	for i := range 2 {
		pr, pw := io.Pipe()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tfront.URL+"/upload", pr)
		req.ContentLength = 100
		go pw.Write([]byte(strings.Repeat("x", 10)))
		start := time.Now()
		res, err := client.Do(req)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("HTTP/2 upload %d: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		pw.Close()
		if res.ProtoMajor != 2 || res.StatusCode != http.StatusRequestTimeout || took < 300*time.Millisecond || took > 3*time.Second {
			t.Errorf("HTTP/2 upload %d: %s %d %q after %v; want HTTP/2 408 after 300ms", i, res.Proto, res.StatusCode, body, took)
		}
		select {
		case err := <-reads:
			if err == nil {
				t.Errorf("HTTP/2 upload %d: the upstream read a whole body; want its request cut", i)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("HTTP/2 upload %d: the upstream's request still runs 5 s later", i)
		}
	}
	if st := status(t, b, "a"); st.Breaker != "closed" || !st.Available {
		t.Errorf("after 6 timed-out uploads the breaker is %s (available %v); want closed", st.Breaker, st.Available)
	}

	// Slow but steady: 12 bytes, one every 100 ms.
	u := startUpload(t, front.Listener.Addr().String(), head, 12, "")
	for range 12 {
		time.Sleep(100 * time.Millisecond)
		if _, err := u.conn.Write([]byte("z")); err != nil {
			t.Fatal(err)
		}
	}
	if code, msg, took := u.status(5 * time.Second); code != 200 {
		t.Errorf("a slow but steady upload: %d %q after %v; want 200", code, msg, took)
	}
	if err := <-reads; err != nil {
		t.Errorf("a slow but steady upload: the upstream's read failed: %v", err)
	}
}

// jsonBodyHead is a raw request head for a JSON body, keyed on json:
// user by jsonOptions.
const jsonBodyHead = "POST /v1 HTTP/1.1\r\nHost: front\r\nContent-Type: application/json\r\n"

// TestJSONKeyClientBodyTimeout: a client whose JSON body stops before
// the key's field is complete gets 408 once timeouts.client_body has
// passed, without any upstream being asked, and the memory the scan
// held is given back.
func TestJSONKeyClientBodyTimeout(t *testing.T) {
	be := bodyEcho(t, "a")
	opts := jsonOptions(t, options.DefaultBodyLimit, be)
	opts.Timeouts.ClientBody = 300 * time.Millisecond
	_, reg, front := proxy(t, opts)
	for _, sent := range []string{`{"user":"al`, `{"pad":"` + strings.Repeat("p", 10000)} {
		code, msg, took := startUpload(t, front.Listener.Addr().String(), jsonBodyHead, 20000, sent).status(10 * time.Second)
		if code != http.StatusRequestTimeout || !strings.Contains(msg, "client_body") || took < 300*time.Millisecond || took > 3*time.Second {
			t.Errorf("%d bytes sent: %d %q after %v; want 408 after 300ms", len(sent), code, msg, took)
		}
	}
	if n := be.hits.Load(); n != 0 {
		t.Errorf("the upstream got %d requests; want none", n)
	}
	waitGauge(t, reg, "ringlb_body_memory_bytes", 0)
}

// waitGauge waits up to 5 s for the metric name to read want.
func waitGauge(t testing.TB, reg prometheus.Gatherer, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := metric(t, reg, name)
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, v, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBodyMemoryLimit: with limits.body_memory at 40 KiB, clients whose
// JSON bodies (20 000 bytes declared) have sent 9000 bytes without the
// key's field each hold a 16 KiB buffer: two fit, every other one gets
// 503 at once, counted in ringlb_body_memory_refused_total, and never
// reaches an upstream. When the clients go, the memory comes back: the
// gauge reads 0 and a request is keyed again.
func TestBodyMemoryLimit(t *testing.T) {
	be := bodyEcho(t, "a")
	opts := jsonOptions(t, options.DefaultBodyLimit, be)
	opts.Limits.BodyMemory = 40 << 10
	_, reg, front := proxy(t, opts)
	partial := `{"pad":"` + strings.Repeat("p", 9000-8)
	var held []*upload
	refused := 0
	for i := range 6 {
		u := startUpload(t, front.Listener.Addr().String(), jsonBodyHead, 20000, partial)
		if i < 2 {
			held = append(held, u)
			waitGauge(t, reg, "ringlb_body_memory_bytes", float64((i+1)*16<<10))
			continue
		}
		code, msg, took := u.status(5 * time.Second)
		if code != http.StatusServiceUnavailable || !strings.Contains(msg, "body_memory") {
			t.Errorf("client %d: %d %q after %v; want 503 for body_memory", i, code, msg, took)
			continue
		}
		refused++
		if v := metric(t, reg, "ringlb_body_memory_bytes"); v != 32<<10 {
			t.Errorf("after client %d was refused, ringlb_body_memory_bytes = %v, want %d", i, v, 32<<10)
		}
	}
	if v := metric(t, reg, "ringlb_body_memory_refused_total"); v != float64(refused) || refused != 4 {
		t.Errorf("ringlb_body_memory_refused_total = %v after %d refusals; want 4", v, refused)
	}
	if n := be.hits.Load(); n != 0 {
		t.Errorf("the upstream got %d requests; want none", n)
	}
	for _, u := range held {
		u.conn.Close()
	}
	waitGauge(t, reg, "ringlb_body_memory_bytes", 0)
	res, err := front.Client().Post(front.URL+"/v1", "application/json", strings.NewReader(`{"user":"alice"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("a request after the clients left: %d, want 200", res.StatusCode)
	}
}

// TestBodyMemoryFollowsArrival: a body that declares 64 KiB and sends 10
// bytes holds 4 KiB, not 64: memory is taken as bytes arrive. 5000 more
// bytes take it to 8 KiB; once the body is whole and sent upstream, it
// is given back.
func TestBodyMemoryFollowsArrival(t *testing.T) {
	be := bodyEcho(t, "a")
	_, reg, front := proxy(t, jsonOptions(t, options.DefaultBodyLimit, be))
	const declared = 64 << 10
	first := `{"pad":"p`
	u := startUpload(t, front.Listener.Addr().String(), jsonBodyHead, declared, first)
	waitGauge(t, reg, "ringlb_body_memory_bytes", 4<<10)
	more := strings.Repeat("p", 5000)
	io.WriteString(u.conn, more)
	waitGauge(t, reg, "ringlb_body_memory_bytes", 8<<10)
	tail := `","user":"alice"}`
	io.WriteString(u.conn, strings.Repeat("p", declared-len(first)-len(more)-len(tail))+tail)
	if code, msg, _ := u.status(5 * time.Second); code != 200 || len(msg) != declared {
		t.Errorf("the whole body: %d with %d bytes echoed; want 200 with %d", code, len(msg), declared)
	}
	waitGauge(t, reg, "ringlb_body_memory_bytes", 0)
}

// TestBodyMemoryReleasedOnFailure: the memory a body's key scan took is
// given back exactly once however the request ends: an upstream that
// hangs up after reading 100 bytes of the body (the prefix not yet
// replayed), one that reads it all (the prefix replayed, its memory
// given back by the replay) and then hangs up, and a client that leaves
// during the scan. The gauge comes back to 0, never below.
func TestBodyMemoryReleasedOnFailure(t *testing.T) {
	be := newBackend(t, "a")
	be.handle = func(w http.ResponseWriter, r *http.Request) {
		n := int64(100)
		if r.URL.Path == "/whole" {
			n = 1 << 30
		}
		io.Copy(io.Discard, io.LimitReader(r.Body, n))
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}
	_, reg, front := proxy(t, jsonOptions(t, options.DefaultBodyLimit, be))
	body := `{"user":"alice","pad":"` + strings.Repeat("p", 20000) + `"}`
	for _, path := range []string{"/part", "/whole"} {
		for range 5 {
			res, err := front.Client().Post(front.URL+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadGateway {
				t.Errorf("%s: %d, want 502 (the upstream hung up)", path, res.StatusCode)
			}
		}
		waitGauge(t, reg, "ringlb_body_memory_bytes", 0)
	}
	for range 5 {
		u := startUpload(t, front.Listener.Addr().String(), jsonBodyHead, 20000, `{"pad":"`+strings.Repeat("p", 9000))
		time.Sleep(20 * time.Millisecond)
		u.conn.Close()
	}
	waitGauge(t, reg, "ringlb_body_memory_bytes", 0)
}
