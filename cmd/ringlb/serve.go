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
	"sync"
	"syscall"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/admin"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/healthcheck"
)

// Server limits a proxy user expects; not in the config file. Variables
// so tests can shorten them.
var (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 120 * time.Second
)

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	path, cfg, code, ok := loadCommand("serve", args, stdout, stderr)
	if !ok {
		return code
	}
	return serve(ctx, path, cfg, slog.New(slog.NewTextHandler(stderr, nil)), nil)
}

// loadCommand parses the flags of a command that takes only -config and
// loads its config; ok is false when the command should exit with code.
func loadCommand(name string, args []string, stdout, stderr io.Writer) (path string, cfg *config.Config, code int, ok bool) {
	c, p := newCommand(name, name+" [-config config.yaml]", stdout, stderr)
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

// checker is a running health checker: it reports into the balancer
// until stop.
type checker struct {
	hc     *healthcheck.Checker
	cancel context.CancelFunc
	done   chan struct{}
}

// startChecker starts active checks of cfg's upstreams (nil without a
// health block). It stops with ctx or with stop.
func startChecker(ctx context.Context, cfg *config.Config, b *balancer.Balancer, logger *slog.Logger) *checker {
	opts := healthOptions(cfg.Health)
	if opts == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &checker{hc: healthcheck.New(*opts, b, logger), cancel: cancel, done: make(chan struct{})}
	c.hc.Update(*opts, healthTargets(cfg))
	go func() {
		defer close(c.done)
		c.hc.Run(ctx)
	}()
	return c
}

// stop cancels the checker and waits until every prober has stopped, so
// no report follows. The caller must not hold a lock SetHealthy takes.
func (c *checker) stop() {
	if c != nil {
		c.cancel()
		<-c.done
	}
}

// serve runs the proxy and admin listeners until ctx is done, then drains.
// ready, if not nil, is called with the bound addresses once both listen.
func serve(ctx context.Context, path string, cfg *config.Config, logger *slog.Logger, ready func(proxy, admin net.Addr)) int {
	reg := balancer.NewRegistry()
	b, err := balancer.New(balancerOptions(cfg), reg, logger)
	if err != nil {
		logger.Error("cannot build the balancer", "err", err)
		return exitFail
	}
	defer b.Close()

	// Health checks report into b from the start: every upstream counts as
	// up until it fails `fall` probes. The checker stops (deferred) before
	// serve returns.
	hcCtx, hcCancel := context.WithCancel(context.Background())
	defer hcCancel()
	var mu sync.Mutex // serialises reloads from SIGHUP and POST /reload, and guards hc
	hc := startChecker(hcCtx, cfg, b, logger)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		hc.stop()
	}()

	// reload re-reads the config file and swaps the new ring in; a bad
	// config leaves the old one serving. Then the health checker follows
	// the new config: its targets and timing are updated (state and counts
	// carry over by name), or it starts, or it stops. b.Update runs first:
	// a checker being stopped may still report, and an Update that turns
	// HealthChecks off has reset every verdict to up and ignores those
	// reports. None of this holds a lock SetHealthy takes, since Checker
	// Update and stop wait for probers that may be inside SetHealthy.
	reload := func() (string, []string, error) {
		mu.Lock()
		defer mu.Unlock()
		next, err := config.Load(path)
		if err == nil && (next.Listen != cfg.Listen || next.AdminListen != cfg.AdminListen) {
			logger.Warn("listen and admin_listen changes take effect on restart",
				"listen", cfg.Listen, "admin_listen", cfg.AdminListen)
		}
		var version string
		if err == nil {
			version, err = b.Update(balancerOptions(next))
		}
		if err != nil {
			problems := problemsOf(err)
			for _, p := range problems {
				logger.Error("reload rejected, old config keeps serving", "problem", p)
			}
			return "", problems, err
		}
		switch opts := healthOptions(next.Health); {
		case opts == nil && hc != nil:
			hc.stop()
			hc = nil
			logger.Info("health checks off: every upstream counts as up")
		case opts != nil && hc == nil:
			hc = startChecker(hcCtx, next, b, logger)
			logger.Info("health checks on", "path", opts.Path, "interval", opts.Interval)
		case opts != nil:
			hc.hc.Update(*opts, healthTargets(next))
		}
		return version, nil, nil
	}

	// Catch SIGHUP before anyone can learn our addresses and send one.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	errLog := log.New(&slogWriter{logger}, "", 0)
	proxySrv := &http.Server{
		Handler:           limitHeaders(b, cfg.MaxHeaderBytes),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    serverHeaderLimit(cfg.MaxHeaderBytes),
		ErrorLog:          errLog,
	}
	started := time.Now()
	adminSrv := &http.Server{ // Handler is set once the proxy's address is known
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          errLog,
	}
	pl, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		logger.Error(bindError("listen", cfg.Listen, err))
		return exitFail
	}
	al, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		pl.Close()
		logger.Error(bindError("admin_listen", cfg.AdminListen, err))
		return exitFail
	}
	adminSrv.Handler = admin.NewHandler(b, reg, reload, admin.Options{
		Pprof: cfg.DebugPprof, Version: buildVersion(), Listen: pl.Addr().String(), Started: started,
		Addr: al.Addr().String(),
		Name: hostName(cfg.AdminListen),
	})
	names := make([]string, len(cfg.Upstreams))
	for i, u := range cfg.Upstreams {
		names[i] = u.Name + "=" + u.URL.String()
	}
	logger.Info("ringlb serving", "listen", pl.Addr().String(), "admin_listen", al.Addr().String(),
		"upstreams", names, "version", b.Version(), "ringlb", buildVersion())
	if ready != nil {
		ready(pl.Addr(), al.Addr())
	}

	errc := make(chan error, 2)
	go func() { errc <- proxySrv.Serve(pl) }()
	go func() { errc <- adminSrv.Serve(al) }()

	code := exitOK
loop:
	for {
		select {
		case <-hup:
			_, problems, err := reload() // POST /reload is counted by the admin handler
			b.RecordReload(err == nil, problems...)
		case err := <-errc:
			logger.Error("listener failed", "err", err)
			code = exitFail
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	logger.Info("shutting down: draining in-flight requests", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range []*http.Server{proxySrv, adminSrv} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Warn("shutdown did not finish draining", "err", err)
				s.Close()
			}
			if s == proxySrv {
				// Shutdown does not wait for upgraded connections
				// (WebSocket tunnels): they get the rest of the time.
				if err := b.WaitTunnels(sctx); err != nil {
					logger.Warn("shutdown closed upgraded connections still open", "err", err)
				}
			}
		}()
	}
	wg.Wait()
	logger.Info("stopped")
	return code
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
