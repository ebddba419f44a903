package process

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// startServeAddr is startServe with the proxy's address as host:port
// rather than a URL (the TLS tests pick the scheme).
func startServeAddr(t *testing.T, path string) *running {
	t.Helper()
	r := startServe(t, path)
	r.proxy = strings.TrimPrefix(r.proxy, "http://")
	return r
}

// echoBackends start n HTTP/1.1 upstreams answering "NAME PROTO
// X-Forwarded-Proto".
func echoBackends(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("upstreams:\n")
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("app-%d", i)
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s %s", name, r.Proto, r.Header.Get("X-Forwarded-Proto"))
		}))
		t.Cleanup(s.Close)
		fmt.Fprintf(&b, "  - name: %s\n    url: %s\n", name, s.URL)
	}
	return b.String()
}

// tlsClient returns a client that trusts roots and speaks only what protos
// allows ("h2" or "http/1.1"), over one connection per host.
func tlsClient(roots *x509.CertPool, proto string) *http.Client {
	p := new(http.Protocols)
	if proto == "h2" {
		p.SetHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"},
		Protocols:       p,
		HTTP2:           &http.HTTP2Config{StrictMaxConcurrentRequests: true},
		MaxConnsPerHost: 1,
	}}
}

type answer struct {
	status int
	body   string
	proto  string
	serial string // of the certificate the server presented
}

func fetch(t *testing.T, c *http.Client, method, url string, hdr ...string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, body: string(b), proto: res.Proto}
	if res.TLS != nil && len(res.TLS.PeerCertificates) > 0 {
		a.serial = res.TLS.PeerCertificates[0].SerialNumber.Text(16)
	}
	return a
}

// lookupChosen asks /debug/lookup where key goes.
func lookupChosen(t *testing.T, admin, key string) string {
	t.Helper()
	a := fetch(t, http.DefaultClient, "GET", admin+"/debug/lookup?key="+url.QueryEscape(key))
	var l struct{ Chosen string }
	if err := json.Unmarshal([]byte(a.body), &l); err != nil || l.Chosen == "" {
		t.Fatalf("/debug/lookup?key=%s: %d %s", key, a.status, a.body)
	}
	return l.Chosen
}

// handshakeSerial makes a new TLS handshake with addr and returns the
// serial number of the certificate presented.
func handshakeSerial(t *testing.T, addr string, roots *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

func sn(l *certstest.Leaf) string { return l.Cert.SerialNumber.Text(16) }

// replaceFile writes data to path by rename, as most tools do.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const keyedYAML = "hash:\n  key:\n    - header: X-Key\n"

func TestTLSAffinityOverH2AndHTTP1(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	cert, key := ca.Issue(t, certstest.Options{}).Write(t, dir, "tls")
	r := startServeAddr(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+keyedYAML+
		"tls:\n  cert_file: "+cert+"\n  key_file: "+key+"\n"+echoBackends(t, 4)))
	h2, h1 := tlsClient(ca.Pool(), "h2"), tlsClient(ca.Pool(), "http/1.1")
	seen := map[string]bool{}
	for i := range 40 {
		k := fmt.Sprintf("user-%d", i)
		want := lookupChosen(t, r.admin, k)
		seen[want] = true
		for _, c := range []struct {
			client *http.Client
			proto  string
		}{{h2, "HTTP/2.0"}, {h1, "HTTP/1.1"}} {
			a := fetch(t, c.client, "GET", "https://"+r.proxy+"/", "X-Key", k)
			if a.status != 200 || a.proto != c.proto || a.body != want+" HTTP/1.1 https" {
				t.Fatalf("key %s over %s: %d %s %q; want 200 %s %q", k, c.proto, a.status, a.proto, a.body, c.proto, want+" HTTP/1.1 https")
			}
		}
	}
	if len(seen) < 3 {
		t.Errorf("40 keys reached only %v", seen)
	}
}

// TestTLSManyStreamsOneConnection sends 300 requests at once over one
// HTTP/2 connection, all in flight together (the upstreams answer none
// until all 300 have arrived): each lands on its key's upstream. One
// connection may open that many streams only when
// limits.streams_per_connection allows it (the default is 250).
func TestTLSManyStreamsOneConnection(t *testing.T) {
	const n = 300
	var arrived atomic.Int32
	all := make(chan struct{})
	var ups strings.Builder
	ups.WriteString("upstreams:\n")
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("app-%d", i)
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if arrived.Add(1) == n {
				close(all)
			}
			select {
			case <-all:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "%s %s", name, r.Proto)
		}))
		t.Cleanup(s.Close)
		fmt.Fprintf(&ups, "  - name: %s\n    url: %s\n", name, s.URL)
	}
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	cert, key := ca.Issue(t, certstest.Options{}).Write(t, dir, "tls")
	r := startServeAddr(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+keyedYAML+"limits:\n  streams_per_connection: 1000\n"+
		"tls:\n  cert_file: "+cert+"\n  key_file: "+key+"\n"+ups.String()))
	want := make([]string, n)
	for i := range want {
		want[i] = lookupChosen(t, r.admin, fmt.Sprintf("k%d", i))
	}
	var dials atomic.Int32
	tr := tlsClient(ca.Pool(), "h2").Transport.(*http.Transport)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second} // a stream that cannot start fails, not hangs
	var wg sync.WaitGroup
	errs := make(chan string, len(want))
	for i := range want {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", "https://"+r.proxy+"/", nil)
			req.Header.Set("X-Key", fmt.Sprintf("k%d", i))
			res, err := c.Do(req)
			if err != nil {
				errs <- err.Error()
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.ProtoMajor != 2 || !strings.HasPrefix(string(b), want[i]+" ") {
				errs <- fmt.Sprintf("k%d: %s %q, want %s", i, res.Proto, b, want[i])
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("300 streams took %d connections; want 1", n)
	}
}

func TestTLSReload(t *testing.T) {
	for _, by := range []string{"SIGHUP", "file change"} {
		t.Run(by, func(t *testing.T) {
			if by == "SIGHUP" {
				defer setWatch(time.Hour)() // only the signal can do it
			} else {
				defer setWatch(20 * time.Millisecond)()
			}
			dir := t.TempDir()
			ca := certstest.NewCA(t)
			one, two := ca.Issue(t, certstest.Options{}), ca.Issue(t, certstest.Options{CommonName: "two"})
			cert, key := one.Write(t, dir, "tls")
			r := startServeAddr(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+
				"tls:\n  cert_file: "+cert+"\n  key_file: "+key+"\n"+echoBackends(t, 2)))
			before := tlsClient(ca.Pool(), "h2")
			if a := fetch(t, before, "GET", "https://"+r.proxy+"/"); a.serial != sn(one) || a.proto != "HTTP/2.0" {
				t.Fatalf("before: %+v", a)
			}
			replaceFile(t, key, two.KeyPEM)
			replaceFile(t, cert, two.CertPEM)
			if by == "SIGHUP" {
				syscall.Kill(os.Getpid(), syscall.SIGHUP)
			}
			waitFor(t, 10*time.Second, func() bool { return handshakeSerial(t, r.proxy, ca.Pool()) == sn(two) })
			// The connection opened before keeps working, with the old
			// certificate.
			for range 3 {
				if a := fetch(t, before, "GET", "https://"+r.proxy+"/"); a.status != 200 || a.serial != sn(one) || a.proto != "HTTP/2.0" {
					t.Fatalf("old connection after the reload: %+v; want 200 over HTTP/2 with serial %s", a, sn(one))
				}
			}
			if a := fetch(t, tlsClient(ca.Pool(), "h2"), "GET", "https://"+r.proxy+"/"); a.serial != sn(two) {
				t.Errorf("new connection: serial %s, want %s", a.serial, sn(two))
			}
			if got := ringlbtest.MetricValue(t, r.admin, "ringlb_tls_cert_not_after_seconds"); got != float64(two.Cert.NotAfter.Unix()) {
				t.Errorf("ringlb_tls_cert_not_after_seconds = %v after the reload; want %d", got, two.Cert.NotAfter.Unix())
			}
		})
	}
}

// setWatch sets how often certificate files are looked at and returns
// the function that restores it.
func setWatch(d time.Duration) func() {
	old := certWatchInterval
	certWatchInterval = d
	return func() { certWatchInterval = old }
}

func TestTLSReloadMismatchedPairKeepsTheOld(t *testing.T) {
	defer setWatch(time.Hour)()
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	one, two := ca.Issue(t, certstest.Options{}), ca.Issue(t, certstest.Options{})
	cert, key := one.Write(t, dir, "tls")
	r := startServeAddr(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+
		"tls:\n  cert_file: "+cert+"\n  key_file: "+key+"\n"+echoBackends(t, 2)))
	replaceFile(t, cert, two.CertPEM) // two's certificate, one's key
	a := fetch(t, http.DefaultClient, "POST", r.admin+"/reload")
	if a.status != http.StatusBadRequest || !strings.Contains(a.body, "tls.key_file") {
		t.Errorf("POST /reload with a mismatched pair: %d %s; want 400 naming tls.key_file", a.status, a.body)
	}
	if got := handshakeSerial(t, r.proxy, ca.Pool()); got != sn(one) {
		t.Errorf("after the failed reload the listener serves %s; want the old %s", got, sn(one))
	}
	if got := ringlbtest.MetricValue(t, r.admin, `ringlb_config_reloads_total{result="error"}`); got != 1 {
		t.Errorf(`ringlb_config_reloads_total{result="error"} = %v; want 1`, got)
	}
	if got := ringlbtest.MetricValue(t, r.admin, "ringlb_tls_cert_not_after_seconds"); got != float64(one.Cert.NotAfter.Unix()) {
		t.Errorf("ringlb_tls_cert_not_after_seconds = %v; want the old certificate's %d", got, one.Cert.NotAfter.Unix())
	}
}

func TestTLSExpiryMetricAndStatus(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	notAfter := time.Now().Add(40 * 24 * time.Hour).Truncate(time.Second)
	leaf := ca.Issue(t, certstest.Options{CommonName: "shop.example", NotAfter: notAfter})
	cert, key := leaf.Write(t, dir, "tls")
	r := startServeAddr(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+
		"tls:\n  cert_file: "+cert+"\n  key_file: "+key+"\n"+echoBackends(t, 2)))
	if got := ringlbtest.MetricValue(t, r.admin, "ringlb_tls_cert_not_after_seconds"); got != float64(leaf.Cert.NotAfter.Unix()) {
		t.Errorf("ringlb_tls_cert_not_after_seconds = %v; want %d", got, leaf.Cert.NotAfter.Unix())
	}
	a := fetch(t, http.DefaultClient, "GET", r.admin+"/")
	if !strings.Contains(a.body, "shop.example") || !strings.Contains(a.body, notAfter.UTC().Format(time.RFC3339)) {
		t.Errorf("status page lacks the certificate's subject or expiry:\n%.2000s", a.body)
	}
}

func TestH2CListener(t *testing.T) {
	r := startServeAddr(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+keyedYAML+"h2c: true\n"+echoBackends(t, 2)))
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: p}}
	for _, c := range []struct {
		client *http.Client
		proto  string
	}{{h2c, "HTTP/2.0"}, {http.DefaultClient, "HTTP/1.1"}} {
		a := fetch(t, c.client, "GET", "http://"+r.proxy+"/", "X-Key", "k")
		if a.status != 200 || a.proto != c.proto || !strings.HasSuffix(a.body, " HTTP/1.1 http") {
			t.Errorf("over %s: %d %s %q", c.proto, a.status, a.proto, a.body)
		}
	}
}

// h2cUpstream serves handler over cleartext HTTP/2 (and HTTP/1.1).
func h2cUpstream(t *testing.T, handler http.Handler) string {
	t.Helper()
	s := httptest.NewUnstartedServer(handler)
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetHTTP1(true)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	t.Cleanup(s.Close)
	return s.URL
}

func TestH2CUpstreamStreamsAndTrailers(t *testing.T) {
	release := make(chan struct{})
	url := h2cUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Count")
		fmt.Fprintf(w, "first %s %s %q trailer=%s\n", r.Proto, r.Header.Get("X-Forwarded-Proto"), body, r.Trailer.Get("X-Checksum"))
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "last\n")
		w.Header().Set("X-Count", "2")
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	}))
	r := startServeAddr(t, ringlbtest.WriteConfig(t, ringlbtest.Listeners+"h2c: true\nupstreams:\n  - name: up\n    url: "+url+"\n    protocol: h2c\n"))
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Protocols: p}}
	req, _ := http.NewRequest("POST", "http://"+r.proxy+"/", nil)
	req.Trailer = http.Header{"X-Checksum": nil}
	req.Body = &trailerBody{r: strings.NewReader("hello"), set: func() { req.Trailer.Set("X-Checksum", "abc") }}
	req.ContentLength = -1
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "first HTTP/2.0 http \"hello\" trailer=abc\n" {
		t.Fatalf("first message: %q, %v", first, err)
	}
	close(release) // the last message is written only now
	rest, _ := io.ReadAll(br)
	if string(rest) != "last\n" {
		t.Errorf("rest: %q", rest)
	}
	if res.Trailer.Get("X-Count") != "2" || res.Trailer.Get("Grpc-Status") != "0" {
		t.Errorf("trailers: %v; want X-Count 2 and Grpc-Status 0", res.Trailer)
	}
}

// trailerBody is a request body that sets its trailer when it ends.
type trailerBody struct {
	r   io.Reader
	set func()
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.set()
	}
	return n, err
}

func (b *trailerBody) Close() error { return nil }

func TestHTTPSUpstreams(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	caFile := ca.WriteCA(t, dir, "ca.pem")
	leaf := ca.Issue(t, certstest.Options{DNSNames: []string{"app.internal"}, IPs: []net.IP{}})
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s", r.Proto)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.Pair(t)}}
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	for _, c := range []struct {
		protocol, serverName string
		status               int
		body                 string
	}{
		{"http1", "app.internal", 200, "HTTP/1.1"},
		{"h2", "app.internal", 200, "HTTP/2.0"},
		{"h2", "", 502, ""},                  // 127.0.0.1 is not in the certificate
		{"http1", "other.internal", 502, ""}, // nor is this name
	} {
		t.Run(c.protocol+" "+c.serverName, func(t *testing.T) {
			cfg := ringlbtest.Listeners + "upstream_tls:\n  ca_file: " + caFile + "\n"
			if c.serverName != "" {
				cfg += "  server_name: " + c.serverName + "\n"
			}
			cfg += "upstreams:\n  - name: up\n    url: " + s.URL + "\n    protocol: " + c.protocol + "\n"
			r := startServeAddr(t, ringlbtest.WriteConfig(t, cfg))
			a := fetch(t, http.DefaultClient, "GET", "http://"+r.proxy+"/")
			if a.status != c.status || (c.status == 200 && a.body != c.body) {
				t.Errorf("%d %q; want %d %q", a.status, a.body, c.status, c.body)
			}
		})
	}
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A reload that changes upstream_tls rebuilds the transports: an https
// upstream refused for want of its CA is served once ca_file names it.
func TestReloadUpstreamTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	caFile := ca.WriteCA(t, dir, "ca.pem")
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, certstest.Options{}).Pair(t)}}
	s.StartTLS()
	t.Cleanup(s.Close)
	ups := "upstreams:\n  - name: up\n    url: " + s.URL + "\n"
	path := ringlbtest.WriteConfig(t, ringlbtest.Listeners+ups)
	r := startServeAddr(t, path)
	if a := fetch(t, http.DefaultClient, "GET", "http://"+r.proxy+"/"); a.status != http.StatusBadGateway {
		t.Fatalf("without ca_file: %d %q; want 502 (unknown authority)", a.status, a.body)
	}
	if err := os.WriteFile(path, []byte(ringlbtest.Listeners+"upstream_tls:\n  ca_file: "+caFile+"\n"+ups), 0o600); err != nil {
		t.Fatal(err)
	}
	if a := fetch(t, http.DefaultClient, "POST", r.admin+"/reload"); a.status != http.StatusOK {
		t.Fatalf("POST /reload: %d %s", a.status, a.body)
	}
	if a := fetch(t, http.DefaultClient, "GET", "http://"+r.proxy+"/"); a.status != http.StatusOK || a.body != "HTTP/1.1" {
		t.Errorf("with ca_file: %d %q; want 200 HTTP/1.1", a.status, a.body)
	}
}
