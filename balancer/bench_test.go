package balancer

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/internal/testutil/chat"
)

// discardWriter is the cheapest ResponseWriter, so the benchmark measures
// ringlb and the loopback round trip, not a recorder.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkServeHTTP runs the whole handler: key extraction, pick with
// bounded loads, ReverseProxy over loopback to an in-process upstream,
// metrics, with circuit breakers, timeouts.read, the limits and a request
// id made for every request, as `ringlb serve` defaults them. Most of the
// time and allocations are net/http's (the outbound request clone, the
// transport round trip, header maps) and the in-process upstream's.
// BenchmarkServeHTTPFloor is the same without ringlb: 61 against 49
// allocs/op when this was written, the difference being the request id,
// the forwarding headers' values and gobreaker's done closure, plus what
// the upstream allocates to parse the X-Forwarded-*, X-Request-Id and
// CDN-Loop headers (ringlb's downstream.Writer is reused). (The read timeout's
// body wrapper is not needed: these bodies come with their heads.)
// bench/PROFILE.md breaks allocs/op down by site. A jump of allocs/op after
// a change to pick or key extraction is a regression: pick must not
// allocate (see TestPickDoesNotAllocate). http1 upstreams go through
// h1.Transport, as in `ringlb serve`; BenchmarkServeHTTPStdTransport is the
// same with net/http's Transport, for comparison.
func BenchmarkServeHTTP(b *testing.B) { benchServeHTTP(b, "ringlb") }

// BenchmarkServeHTTPStdTransport is BenchmarkServeHTTP with net/http's
// Transport to the upstreams instead of h1.Transport.
func BenchmarkServeHTTPStdTransport(b *testing.B) { benchServeHTTP(b, "std") }

// BenchmarkServeHTTPFloor sends the same requests to the same upstreams
// through a bare httputil.ReverseProxy with the same transport and copy
// buffers, picking the upstream by xxhash of the URI: what ringlb's parts
// cost without ringlb. BenchmarkServeHTTP minus this is ringlb's own cost
// per request (bench/floor is the same idea as a process, for bench/run.sh).
func BenchmarkServeHTTPFloor(b *testing.B) { benchServeHTTP(b, "floor") }

// BenchmarkServeHTTPRouter is BenchmarkServeHTTP through a Router with
// one pool, as serve runs: the cost of the route table.
func BenchmarkServeHTTPRouter(b *testing.B) { benchServeHTTP(b, "router") }

func benchServeHTTP(b *testing.B, kind string) {
	defer func(was bool) { transport.StdHTTP1 = was }(transport.StdHTTP1)
	transport.StdHTTP1 = kind == "std"
	bes := []*backend{newBackend(b, "a"), newBackend(b, "b"), newBackend(b, "c")}
	for _, be := range bes {
		be.handle = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	}
	opts := baseOptions(upstreamsOf(b, bes...))
	opts.Breaker = breaker.Options{ConsecutiveFailures: 5, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 5 * time.Second, MaxOpenTimeout: time.Minute}
	opts.Timeouts.Read = time.Minute // on by default (timeouts.read)
	// limits' defaults
	opts.Limits = options.Limits{UpstreamRequests: 1024, Send: time.Minute}
	// request_id_header's default: every request below arrives without
	// one, so each gets an id made for it.
	opts.RequestIDHeader = "X-Request-Id"
	var h http.Handler
	switch kind {
	case "floor":
		h = floorProxy(opts)
	case "router":
		rt, err := NewRouter(metrics.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		bal, err := rt.NewPool(opts, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer rt.Close()
		if err := rt.Install(nil, []*Balancer{bal}); err != nil {
			b.Fatal(err)
		}
		h = rt
	default:
		bal, err := New(opts, metrics.NewRegistry(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer bal.Close()
		h = bal
	}
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		r, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://shop.example/item?id=%d", i), nil)
		r.Header.Set("X-User-ID", fmt.Sprint("user-", i))
		r.RemoteAddr = "192.0.2.1:5555"
		r.RequestURI = r.URL.RequestURI()
		reqs[i] = r
	}
	// own gives a goroutine its own copies of reqs: ServeHTTP sets the
	// request id on the request it is given.
	own := func() []*http.Request {
		rs := make([]*http.Request, len(reqs))
		for i, r := range reqs {
			rs[i] = r.Clone(r.Context())
		}
		return rs
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		rs := own()
		w := &discardWriter{h: http.Header{}}
		for i := 0; b.Loop(); i++ {
			clear(w.h)
			r := rs[i&1023]
			delete(r.Header, "X-Request-Id")
			h.ServeHTTP(w, r)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			rs := own()
			w := &discardWriter{h: http.Header{}}
			for i := 0; pb.Next(); i++ {
				clear(w.h)
				r := rs[i&1023]
				delete(r.Header, "X-Request-Id")
				h.ServeHTTP(w, r)
			}
		})
	})
}

// floorProxy is the bare ReverseProxy of BenchmarkServeHTTPFloor over
// opts' upstreams.
func floorProxy(opts Options) http.Handler {
	var bufs bufferPool
	tr := transport.NewH1(transport.Options{DialTimeout: opts.Timeouts.Dial, ResponseHeaderTimeout: opts.Timeouts.ResponseHeader, IdleConnTimeout: opts.Timeouts.IdleConn})
	ups := opts.Upstreams
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(ups[xxhash.Sum64String(pr.In.RequestURI)%uint64(len(ups))].URL)
			pr.Out.Host = pr.In.Host
		},
		Transport:  tr,
		BufferPool: &bufs,
	}
}

// BenchmarkPick measures key hashing plus the pick (availability, bounded
// loads) for rings of several sizes. It must report 0 allocs/op; ns/op
// should grow only slowly with the member count (the walk usually stops
// at the owner).
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{3, 30, 300} {
		b.Run(fmt.Sprint("members=", n), func(b *testing.B) {
			var ups []options.Upstream
			for i := range n {
				u, _ := url.Parse(fmt.Sprintf("http://10.0.%d.%d:80", i/250, i%250))
				ups = append(ups, options.Upstream{Name: fmt.Sprint("app-", i), URL: u, Weight: 1})
			}
			bal, err := New(baseOptions(ups), nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			s := bal.snap.Load()
			keys := make([]string, 4096)
			for i := range keys {
				keys[i] = fmt.Sprint("user-", i)
			}
			b.ReportAllocs()
			sink := 0
			for i := 0; b.Loop(); i++ {
				c, _ := bal.pick(s, s.ring.Hash(keys[i&4095]), nil, nil)
				sink += c.Member
			}
			_ = sink
		})
	}
}

// BenchmarkServeHTTPJSONKey is BenchmarkServeHTTP for POSTs of a 4 KiB
// chat completion body keyed on its prompt_cache_key field (a json key
// source), with timeouts.client_body and limits.body_memory at their
// defaults: what reading the body for the key, timing its reads and
// replaying it to the upstream cost on top of a request with a body.
func BenchmarkServeHTTPJSONKey(b *testing.B) {
	bes := []*backend{newBackend(b, "a"), newBackend(b, "b"), newBackend(b, "c")}
	for _, be := range bes {
		be.handle = func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "ok")
		}
	}
	opts := baseOptions(upstreamsOf(b, bes...))
	opts.Hash.Key = []key.Source{{Kind: key.JSON, Name: "prompt_cache_key"}}
	opts.Breaker = breaker.Options{ConsecutiveFailures: 5, FailureStatuses: []int{502, 503, 504}, OpenTimeout: 5 * time.Second, MaxOpenTimeout: time.Minute}
	opts.Timeouts.Read = time.Minute
	opts.Timeouts.ClientBody = time.Minute
	opts.Limits = options.Limits{UpstreamRequests: 1024, Send: time.Minute, BodyMemory: 64 << 20}
	opts.RequestIDHeader = "X-Request-Id"
	bal, err := New(opts, metrics.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bal.Close()
	body := chat.Body(4<<10, true, false)
	r, _ := http.NewRequest(http.MethodPost, "http://api.example/v1/chat/completions", nil)
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	r.RemoteAddr = "192.0.2.1:5555"
	r.RequestURI = r.URL.RequestURI()
	rb := &chat.Rewind{}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		delete(r.Header, "X-Request-Id")
		rb.Reset(body)
		r.Body = rb
		bal.ServeHTTP(w, r)
	}
}
