package balancer

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// backend is a test upstream that names itself in X-Backend and its body.
type backend struct {
	name string
	srv  *httptest.Server
	hits atomic.Int64
	// handle, if set, replaces the default answer.
	handle func(w http.ResponseWriter, r *http.Request)
}

func newBackend(t testing.TB, name string) *backend {
	t.Helper()
	be := &backend{name: name}
	be.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		be.hits.Add(1)
		w.Header().Set("X-Backend", be.name)
		if be.handle != nil {
			be.handle(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, be.name)
	}))
	t.Cleanup(be.srv.Close)
	return be
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func upstreamsOf(t testing.TB, bes ...*backend) []UpstreamOptions {
	var out []UpstreamOptions
	for _, be := range bes {
		u := mustURL(t, be.srv.URL)
		out = append(out, UpstreamOptions{Name: be.name, URL: u, Addr: u.Host, Weight: 1})
	}
	return out
}

// deadURL returns an http URL on which nothing listens: dialling it is refused.
func deadURL(t testing.TB) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return mustURL(t, "http://"+addr)
}

func baseOptions(ups []UpstreamOptions) Options {
	return Options{
		Upstreams:             ups,
		PointsPerWeight:       160,
		LoadFactor:            1.25,
		Key:                   []KeySource{{Kind: KeyCookie, Name: "session"}, {Kind: KeyHeader, Name: "X-User-ID"}, {Kind: KeyQuery, Name: "user"}, {Kind: KeyURI}},
		OnMissing:             "random",
		UpstreamHeader:        "X-Upstream",
		Retries:               1,
		DialTimeout:           2 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		IdleConnTimeout:       30 * time.Second,
	}
}

// proxy builds a Balancer on a fresh registry and serves it over loopback.
func proxy(t testing.TB, opts Options) (*Balancer, *prometheus.Registry, *httptest.Server) {
	t.Helper()
	reg := NewRegistry()
	b, err := New(opts, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front := httptest.NewServer(b)
	t.Cleanup(front.Close)
	return b, reg, front
}

// get sends a GET to front with the given headers and returns the status,
// the backend that answered (X-Backend) and the body.
func get(t testing.TB, c *http.Client, target string, hdr ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header.Get("X-Backend"), string(body)
}

// metric returns the value of the counter or gauge name with the given
// labels ("k=v" pairs), or -1 when no such series exists.
func metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, l := range labels {
				k, v, _ := strings.Cut(l, "=")
				if !hasLabel(m, k, v) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return -1
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == k && lp.GetValue() == v {
			return true
		}
	}
	return false
}
