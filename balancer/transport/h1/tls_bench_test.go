package h1

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkTLSPooledGet: sequential GETs over one pooled TLS connection
// (the idle check runs once per request).
func BenchmarkTLSPooledGet(b *testing.B) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	up.StartTLS()
	defer up.Close()
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	tr := &Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"}, MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", up.URL, nil)
	b.ReportAllocs()
	for b.Loop() {
		res, err := tr.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}
