package balancer

import (
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"

	"github.com/ringlb/ringlb/balancer/downstream"
	"github.com/ringlb/ringlb/balancer/forward"
	"github.com/ringlb/ringlb/balancer/transport"
)

// upstreamTransports is the upstream transports (one per transport.Protocol) of one or more
// snapshots, with a count of the attempts using them. One that a reload replaced (retired)
// closes its idle connections at once and again when its last attempt
// ends: connections that requests in flight give back afterwards would
// otherwise sit idle, to upstreams perhaps removed, until idle_conn.
// (CloseIdleConnections also makes connections that become idle close,
// but only until the transport's next dial.)
type upstreamTransports struct {
	*transport.Set
	cfg     transportConfig
	active  atomic.Int64
	retired atomic.Bool
}

func (t *upstreamTransports) begin() { t.active.Add(1) }

func (t *upstreamTransports) end() {
	if t.active.Add(-1) == 0 && t.retired.Load() {
		t.CloseIdleConnections()
	}
}

func (t *upstreamTransports) retire() {
	t.retired.Store(true)
	t.CloseIdleConnections()
}

func newTransport(cfg transportConfig) *upstreamTransports {
	return &upstreamTransports{cfg: cfg, Set: transport.NewSet(transport.Options{
		DialTimeout:           cfg.dial,
		ResponseHeaderTimeout: cfg.responseHeader,
		IdleConnTimeout:       cfg.idleConn,
		TLS:                   cfg.tls,
	})}
}

// bufferPool lends ReverseProxy 32 KiB copy buffers. It pools array
// pointers, so neither Get nor Put allocates.
type bufferPool struct{ p sync.Pool }

const copyBufferSize = 32 << 10

func (bp *bufferPool) Get() []byte {
	if a, ok := bp.p.Get().(*[copyBufferSize]byte); ok {
		return a[:]
	}
	return new([copyBufferSize]byte)[:]
}

func (bp *bufferPool) Put(b []byte) {
	if cap(b) >= copyBufferSize {
		bp.p.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}

func (b *Balancer) newProxy(s *snapshot, u *upstream, spec memberSpec) *httputil.ReverseProxy {
	target := spec.url
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Forward the query exactly as received: ReverseProxy has
			// re-encoded one holding ";", a bad escape or too many
			// parameters (dropping pairs, sorting the rest), which breaks
			// signed URLs and the query the application reads.
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			pr.SetURL(target)
			forward.SetForwarded(pr.Out.Header, pr.In)
			forward.SetLoop(pr.Out.Header, pr.In.Header)
			pr.Out.Host = pr.In.Host
			if pr.Out.Host == "" {
				// No Host (HTTP/1.0, an empty one, HTTP/2 without
				// :authority): the address the client reached, not the
				// upstream's own, which an empty Host would give.
				pr.Out.Host = forward.LocalAddr(pr.In)
			}
			// Request trailers: the server fills the inbound map when the
			// body ends, which is when the transport reads it to send
			// them (Clone copied it while it was still empty).
			if pr.In.Trailer != nil {
				pr.Out.Trailer = pr.In.Trailer
			}
		},
		Transport:    s.transport.For(spec.protocol),
		BufferPool:   &b.bufs,
		ErrorLog:     b.errLog,
		ErrorHandler: downstream.RecordError,
	}
	key, val := s.header, []string{u.name}
	readTimeout := s.readTimeout
	retryOn, retryStatus := s.retryOn, s.retryStatus
	p.ModifyResponse = func(res *http.Response) error {
		if retryOn && retryStatus.Has(res.StatusCode) && res.Request != nil {
			if rw, _ := res.Request.Context().Value(retryWriterKey{}).(*downstream.Writer); rw != nil && rw.RetryStatus {
				// ReverseProxy closes the body and hands the error to
				// downstream.RecordError: nothing reaches the client.
				return &statusError{code: res.StatusCode}
			}
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			if err := transport.CheckUpgrade(res); err != nil {
				return err // ReverseProxy closes the upstream connection
			}
		} else if readTimeout > 0 && res.Body != nil && res.Body != http.NoBody && !transport.Whole(res.Body) {
			res.Body = transport.NewSilenceBody(res.Body, readTimeout)
		}
		if len(res.Trailer) > 0 {
			// Trailers follow the body: an HTTP/1.1 client can get them
			// only in a chunked response, so a Content-Length (which an
			// HTTP/2 upstream may send beside them) must not go out.
			delete(res.Header, "Content-Length")
			res.ContentLength = -1
		}
		if key != "" {
			res.Header[key] = val[:1:1] // cap 1: an append elsewhere copies
		}
		return nil
	}
	return p
}
