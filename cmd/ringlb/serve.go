package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// configWatchInterval is how often serve looks at the config file for a
// change on disk, as at the certificate files; a variable so tests can
// shorten it.
var configWatchInterval = 2 * time.Second

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, p := newCommand("serve", "serve [-config config.yaml | config.yaml] [-watch=false]", stdout, stderr)
	watch := c.fs.Bool("watch", true, "reload the config file when it changes on disk (looked at every 2s)")
	if code, ok := c.parse(args); !ok {
		return code
	}
	cfg, err := config.Load(*p)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFail
	}
	interval := configWatchInterval
	if !*watch {
		interval = 0
	}
	return serveWatching(ctx, *p, cfg, slog.New(slog.NewTextHandler(stderr, nil)), nil, interval)
}

// loadCommand parses the flags of a command that takes only -config and
// loads its config; ok is false when the command should exit with code.
func loadCommand(name string, args []string, stdout, stderr io.Writer) (path string, cfg *config.Config, code int, ok bool) {
	c, p := newCommand(name, name+" [-config config.yaml | config.yaml]", stdout, stderr)
	if code, ok := c.parse(args); !ok {
		return "", nil, code, false
	}
	cfg, err := config.Load(*p)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return "", nil, exitFail, false
	}
	return *p, cfg, exitOK, true
}

// serve runs the proxy and admin listeners until ctx is done, then drains.
// ready, if not nil, is called with the bound addresses once both listen.
// It reloads the config file on SIGHUP and POST /reload only (the demo's
// way, and the in-process tests'); see serveWatching.
func serve(ctx context.Context, path string, cfg *config.Config, logger *slog.Logger, ready func(proxy, admin net.Addr)) int {
	return serveWatching(ctx, path, cfg, logger, ready, 0)
}

// serveWatching is serve that also looks at the config file every watch
// and reloads it when it changed on disk and the change looks complete
// (server.reloadIfChanged); 0 turns that off.
func serveWatching(ctx context.Context, path string, cfg *config.Config, logger *slog.Logger, ready func(proxy, admin net.Addr), watch time.Duration) int {
	srv, err := newServer(path, cfg, logger)
	if err != nil {
		logger.Error("cannot build the balancer", "err", err)
		return exitFail
	}
	defer srv.close()

	// Catch SIGHUP before anyone can learn our addresses and send one.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	usr1 := make(chan os.Signal, 1) // reopen the access log file
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)

	pl, al, problem := listen(cfg)
	if problem != "" {
		logger.Error(problem)
		return exitFail
	}
	proxySrv, adminSrv := srv.httpServers(cfg, pl.Addr(), al.Addr())
	if cfg.Pools == nil {
		logger.Info("ringlb serving", "listen", pl.Addr().String(), "admin_listen", al.Addr().String(),
			"upstreams", upstreamNames(&cfg.Pool), "version", srv.b.Version(), "ringlb", buildVersion())
	} else {
		logger.Info("ringlb serving", "listen", pl.Addr().String(), "admin_listen", al.Addr().String(),
			"pools", len(cfg.Pools), "routes", len(cfg.Routes), "ringlb", buildVersion())
		for _, pr := range srv.pools {
			p := cfg.Pools[slices.IndexFunc(cfg.Pools, func(p config.Pool) bool { return p.Name == pr.name })]
			logger.Info("pool serving", "pool", pr.name, "upstreams", upstreamNames(&p), "version", pr.b.Version())
		}
	}
	srv.front.watch(ctx)
	if ready != nil {
		ready(pl.Addr(), al.Addr())
	}

	errc := make(chan error, 2)
	go func() { errc <- srv.front.serve(proxySrv, pl) }()
	go func() { errc <- adminSrv.Serve(al) }()

	var look <-chan time.Time // the config file's watch; nil when off
	var lookTicker *time.Ticker
	if watch > 0 {
		lookTicker = time.NewTicker(watch)
		defer lookTicker.Stop()
		look = lookTicker.C
	}
	code := exitOK
	stop := ctx.Done()
	var delayed <-chan time.Time // fires when shutdown_delay is over
loop:
	for {
		select {
		case <-hup:
			srv.reload()
		case <-usr1:
			srv.reopenLog()
		case <-look:
			srv.reloadIfChanged(watch)
			// The next look comes a whole interval after this one ended,
			// however long a reload took: two looks in a row are never
			// closer, as reloadIfChanged's "looked the same twice" needs.
			lookTicker.Reset(watch)
		case err := <-errc:
			logger.Error("listener failed", "err", err)
			code = exitFail
			break loop
		case <-stop:
			stop = nil
			srv.stopping.Store(true) // /readyz: 503 from now on
			delay, _ := srv.shutdownTimes()
			if delay <= 0 {
				break loop
			}
			logger.Info("shutting down: not ready, still accepting for shutdown_delay", "shutdown_delay", delay)
			// Responses now close their connections, so clients with
			// persistent ones reconnect while this process still
			// accepts, and by then through what no longer sends here.
			proxySrv.SetKeepAlivesEnabled(false)
			t := time.NewTimer(delay)
			defer t.Stop()
			delayed = t.C
		case <-delayed:
			break loop
		}
	}
	srv.stopping.Store(true)
	_, timeout := srv.shutdownTimes()
	drain(logger, timeout, srv.rt, proxySrv, adminSrv)
	logger.Info("stopped")
	return code
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
		return nil, nil, bindError("listen", cfg.Listen, err)
	}
	al, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		pl.Close()
		return nil, nil, bindError("admin_listen", cfg.AdminListen, err)
	}
	return pl, al, ""
}

// httpServers returns the proxy's and the admin listener's HTTP servers,
// bound at proxyAddr and adminAddr.
func (s *server) httpServers(cfg *config.Config, proxyAddr, adminAddr net.Addr) (proxySrv, adminSrv *http.Server) {
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
			Pprof: cfg.DebugPprof, Version: buildVersion(), Listen: proxyAddr.String(), Started: s.started,
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
