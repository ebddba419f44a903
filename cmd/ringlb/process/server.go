package process

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/cmd/ringlb/certs"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// server is what a running ringlb keeps besides its listeners: the
// router with its metrics registry and, per pool, the balancer and the
// health checker that reports into it. It performs reloads, for SIGHUP
// and POST /reload alike.
type server struct {
	path string
	// file is the config file at path as it was when last read, for the
	// watch that reloads it when it changes on disk.
	file *certs.Files
	// loader reads the file on reloads, reusing what did not change.
	loader  *config.Loader
	log     *slog.Logger
	started time.Time
	rt      *balancer.Router
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

	// alog is the access log (nil: off), built from alogCfg; a reload
	// that changes access_log replaces it. SIGUSR1 reopens its file.
	alog    *accesslog.Logger
	alogCfg config.AccessLog

	mu    sync.Mutex // serialises reloads and close, and guards pools
	pools []*poolRun // in config order
	// cfg is the config the pools run (the start's, or the last reload's
	// that applied; nil after a reload failed halfway), and proc the
	// options it gives every pool (those of an empty pool): a pool that
	// is the same in the next config (config.SamePool) keeps its options
	// as they are when proc is the same too.
	cfg  *config.Config
	proc balancer.Options
	// b is the first pool's balancer, what the admin listener shows.
	b *balancer.Balancer
	// shutdownDelay and shutdownTimeout are the last applied config's
	// shutdown_delay and shutdown_timeout.
	shutdownDelay, shutdownTimeout time.Duration
	// proxyAddr is the proxy listener's bound address once it listens
	// (listen as configured before); loopWarned holds the discovered
	// members (POOL/NAME: URL) already warned about as ringlb's own
	// listener.
	proxyAddr  string
	loopWarned map[string]string
}

// shutdownTimes returns shutdown_delay and shutdown_timeout as the last
// applied config (the start's, or a reload's) says.
func (s *server) shutdownTimes() (delay, timeout time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdownDelay, s.shutdownTimeout
}

// poolRun is one pool's running parts.
type poolRun struct {
	name      string
	b         *balancer.Balancer
	opts      balancer.Options // the ones b last took
	hc        *checker         // nil without a health block
	probes    *transport.Set   // what health probes are sent over
	probeOpts transport.Options
	stop      context.CancelFunc // ends followMembers
}

// newServer builds the router and each pool's balancer for cfg, read from
// path, and starts their health checks: every upstream counts as up until
// it fails `fall` probes.
func newServer(path string, cfg *config.Config, logger *slog.Logger) (*server, error) {
	started := time.Now()
	reg := metrics.NewRegistry()
	rt, err := balancer.NewRouter(reg)
	if err != nil {
		return nil, err
	}
	fr, err := newFront(cfg, reg, logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{path: path, file: certs.NewFiles(path), loader: config.NewLoader(path, cfg), log: logger, started: started, rt: rt, reg: reg, listen: cfg.Listen, adminListen: cfg.AdminListen,
		front: fr, hcCtx: ctx, hcCancel: cancel, shutdownDelay: cfg.ShutdownDelay, shutdownTimeout: cfg.ShutdownTimeout,
		proxyAddr: cfg.Listen, loopWarned: map[string]string{}}
	if s.alog, err = newAccessLog(cfg.AccessLog, logger); err != nil {
		cancel()
		return nil, err
	}
	s.alogCfg = cfg.AccessLog
	var bs []*balancer.Balancer
	for _, p := range cfg.Serving() {
		pr, err := s.startPool(cfg, p)
		if err != nil {
			s.close()
			return nil, err
		}
		s.mu.Lock() // followMembers reads pools
		s.pools = append(s.pools, pr)
		s.mu.Unlock()
		bs = append(bs, pr.b)
	}
	if err := rt.Install(cfg.Routes, bs); err != nil {
		s.close()
		return nil, err
	}
	s.b = bs[0]
	s.cfg, s.proc = cfg, processOptions(cfg)
	warnLoops(logger, cfg)
	return s, nil
}

// startPool builds a pool's balancer and starts its health checks.
func (s *server) startPool(cfg *config.Config, p *config.Pool) (*poolRun, error) {
	opts, err := balancerOptions(cfg, p)
	if err != nil {
		return nil, err
	}
	opts.AccessLog = s.alog
	b, err := s.rt.NewPool(opts, s.log.With("pool", p.Name))
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(s.hcCtx)
	pr := &poolRun{name: p.Name, b: b, opts: opts, probeOpts: transportOptions(p, opts.UpstreamTLS), stop: stop}
	pr.probes = transport.NewSet(pr.probeOpts)
	pr.hc = s.startChecker(pr, p)
	go s.followMembers(ctx, pr)
	return pr, nil
}

// stopPool stops a pool's checks and closes its balancer.
func (s *server) stopPool(pr *poolRun) {
	pr.stop()
	pr.hc.stop()
	pr.hc = nil
	pr.probes.CloseIdleConnections()
	s.rt.Remove(pr.b)
}

// close stops the health checkers and releases the balancers' idle
// connections and timers.
func (s *server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pr := range s.pools {
		pr.stop()
		pr.hc.stop()
		pr.hc = nil
		pr.probes.CloseIdleConnections()
		pr.b.Close()
	}
	s.hcCancel()
	s.front.close()
	if s.alog != nil {
		s.alog.Close()
	}
}
