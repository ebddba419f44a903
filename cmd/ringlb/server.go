package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/cmd/ringlb/certs"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/healthcheck"
)

// server is what a running ringlb keeps besides its listeners: the
// balancer with its metrics registry, and the health checker that reports
// into it. It performs reloads, for SIGHUP and POST /reload alike.
type server struct {
	path string
	// file is the config file at path as it was when last read, for the
	// watch that reloads it when it changes on disk.
	file    *certs.Files
	log     *slog.Logger
	started time.Time
	b       *balancer.Balancer
	reg     *prometheus.Registry
	// listen and adminListen are the addresses bound at the start; a
	// reload cannot move them.
	listen, adminListen string
	// front is the proxy listener's TLS and HTTP/2 side; its certificate
	// follows reloads.
	front *front

	hcCtx    context.Context // the checkers' parent; cancelled by close
	hcCancel context.CancelFunc

	// stopping is set once a shutdown signal arrived: /readyz answers
	// 503 while shutdown_delay runs and the listeners drain.
	stopping atomic.Bool

	mu        sync.Mutex           // serialises reloads and close, and guards hc and probes
	hc        *checker             // nil without a health block
	probes    *balancer.Transports // what health probes are sent over
	probeOpts balancer.TransportOptions
	// shutdownDelay and shutdownTimeout are the last applied config's
	// shutdown_delay and shutdown_timeout.
	shutdownDelay, shutdownTimeout time.Duration
}

// shutdownTimes returns shutdown_delay and shutdown_timeout as the last
// applied config (the start's, or a reload's) says.
func (s *server) shutdownTimes() (delay, timeout time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdownDelay, s.shutdownTimeout
}

// sameTransport reports whether a and b build the same transports (a CA
// file read again unchanged gives an equal pool).
func sameTransport(a, b balancer.TransportOptions) bool {
	ap, bp := a.TLS.RootCAs, b.TLS.RootCAs
	if (ap == nil) != (bp == nil) || (ap != nil && !ap.Equal(bp)) {
		return false
	}
	a.TLS.RootCAs, b.TLS.RootCAs = nil, nil
	return a == b
}

// newServer builds the balancer for cfg, read from path, and starts its
// health checks: every upstream counts as up until it fails `fall`
// probes.
func newServer(path string, cfg *config.Config, logger *slog.Logger) (*server, error) {
	started := time.Now()
	reg := balancer.NewRegistry()
	opts, err := balancerOptions(cfg)
	if err != nil {
		return nil, err
	}
	fr, err := newFront(cfg, reg, logger)
	if err != nil {
		return nil, err
	}
	b, err := balancer.New(opts, reg, logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{path: path, file: certs.NewFiles(path), log: logger, started: started, b: b, reg: reg, listen: cfg.Listen, adminListen: cfg.AdminListen,
		front: fr, hcCtx: ctx, hcCancel: cancel, probeOpts: transportOptions(cfg, opts.UpstreamTLS),
		shutdownDelay: cfg.ShutdownDelay, shutdownTimeout: cfg.ShutdownTimeout}
	s.probes = balancer.NewTransports(s.probeOpts)
	s.hc = s.startChecker(cfg)
	go s.followMembers()
	warnLoops(logger, cfg)
	return s, nil
}

// loopWarnings says which static upstreams are ringlb's own proxy
// listener (config.LoopsBack): a request sent there comes back into
// ringlb, which sends it there again. Not an error (nginx and HAProxy
// accept such a config too), but never what was meant.
func loopWarnings(cfg *config.Config) []string {
	var out []string
	for i, u := range cfg.Upstreams {
		if u.URL != nil && config.LoopsBack(cfg.Listen, u.URL) {
			out = append(out, fmt.Sprintf("upstreams[%d] (%s): %s is ringlb's own listen address (%s): requests sent there come back into ringlb",
				i, u.Name, u.URL, cfg.Listen))
		}
	}
	return out
}

func warnLoops(logger *slog.Logger, cfg *config.Config) {
	for _, w := range loopWarnings(cfg) {
		logger.Warn("upstream loops back", "problem", w)
	}
}

// close stops the health checker and releases the balancer's idle
// connections and timers.
func (s *server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hc.stop()
	s.hc = nil
	s.hcCancel()
	s.probes.CloseIdleConnections()
	s.front.close()
	s.b.Close()
}

// reload re-reads the config file and swaps the new ring in; a bad config
// leaves the old one serving. Then the health checker follows the new
// config: its targets and timing are updated (state and counts carry
// over by name), or it starts, or it stops. A checker reports through a
// reporter that an Update turning checks off revokes, so one being
// stopped can say nothing more. reload counts the attempt
// (Balancer.RecordReload) and returns what POST /reload answers: the new
// ring version, or the problems that rejected the config.
func (s *server) reload() (version string, problems []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.file.Stat() // before the read: a change made meanwhile is seen next time
	version, problems, err = s.apply()
	s.file.Mark(st)
	s.b.RecordReload(err == nil, problems...)
	return version, problems, err
}

// reloadIfChanged reloads the config file if it changed on disk since it
// was last read (by the start, a reload or a previous look), as SIGHUP
// does: a file that does not load keeps the old config serving, and is
// tried again when it changes again.
func (s *server) reloadIfChanged() {
	if _, changed := s.file.Changed(); !changed {
		return
	}
	s.log.Info("config file changed on disk: reloading", "config", s.path)
	s.reload()
}

func (s *server) apply() (string, []string, error) {
	next, err := config.Load(s.path)
	if err == nil && (next.Listen != s.listen || next.AdminListen != s.adminListen) {
		s.log.Warn("listen and admin_listen changes take effect on restart",
			"listen", s.listen, "admin_listen", s.adminListen)
	}
	var opts balancer.Options
	if err == nil {
		opts, err = balancerOptions(next)
	}
	// The certificate pair first: one that does not load rejects the
	// reload before anything changed.
	if err == nil {
		err = s.front.reload(next)
	}
	var version string
	if err == nil {
		version, err = s.b.Update(opts)
	}
	if err != nil {
		problems := problemsOf(err)
		for _, p := range problems {
			s.log.Error("reload rejected, old config keeps serving", "problem", p)
		}
		return "", problems, err
	}
	if to := transportOptions(next, opts.UpstreamTLS); !sameTransport(to, s.probeOpts) {
		s.probes.CloseIdleConnections()
		s.probes, s.probeOpts = balancer.NewTransports(to), to
	}
	switch opts := healthOptions(next.Health); {
	case opts == nil && s.hc != nil:
		s.hc.stop()
		s.hc = nil
		s.log.Info("health checks off: every upstream counts as up")
	case opts != nil && s.hc == nil:
		s.hc = s.startChecker(next)
		s.log.Info("health checks on", "path", opts.Path, "interval", opts.Interval)
	case opts != nil:
		s.hc.opts = *opts
		s.hc.hc.Update(*opts, healthTargets(s.b, s.probes))
	}
	s.shutdownDelay, s.shutdownTimeout = next.ShutdownDelay, next.ShutdownTimeout
	warnLoops(s.log, next)
	return version, nil, nil
}

// checker is a running health checker: it reports into the balancer
// until stop.
type checker struct {
	hc     *healthcheck.Checker
	opts   healthcheck.Options // the ones hc last took
	cancel context.CancelFunc
	done   chan struct{}
}

// startChecker starts active checks of the ring's members (cfg's
// upstreams and those discovery found), reporting through a reporter of
// their own (nil without a health block).
func (s *server) startChecker(cfg *config.Config) *checker {
	opts := healthOptions(cfg.Health)
	if opts == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(s.hcCtx)
	ck := &checker{hc: healthcheck.New(*opts, s.b.HealthReporter(), s.log), opts: *opts, cancel: cancel, done: make(chan struct{})}
	ck.hc.Update(*opts, healthTargets(s.b, s.probes))
	go func() {
		defer close(ck.done)
		ck.hc.Run(ctx)
	}()
	return ck
}

// stop cancels the checker and waits until every prober has stopped.
func (ck *checker) stop() {
	if ck != nil {
		ck.cancel()
		<-ck.done
	}
}
