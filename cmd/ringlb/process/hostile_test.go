package process

// Reliability under hostile input (issue 7): slow, oversized, malformed and
// smuggling requests against a real ringlb serving on loopback, driven over
// raw connections where net/http's client would refuse to send the bytes.

import (
	"bufio"
	"errors"
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

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

// echoBackend is an upstream that counts its requests, remembers each
// one's X-Req-Id, path and headers, reads the whole body, and answers
// "id=" + X-Req-Id, so a client can tell whether it got its own response.
type echoBackend struct {
	*httptest.Server
	hits atomic.Int64

	mu    sync.Mutex
	ids   map[string]int
	paths map[string]int
	hdrs  map[string]http.Header // by X-Req-Id
}

func startEchoBackend(t *testing.T) *echoBackend {
	t.Helper()
	be := &echoBackend{ids: map[string]int{}, paths: map[string]int{}, hdrs: map[string]http.Header{}}
	be.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		be.hits.Add(1)
		io.Copy(io.Discard, r.Body)
		id := r.Header.Get("X-Req-Id")
		be.mu.Lock()
		be.ids[id]++
		be.paths[r.URL.Path]++
		be.hdrs[id] = r.Header.Clone()
		be.mu.Unlock()
		io.WriteString(w, "id="+id)
	}))
	t.Cleanup(be.Close)
	return be
}

func (be *echoBackend) saw(id string) int {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.ids[id]
}

func (be *echoBackend) sawPath(p string) int {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.paths[p]
}

func (be *echoBackend) header(id string) http.Header {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.hdrs[id]
}

// startHostile serves ringlb in front of one echoBackend; extra is more
// config YAML. It returns the proxy's host:port.
func startHostile(t *testing.T, extra string) (*running, string, *echoBackend) {
	t.Helper()
	be := startEchoBackend(t)
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+extra+"upstreams:\n  - name: app-1\n    url: "+be.URL+"\n"))
	return r, strings.TrimPrefix(r.proxy, "http://"), be
}

// rawResp is one response read off a raw connection.
type rawResp struct {
	code int
	body string
}

// exchange writes payload on a new connection to addr in one write and
// reads responses until the server closes the connection. A reset after
// at least one response counts as a close. Everything is bounded by a 5 s
// deadline: a server that neither answers nor closes is an error.
func exchange(addr, payload string) ([]rawResp, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, payload); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	br := bufio.NewReader(c)
	var out []rawResp
	for {
		if _, err := br.Peek(1); err != nil {
			if err == io.EOF || (len(out) > 0 && errors.Is(err, syscall.ECONNRESET)) {
				return out, nil
			}
			return out, fmt.Errorf("after %d responses %v: %w", len(out), out, err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return out, fmt.Errorf("reading response %d: %w", len(out)+1, err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil && !(errors.Is(err, syscall.ECONNRESET) && res.Close) {
			return out, fmt.Errorf("reading the body of a %d: %w", res.StatusCode, err)
		}
		out = append(out, rawResp{res.StatusCode, string(b)})
	}
}

func mustExchange(t *testing.T, addr, payload string) []rawResp {
	t.Helper()
	got, err := exchange(addr, payload)
	if err != nil {
		t.Fatalf("%q: %v", payload, err)
	}
	return got
}

// TestHostileSlowlorisIsCutOff: clients dribbling header bytes (or sending
// none) are disconnected once ReadHeaderTimeout has passed since their
// request began, however steadily they keep sending, while other clients
// are served normally all along.
func TestHostileSlowlorisIsCutOff(t *testing.T) {
	const timeout = 500 * time.Millisecond
	old := readHeaderTimeout
	readHeaderTimeout = timeout
	t.Cleanup(func() { readHeaderTimeout = old }) // runs after the server stopped
	_, addr, be := startHostile(t, "")

	const slow = 8
	type cut struct {
		after time.Duration
		err   error
		got   string
	}
	cuts := make(chan cut, slow)
	stop := make(chan struct{})
	defer close(stop)
	for i := range slow {
		// Before the dial: the server's header timer cannot start
		// earlier, however late this goroutine runs after the dial.
		start := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i > 0 { // the first one sends nothing at all
			go func() {
				// Two bytes every 100 ms: a request that never ends.
				msg := "GET /slow HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 1<<20)
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for j := 0; j+2 <= len(msg); j += 2 {
					if _, err := io.WriteString(c, msg[j:j+2]); err != nil {
						return // cut off
					}
					select {
					case <-tick.C:
					case <-stop:
						return
					}
				}
			}()
		}
		go func() {
			c.SetReadDeadline(start.Add(timeout + 5*time.Second))
			b, err := io.ReadAll(c)
			cuts <- cut{time.Since(start), err, string(b)}
		}()
	}

	// Normal clients, served while the slow ones hang on.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	served := 0
	for done := 0; done < slow; {
		select {
		case c := <-cuts:
			done++
			if c.err != nil && !errors.Is(c.err, syscall.ECONNRESET) {
				t.Errorf("slow client not cut off: %v after %v", c.err, c.after)
			}
			if c.after < timeout*8/10 {
				t.Errorf("slow client cut off after %v, before ReadHeaderTimeout %v", c.after, timeout)
			}
			if c.got != "" && !strings.HasPrefix(c.got, "HTTP/1.1 4") {
				t.Errorf("slow client got %q", c.got)
			}
			continue
		default:
		}
		id := fmt.Sprint("normal-", served)
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		req.Header.Set("X-Req-Id", id)
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("normal request during slowloris: %v", err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "id="+id {
			t.Fatalf("normal request during slowloris: %d %q", res.StatusCode, b)
		}
		served++
	}
	if served == 0 {
		t.Error("no normal request was served while the slow clients hung on")
	}
	if n := be.sawPath("/slow"); n != 0 {
		t.Errorf("upstream saw %d slow requests", n)
	}
	t.Logf("%d normal requests served while %d slow clients were cut off", served, slow)
}

// TestHostileOversizedHeaders: request headers over max_header_bytes get
// 431 without reaching the upstream, and the proxy carries on.
func TestHostileOversizedHeaders(t *testing.T) {
	r, addr, be := startHostile(t, "max_header_bytes: 4096\n")
	for _, tc := range []struct{ name, hdr string }{
		{"one 10 KB header", "X-Big: " + strings.Repeat("b", 10<<10) + "\r\n"},
		{"many small headers", strings.Repeat("X-Many: "+strings.Repeat("m", 90)+"\r\n", 110)},
		{"a 10 KB cookie", "Cookie: session=" + strings.Repeat("c", 10<<10) + "\r\n"},
		{"a 10 KB request line", ""},
	} {
		target := "/big"
		if tc.hdr == "" {
			target += "?q=" + strings.Repeat("q", 10<<10)
		}
		got := mustExchange(t, addr, "GET "+target+" HTTP/1.1\r\nHost: x\r\nX-Req-Id: big\r\n"+tc.hdr+"\r\n")
		if len(got) != 1 || got[0].code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: got %v, want one 431", tc.name, got)
		}
		// The next request, on a new connection, is fine.
		if code, body := ringlbtest.Get(t, r.proxy+"/next", "X-Req-Id", "next", "X-Fits", strings.Repeat("f", 3000)); code != 200 || body != "id=next" {
			t.Errorf("%s: next request: %d %q", tc.name, code, body)
		}
	}
	if n := be.sawPath("/big"); n != 0 {
		t.Errorf("upstream saw %d oversized requests", n)
	}
}

// TestHostileMalformedRequestsAreRefused: malformed request lines, invalid
// methods and versions, ambiguous framing and header injection get a 4xx
// (505 for an unknown HTTP version) from ringlb itself, never reaching the
// upstream; a few forms that HTTP lets a recipient repair are accepted,
// and then the upstream sees the repaired, well-formed request.
func TestHostileMalformedRequestsAreRefused(t *testing.T) {
	r, addr, be := startHostile(t, "")
	const h = "Host: x\r\nConnection: close\r\n"
	refused := []struct {
		name, payload string
		want          int
	}{
		{"NUL in method", "G\x00T / HTTP/1.1\r\n" + h + "\r\n", 400},
		{"space in method", "G T / HTTP/1.1\r\n" + h + "\r\n", 400},
		{"unknown version", "GET /x HTTP/9.9\r\n" + h + "\r\n", 505},
		{"HTTP/2 version over HTTP/1", "GET /x HTTP/2.0\r\n" + h + "\r\n", 505},
		{"malformed version", "GET /x HTTP/1.1x\r\n" + h + "\r\n", 400},
		{"extra token", "GET /x HTTP/1.1 extra\r\n" + h + "\r\n", 400},
		{"no target", "GET HTTP/1.1\r\n" + h + "\r\n", 400},
		{"double space", "GET  /x HTTP/1.1\r\n" + h + "\r\n", 400},
		{"target not origin-form", "GET x HTTP/1.1\r\n" + h + "\r\n", 400},
		{"control byte in target", "GET /x\x01y HTTP/1.1\r\n" + h + "\r\n", 400},
		{"CR in target", "GET /x\ry HTTP/1.1\r\n" + h + "\r\n", 400},
		{"garbage", "hello world\r\n\r\n", 400},
		{"binary garbage", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", 400},
		{"missing Host", "GET /x HTTP/1.1\r\nConnection: close\r\n\r\n", 400},
		{"two Hosts", "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n", 400},
		{"malformed Host", "GET /x HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n", 400},
		{"differing Content-Lengths", "POST /x HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef", 400},
		{"Content-Length list", "POST /x HTTP/1.1\r\n" + h + "Content-Length: 5, 6\r\n\r\nabcdef", 400},
		{"negative Content-Length", "POST /x HTTP/1.1\r\n" + h + "Content-Length: -1\r\n\r\n", 400},
		{"signed Content-Length", "POST /x HTTP/1.1\r\n" + h + "Content-Length: +5\r\n\r\nabcde", 400},
		{"hex Content-Length", "POST /x HTTP/1.1\r\n" + h + "Content-Length: 0x5\r\n\r\nabcde", 400},
		{"huge Content-Length", "POST /x HTTP/1.1\r\n" + h + "Content-Length: 99999999999999999999\r\n\r\n", 400},
		{"CR injection in value", "GET /x HTTP/1.1\r\n" + h + "X-A: a\rX-Injected: 1\r\n\r\n", 400},
		{"NUL in value", "GET /x HTTP/1.1\r\n" + h + "X-A: a\x00b\r\n\r\n", 400},
		{"DEL in value", "GET /x HTTP/1.1\r\n" + h + "X-A: a\x7fb\r\n\r\n", 400},
		{"control byte in value", "GET /x HTTP/1.1\r\n" + h + "X-A: a\x01b\r\n\r\n", 400},
		{"space in header name", "GET /x HTTP/1.1\r\n" + h + "X A: 1\r\n\r\n", 400},
		{"space before colon", "GET /x HTTP/1.1\r\n" + h + "X-A : 1\r\n\r\n", 400},
		{"separator in header name", "GET /x HTTP/1.1\r\n" + h + "X-(A): 1\r\n\r\n", 400},
		{"header without colon", "GET /x HTTP/1.1\r\n" + h + "X-A\r\n\r\n", 400},
		{"fold before the first header", "GET /x HTTP/1.1\r\n X-A: a\r\n" + h + "\r\n", 400},
	}
	for _, tc := range refused {
		before := be.hits.Load()
		got := mustExchange(t, addr, tc.payload)
		if len(got) != 1 || got[0].code != tc.want {
			t.Errorf("%s: got %v, want one %d", tc.name, got, tc.want)
		}
		if n := be.hits.Load() - before; n != 0 {
			t.Errorf("%s: reached the upstream (%d requests)", tc.name, n)
		}
	}

	// Accepted after repair: the upstream sees exactly the header fields
	// ringlb parsed, re-serialised with CRLF, so the two cannot disagree
	// about where a field or the request ends.
	accepted := []struct {
		name, payload string
		check         func(http.Header) bool
	}{
		{"obs-fold joined with a space", "GET /x HTTP/1.1\r\n" + h + "X-Req-Id: fold\r\nX-A: a\r\n b\r\n\r\n",
			func(h http.Header) bool { return len(h["X-A"]) == 1 && h.Get("X-A") == "a b" }},
		{"bare LF ends a field", "GET /x HTTP/1.1\r\n" + h + "X-Req-Id: lf\r\nX-A: a\nX-B: b\r\n\r\n",
			func(h http.Header) bool { return h.Get("X-A") == "a" && h.Get("X-B") == "b" }},
		{"bare LF line endings", "GET /x HTTP/1.1\nHost: x\nConnection: close\nX-Req-Id: lfonly\n\n",
			func(h http.Header) bool { return true }},
	}
	for _, tc := range accepted {
		id := tc.payload[strings.Index(tc.payload, "X-Req-Id: ")+10:]
		id = id[:strings.IndexAny(id, "\r\n")]
		got := mustExchange(t, addr, tc.payload)
		if len(got) != 1 || got[0].code != 200 || got[0].body != "id="+id {
			t.Errorf("%s: got %v, want 200 id=%s", tc.name, got, id)
			continue
		}
		if hdr := be.header(id); !tc.check(hdr) {
			t.Errorf("%s: upstream saw %q", tc.name, hdr)
		}
	}
	if code, body := ringlbtest.Get(t, r.proxy+"/after", "X-Req-Id", "after"); code != 200 || body != "id=after" {
		t.Errorf("request after the malformed ones: %d %q", code, body)
	}
}

// TestHostileSmugglingProbes sends request-smuggling probes over raw
// keep-alive connections while other clients use the proxy concurrently.
// Each probe is either refused (without reaching the upstream) or, if
// accepted, every response the prober gets is for one of its own
// requests and every other client gets its own response: the pooled
// upstream connections never desynchronise.
func TestHostileSmugglingProbes(t *testing.T) {
	// Breakers off: this test is about framing, not ejection.
	_, addr, be := startHostile(t, "breaker: {consecutive_failures: 0}\n")

	smuggled := func(id string) string {
		return "GET /smuggled HTTP/1.1\r\nHost: x\r\nX-Req-Id: " + id + "\r\n\r\n"
	}
	type probe struct {
		name string
		// build returns the payload (ending with a request that closes
		// the connection) and the ids of the requests in it.
		build func(p string) string
	}
	end := func(p string) string {
		return "GET /end HTTP/1.1\r\nHost: x\r\nX-Req-Id: " + p + "-end\r\nConnection: close\r\n\r\n"
	}
	probes := []probe{
		{"CL.TE", func(p string) string {
			body := "0\r\n\r\n" + smuggled(p+"-smuggled")
			return fmt.Sprintf("POST /probe HTTP/1.1\r\nHost: x\r\nX-Req-Id: %s\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", p, len(body), body) + end(p)
		}},
		{"TE.CL", func(p string) string {
			s := smuggled(p + "-smuggled")
			return fmt.Sprintf("POST /probe HTTP/1.1\r\nHost: x\r\nX-Req-Id: %s\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", p, len(s), s) + end(p)
		}},
		{"TE chunked, identity", func(p string) string {
			body := "0\r\n\r\n" + smuggled(p+"-smuggled")
			return fmt.Sprintf("POST /probe HTTP/1.1\r\nHost: x\r\nX-Req-Id: %s\r\nContent-Length: %d\r\nTransfer-Encoding: chunked, identity\r\n\r\n%s", p, len(body), body) + end(p)
		}},
		{"TE xchunked", func(p string) string {
			body := "0\r\n\r\n" + smuggled(p+"-smuggled")
			return fmt.Sprintf("POST /probe HTTP/1.1\r\nHost: x\r\nX-Req-Id: %s\r\nContent-Length: %d\r\nTransfer-Encoding: xchunked\r\n\r\n%s", p, len(body), body) + end(p)
		}},
		{"TE twice", func(p string) string {
			body := "0\r\n\r\n" + smuggled(p+"-smuggled")
			return fmt.Sprintf("POST /probe HTTP/1.1\r\nHost: x\r\nX-Req-Id: %s\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n%s", p, len(body), body) + end(p)
		}},
		{"TE with space before colon", func(p string) string {
			body := "0\r\n\r\n" + smuggled(p+"-smuggled")
			return fmt.Sprintf("POST /probe HTTP/1.1\r\nHost: x\r\nX-Req-Id: %s\r\nContent-Length: %d\r\nTransfer-Encoding : chunked\r\n\r\n%s", p, len(body), body) + end(p)
		}},
		{"chunk longer than declared", func(p string) string {
			return "POST /probe HTTP/1.1\r\nHost: x\r\nX-Req-Id: " + p + "\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc" + smuggled(p+"-smuggled") + "\r\n0\r\n\r\n" + end(p)
		}},
		{"negative chunk size", func(p string) string {
			return "POST /probe HTTP/1.1\r\nHost: x\r\nX-Req-Id: " + p + "\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n" + smuggled(p+"-smuggled") + end(p)
		}},
		{"overflowing chunk size", func(p string) string {
			return "POST /probe HTTP/1.1\r\nHost: x\r\nX-Req-Id: " + p + "\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000003\r\nabc\r\n0\r\n\r\n" + smuggled(p+"-smuggled") + end(p)
		}},
		{"HTTP/1.0 with TE and CL", func(p string) string {
			body := "0\r\n\r\n" + smuggled(p+"-smuggled")
			return fmt.Sprintf("POST /probe HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nX-Req-Id: %s\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", p, len(body), body) + end(p)
		}},
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	const iterations = 50
	verdicts := map[string]map[string]int{} // probe → outcome → count
	for i := range iterations {
		for k, pr := range probes {
			p := fmt.Sprintf("p%d.%d", i, k)
			var wg sync.WaitGroup
			var got []rawResp
			var gotErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, gotErr = exchange(addr, pr.build(p))
			}()
			// Meanwhile, other clients on other connections.
			for j := range 2 {
				id := fmt.Sprintf("n%d.%d.%d", i, k, j)
				req, _ := http.NewRequest("POST", "http://"+addr+"/normal", strings.NewReader("payload"))
				req.Header.Set("X-Req-Id", id)
				res, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s: normal request %s: %v", pr.name, id, err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || string(b) != "id="+id {
					t.Fatalf("%s: normal request %s got %d %q: desynchronised", pr.name, id, res.StatusCode, b)
				}
			}
			wg.Wait()
			if gotErr != nil {
				t.Fatalf("%s: %v", pr.name, gotErr)
			}
			if len(got) == 0 {
				t.Fatalf("%s: no response at all", pr.name)
			}
			// Refused: ringlb answered alone and nothing reached the
			// upstream. Otherwise every response is for one of the
			// prober's own requests.
			outcome := "accepted"
			if c := got[0].code; c >= 400 {
				outcome = fmt.Sprint("answered ", c)
				if be.saw(p) == 0 && be.saw(p+"-smuggled") == 0 && be.saw(p+"-end") == 0 {
					outcome = fmt.Sprint("refused ", c)
				}
			}
			for _, g := range got {
				if g.code < 400 && !strings.HasPrefix(g.body, "id="+p) {
					t.Fatalf("%s: the prober got someone else's response %q (all: %v)", pr.name, g.body, got)
				}
			}
			if verdicts[pr.name] == nil {
				verdicts[pr.name] = map[string]int{}
			}
			verdicts[pr.name][outcome]++
		}
	}
	for _, pr := range probes {
		t.Logf("%-28s %v", pr.name, verdicts[pr.name])
	}
}

// TestHostileAdminPathsOnProxyPort: admin paths on the proxy listener are
// ordinary paths, proxied to the upstream; the admin listener takes POST
// /reload only.
func TestHostileAdminPathsOnProxyPort(t *testing.T) {
	r, _, be := startHostile(t, "")
	for _, tc := range []struct{ method, path string }{
		{"GET", "/metrics"}, {"GET", "/debug/ring"}, {"GET", "/debug/lookup?key=a"},
		{"GET", "/reload"}, {"POST", "/reload"}, {"GET", "/healthz"}, {"GET", "/readyz"}, {"GET", "/"},
	} {
		id := tc.method + " " + tc.path
		req, _ := http.NewRequest(tc.method, r.proxy+tc.path, nil)
		req.Header.Set("X-Req-Id", id)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "id="+id || be.saw(id) != 1 {
			t.Errorf("%s on the proxy port: %d %q, upstream saw it %d times; want it proxied", id, res.StatusCode, b, be.saw(id))
		}
	}

	res, err := http.Post(r.admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("POST /reload on the admin port: %d, want 200", res.StatusCode)
	}
	if code, _ := ringlbtest.Get(t, r.admin+"/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /reload on the admin port: %d, want 405", code)
	}
}

// TestHostileBadBodiesDoNotEjectUpstream: a client sending broken chunked
// bodies is at fault, not the upstream: it gets a 4xx, and however often
// it does it, the upstream's breaker stays closed for everyone else.
func TestHostileBadBodiesDoNotEjectUpstream(t *testing.T) {
	r, addr, _ := startHostile(t, "breaker: {consecutive_failures: 3}\n")
	for i := range 10 {
		got := mustExchange(t, addr, "POST /bad HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX\r\n0\r\n\r\n")
		if len(got) != 1 || got[0].code/100 != 4 {
			t.Errorf("broken chunked body %d: got %v, want one 4xx", i, got)
		}
	}
	if code, body := ringlbtest.Get(t, r.proxy+"/after", "X-Req-Id", "after"); code != 200 || body != "id=after" {
		t.Errorf("after broken bodies: %d %q; the upstream was ejected for the client's fault", code, body)
	}
}

// TestHostileShortBodyIsNotSuccess: a client that half-closes before
// sending its whole Content-Length is not told its request succeeded.
func TestHostileShortBodyIsNotSuccess(t *testing.T) {
	_, addr, _ := startHostile(t, "")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "POST /short HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 10\r\n\r\nabc")
	c.(*net.TCPConn).CloseWrite()
	b, _ := io.ReadAll(c)
	if strings.HasPrefix(string(b), "HTTP/1.1 2") {
		t.Errorf("short body: got %q, want no response or a 4xx", b)
	}
}

// TestHostileHeaderLimitIsExact: max_header_bytes is the limit itself, not
// the limit plus net/http's read-ahead slack: a request head a little over
// it gets 431, one a little under it is proxied, for limits above and
// below that slack.
func TestHostileHeaderLimitIsExact(t *testing.T) {
	for _, limit := range []int{2048, 8192, 65536} {
		_, addr, be := startHostile(t, fmt.Sprintf("max_header_bytes: %d\n", limit))
		for _, tc := range []struct {
			size int
			want int
		}{{limit + 300, http.StatusRequestHeaderFieldsTooLarge}, {limit - 300, http.StatusOK}} {
			head := "GET /sized HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Req-Id: sized\r\nX-Pad: "
			pad := tc.size - len(head) - len("\r\n\r\n")
			got := mustExchange(t, addr, head+strings.Repeat("p", pad)+"\r\n\r\n")
			if len(got) != 1 || got[0].code != tc.want {
				t.Errorf("limit %d, head of %d bytes: got %v, want %d", limit, tc.size, got, tc.want)
			}
		}
		if n := be.sawPath("/sized"); n != 1 {
			t.Errorf("limit %d: upstream saw %d requests, want only the one under the limit", limit, n)
		}
	}
}

// h2cStatus sends one request over a new cleartext HTTP/2 connection to
// addr (prior knowledge) as raw frames, HEADERS with fields (name, value
// pairs): Go's HTTP/2 client refuses to send a :method that is not a
// token. It returns the response status, or 0 for a reset stream.
func h2cStatus(t *testing.T, addr string, fields ...string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	code, _, _ := testnet.H2Request(t, c, fields...)
	return code
}

// TestHostileH2MethodDoesNotEjectUpstreams: an HTTP/2 client sending a
// :method that is not a token (HTTP/1.1's server refuses those itself)
// gets 400, however often; no upstream is ejected, /readyz stays 200 and
// the key's requests still reach their upstream. (Before: each got 502
// and counted against the key's owner and, retried, the next upstream:
// ten requests took the fleet down, 503 for everyone and /readyz 503.)
func TestHostileH2MethodDoesNotEjectUpstreams(t *testing.T) {
	a, b := startEchoBackend(t), startEchoBackend(t)
	r := startServe(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+"h2c: true\nhash:\n  key:\n    - header: X-User\n"+
		"upstreams:\n  - name: u1\n    url: "+a.URL+"\n  - name: u2\n    url: "+b.URL+"\n"))
	addr := strings.TrimPrefix(r.proxy, "http://")
	for i := range 10 {
		if code := h2cStatus(t, addr, ":method", "G(T", ":scheme", "http", ":authority", addr, ":path", "/p", "x-user", "alice"); code != http.StatusBadRequest {
			t.Errorf("request %d with :method G(T: %d, want 400", i+1, code)
		}
	}
	if a.hits.Load()+b.hits.Load() != 0 {
		t.Errorf("the upstreams got %d and %d requests", a.hits.Load(), b.hits.Load())
	}
	if code, body := ringlbtest.Get(t, r.admin+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %q", code, body)
	}
	for _, user := range []string{"alice", "bob", "carol", "dave"} {
		if code := h2cStatus(t, addr, ":method", "GET", ":scheme", "http", ":authority", addr, ":path", "/p", "x-user", user); code != http.StatusOK {
			t.Errorf("a well-formed request for %s afterwards: %d", user, code)
		}
	}
}
