package balancer

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

// refusalUpstream is a test upstream that counts what reaches it and
// notes the last request's Host and trailers.
type refusalUpstream struct {
	name  string
	proto transport.Protocol
	srv   *httptest.Server
	hits  atomic.Int64
	mu    sync.Mutex
	host  string
	trail http.Header
}

func (u *refusalUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		return
	}
	u.hits.Add(1)
	io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.host, u.trail = r.Host, r.Trailer.Clone()
	u.mu.Unlock()
	w.Header().Set("X-Backend", u.name)
	io.WriteString(w, u.name)
}

func (u *refusalUpstream) trailer() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.trail
}

// refusalRig is a Balancer over upstreams u1 and u2 (of the protocols
// given), keyed by the JSON body's "user" or else the X-User header,
// with breakers that open after 5 failures and one retry, served on a
// cleartext front (HTTP/1.1 and h2c with prior knowledge) and a TLS
// front (h2 and HTTP/1.1 by ALPN).
type refusalRig struct {
	b     *Balancer
	plain *httptest.Server
	tls   *httptest.Server
	ups   map[string]*refusalUpstream
}

// newRefusalUpstream starts an upstream speaking p (h2 with a
// certificate from ca) whose server max sets MaxHeaderBytes of (0: the
// default).
func newRefusalUpstream(t *testing.T, name string, p transport.Protocol, ca *certstest.CA, max int) *refusalUpstream {
	t.Helper()
	u := &refusalUpstream{name: name, proto: p}
	u.srv = httptest.NewUnstartedServer(u)
	u.srv.Config.ErrorLog = discardLog()
	u.srv.Config.MaxHeaderBytes = max
	switch p {
	case transport.HTTP1:
		u.srv.Start()
	case transport.H2C:
		ps := new(http.Protocols)
		ps.SetHTTP1(true)
		ps.SetUnencryptedHTTP2(true)
		u.srv.Config.Protocols = ps
		u.srv.Start()
	case transport.H2:
		u.srv.EnableHTTP2 = true
		u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, certstest.Options{}).Pair(t)}}
		u.srv.StartTLS()
	}
	t.Cleanup(u.srv.Close)
	return u
}

func newRefusalRig(t *testing.T, p1, p2 transport.Protocol, mut func(*Options)) *refusalRig {
	return newRefusalRigMax(t, p1, p2, 0, mut)
}

// newRefusalRigMax is newRefusalRig with upstreams whose servers take
// heads of at most max bytes.
func newRefusalRigMax(t *testing.T, p1, p2 transport.Protocol, max int, mut func(*Options)) *refusalRig {
	t.Helper()
	rr := &refusalRig{ups: map[string]*refusalUpstream{}}
	ca := certstest.NewCA(t)
	var ups []options.Upstream
	for i, p := range []transport.Protocol{p1, p2} {
		u := newRefusalUpstream(t, fmt.Sprint("u", i+1), p, ca, max)
		rr.ups[u.name] = u
		url := mustURL(t, u.srv.URL)
		ups = append(ups, options.Upstream{Name: u.name, URL: url, Addr: url.Host, Weight: 1, Protocol: p})
	}
	opts := baseOptions(ups)
	opts.UpstreamTLS.RootCAs = ca.Pool()
	opts.Hash.Key = []key.Source{{Kind: key.JSON, Name: "user"}, {Kind: key.Header, Name: "X-User"}}
	opts.Ring.LoadFactor = 0
	opts.Retries = 1
	opts.Timeouts.ResponseHeader = 2 * time.Second
	opts.Breaker = breaker.Options{ConsecutiveFailures: 5, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 30 * time.Second, MaxOpenTimeout: 60 * time.Second}
	if mut != nil {
		mut(&opts)
	}
	b, err := New(opts, metrics.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	rr.b = b
	rr.plain = httptest.NewUnstartedServer(b)
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	rr.plain.Config.Protocols = p
	rr.plain.Config.ErrorLog = discardLog()
	rr.plain.Start()
	t.Cleanup(rr.plain.Close)
	rr.tls = httptest.NewUnstartedServer(b)
	rr.tls.EnableHTTP2 = true
	rr.tls.Config.ErrorLog = discardLog()
	rr.tls.StartTLS()
	t.Cleanup(rr.tls.Close)
	return rr
}

// hits returns every upstream's request count.
func (rr *refusalRig) hits() map[string]int64 {
	m := map[string]int64{}
	for n, u := range rr.ups {
		m[n] = u.hits.Load()
	}
	return m
}

// unharmed asserts that no upstream's breaker counted a failure or
// opened, that every upstream is available, that no request reached an
// upstream since before (unless before is nil), and that a well-formed
// request for key still goes to owner over front.
func (rr *refusalRig) unharmed(t *testing.T, what string, before map[string]int64, front *httptest.Server, key, owner string) {
	t.Helper()
	for n, u := range rr.b.ups {
		br := u.br.Load()
		if st := br.State(); st != breaker.Closed {
			t.Errorf("%s: upstream %s: breaker %s", what, n, breaker.Names[st])
		} else if c := br.Counts(); c.ConsecutiveFailures != 0 {
			t.Errorf("%s: upstream %s: %d failures counted", what, n, c.ConsecutiveFailures)
		}
		if !status(t, rr.b, n).Available {
			t.Errorf("%s: upstream %s unavailable", what, n)
		}
	}
	if got := rr.hits(); before != nil && fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("%s: upstream hits went from %v to %v: the request was served", what, before, got)
	}
	code, body := h2Request(t, front, h2Fields(front, "GET", "", "x-user", key)...)
	if code != http.StatusOK || body != owner {
		t.Errorf("%s: a well-formed request for %s afterwards: %d %q, want 200 from %s", what, key, code, body, owner)
	}
}

// h2Fields is a request's header block: method, an authority ("" for
// the front's address), path /p, and more fields in pairs.
func h2Fields(front *httptest.Server, method, authority string, more ...string) []string {
	scheme := "http"
	if front.TLS != nil {
		scheme = "https"
	}
	if authority == "" {
		authority = front.Listener.Addr().String()
	}
	return append([]string{":method", method, ":scheme", scheme, ":authority", authority, ":path", "/p"}, more...)
}

// h2Request sends one request as raw HTTP/2 frames, HEADERS with the
// given fields (name, value pairs) and END_STREAM, on a connection of its
// own to front: h2c with prior knowledge, or TLS with h2 by ALPN. Go's
// HTTP/2 clients refuse to send a :method or :authority that is not
// valid; a Framer and an HPACK encoder send anything. It returns the
// response's status and body, or 0 and the reason for a reset stream.
func h2Request(t *testing.T, front *httptest.Server, fields ...string) (int, string) {
	t.Helper()
	c := dialFront(t, front, "h2")
	defer c.Close()
	code, body, ended := testnet.H2Request(t, c, fields...)
	if ended != "" {
		return 0, ended
	}
	return code, string(body)
}

// http1Request sends raw bytes to front over a connection of its own
// (TLS with http/1.1 by ALPN on the TLS front) and returns the response's
// status and body.
func http1Request(t *testing.T, front *httptest.Server, raw string) (int, string) {
	t.Helper()
	c := dialFront(t, front, "http/1.1")
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", raw, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// dialFront opens a connection of its own to front: plain TCP, or TLS
// offering proto by ALPN on the TLS front (which must take h2 when that
// is asked for; a front without ALPN serves HTTP/1.1).
func dialFront(t *testing.T, front *httptest.Server, proto string) net.Conn {
	t.Helper()
	addr := front.Listener.Addr().String()
	if front.TLS == nil {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	roots := x509.NewCertPool()
	roots.AddCert(front.Certificate())
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{proto}})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; proto == "h2" && p != proto {
		t.Fatalf("TLS front negotiated %q, want %s", p, proto)
	}
	return c
}

// sixTimes sends a request six times (more than the breaker's five
// failures) and asserts that each answer is want.
func sixTimes(t *testing.T, what string, want int, send func() (int, string)) {
	t.Helper()
	var got []string
	bad := false
	for range 6 {
		code, body := send()
		got = append(got, fmt.Sprintf("%d %q", code, body))
		bad = bad || code != want
	}
	if bad {
		t.Errorf("%s: six requests got %s; want %d each", what, strings.Join(got, ", "), want)
	}
}

func discardLog() *log.Logger { return slog.NewLogLogger(slog.DiscardHandler, slog.LevelError) }

var protoNames = map[transport.Protocol]string{transport.HTTP1: "http1", transport.H2C: "h2c", transport.H2: "h2"}

// An HTTP/2 :method that is not a token (HTTP/1.1's server refuses such
// a method itself; HTTP/2's lets it through) is the client's: 400, on
// the h2c and the TLS front, to http1 and h2c upstreams alike. No
// upstream's breaker counts it, none is tried, and the key's owner still
// serves it afterwards. (Before: 502, counted against the owner and,
// retried, the next upstream: five requests ejected the owner, ten the
// fleet.)
func TestH2MethodNotATokenIsTheClients(t *testing.T) {
	for _, p := range []transport.Protocol{transport.HTTP1, transport.H2C} {
		t.Run(protoNames[p], func(t *testing.T) {
			rr := newRefusalRig(t, p, p, nil)
			owner := rr.b.Lookup("alice").Owner
			for _, front := range []*httptest.Server{rr.plain, rr.tls} {
				for _, m := range []string{"G(T", "GE,T", "X@Y", "GET é"} {
					what := fmt.Sprintf("front tls=%v, :method %q", front.TLS != nil, m)
					before := rr.hits()
					sixTimes(t, what, http.StatusBadRequest, func() (int, string) {
						return h2Request(t, front, h2Fields(front, m, "", "x-user", "alice")...)
					})
					rr.unharmed(t, what, before, front, "alice", owner)
				}
			}
		})
	}
}

// An HTTP/2 :authority that is not a valid Host is the client's: 400.
// (Before: an http1 upstream got the request with its Host blanked, as
// (*http.Request).Write does with an invalid one; an HTTP/2 upstream's
// transport refused it, 502, counted and retried.)
func TestH2AuthorityNotAHostIsTheClients(t *testing.T) {
	for _, p := range []transport.Protocol{transport.HTTP1, transport.H2C} {
		t.Run(protoNames[p], func(t *testing.T) {
			rr := newRefusalRig(t, p, p, nil)
			owner := rr.b.Lookup("alice").Owner
			for _, front := range []*httptest.Server{rr.plain, rr.tls} {
				for _, a := range []string{"a b", "a{b}", `a\b`, "a\"b"} {
					what := fmt.Sprintf("front tls=%v, :authority %q", front.TLS != nil, a)
					before := rr.hits()
					sixTimes(t, what, http.StatusBadRequest, func() (int, string) {
						return h2Request(t, front, h2Fields(front, "GET", a, "x-user", "alice")...)
					})
					rr.unharmed(t, what, before, front, "alice", owner)
				}
			}
		})
	}
}

// jsonChunked is a chunked POST whose JSON body gives the key alice,
// declaring the trailer names in declared (a Trailer header's value),
// then the trailer fields given (lines with CRLF).
func jsonChunked(declared, trailer string) string {
	body := `{"user":"alice"}`
	return "POST /p HTTP/1.1\r\nHost: shop.example\r\nContent-Type: application/json\r\nTrailer: " + declared + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n", len(body), body) + trailer + "\r\n"
}

// A trailer field that must not be forwarded (Content-Length,
// Transfer-Encoding, Trailer, and the other names net/http forbids in a
// trailer, such as Authorization) is dropped, and the request is served
// by its key's owner with the rest of its trailer. A chunked body read
// for a json key has its trailer in Request.Trailer before the request
// is forwarded; a streamed one sends it at the end. Only declared fields
// are forwarded, so X-Ok is declared (net/http's server refuses a request
// that declares Content-Length, Transfer-Encoding or Trailer: those come
// undeclared, and are dropped as such). (Before: (*http.Request).Write refused a trailer naming
// Content-Length, Transfer-Encoding or Trailer, and an http1 upstream
// then waited out timeouts.response_header: 504, counted as a timeout;
// an h2c upstream failed at once, 502, counted; one naming Authorization
// reached an http1 upstream, and an h2c upstream reset the stream, 502,
// counted.)
func TestForbiddenRequestTrailersAreDropped(t *testing.T) {
	for _, p := range []transport.Protocol{transport.HTTP1, transport.H2C} {
		t.Run(protoNames[p], func(t *testing.T) {
			rr := newRefusalRig(t, p, p, func(o *Options) { o.Timeouts.ResponseHeader = time.Second })
			owner := rr.b.Lookup("alice").Owner
			streamed := "POST /p HTTP/1.1\r\nHost: shop.example\r\nX-User: alice\r\nTrailer: Authorization, X-Ok\r\n" +
				"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nAuthorization: secret\r\nX-Ok: yes\r\n\r\n"
			for _, c := range []struct{ name, raw string }{
				{"json key, Content-Length", jsonChunked("X-Ok", "Content-Length: 5\r\nX-Ok: yes\r\n")},
				{"json key, Transfer-Encoding", jsonChunked("X-Ok", "Transfer-Encoding: chunked\r\nX-Ok: yes\r\n")},
				{"json key, Trailer", jsonChunked("X-Ok", "Trailer: X-Ok\r\nX-Ok: yes\r\n")},
				{"json key, Authorization", jsonChunked("Authorization, X-Ok", "Authorization: secret\r\nX-Ok: yes\r\n")},
				{"json key, If-Match", jsonChunked("If-Match, X-Ok", "If-Match: \"x\"\r\nX-Ok: yes\r\n")},
				{"streamed, Authorization", streamed},
			} {
				before := rr.ups[owner].hits.Load()
				sixTimes(t, c.name, http.StatusOK, func() (int, string) { return http1Request(t, rr.plain, c.raw) })
				if n := rr.ups[owner].hits.Load() - before; n != 6 {
					t.Errorf("%s: the owner %s served %d of the 6", c.name, owner, n)
				}
				if got := rr.ups[owner].trailer(); fmt.Sprint(got) != "map[X-Ok:[yes]]" {
					t.Errorf("%s: the upstream got the trailer %v, want X-Ok alone", c.name, got)
				}
				rr.unharmed(t, c.name, nil, rr.plain, "alice", owner)
			}
		})
	}
}

// An upgrade (WebSocket, h2c) towards an HTTP/2 upstream cannot be made:
// 501, not counted against the upstream, and not retried on the next
// upstream, which would serve the key away from its owner. (Before:
// net/http's HTTP/2 transport refused it, 502 or the next upstream's
// answer, counted: five requests ejected the owner.)
func TestUpgradeTowardsH2UpstreamIsNotImplemented(t *testing.T) {
	for _, p := range []transport.Protocol{transport.H2C, transport.H2} {
		t.Run(protoNames[p], func(t *testing.T) {
			rr := newRefusalRig(t, p, transport.HTTP1, nil) // u1 speaks HTTP/2, u2 HTTP/1.1
			key := keyOwnedBy(t, rr.b, "u1")
			for _, front := range []*httptest.Server{rr.plain, rr.tls} {
				for _, up := range []string{
					"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
					"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
				} {
					what := fmt.Sprintf("front tls=%v, %q", front.TLS != nil, up)
					before := rr.hits()
					sixTimes(t, what, http.StatusNotImplemented, func() (int, string) {
						return http1Request(t, front, "GET /ws HTTP/1.1\r\nHost: shop.example\r\nX-User: "+key+"\r\n"+up+"\r\n")
					})
					rr.unharmed(t, what, before, front, key, "u1")
				}
			}
		})
	}
}

// An upgrade to a protocol whose name is not printable ASCII, which
// ReverseProxy refuses before calling the transport, is the client's:
// 400. (Before: 502, counted against the owner and, retried, the next
// upstream.)
func TestUnprintableUpgradeIsTheClients(t *testing.T) {
	rr := newRefusalRig(t, transport.HTTP1, transport.HTTP1, nil)
	owner := rr.b.Lookup("alice").Owner
	for _, front := range []*httptest.Server{rr.plain, rr.tls} {
		what := fmt.Sprintf("front tls=%v", front.TLS != nil)
		before := rr.hits()
		sixTimes(t, what, http.StatusBadRequest, func() (int, string) {
			return http1Request(t, front, "GET /ws HTTP/1.1\r\nHost: shop.example\r\nX-User: alice\r\nConnection: Upgrade\r\nUpgrade: w\u00e9bsocket\r\n\r\n")
		})
		rr.unharmed(t, what, before, front, "alice", owner)
	}
}

// A request head larger than an HTTP/2 upstream's
// SETTINGS_MAX_HEADER_LIST_SIZE, which net/http's transport refuses to
// send once it knows the setting, is the client's: 431, not counted, not
// retried. (Before: 502, counted against the owner and, retried, the
// next upstream, whose fresh connection sent it and got a GOAWAY.)
func TestHeadTooLargeForH2UpstreamIsTheClients(t *testing.T) {
	rr := newRefusalRigMax(t, transport.H2C, transport.H2C, 1024, nil)
	owner := rr.b.Lookup("alice").Owner
	// The first request opens the owner's connection, which learns its
	// settings.
	rr.unharmed(t, "before", nil, rr.plain, "alice", owner)
	before := rr.hits()
	sixTimes(t, "an 8 KB header", http.StatusRequestHeaderFieldsTooLarge, func() (int, string) {
		return h2Request(t, rr.plain, h2Fields(rr.plain, "GET", "", "x-user", "alice", "x-big", strings.Repeat("b", 8000))...)
	})
	rr.unharmed(t, "after", before, rr.plain, "alice", owner)
}

// Every refusal of a request by an upstream transport, before anything
// of it is sent, for what the request holds, is recognised as the
// client's (transport.CauseClient, refusal's status), for each protocol whose
// transport refuses it; nothing reaches the upstream. A connection that
// fails is still the upstream's, even for a request that would have been
// refused. (Before: every one was a "bad response", 502, counted.)
func TestTransportRefusalsAreTheClients(t *testing.T) {
	ca := certstest.NewCA(t)
	ts := transport.NewSet(transport.Options{DialTimeout: 2 * time.Second, ResponseHeaderTimeout: 5 * time.Second,
		TLS: transport.UpstreamTLS{RootCAs: ca.Pool()}})
	t.Cleanup(ts.CloseIdleConnections)
	ups := map[transport.Protocol]*refusalUpstream{}
	for _, p := range []transport.Protocol{transport.HTTP1, transport.H2C, transport.H2} {
		u := newRefusalUpstream(t, protoNames[p], p, ca, 1024)
		ups[p] = u
		// A first request: the HTTP/2 connections learn their settings.
		req, _ := http.NewRequest(http.MethodGet, u.srv.URL+"/", nil)
		res, err := ts.For(p).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	h1, h2 := []transport.Protocol{transport.HTTP1, transport.H2C, transport.H2}, []transport.Protocol{transport.H2C, transport.H2}
	for _, c := range []struct {
		name  string
		on    []transport.Protocol
		code  int
		build func(req *http.Request)
	}{
		{"method not a token", h1, 400, func(r *http.Request) { r.Method = "G(T" }},
		{"header field name", h1, 400, func(r *http.Request) { r.Header["X A"] = []string{"1"} }},
		{"header field value", h1, 400, func(r *http.Request) { r.Header["X-A"] = []string{"1\x00"} }},
		{"trailer field name", h1, 400, func(r *http.Request) { r.Trailer = http.Header{"X A": {"1"}} }},
		{"trailer naming Content-Length", h1, 400, func(r *http.Request) { r.Trailer = http.Header{"Content-Length": {"3"}} }},
		{"trailer naming Trailer", h1, 400, func(r *http.Request) { r.Trailer = http.Header{"Trailer": {"x"}} }},
		{"trailer field value", h2, 400, func(r *http.Request) { r.Trailer = http.Header{"X-A": {"1\x00"}} }},
		{"host not valid", h2, 400, func(r *http.Request) { r.Host = "a b" }},
		{"Transfer-Encoding header", h2, 400, func(r *http.Request) { r.Header["Transfer-Encoding"] = []string{"gzip"} }},
		{"Connection header", h2, 400, func(r *http.Request) { r.Header["Connection"] = []string{"Upgrade"} }},
		{"upgrade", h2, 501, func(r *http.Request) {
			r.Header["Connection"], r.Header["Upgrade"] = []string{"Upgrade"}, []string{"websocket"}
		}},
		{"header list above the peer's limit", h2, 431, func(r *http.Request) { r.Header["X-Big"] = []string{strings.Repeat("b", 8000)} }},
	} {
		for _, p := range c.on {
			u := ups[p]
			what := c.name + " to " + protoNames[p]
			req, _ := http.NewRequest(http.MethodPost, u.srv.URL+"/p", io.MultiReader(strings.NewReader("abc")))
			req.ContentLength = -1
			c.build(req)
			before := u.hits.Load()
			start := time.Now()
			res, err := ts.For(p).RoundTrip(req)
			if err == nil {
				res.Body.Close()
				t.Errorf("%s: %d, want a refusal", what, res.StatusCode)
				continue
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("%s: refused after %v", what, took)
			}
			if code, _, ok := transport.Refusal(err); !ok || code != c.code {
				t.Errorf("%s: %v: refusal %d %v, want %d", what, err, code, ok, c.code)
			}
			if got := transport.CauseOf(err); got != transport.CauseClient {
				t.Errorf("%s: %v: cause %q, want client", what, err, got)
			}
			if n := u.hits.Load() - before; n != 0 {
				t.Errorf("%s: the upstream got %d requests", what, n)
			}
		}
	}
	// A dial that fails is the upstream's, whatever the request.
	for _, p := range []transport.Protocol{transport.HTTP1, transport.H2C} {
		req, _ := http.NewRequest(http.MethodGet, deadURL(t).String()+"/", nil)
		req.Host = "a b"
		req.Header["Upgrade"] = []string{""}
		_, err := ts.For(p).RoundTrip(req)
		if got := transport.CauseOf(err); got != transport.CauseRefused {
			t.Errorf("a dial refused to %s: %v: cause %q, want refused", protoNames[p], err, got)
		}
	}
}

// The checks every request meets allocate nothing: an HTTP/2 request's
// :method and :authority, and a trailer with nothing to drop.
func TestRefusalChecksDoNotAllocate(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "http://shop.example/cart", nil)
	r.ProtoMajor, r.ProtoMinor, r.Proto = 2, 0, "HTTP/2.0"
	r.Host = "shop.example:8443"
	tr := http.Header{"Grpc-Status": {"0"}, "X-Checksum": {"abc"}}
	if n := testing.AllocsPerRun(100, func() {
		if transport.CheckH2Head(r) != "" {
			t.Fatal("a valid HTTP/2 request refused")
		}
		transport.DropBadTrailers(tr)
	}); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
	if len(tr) != 2 {
		t.Errorf("valid trailer fields dropped: %v", tr)
	}
}
