package balancer

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

// protoUpstream is a test upstream that answers with the protocol it read
// and echoes trailers: request trailer X-Req-Sum comes back as response
// trailer X-Saw-Sum, beside a grpc-status-like trailer.
func protoHandler(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			t.Errorf("upstream: reading body: %v", err)
		}
		w.Header().Set("Trailer", "X-Saw-Sum, Grpc-Status")
		w.Header().Set("X-Proto", r.Proto)
		io.WriteString(w, "ok")
		w.Header().Set("X-Saw-Sum", r.Trailer.Get("X-Req-Sum"))
		w.Header().Set("Grpc-Status", "0")
	}
}

// h2cUpstream starts a cleartext server speaking HTTP/1.1 and HTTP/2 with
// prior knowledge.
func h2cUpstream(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = p
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// tlsUpstream starts a TLS server with leaf's certificate, offering h2 by
// ALPN when h2 is set.
func tlsUpstream(t *testing.T, h http.Handler, leaf *certstest.Leaf, h2 bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = h2
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.Pair(t)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// roundTrip posts a body with trailer X-Req-Sum through rt and returns
// the response with its body read (so its trailers are set).
func roundTrip(t *testing.T, rt http.RoundTripper, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1 // chunked on HTTP/1.1, so the trailer can be sent
	req.Trailer = http.Header{"X-Req-Sum": {"42"}}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, nil
}

// checkProto checks that the upstream read the request as proto and the
// trailers went both ways.
func checkProto(t *testing.T, resp *http.Response, err error, proto string) {
	t.Helper()
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	if got := resp.Header.Get("X-Proto"); got != proto || resp.Proto != proto {
		t.Errorf("upstream read %q, response is %q; want %s", got, resp.Proto, proto)
	}
	if got := resp.Trailer.Get("X-Saw-Sum"); got != "42" {
		t.Errorf("upstream saw request trailer X-Req-Sum %q, want 42", got)
	}
	if got := resp.Trailer.Get("Grpc-Status"); got != "0" {
		t.Errorf("response trailer Grpc-Status = %q, want 0", got)
	}
}

func TestTransportsSpeakTheirProtocol(t *testing.T) {
	ca := certstest.NewCA(t)
	leaf := ca.Issue(t, certstest.Options{})
	h2c := h2cUpstream(t, protoHandler(t))
	h2 := tlsUpstream(t, protoHandler(t), leaf, true)
	h1only := tlsUpstream(t, protoHandler(t), leaf, false)
	ts := transport.NewSet(transport.Options{DialTimeout: 2 * time.Second, ResponseHeaderTimeout: 5 * time.Second,
		IdleConnTimeout: time.Minute, TLS: transport.UpstreamTLS{RootCAs: ca.Pool()}})
	t.Cleanup(ts.CloseIdleConnections)

	t.Run("h2c", func(t *testing.T) {
		resp, err := roundTrip(t, ts.For(transport.H2C), h2c.URL)
		checkProto(t, resp, err, "HTTP/2.0")
	})
	t.Run("h2", func(t *testing.T) {
		resp, err := roundTrip(t, ts.For(transport.H2), h2.URL)
		checkProto(t, resp, err, "HTTP/2.0")
	})
	t.Run("http1 to a cleartext server that speaks h2c", func(t *testing.T) {
		resp, err := roundTrip(t, ts.For(transport.HTTP1), h2c.URL)
		checkProto(t, resp, err, "HTTP/1.1")
	})
	t.Run("http1 to a TLS server that offers h2", func(t *testing.T) {
		resp, err := roundTrip(t, ts.For(transport.HTTP1), h2.URL)
		checkProto(t, resp, err, "HTTP/1.1")
	})
	t.Run("h2 to a TLS server without h2 fails", func(t *testing.T) {
		if resp, err := roundTrip(t, ts.For(transport.H2), h1only.URL); err == nil {
			t.Errorf("h2 transport reached an HTTP/1.1-only server with %s", resp.Proto)
		}
	})
	t.Run("unknown protocol uses http1", func(t *testing.T) {
		if ts.For(transport.Protocol(9)) != ts.For(transport.HTTP1) {
			t.Error("For(9) is not the http1 transport")
		}
	})
}

// A response streams through the h2c transport: its first part arrives
// while the upstream still holds back the last.
func TestH2CTransportStreams(t *testing.T) {
	release := make(chan struct{})
	srv := h2cUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "last\n")
	}))
	ts := transport.NewSet(transport.Options{DialTimeout: time.Second})
	t.Cleanup(ts.CloseIdleConnections)
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := ts.For(transport.H2C).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() { l, _ := br.ReadString('\n'); got <- l }()
	select {
	case l := <-got:
		if l != "first\n" || resp.ProtoMajor != 2 {
			t.Fatalf("first line %q over %s", l, resp.Proto)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("first part not received while the upstream held back the last")
	}
	close(release)
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "last\n" {
		t.Errorf("rest = %q, %v", rest, err)
	}
}

// verifyCase is an upstream_tls setting and what verifying the
// certificate of a verifyUpstream with it gives.
type verifyCase struct {
	name    string
	tls     transport.UpstreamTLS
	wantErr string // "" when it must succeed
}

// verifyUpstream serves a certificate for a name only: reached at
// 127.0.0.1, it verifies only when server_name says which name to expect.
// It returns the server and the upstream_tls settings to try against it.
func verifyUpstream(t *testing.T, h2 bool) (*httptest.Server, []verifyCase) {
	ca := certstest.NewCA(t)
	leaf := ca.Issue(t, certstest.Options{CommonName: "backend.internal", DNSNames: []string{"backend.internal"}, IPs: []net.IP{}})
	return tlsUpstream(t, protoHandler(t), leaf, h2), []verifyCase{
		{"ca_file and server_name", transport.UpstreamTLS{RootCAs: ca.Pool(), ServerName: "backend.internal"}, ""},
		{"ca_file, name from the URL", transport.UpstreamTLS{RootCAs: ca.Pool()}, "doesn't contain any IP SANs"},
		{"ca_file, wrong server_name", transport.UpstreamTLS{RootCAs: ca.Pool(), ServerName: "other.internal"}, "not other.internal"},
		{"system roots", transport.UpstreamTLS{ServerName: "backend.internal"}, "unknown authority"},
		{"insecure_skip_verify", transport.UpstreamTLS{InsecureSkipVerify: true}, ""},
	}
}

func TestTransportsVerifyUpstreams(t *testing.T) {
	srv, cases := verifyUpstream(t, true)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := transport.NewSet(transport.Options{DialTimeout: 2 * time.Second, TLS: tc.tls})
			t.Cleanup(ts.CloseIdleConnections)
			for _, p := range []transport.Protocol{transport.H2, transport.HTTP1} {
				resp, err := roundTrip(t, ts.For(p), srv.URL)
				switch {
				case tc.wantErr == "" && err != nil:
					t.Errorf("%s: %v", p, err)
				case tc.wantErr == "" && resp.ProtoMajor != map[transport.Protocol]int{transport.H2: 2, transport.HTTP1: 1}[p]:
					t.Errorf("%s: got %s", p, resp.Proto)
				case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
					t.Errorf("%s: err = %v, want one containing %q", p, err, tc.wantErr)
				}
			}
		})
	}
}

func TestTransportsMarkDialErrors(t *testing.T) {
	addr := testnet.RefusedAddr(t)
	ts := transport.NewSet(transport.Options{DialTimeout: 2 * time.Second})
	for p, url := range map[transport.Protocol]string{transport.HTTP1: "http://" + addr, transport.H2C: "http://" + addr, transport.H2: "https://" + addr} {
		_, err := roundTrip(t, ts.For(p), url)
		var de *transport.DialError
		if !errors.As(err, &de) {
			t.Errorf("%s: err = %v, want a *transport.DialError", p, err)
		}
	}
}

func TestParseProtocol(t *testing.T) {
	for _, p := range []transport.Protocol{transport.HTTP1, transport.H2C, transport.H2} {
		if got, err := transport.ParseProtocol(p.String()); err != nil || got != p {
			t.Errorf("transport.ParseProtocol(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := transport.ParseProtocol("http2"); err == nil {
		t.Error("transport.ParseProtocol(http2) succeeded")
	}
}
