package balancer

import (
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/reqbody"
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
			setForwarded(pr.Out.Header, pr.In)
			setLoop(pr.Out.Header, pr.In.Header)
			pr.Out.Host = pr.In.Host
			if pr.Out.Host == "" {
				// No Host (HTTP/1.0, an empty one, HTTP/2 without
				// :authority): the address the client reached, not the
				// upstream's own, which an empty Host would give.
				pr.Out.Host = localAddr(pr.In)
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
		ErrorHandler: recordError,
	}
	key, val := s.header, []string{u.name}
	readTimeout := s.readTimeout
	retryOn, retryStatus := s.retryOn, s.retryStatus
	p.ModifyResponse = func(res *http.Response) error {
		if retryOn && retryStatus.Has(res.StatusCode) && res.Request != nil {
			if rw, _ := res.Request.Context().Value(retryWriterKey{}).(*responseWriter); rw != nil && rw.retryStatus {
				// ReverseProxy closes the body and hands the error to
				// recordError: nothing reaches the client.
				return &statusError{code: res.StatusCode}
			}
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			if err := transport.CheckUpgrade(res); err != nil {
				return err // ReverseProxy closes the upstream connection
			}
		} else if readTimeout > 0 && res.Body != nil && res.Body != http.NoBody && !whole(res.Body) {
			res.Body = newSilenceBody(res.Body, readTimeout)
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

// setForwarded sets the outbound X-Forwarded-For, -Host and -Proto
// exactly as httputil.ProxyRequest.SetXForwarded does, except that the
// client's X-Forwarded-For is kept (Rewrite mode drops it from the
// outbound request) with the client's address appended, as one
// comma-separated value. When the client sent no User-Agent it also sets
// an empty one, which ReverseProxy would otherwise set after Rewrite so
// that the transport sends none: the upstream sees the same header either
// way. The values share one backing array, one allocation per request
// where SetXForwarded and ReverseProxy make four; each is a capped
// one-element slice, so an append elsewhere copies.
func setForwarded(h http.Header, in *http.Request) {
	v := new([4]string)
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := in.Header["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		v[0] = ip
		h["X-Forwarded-For"] = v[0:1:1]
	} else {
		delete(h, "X-Forwarded-For")
	}
	v[1] = in.Host
	h["X-Forwarded-Host"] = v[1:2:2]
	v[2] = "http"
	if in.TLS != nil {
		v[2] = "https"
	}
	h["X-Forwarded-Proto"] = v[2:3:3]
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = v[3:4:4] // ""
	}
}

// localAddr is the address of ringlb's end of the connection r came
// on, as host:port ("" for a request that came on none).
func localAddr(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a != nil {
		return a.String()
	}
	return ""
}

// recordError is every ReverseProxy's ErrorHandler: it writes nothing and
// leaves the error for ServeHTTP, which retries or answers. ReverseProxy's
// own refusal of what the client asked for (badUpgrade) is marked here.
func recordError(w http.ResponseWriter, r *http.Request, err error) {
	if rw, ok := w.(*responseWriter); ok {
		rw.err = transport.BadUpgrade(r, err)
		return
	}
	w.WriteHeader(http.StatusBadGateway)
}

// errReadTimeout ends a read of an upstream's response body that waited
// longer than Options.Timeouts.Read.
var errReadTimeout = &readTimeoutError{}

type readTimeoutError struct{}

func (*readTimeoutError) Error() string {
	return "upstream response body silent for longer than timeouts.read"
}
func (*readTimeoutError) Timeout() bool { return true }

func (*readTimeoutError) Temporary() bool { return false }

// silenceBody is an upstream response body each of whose reads may wait
// at most d for data. A read that waits longer closes the body, which
// ends it (and the connection) with errReadTimeout. Only time spent in a
// read counts: time ringlb spends writing to the client does not. A read
// that cannot wait (the body says so: readier) is not timed, which spares
// the common response whose body came in with its head a timer
// altogether.
type silenceBody struct {
	rc      io.ReadCloser
	ready   readier // rc, when it can tell; nil otherwise
	d       time.Duration
	timer   *time.Timer
	expired atomic.Bool
}

// readier is a response body that knows when its next Read cannot wait
// on the connection (balancer/h1's bodies).
type readier interface{ Ready() bool }

// whole reports whether body says that all of it arrived with the head
// (balancer/h1's bodies can): no read of it can wait, so timeouts.read
// need not wrap it.
func whole(body io.ReadCloser) bool {
	w, ok := body.(interface{ Whole() bool })
	return ok && w.Whole()
}

func newSilenceBody(rc io.ReadCloser, d time.Duration) *silenceBody {

	b := &silenceBody{rc: rc, d: d}
	b.ready, _ = rc.(readier)
	return b
}

func (b *silenceBody) Read(p []byte) (int, error) {
	timed := b.ready == nil || !b.ready.Ready()
	if timed {
		if b.timer == nil {
			b.timer = time.AfterFunc(b.d, b.expire)
		} else {
			b.timer.Reset(b.d)
		}
	}
	n, err := b.rc.Read(p)
	if timed {
		b.timer.Stop()
	}
	if err != nil && b.expired.Load() {
		err = errReadTimeout
	}
	return n, err
}

func (b *silenceBody) expire() {
	b.expired.Store(true)
	b.rc.Close() // the transport closes the connection: the read ends
}

func (b *silenceBody) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	return b.rc.Close()
}

// trackedBody counts the request body bytes read, so a retry happens only
// when nothing was sent; notes whether reading the client's body failed
// (a malformed chunk, a connection closed short of Content-Length, a
// silence longer than timeouts.client_body), which is the client's fault
// and never the upstream's; and ignores Close, so an attempt's transport
// cannot close the body a retry still needs (net/http closes it after the
// handler returns). The transport reads it on its own goroutine, hence
// the atomics.
//
// It holds the body's other readers, in one allocation: the client's
// body as ringlb reads it (client), and the prefix the key scan read
// (prefix, for a JSON body when a key source reads bodies). It reads the
// prefix (viaPrefix) once the scan read from it, else client.
type trackedBody struct {
	n   atomic.Int64
	bad atomic.Bool
	// stalled says the current attempt failed while a read of the body
	// had long waited on the client (reqbody.ClientBody.stalled): the upstream
	// gave up on a body the client held back. Set by attempt.
	stalled   bool
	viaPrefix bool
	// trailer is the request's trailer map, which the server fills as
	// the body ends, before the transport writes it: the fields that must
	// not be forwarded are dropped then (dropBadTrailers).
	trailer http.Header
	// trailers keeps the declared trailers of a body that no key source
	// read (see reqbody.TrailerGate).
	trailers reqbody.TrailerGate

	client reqbody.ClientBody
	prefix reqbody.Prefix
}

// trackBody gives r's body (which it must have) its trackedBody, and r
// the reader the key scan reads: the prefix when it may scan the body,
// else the client's body. Once the request is routed, routed makes the
// trackedBody r's body.
func (b *Balancer) trackBody(s *snapshot, w http.ResponseWriter, r *http.Request) *trackedBody {
	t := new(trackedBody)
	t.trailer = r.Trailer
	t.client.Init(r.Body, w, r, s.clientBody)
	r.Body = &t.client
	if s.bodyKeys && key.IsJSONBody(r.Header) {
		t.prefix.Init(&t.client, r.ContentLength, s.bodyLimit, &b.proc.Body)
		t.prefix.Trailers = reqbody.NewTrailerGate(r)
		r.Body = &t.prefix
	} else if len(r.Trailer) > 0 {
		t.trailers = reqbody.NewTrailerGate(r)
	}
	return t
}

// routed makes t r's body, reading the prefix first if the key scan
// read any of it.
func (t *trackedBody) routed(r *http.Request) {
	t.viaPrefix = t.prefix.Started()
	r.Body = t
}

// finish ends the body's part in a request that is over: the prefix's
// memory goes back to limits.body_memory and the client's reads are no
// longer timed, except one an upstream's transport may still make (sent
// says one was given the body; see bodyWatch.finish).
func (t *trackedBody) finish(sent bool) {
	t.prefix.Done(sent)
	t.client.Finish(sent)
}

func (t *trackedBody) Read(p []byte) (int, error) {
	var n int
	var err error
	if t.viaPrefix {
		n, err = t.prefix.Read(p)
	} else {
		n, err = t.client.Read(p)
	}
	t.n.Add(int64(n))
	if err == io.EOF {
		t.trailers.Close()
		if len(t.trailer) > 0 {
			transport.DropBadTrailers(t.trailer)
		}
	} else if err != nil {
		t.bad.Store(true)
	}
	return n, err
}

func (t *trackedBody) Close() error { return nil }
