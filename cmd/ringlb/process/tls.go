package process

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/cmd/ringlb/certs"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/internal/sendlimit"
)

// certWatchInterval is how often the certificate files are looked at; a
// variable so tests can shorten it.
var certWatchInterval = 2 * time.Second

// front is the proxy listener's protocol side: TLS with its certificate
// store, HTTP/2 by ALPN, h2c. Whether there is TLS, and http2 and h2c,
// are fixed at start (changing them, like listen, needs a restart); the
// certificate files and min_version follow reloads.
type front struct {
	opts   certs.ListenerOptions // as at start; Store nil without TLS
	logger *slog.Logger
	// streams is limits.streams_per_connection, as at start: it
	// configures the HTTP/2 server, which takes it once. send is
	// limits.send in nanoseconds, following reloads: every client
	// connection's socket is held to it (sendlimit) until it is upgraded.
	streams int
	send    atomic.Int64

	mu       sync.Mutex // serialises reloads and guards the watch fields
	store    atomic.Pointer[certs.Store]
	min      atomic.Uint32 // tls.min_version, as a tls.Version* value
	stop     context.CancelFunc
	ctx      context.Context
	interval time.Duration // certWatchInterval when watch was called
	done     chan struct{} // closed when the current watch has returned
}

// newFront loads cfg's certificate pair (with a tls block) and registers
// ringlb_tls_cert_not_after_seconds in reg. It fails as certs.NewStore
// does; config.Load has already checked the same files, so this happens
// only if they changed in between.
func newFront(cfg *config.Config, reg prometheus.Registerer, logger *slog.Logger) (*front, error) {
	f := &front{
		opts:    certs.ListenerOptions{HTTP2: cfg.HTTP2, H2C: cfg.H2C},
		logger:  logger,
		streams: cfg.Limits.StreamsPerConnection,
	}
	f.send.Store(int64(cfg.Limits.Send))
	if cfg.TLS == nil {
		return f, nil
	}
	st, err := certs.NewStore(cfg.TLS.CertFile, cfg.TLS.KeyFile)
	if err != nil {
		return nil, err
	}
	f.store.Store(st)
	f.opts.Store = st
	f.opts.MinVersion = cfg.TLS.MinVersion
	f.min.Store(uint32(cfg.TLS.MinVersion))
	for _, e := range cfg.Expired {
		logger.Warn("serving a certificate that is not valid now", "problem", e.Error())
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringlb_tls_cert_not_after_seconds",
		Help: "Unix time the served certificate expires.",
	}, func() float64 {
		return float64(f.store.Load().Info().NotAfter.Unix())
	}))
	logCert(logger, "serving certificate", f.store.Load().Info())
	return f, nil
}

func logCert(logger *slog.Logger, msg string, in certs.Info) {
	logger.Info(msg, "subject", in.Subject, "dns_names", in.DNSNames, "serial", in.Serial,
		"not_after", in.NotAfter.UTC().Format(time.RFC3339))
}

// tls reports whether the listener serves TLS.
func (f *front) tls() bool { return f.opts.Store != nil }

// Info describes the served certificate; ok is false without TLS.
func (f *front) Info() (certs.Info, bool) {
	if !f.tls() {
		return certs.Info{}, false
	}
	return f.store.Load().Info(), true
}

// certificate describes the served certificate for the status page.
func (f *front) certificate() (subject string, notAfter time.Time, ok bool) {
	in, ok := f.Info()
	return in.Subject, in.NotAfter, ok
}

// configure sets srv's protocols and TLS config for the listener. An
// HTTP/2 client connection may open limits.streams_per_connection streams
// at once (SETTINGS_MAX_CONCURRENT_STREAMS): each is a request in flight,
// as an HTTP/1.1 connection's one is.
func (f *front) configure(srv *http.Server) {
	srv.Protocols = f.opts.Protocols()
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: f.streams}
	if !f.tls() {
		return
	}
	base := f.opts.TLSConfig()
	// Every handshake gets the current store's certificate and the
	// current min_version, so that both follow reloads.
	base.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return f.store.Load().GetCertificate(hello)
	}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if v := uint16(f.min.Load()); v != base.MinVersion {
			c := base.Clone()
			c.GetConfigForClient = nil
			c.MinVersion = v
			return c, nil
		}
		return nil, nil
	}
	srv.TLSConfig = base
}

// serve serves srv on ln, over TLS when configured. A connection whose
// socket takes no byte for limits.send fails its write, and is closed: a
// client that stops reading an HTTP/2 connection altogether stops every
// stream's writes, and a reset stream (how the balancer cuts one stream's
// stalled write) cannot be sent on it. (net/http's own WriteByteTimeout
// does the same for HTTP/2 by setting and clearing the deadline around
// every write; sendlimit pushes it forward now and then.) Over HTTP/1.1
// the balancer's own watch of each write cuts first; an upgraded
// connection is released from the limit when it is hijacked.
func (f *front) serve(srv *http.Server, ln net.Listener) error {
	ln = sendlimit.NewListener(ln, &f.send)
	if f.tls() {
		return srv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig
	}
	return srv.Serve(ln)
}

// watch reloads the pair whenever its files change on disk, until ctx is
// done or the files are replaced by a reload naming others.
func (f *front) watch(ctx context.Context) {
	if !f.tls() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctx, f.interval = ctx, certWatchInterval
	f.startWatchLocked()
}

func (f *front) startWatchLocked() {
	ctx, cancel := context.WithCancel(f.ctx)
	st, done := f.store.Load(), make(chan struct{})
	f.stop, f.done = cancel, done
	go func() {
		defer close(done)
		st.Watch(ctx, certs.WatchOptions{Interval: f.interval, OnReload: func(err error, now certs.Info) {
			if err != nil {
				f.logger.Error("certificate files changed but do not load; the old pair keeps serving", "problem", err.Error())
				return
			}
			logCert(f.logger, "certificate reloaded after a change on disk", now)
		}})
	}()
}

// close stops watching.
func (f *front) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stop != nil {
		f.stop()
		<-f.done
		f.stop = nil
	}
}

// reload applies next's tls block: the pair is read again (from new
// paths, if they changed) and min_version follows. A pair that does not
// load changes nothing and the error, a *certs.FileError, names the
// field. Adding or removing tls, and changing http2 or h2c, take effect
// on restart only: they are logged, not applied.
func (f *front) reload(next *config.Config) error {
	if (next.TLS != nil) != f.tls() || next.HTTP2 != f.opts.HTTP2 || next.H2C != f.opts.H2C {
		f.logger.Warn("tls (added or removed), http2 and h2c changes take effect on restart",
			"tls", f.tls(), "http2", f.opts.HTTP2, "h2c", f.opts.H2C)
	}
	if next.Limits.StreamsPerConnection != f.streams {
		f.logger.Warn("limits.streams_per_connection changes take effect on restart",
			"streams_per_connection", f.streams)
	}
	if next.TLS == nil || !f.tls() {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.store.Load()
	if c, k := cur.Files(); c == next.TLS.CertFile && k == next.TLS.KeyFile {
		if err := cur.Reload(); err != nil {
			return err
		}
	} else {
		st, err := certs.NewStore(next.TLS.CertFile, next.TLS.KeyFile)
		if err != nil {
			return err
		}
		f.store.Store(st)
		if f.stop != nil { // watch the new files instead
			f.stop()
			<-f.done
			f.startWatchLocked()
		}
	}
	f.min.Store(uint32(next.TLS.MinVersion))
	logCert(f.logger, "certificate reloaded", f.store.Load().Info())
	return nil
}

// setSend applies a reload's limits.send to the connections open and to
// come.
func (f *front) setSend(d time.Duration) { f.send.Store(int64(d)) }
