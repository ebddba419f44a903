package h1

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"
)

// discardWriter is a ResponseWriter that keeps nothing but its header map,
// so that the benchmark measures the proxy and the transport, not a
// client.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkReverseProxy proxies GET requests through httputil.ReverseProxy
// to a real loopback upstream (net/http, a 12-byte body), with this
// Transport ("h1") and with an http.Transport tuned as the balancer tunes
// it ("std"). Both include the upstream's own cost, which is the same for
// both. A regression shows as more allocs/op or ns/op for h1 against std
// measured in the same run; compare within one run only (a shared machine
// moves absolute figures a lot).
func BenchmarkReverseProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok from u1\n")
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	transports := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"h1", &Transport{Dial: dial, DialTimeout: 2 * time.Second, MaxIdleConns: 16384, MaxIdleConnsPerHost: 1024,
			IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: 30 * time.Second, ExpectContinueTimeout: time.Second}},
		{"std", &http.Transport{DialContext: dial, MaxIdleConns: 16384, MaxIdleConnsPerHost: 1024,
			IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: 30 * time.Second, ExpectContinueTimeout: time.Second,
			DisableCompression: true}},
	}
	for _, tc := range transports {
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Host = pr.In.Host
			},
			Transport: tc.rt,
		}
		newReq := func() *http.Request {
			r := httptest.NewRequest("GET", "http://front.example/k/123", nil)
			ctx, cancel := context.WithCancel(r.Context()) // a server request's context can be cancelled
			b.Cleanup(cancel)
			return r.WithContext(ctx)
		}
		b.Run(tc.name+"/serial", func(b *testing.B) {
			req := newReq()
			w := &discardWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				rp.ServeHTTP(w, req)
				if w.code != 200 {
					b.Fatalf("status %d", w.code)
				}
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := newReq()
				w := &discardWriter{h: make(http.Header)}
				for pb.Next() {
					clear(w.h)
					rp.ServeHTTP(w, req)
					if w.code != 200 {
						b.Errorf("status %d", w.code)
						return
					}
				}
			})
		})
		if c, ok := tc.rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}
