package certs_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/certs"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// serve runs an http.Server on loopback with the listener options and
// returns its address. The handler answers with the request's protocol.
func serve(t *testing.T, o certs.ListenerOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, r.Proto)
		}),
		TLSConfig: o.TLSConfig(),
		Protocols: o.Protocols(),
	}
	done := make(chan error, 1)
	go func() {
		if o.Store != nil {
			done <- srv.ServeTLS(ln, "", "")
		} else {
			done <- srv.Serve(ln)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// client is an HTTP client trusting roots, speaking HTTP/2 when the
// server offers it by ALPN.
func client(roots *x509.CertPool) *http.Client {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		Protocols:       p,
	}}
}

// result is what one request saw.
type result struct {
	proto  string // as the server read it
	serial string // the leaf certificate the connection was made with
	reused bool   // whether the request went on an open connection
}

func get(t *testing.T, c *http.Client, url string) result {
	t.Helper()
	var res result
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { res.reused = i.Reused },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %q %v", url, resp.StatusCode, b, err)
	}
	res.proto = string(b)
	if resp.TLS != nil {
		res.serial = resp.TLS.PeerCertificates[0].SerialNumber.Text(16)
	}
	return res
}

// event is one reload the watcher made.
type event struct {
	err    error
	serial string
}

// watch starts s.Watch with a short interval and returns its reloads.
func watch(t *testing.T, s *certs.Store) <-chan event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan event, 64)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.Watch(ctx, certs.WatchOptions{Interval: 5 * time.Millisecond, OnReload: func(err error, now certs.Info) {
			ch <- event{err, now.Serial}
		}})
	}()
	t.Cleanup(func() { cancel(); <-stopped })
	return ch
}

// waitServing waits for a reload that leaves serial served, and returns
// every reload seen until then.
func waitServing(t *testing.T, ch <-chan event, serial string) []event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	var seen []event
	for {
		select {
		case e := <-ch:
			seen = append(seen, e)
			if e.err == nil && e.serial == serial {
				return seen
			}
		case <-deadline:
			t.Fatalf("no reload to serial %s within 10s; saw %v", serial, seen)
		}
	}
}

func serial(l *certstest.Leaf) string { return l.Cert.SerialNumber.Text(16) }

// replace writes data to path atomically, by rename.
func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// checkSwap checks what a reload from old to new promises: an HTTP/2
// connection opened before it keeps working with the old certificate, and
// a new handshake gets the new one.
func checkSwap(t *testing.T, url string, before *http.Client, roots *x509.CertPool, old, new string) {
	t.Helper()
	if r := get(t, before, url); !r.reused || r.serial != old || r.proto != "HTTP/2.0" {
		t.Errorf("connection opened before the reload: %+v, want reused HTTP/2.0 with serial %s", r, old)
	}
	if r := get(t, client(roots), url); r.reused || r.serial != new || r.proto != "HTTP/2.0" {
		t.Errorf("new connection: %+v, want HTTP/2.0 with serial %s", r, new)
	}
}

func TestWatchNoticesRewrittenFiles(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	one, two := ca.Issue(t, certstest.Options{}), ca.Issue(t, certstest.Options{CommonName: "two.example"})
	certFile, keyFile := one.Write(t, dir, "tls")
	s, err := certs.NewStore(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + serve(t, certs.ListenerOptions{Store: s, HTTP2: true}) + "/"
	before := client(ca.Pool())
	if r := get(t, before, url); r.serial != serial(one) || r.proto != "HTTP/2.0" {
		t.Fatalf("first request: %+v, want HTTP/2.0 with serial %s", r, serial(one))
	}
	events := watch(t, s)

	// Written in place, one file then the other, as an editor or cp does:
	// the watcher may see the new certificate with the old key first.
	two.Write(t, dir, "tls")
	waitServing(t, events, serial(two))
	checkSwap(t, url, before, ca.Pool(), serial(one), serial(two))
	if info := s.Info(); info.Subject != "two.example" || !info.NotAfter.Equal(two.Cert.NotAfter) {
		t.Errorf("Info() = %+v", info)
	}
}

// A Kubernetes Secret volume holds tls.crt -> ..data/tls.crt and
// ..data -> ..TIMESTAMP; an update writes a new ..TIMESTAMP directory and
// renames a new ..data symlink over the old one.
func TestWatchNoticesSecretVolumeSwap(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	one, two := ca.Issue(t, certstest.Options{}), ca.Issue(t, certstest.Options{})
	version := func(name string, l *certstest.Leaf) {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		l.Write(t, d, "tls")
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2025_01_01_00_00_00.1", one)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := certs.NewStore(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + serve(t, certs.ListenerOptions{Store: s, HTTP2: true}) + "/"
	before := client(ca.Pool())
	if r := get(t, before, url); r.serial != serial(one) {
		t.Fatalf("first request: %+v, want serial %s", r, serial(one))
	}
	events := watch(t, s)

	version("..2025_01_02_00_00_00.2", two)
	if err := os.RemoveAll(filepath.Join(dir, "..2025_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	// Both files change in one rename: one reload, and it succeeds.
	if seen := waitServing(t, events, serial(two)); len(seen) != 1 {
		t.Errorf("reloads = %v, want exactly one", seen)
	}
	checkSwap(t, url, before, ca.Pool(), serial(one), serial(two))
}

func TestReloadKeepsThePairOnFailure(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	one, other := ca.Issue(t, certstest.Options{}), ca.Issue(t, certstest.Options{})
	certFile, keyFile := one.Write(t, dir, "tls")
	s, err := certs.NewStore(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + serve(t, certs.ListenerOptions{Store: s, HTTP2: true}) + "/"
	before := client(ca.Pool())
	get(t, before, url)

	var fe *certs.FileError
	replace(t, keyFile, other.KeyPEM)
	if err := s.Reload(); !errors.As(err, &fe) || fe.Field != "tls.key_file" || fe.Path != keyFile {
		t.Errorf("Reload() with another certificate's key = %v, want a tls.key_file error", err)
	}
	if err := os.Remove(certFile); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); !errors.As(err, &fe) || fe.Field != "tls.cert_file" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Reload() without a certificate = %v, want a tls.cert_file error wrapping ErrNotExist", err)
	}
	if r := get(t, client(ca.Pool()), url); r.serial != serial(one) {
		t.Errorf("after failed reloads a new handshake got serial %s, want %s", r.serial, serial(one))
	}
	if r := get(t, before, url); !r.reused || r.serial != serial(one) {
		t.Errorf("connection opened before failed reloads: %+v", r)
	}
	if s.Info().Serial != serial(one) {
		t.Errorf("Info().Serial = %s, want %s", s.Info().Serial, serial(one))
	}
}

// A pair that does not load is tried once per change, not on every look.
func TestWatchTriesABrokenPairOnce(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	one, other := ca.Issue(t, certstest.Options{}), ca.Issue(t, certstest.Options{})
	certFile, keyFile := one.Write(t, dir, "tls")
	s, err := certs.NewStore(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	// Looks happen when the test ticks: a tick is taken only once the
	// previous look, and its callback, are done.
	ticks := make(chan time.Time)
	events := make(chan event, 16)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	o := certs.WatchOptions{OnReload: func(err error, now certs.Info) { events <- event{err, now.Serial} }}
	certs.SetTick(&o, ticks)
	go func() { defer close(stopped); s.Watch(ctx, o) }()
	defer func() { cancel(); <-stopped }()
	look := func(n int) {
		for range n {
			ticks <- time.Now()
		}
		ticks <- time.Now() // the n-th look has finished
	}
	pending := func() []event {
		var es []event
		for len(events) > 0 {
			es = append(es, <-events)
		}
		return es
	}

	look(2)
	if es := pending(); len(es) != 0 {
		t.Fatalf("reloads without a change: %v", es)
	}
	replace(t, keyFile, other.KeyPEM) // another certificate's key
	look(5)
	es := pending()
	var fe *certs.FileError
	if len(es) != 1 || !errors.As(es[0].err, &fe) || fe.Field != "tls.key_file" || es[0].serial != serial(one) {
		t.Fatalf("reloads after a bad key: %v; want one tls.key_file error with serial %s still served", es, serial(one))
	}
	replace(t, certFile, other.CertPEM)
	look(5)
	if es := pending(); len(es) != 1 || es[0].err != nil || es[0].serial != serial(other) {
		t.Errorf("reloads after the fix: %v, want one loading serial %s", es, serial(other))
	}
}

func TestNewStoreFails(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	certFile, _ := ca.Issue(t, certstest.Options{}).Write(t, dir, "a")
	_, keyFile := ca.Issue(t, certstest.Options{}).Write(t, dir, "b")
	_, err := certs.NewStore(certFile, keyFile)
	var fe *certs.FileError
	if !errors.As(err, &fe) || fe.Field != "tls.key_file" {
		t.Fatalf("NewStore with a mismatched pair = %v", err)
	}
	if want := "tls.key_file: " + keyFile + ": does not match the certificate in " + certFile; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}
