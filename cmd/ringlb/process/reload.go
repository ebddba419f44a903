package process

import (
	"errors"
	"reflect"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/admin"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

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

// sameOptions reports whether a pool's balancer options are unchanged (a
// CA file read again unchanged gives an equal pool). The paths of hold's
// secret and password files are not compared: what the balancer runs
// with is what they hold, which is.
func sameOptions(a, b balancer.Options) bool {
	ap, bp := a.UpstreamTLS.RootCAs, b.UpstreamTLS.RootCAs
	if (ap == nil) != (bp == nil) || (ap != nil && !ap.Equal(bp)) {
		return false
	}
	a.UpstreamTLS.RootCAs, b.UpstreamTLS.RootCAs = nil, nil
	a.Hold.Cookie.SecretFile, b.Hold.Cookie.SecretFile = "", ""
	a.Hold.Share.PasswordFile, b.Hold.Share.PasswordFile = "", ""
	return reflect.DeepEqual(a, b)
}

// sameTransport reports whether a and b build the same transports (a CA
// file read again unchanged gives an equal pool).
func sameTransport(a, b transport.Options) bool {
	ap, bp := a.TLS.RootCAs, b.TLS.RootCAs
	if (ap == nil) != (bp == nil) || (ap != nil && !ap.Equal(bp)) {
		return false
	}
	a.TLS.RootCAs, b.TLS.RootCAs = nil, nil
	return a == b
}

// sameHealth reports whether pool p's health block is what pr's checker
// runs (both absent included).
func sameHealth(pr *poolRun, p *config.Pool) bool {
	h := p.Health
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
		pr.probes, pr.probeOpts = transport.NewSet(to), to
	}
	switch hopts := p.Health; {
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
