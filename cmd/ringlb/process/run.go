package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
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
	// it changed on disk and the change looks complete (the file is as the
	// previous look saw it, or was last modified Watch or longer ago). 0
	// turns that off.
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
