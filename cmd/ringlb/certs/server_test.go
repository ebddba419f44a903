package certs_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/certs"
	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// h2cClient speaks only cleartext HTTP/2 with prior knowledge.
func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

func TestListenerProtocols(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t)
	s, err := certs.NewStore(ca.Issue(t, certstest.Options{}).Write(t, dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("tls with http2", func(t *testing.T) {
		url := "https://" + serve(t, certs.ListenerOptions{Store: s, HTTP2: true}) + "/"
		if r := get(t, client(ca.Pool()), url); r.proto != "HTTP/2.0" {
			t.Errorf("an h2-capable client got %s", r.proto)
		}
		h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
		if r := get(t, h1, url); r.proto != "HTTP/1.1" {
			t.Errorf("an HTTP/1.1 client got %s", r.proto)
		}
	})
	t.Run("tls without http2", func(t *testing.T) {
		url := "https://" + serve(t, certs.ListenerOptions{Store: s, HTTP2: false}) + "/"
		if r := get(t, client(ca.Pool()), url); r.proto != "HTTP/1.1" {
			t.Errorf("with http2 off an h2-capable client got %s", r.proto)
		}
	})
	t.Run("min_version 1.3", func(t *testing.T) {
		url := "https://" + serve(t, certs.ListenerOptions{Store: s, HTTP2: true, MinVersion: tls.VersionTLS13}) + "/"
		old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12}}}
		if resp, err := old.Get(url); err == nil {
			resp.Body.Close()
			t.Error("a TLS 1.2 client was served with min_version 1.3")
		} else if !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("TLS 1.2 client: %v, want a protocol version alert", err)
		}
		if r := get(t, client(ca.Pool()), url); r.proto != "HTTP/2.0" {
			t.Errorf("a TLS 1.3 client got %s", r.proto)
		}
	})
	t.Run("min_version defaults to 1.2", func(t *testing.T) {
		if v := (certs.ListenerOptions{Store: s}).TLSConfig().MinVersion; v != tls.VersionTLS12 {
			t.Errorf("MinVersion = %x", v)
		}
	})
	t.Run("h2c", func(t *testing.T) {
		url := "http://" + serve(t, certs.ListenerOptions{H2C: true, HTTP2: true}) + "/"
		if r := get(t, h2cClient(), url); r.proto != "HTTP/2.0" {
			t.Errorf("an h2c client got %s", r.proto)
		}
		if r := get(t, http.DefaultClient, url); r.proto != "HTTP/1.1" {
			t.Errorf("an HTTP/1.1 client got %s", r.proto)
		}
	})
	t.Run("plain without h2c", func(t *testing.T) {
		o := certs.ListenerOptions{HTTP2: true}
		if o.TLSConfig() != nil {
			t.Error("TLSConfig() without a Store is not nil")
		}
		url := "http://" + serve(t, o) + "/"
		if resp, err := h2cClient().Get(url); err == nil {
			resp.Body.Close()
			t.Errorf("an h2c client was served without h2c (%s)", resp.Proto)
		}
		if r := get(t, http.DefaultClient, url); r.proto != "HTTP/1.1" {
			t.Errorf("an HTTP/1.1 client got %s", r.proto)
		}
	})
}
