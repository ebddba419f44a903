package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/admin"
	"github.com/ringlb/ringlb/cmd/ringlb/certs"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/healthcheck"
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
	opts      balancer.Options     // the ones b last took
	hc        *checker             // nil without a health block
	probes    *balancer.Transports // what health probes are sent over
	probeOpts balancer.TransportOptions
	stop      context.CancelFunc // ends followMembers
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

// sameOptions reports whether a pool's balancer options are unchanged (a
// CA file read again unchanged gives an equal pool).
func sameOptions(a, b balancer.Options) bool {
	ap, bp := a.UpstreamTLS.RootCAs, b.UpstreamTLS.RootCAs
	if (ap == nil) != (bp == nil) || (ap != nil && !ap.Equal(bp)) {
		return false
	}
	a.UpstreamTLS.RootCAs, b.UpstreamTLS.RootCAs = nil, nil
	return reflect.DeepEqual(a, b)
}

// newServer builds the router and each pool's balancer for cfg, read from
// path, and starts their health checks: every upstream counts as up until
// it fails `fall` probes.
func newServer(path string, cfg *config.Config, logger *slog.Logger) (*server, error) {
	started := time.Now()
	reg := balancer.NewRegistry()
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
	pr.probes = balancer.NewTransports(pr.probeOpts)
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

// LoopWarnings says which static upstreams are ringlb's own proxy
// listener (config.LoopsBack): a request sent there comes back into
// ringlb, which sends it there again. Not an error (nginx and HAProxy
// accept such a config too), but never what was meant.
func LoopWarnings(cfg *config.Config) []string {
	var out []string
	for _, p := range cfg.Serving() {
		field := "upstreams"
		if cfg.Pools != nil {
			field = "pools." + p.Name + ".upstreams"
		}
		for i, u := range p.Upstreams {
			if u.URL != nil && config.LoopsBack(cfg.Listen, u.URL) {
				out = append(out, fmt.Sprintf("%s[%d] (%s): %s is ringlb's own listen address (%s): requests sent there come back into ringlb",
					field, i, u.Name, u.URL, cfg.Listen))
			}
		}
	}
	return out
}

func warnLoops(logger *slog.Logger, cfg *config.Config) {
	for _, w := range LoopWarnings(cfg) {
		logger.Warn("upstream loops back", "problem", w)
	}
}

// warnDiscoveredLoopsLocked logs "upstream loops back" once for each
// discovered member whose URL is ringlb's own proxy listener (the bound
// address, so a listen port of 0 is covered too), when it appears or its
// URL changes: a request sent there comes back into ringlb, which answers
// it 508 (its CDN-Loop entry), so it costs one hop, but it is never what
// was meant. Static upstreams are warnLoops's. Callers hold s.mu.
func (s *server) warnDiscoveredLoopsLocked() {
	seen := map[string]bool{}
	for _, pr := range s.pools {
		static := make(map[string]bool, len(pr.opts.Upstreams))
		for _, u := range pr.opts.Upstreams {
			static[u.Name] = true
		}
		for _, m := range pr.b.Members() {
			if static[m.Name] || m.URL == nil || !config.LoopsBack(s.proxyAddr, m.URL) {
				continue
			}
			id := pr.name + "/" + m.Name
			seen[id] = true
			if s.loopWarned[id] == m.URL.String() {
				continue
			}
			s.loopWarned[id] = m.URL.String()
			s.log.Warn("upstream loops back", "pool", pr.name, "problem", fmt.Sprintf(
				"discovered member %s: %s is ringlb's own listen address (%s): requests sent there come back into ringlb",
				m.Name, m.URL, s.proxyAddr))
		}
	}
	for id := range s.loopWarned {
		if !seen[id] {
			delete(s.loopWarned, id)
		}
	}
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

// reload re-reads the config file and swaps the new pools and routes in; a
// bad config leaves the old one serving. A pool of the new config that the
// old one had takes its new settings (Balancer.Update) unless, with
// pools, they are unchanged: then it is left exactly as it is, snapshot,
// ring and version, but its discovery, if any, resolves at once, as an
// Update's does. A new pool starts, a pool no longer configured stops
// once the new routes are in. Then each pool's health checker follows its
// config: its targets and timing are updated (state and counts carry
// over by name), or it starts, or it stops. A checker reports through a
// reporter that an Update turning checks off revokes, so one being
// stopped can say nothing more. reload counts the attempt
// (Router.RecordReload) and returns what POST /reload answers: every
// pool's new ring version, or the problems that rejected the config.
func (s *server) reload() (versions []admin.PoolVersion, problems []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.file.Stat() // before the read: a change made meanwhile is seen next time
	versions, problems, err = s.apply()
	s.file.Mark(st)
	s.rt.RecordReload(err == nil, problems...)
	return versions, problems, err
}

// reloadIfChanged reloads the config file if it changed on disk since it
// was last read (by the start, a reload or a previous look), as SIGHUP
// does: a file that does not load keeps the old config serving, and is
// tried again when it changes again. A change is taken once it looks
// complete (certs.Files.Changed): the file is as the previous look saw
// it, or was last modified settle (the look interval) or longer ago, so
// that a file still being written in place is not applied half-way.
func (s *server) reloadIfChanged(settle time.Duration) {
	if _, changed := s.file.Changed(settle); !changed {
		return
	}
	s.log.Info("config file changed on disk: reloading", "config", s.path)
	s.reload()
}

func (s *server) apply() ([]admin.PoolVersion, []string, error) {
	next, err := s.loader.Load()
	if err == nil && (next.Listen != s.listen || next.AdminListen != s.adminListen) {
		s.log.Warn("listen and admin_listen changes take effect on restart",
			"listen", s.listen, "admin_listen", s.adminListen)
	}
	var opts []balancer.Options
	var kept []bool
	var proc balancer.Options
	alog := s.alog
	if err == nil && next.AccessLog != s.alogCfg {
		alog, err = newAccessLog(next.AccessLog, s.log)
	}
	if err == nil {
		proc = processOptions(next)
		opts, kept, err = s.poolOptions(next, proc, alog)
	}
	// The certificate pair first: one that does not load rejects the
	// reload before anything changed.
	if err == nil {
		err = s.front.reload(next)
	}
	if err == nil {
		if err = s.applyPools(next, opts, kept); err != nil {
			s.cfg = nil // some pools may run next's options: compare them all next time
		} else {
			s.cfg, s.proc = next, proc
		}
	}
	if err != nil {
		if alog != s.alog && alog != nil {
			alog.Close()
		}
		problems := problemsOf(err)
		for _, p := range problems {
			s.log.Error("reload rejected, old config keeps serving", "problem", p)
		}
		return nil, problems, err
	}
	if alog != s.alog {
		// Requests already running may still write to the old file for a
		// moment; closing it makes their lines go nowhere, never elsewhere.
		if s.alog != nil {
			s.alog.Close()
		}
		s.alog, s.alogCfg = alog, next.AccessLog
	}
	s.shutdownDelay, s.shutdownTimeout = next.ShutdownDelay, next.ShutdownTimeout
	s.front.setSend(next.Limits.Send)
	warnLoops(s.log, next)
	s.warnDiscoveredLoopsLocked()
	return s.versions(), nil, nil
}

// versions is what a reload answers: each pool's ring version, in order.
func (s *server) versions() []admin.PoolVersion {
	vs := make([]admin.PoolVersion, len(s.pools))
	for i, pr := range s.pools {
		vs[i] = admin.PoolVersion{Pool: pr.name, Version: pr.b.Version()}
	}
	return vs
}

// processOptions are the balancer options cfg gives every pool: those of
// an empty pool, which hold only the process's settings.
func processOptions(cfg *config.Config) balancer.Options {
	o, _ := balancerOptions(cfg, &config.Pool{}) // it fails only reading a CA file
	return o
}

// poolOptions builds the options of next's pools, in order, writing to
// alog; proc is processOptions(next). kept[i] says that pool i is the
// running pool of its name unchanged (config.SamePool, under the same
// process options and access log): opts[i] are then its running options,
// neither built nor compared again, so that a reload that changes one
// pool of many costs about what that one pool costs.
func (s *server) poolOptions(next *config.Config, proc balancer.Options, alog *accesslog.Logger) ([]balancer.Options, []bool, error) {
	pools := next.Serving()
	opts, kept := make([]balancer.Options, len(pools)), make([]bool, len(pools))
	running := map[string]*poolRun{}
	if next.Pools != nil && s.cfg != nil && alog == s.alog && sameOptions(proc, s.proc) {
		for _, pr := range s.pools {
			running[pr.name] = pr
		}
	}
	for i, p := range pools {
		if pr := running[p.Name]; pr != nil && next.SamePool(s.cfg, p.Name) {
			opts[i], kept[i] = pr.opts, true
			continue
		}
		var err error
		if opts[i], err = balancerOptions(next, p); err != nil {
			return nil, nil, err
		}
		opts[i].AccessLog = alog
	}
	return opts, kept, nil
}

// applyPools installs next's pools (opts are theirs, in order) and routes;
// kept[i] (nil: none) says that pool i is unchanged (see poolOptions).
// New pools are built first, so a failure leaves everything as it was.
func (s *server) applyPools(next *config.Config, opts []balancer.Options, kept []bool) error {
	old := map[string]*poolRun{}
	for _, pr := range s.pools {
		old[pr.name] = pr
	}
	pools := next.Serving()
	runs := make([]*poolRun, len(pools))
	for i, p := range pools {
		if old[p.Name] != nil {
			continue
		}
		pr, err := s.startPool(next, p)
		if err != nil {
			for _, pr := range runs[:i] {
				if pr != nil {
					s.stopPool(pr)
				}
			}
			return err
		}
		runs[i] = pr
	}
	for i, p := range pools {
		pr := old[p.Name]
		if pr == nil {
			continue
		}
		runs[i] = pr
		delete(old, p.Name)
		if next.Pools != nil && kept != nil && kept[i] {
			pr.b.Resolve() // untouched: same snapshot, ring and version
			continue
		}
		if next.Pools != nil && sameOptions(pr.opts, opts[i]) {
			// The same snapshot, ring and version; the health block,
			// which the options do not hold, may have changed alone.
			if !sameHealth(pr, p) {
				s.followConfig(pr, p, opts[i])
			}
			pr.b.Resolve()
			continue
		}
		if _, err := pr.b.Update(opts[i]); err != nil {
			// Validated options that the balancer refuses: not expected.
			// The pools updated before it keep their new settings.
			return err
		}
		pr.opts = opts[i]
		s.followConfig(pr, p, opts[i])
	}
	bs := make([]*balancer.Balancer, len(runs))
	for i, pr := range runs {
		bs[i] = pr.b
	}
	if err := s.rt.Install(next.Routes, bs); err != nil {
		return err
	}
	for _, pr := range old { // no longer configured
		s.log.Info("pool removed", "pool", pr.name)
		s.stopPool(pr)
	}
	s.pools, s.b = runs, runs[0].b
	return nil
}

// sameHealth reports whether pool p's health block is what pr's checker
// runs (both absent included).
func sameHealth(pr *poolRun, p *config.Pool) bool {
	h := healthOptions(p.Health)
	if h == nil || pr.hc == nil {
		return (h == nil) == (pr.hc == nil)
	}
	return *h == pr.hc.opts
}

// followConfig brings a pool's probes and health checker to its new
// config after an Update.
func (s *server) followConfig(pr *poolRun, p *config.Pool, opts balancer.Options) {
	if to := transportOptions(p, opts.UpstreamTLS); !sameTransport(to, pr.probeOpts) {
		pr.probes.CloseIdleConnections()
		pr.probes, pr.probeOpts = balancer.NewTransports(to), to
	}
	switch hopts := healthOptions(p.Health); {
	case hopts == nil && pr.hc != nil:
		pr.hc.stop()
		pr.hc = nil
		s.log.Info("health checks off: every upstream counts as up", "pool", pr.name)
	case hopts != nil && pr.hc == nil:
		pr.hc = s.startChecker(pr, p)
		s.log.Info("health checks on", "pool", pr.name, "path", hopts.Path, "interval", hopts.Interval)
	case hopts != nil:
		pr.hc.opts = *hopts
		pr.hc.hc.Update(*hopts, healthTargets(pr.b, pr.probes))
	}
}

// checker is a running health checker: it reports into the balancer
// until stop.
type checker struct {
	hc     *healthcheck.Checker
	opts   healthcheck.Options // the ones hc last took
	cancel context.CancelFunc
	done   chan struct{}
}

// startChecker starts active checks of a pool's ring members (its
// upstreams and those discovery found), reporting through a reporter of
// their own (nil without a health block).
func (s *server) startChecker(pr *poolRun, p *config.Pool) *checker {
	opts := healthOptions(p.Health)
	if opts == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(s.hcCtx)
	ck := &checker{hc: healthcheck.New(*opts, pr.b.HealthReporter(), s.log.With("pool", pr.name)), opts: *opts, cancel: cancel, done: make(chan struct{})}
	ck.hc.Update(*opts, healthTargets(pr.b, pr.probes))
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

// newAccessLog builds the access log of a config's access_log block (nil
// when off). A file that cannot be opened is an error naming
// access_log.path.
func newAccessLog(c config.AccessLog, logger *slog.Logger) (*accesslog.Logger, error) {
	if !c.On() {
		return nil, nil
	}
	l, err := accesslog.New(c.Format, c.Path, os.Stdout, logger)
	if err != nil {
		return nil, fmt.Errorf("access_log.path: %w", err)
	}
	return l, nil
}

// reopenLog opens the access log file again (SIGUSR1, after logrotate
// moved it away).
func (s *server) reopenLog() {
	s.mu.Lock()
	l := s.alog
	s.mu.Unlock()
	if l == nil || l.Path() == "" {
		s.log.Info("SIGUSR1: no access log file to reopen")
		return
	}
	if err := l.Reopen(); err != nil {
		s.log.Error("SIGUSR1: cannot reopen the access log; writing on to the old file", "err", err)
		return
	}
	s.log.Info("access log reopened", "path", l.Path())
}
