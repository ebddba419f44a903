package balancer

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
	"github.com/ringlb/ringlb/internal/testutil/testnet"
)

// rawServer serves each loopback connection with serve; its URL is http.
func rawServer(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// Each class of failure, produced for real over loopback through the
// http1 transport, gets its cause.
func TestCauseOf(t *testing.T) {
	ca := certstest.NewCA(t)
	other := certstest.NewCA(t)
	tlsSrv := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), other.Issue(t, certstest.Options{}), false)
	tlsSrv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	reset := rawServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		c.(*net.TCPConn).SetLinger(0) // the close resets
	})
	silent := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		http.ReadRequest(br)
		br.ReadByte()
	})
	garbage := rawServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "this is not http\r\n\r\n")
	})
	tr := transport.NewH1(transport.Options{DialTimeout: 2 * time.Second, ResponseHeaderTimeout: 100 * time.Millisecond,
		TLS: transport.UpstreamTLS{RootCAs: ca.Pool()}})
	t.Cleanup(tr.CloseIdleConnections)
	roundTripErr := func(url string) error {
		req, _ := http.NewRequest("GET", url, nil)
		res, err := tr.RoundTrip(req)
		if err == nil {
			res.Body.Close()
			t.Fatalf("GET %s succeeded", url)
		}
		return err
	}
	for _, c := range []struct {
		name string
		err  error
		want transport.Cause
	}{
		{"none", nil, transport.CauseNone},
		{"refused", roundTripErr("http://" + testnet.RefusedAddr(t)), transport.CauseRefused},
		{"reset", roundTripErr(reset), transport.CauseReset},
		{"timeout", roundTripErr(silent), transport.CauseTimeout},
		{"tls", roundTripErr(tlsSrv.URL), transport.CauseTLS},
		{"bad response", roundTripErr(garbage), transport.CauseBadResponse},
		{"local", &transport.DialError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}}, transport.CauseLocal},
		{"local (no port)", &transport.DialError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)}}, transport.CauseLocal},
		{"client", fmt.Errorf("wrapped: %w", context.Canceled), transport.CauseClient},
	} {
		if got := transport.CauseOf(c.err); got != c.want {
			t.Errorf("%s: transport.CauseOf(%v) = %q, want %q", c.name, c.err, got, c.want)
		}
		if got := transport.CauseOf(c.err).String(); c.want != transport.CauseNone && got != c.name && !strings.HasPrefix(c.name, got+" (") {
			t.Errorf("%s: String() = %q", c.name, got)
		}
	}
}

// Every failed attempt is logged at warn with its upstream, cause and
// error, at most once per second for each upstream and cause.
func TestFailureLogs(t *testing.T) {
	logs := &logBuffer{}
	refused := mustURL(t, "http://"+testnet.RefusedAddr(t))
	opts := baseOptions([]options.Upstream{{Name: "gone", URL: refused, Addr: refused.Host, Weight: 1}})
	opts.Retries = 0
	b, err := New(opts, metrics.NewRegistry(), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front := httptest.NewServer(b)
	t.Cleanup(front.Close)
	start := time.Now()
	for range 5 {
		res, err := http.Get(front.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", res.StatusCode)
		}
	}
	n := logs.count("upstream attempt failed", "upstream=gone", `cause=refused`)
	if max := 1 + int(time.Since(start)/time.Second); n < 1 || n > max {
		t.Errorf("%d warnings for 5 refused attempts in %v, want 1 (at most one a second)\n%s", n, time.Since(start), logs)
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the warning does not carry the error:\n%s", logs)
	}
}

// A TLS upstream that closes idle connections (as nginx does after
// keepalive_timeout, 75s by default, shorter than idle_conn) costs no
// request and no breaker count: the close is seen before reuse.
func TestTLSUpstreamClosingIdle(t *testing.T) {
	ca := certstest.NewCA(t)
	var closed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, certstest.Options{}).Pair(t)}}
	srv.Config.IdleTimeout = 100 * time.Millisecond
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	idleClosingPOSTs(t, mustURL(t, srv.URL), ca.Pool(), "the upstream", func() {
		opened := closed.Load()
		testenv.Eventually(t, 10*time.Second, func() error {
			if closed.Load() == opened {
				return errors.New("the upstream has not closed its idle connections")
			}
			return nil
		})
		time.Sleep(50 * time.Millisecond) // the rest of the idle connections' closes land
	})
}

// idleClosingPOSTs proxies to the TLS upstream u (trusting roots), with
// breakers on: a burst of 8 POSTs opens several upstream connections,
// waitClosed runs (until who has closed its idle connections), then 8
// POSTs one after another must all get 200.
func idleClosingPOSTs(t *testing.T, u *url.URL, roots *x509.CertPool, who string, waitClosed func()) {
	t.Helper()
	opts := baseOptions([]options.Upstream{{Name: "tls", URL: u, Addr: u.Host, Weight: 1}})
	opts.UpstreamTLS.RootCAs = roots
	opts.Breaker = breaker.Options{ConsecutiveFailures: 3, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 5 * time.Second, MaxOpenTimeout: 60 * time.Second}
	_, _, front := proxy(t, opts)
	post := func() int {
		res, err := http.Post(front.URL+"/p", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	codes := make(chan int, 8)
	for range 8 {
		go func() { codes <- post() }()
	}
	for range 8 {
		if c := <-codes; c != 200 {
			t.Errorf("burst: status %d", c)
		}
	}
	waitClosed()
	var got []int
	for range 8 {
		got = append(got, post())
	}
	for _, c := range got {
		if c != 200 {
			t.Fatalf("POSTs after %s closed its idle connections: %v, want all 200", who, got)
		}
	}
}

// Running out of ringlb's own file descriptors is answered 502, counted
// in ringlb_local_errors_total, logged once a second at most, and never
// counted against an upstream: no breaker opens. The test runs in a child
// process whose descriptor limit it lowers.
func TestLocalErrorsNotCharged(t *testing.T) {
	if os.Getenv("RINGLB_LOCAL_CHILD") == "1" {
		localErrorsChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLocalErrorsNotCharged$", "-test.v")
	cmd.Env = append(os.Environ(), "RINGLB_LOCAL_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "child ok") {
		t.Fatalf("child did not run:\n%s", out)
	}
}

func localErrorsChild(t *testing.T) {
	// Upstreams that refuse: a dial that got a descriptor would fail
	// anyway, and count against its upstream.
	var ups []options.Upstream
	for _, name := range []string{"a", "b", "c"} {
		u := mustURL(t, "http://"+testnet.RefusedAddr(t))
		ups = append(ups, options.Upstream{Name: name, URL: u, Addr: u.Host, Weight: 1})
	}
	opts := baseOptions(ups)
	opts.Hash.Key = []key.Source{{Kind: key.Query, Name: "user"}}
	opts.Hash.OnMissing = "reject"
	opts.Breaker = breaker.Options{ConsecutiveFailures: 2, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 30 * time.Second, MaxOpenTimeout: 60 * time.Second}
	logs := &logBuffer{}
	reg := metrics.NewRegistry()
	b, err := New(opts, reg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front := httptest.NewServer(b)
	t.Cleanup(front.Close)
	// One client connection, opened while descriptors are left, by a
	// request without a key, which reaches no upstream (400).
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	get := func(path string) (int, string) {
		res, err := client.Get(front.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(body)
	}
	if code, _ := get("/"); code != http.StatusBadRequest {
		t.Fatalf("a request without a key: %d", code)
	}
	// The lowest free descriptor number: every number below it is taken,
	// so a limit there leaves none.
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	free := f.Fd()
	f.Close()
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	low := lim
	low.Cur = uint64(free)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 20 {
		code, body := get(fmt.Sprintf("/?user=k%d", i))
		if code != http.StatusBadGateway || !strings.Contains(body, "ringlb is out of its own resources") {
			t.Errorf("request %d at the descriptor limit: %d %q, want 502 naming ringlb's own resources", i, code, body)
		}
	}
	elapsed := time.Since(start)
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	for _, name := range []string{"a", "b", "c"} {
		if br := b.ups[name].br.Load(); br == nil || br.State() != breaker.Closed {
			t.Errorf("upstream %s: breaker not closed after ringlb's own failures", name)
		}
	}
	if n := metric(t, reg, "ringlb_local_errors_total"); n != 20 {
		t.Errorf("ringlb_local_errors_total %v, want 20", n)
	}
	n := logs.count("upstream attempt failed", "cause=local")
	if n < 1 || n > 1+int(elapsed/time.Second) {
		t.Errorf("%d warnings about local failures in %v, want one a second at most\n%s", n, elapsed, logs)
	}
	fmt.Println("child ok")
}
