package process

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/admin"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// Server limits a proxy user expects; not in the config file. Variables
// so tests can shorten them.
var (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 120 * time.Second
)

// Options say what Run serves and how.
type Options struct {
	// Path is the config file, read again on every reload: SIGHUP, POST
	// /reload and, with Watch, a change on disk.
	Path string
	// Config is the config loaded from Path, the one served at the start.
	Config *config.Config
	// Logger receives the process's log, its failures included.
	Logger *slog.Logger
	// Version describes the build, for the start's log line and the admin
	// listener.
	Version string
	// Watch is how often the config file is looked at: it is reloaded when
	// it changed on disk and the change looks complete
	// (server.reloadIfChanged). 0 turns that off.
	Watch time.Duration
	// Ready, if not nil, is called with the bound addresses once both
	// listeners listen.
	Ready func(proxy, admin net.Addr)
}

// Run runs the proxy and admin listeners until ctx is done, then drains.
// It reloads the config file on SIGHUP and POST /reload, and reopens the
// access log file on SIGUSR1. It returns nil once stopped gracefully, or
// the failure that ended it (a config it cannot serve, a listener that
// cannot bind or that failed), which it has logged.
func Run(ctx context.Context, o Options) error {
	srv, err := newServer(o.Path, o.Config, o.Logger)
	if err != nil {
		o.Logger.Error("cannot build the balancer", "err", err)
		return fmt.Errorf("cannot build the balancer: %w", err)
	}
	defer srv.close()

	// Catch SIGHUP before anyone can learn our addresses and send one.
	sig := notify()
	defer sig.stop()

	pl, al, problem := listen(o.Config)
	if problem != "" {
		o.Logger.Error(problem)
		return errors.New(problem)
	}
	proxySrv, adminSrv := srv.httpServers(o.Config, o.Version, pl.Addr(), al.Addr())
	logServing(o, srv, pl.Addr(), al.Addr())
	srv.front.watch(ctx)
	if o.Ready != nil {
		o.Ready(pl.Addr(), al.Addr())
	}

	errc := make(chan error, 2)
	go func() { errc <- srv.front.serve(proxySrv, pl) }()
	go func() { errc <- adminSrv.Serve(al) }()
	err = srv.loop(ctx, sig, errc, proxySrv, o.Watch)
	srv.stopping.Store(true)
	_, timeout := srv.shutdownTimes()
	drain(o.Logger, timeout, srv.rt, proxySrv, adminSrv)
	o.Logger.Info("stopped")
	return err
}

// signals are the signals a running process acts on besides those that
// stop it (which cancel Run's context).
type signals struct {
	hup  chan os.Signal // reload the config file
	usr1 chan os.Signal // reopen the access log file
}

func notify() signals {
	s := signals{hup: make(chan os.Signal, 1), usr1: make(chan os.Signal, 1)}
	signal.Notify(s.hup, syscall.SIGHUP)
	signal.Notify(s.usr1, syscall.SIGUSR1)
	return s
}

func (s signals) stop() {
	signal.Stop(s.usr1)
	signal.Stop(s.hup)
}

// logServing logs what the process serves once both listeners are bound.
func logServing(o Options, srv *server, proxy, adm net.Addr) {
	cfg, logger := o.Config, o.Logger
	if cfg.Pools == nil {
		logger.Info("ringlb serving", "listen", proxy.String(), "admin_listen", adm.String(),
			"upstreams", upstreamNames(&cfg.Pool), "version", srv.b.Version(), "ringlb", o.Version)
		return
	}
	logger.Info("ringlb serving", "listen", proxy.String(), "admin_listen", adm.String(),
		"pools", len(cfg.Pools), "routes", len(cfg.Routes), "ringlb", o.Version)
	for _, pr := range srv.pools {
		p := cfg.Pools[slices.IndexFunc(cfg.Pools, func(p config.Pool) bool { return p.Name == pr.name })]
		logger.Info("pool serving", "pool", pr.name, "upstreams", upstreamNames(&p), "version", pr.b.Version())
	}
}

// loop serves until ctx is done and shutdown_delay is over, or until a
// listener fails, the error it returns. It reloads the config file on
// SIGHUP and, every watch (0: never), when it changed on disk; it reopens
// the access log file on SIGUSR1.
func (s *server) loop(ctx context.Context, sig signals, errc <-chan error, proxySrv *http.Server, watch time.Duration) error {
	var look <-chan time.Time // the config file's watch; nil when off
	var lookTicker *time.Ticker
	if watch > 0 {
		lookTicker = time.NewTicker(watch)
		defer lookTicker.Stop()
		look = lookTicker.C
	}
	stop := ctx.Done()
	var delayed <-chan time.Time // fires when shutdown_delay is over
	for {
		select {
		case <-sig.hup:
			s.reload()
		case <-sig.usr1:
			s.reopenLog()
		case <-look:
			s.reloadIfChanged(watch)
			// The next look comes a whole interval after this one ended,
			// however long a reload took: two looks in a row are never
			// closer, as reloadIfChanged's "looked the same twice" needs.
			lookTicker.Reset(watch)
		case err := <-errc:
			s.log.Error("listener failed", "err", err)
			return fmt.Errorf("listener failed: %w", err)
		case <-stop:
			stop = nil
			s.stopping.Store(true) // /readyz: 503 from now on
			delay, _ := s.shutdownTimes()
			if delay <= 0 {
				return nil
			}
			s.log.Info("shutting down: not ready, still accepting for shutdown_delay", "shutdown_delay", delay)
			// Responses now close their connections, so clients with
			// persistent ones reconnect while this process still
			// accepts, and by then through what no longer sends here.
			proxySrv.SetKeepAlivesEnabled(false)
			t := time.NewTimer(delay)
			defer t.Stop()
			delayed = t.C
		case <-delayed:
			return nil
		}
	}
}

// upstreamNames lists a pool's static upstreams as NAME=URL, for the log.
func upstreamNames(p *config.Pool) []string {
	names := make([]string, len(p.Upstreams))
	for i, u := range p.Upstreams {
		names[i] = u.Name + "=" + u.URL.String()
	}
	return names
}

// listen binds the proxy and the admin addresses. On failure it binds
// nothing and returns the problem to log.
func listen(cfg *config.Config) (proxy, adm net.Listener, problem string) {
	pl, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, nil, BindError("listen", cfg.Listen, err)
	}
	al, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		pl.Close()
		return nil, nil, BindError("admin_listen", cfg.AdminListen, err)
	}
	return pl, al, ""
}

// httpServers returns the proxy's and the admin listener's HTTP servers,
// bound at proxyAddr and adminAddr; the admin listener shows version.
func (s *server) httpServers(cfg *config.Config, version string, proxyAddr, adminAddr net.Addr) (proxySrv, adminSrv *http.Server) {
	s.mu.Lock()
	s.proxyAddr = proxyAddr.String()
	s.warnDiscoveredLoopsLocked() // members found before the port was known
	s.mu.Unlock()
	errLog := log.New(&slogWriter{s.log}, "", 0)
	proxySrv = &http.Server{
		Handler:           limitHeaders(s.rt, cfg.MaxHeaderBytes),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    serverHeaderLimit(cfg.MaxHeaderBytes),
		ErrorLog:          errLog,
	}
	s.front.configure(proxySrv)
	adminSrv = &http.Server{
		Handler: admin.NewRouterHandler(s.rt, s.reg, s.reload, admin.Options{
			Pprof: cfg.DebugPprof, Version: version, Listen: proxyAddr.String(), Started: s.started,
			Addr:        adminAddr.String(),
			Name:        hostName(cfg.AdminListen),
			Certificate: s.front.certificate,
			Stopping:    s.stopping.Load,
		}),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          errLog,
	}
	return proxySrv, adminSrv
}

// drain shuts the proxy and admin servers down, letting requests in
// flight (and upgraded connections on the proxy) finish within timeout,
// then closes what is left.
func drain(logger *slog.Logger, timeout time.Duration, b *balancer.Router, proxySrv, adminSrv *http.Server) {
	logger.Info("shutting down: draining in-flight requests", "timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, hs := range []*http.Server{proxySrv, adminSrv} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Warn("shutdown did not finish draining", "err", err)
				hs.Close()
			}
			if hs == proxySrv {
				// Shutdown does not wait for upgraded connections
				// (WebSocket tunnels): they get the rest of the time.
				if err := b.WaitTunnels(ctx); err != nil {
					logger.Warn("shutdown closed upgraded connections still open", "err", err)
				}
			}
		}()
	}
	wg.Wait()
}

// slogWriter sends net/http's server error log (TLS handshake errors,
// panics, accept errors) through slog.
type slogWriter struct{ l *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	msg := string(p)
	if n := len(msg); n > 0 && msg[n-1] == '\n' {
		msg = msg[:n-1]
	}
	w.l.Warn(msg, "source", "http")
	return len(p), nil
}

// problemsOf lists a config or reload error's problems, one per entry.
func problemsOf(err error) []string {
	var errs config.Errors
	if errors.As(err, &errs) {
		out := make([]string, len(errs))
		for i, e := range errs {
			out[i] = e.Error()
		}
		return out
	}
	return []string{err.Error()}
}

// headerSlack is what net/http reads beyond http.Server.MaxHeaderBytes
// before it answers 431 (its buffered reader's look-ahead).
const headerSlack = 4096

// serverHeaderLimit is the http.Server.MaxHeaderBytes that makes request
// heads (request line and headers) larger than limit get 431, as
// max_header_bytes promises, rather than limit plus net/http's slack.
func serverHeaderLimit(limit int) int {
	return max(limit-headerSlack, 1)
}

// limitHeaders answers 431 to request heads larger than limit that the
// server let through: only possible when limit is at most the slack, since
// the server's own limit cannot go below it.
func limitHeaders(h http.Handler, limit int) http.Handler {
	if limit > headerSlack {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headSize(r) > limit {
			w.Header().Set("Connection", "close")
			http.Error(w, "431 Request Header Fields Too Large", http.StatusRequestHeaderFieldsTooLarge)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// headSize approximates the bytes of a request's head as sent: the request
// line and every header line with its CRLF.
func headSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	if r.Host != "" { // net/http moves Host out of the header map
		n += len("Host: ") + len(r.Host) + 2
	}
	return n + 2
}

// hostName returns the host of a host:port address when it is a name
// rather than an IP address; "" otherwise.
func hostName(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	return host
}
