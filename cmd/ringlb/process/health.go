package process

import (
	"context"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/healthcheck"
)

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
	opts := p.Health
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

// followMembers keeps a pool's health checker's targets equal to its
// ring's members while discovery changes them (a reload updates them
// itself), and warns about members that are ringlb's own listener, until
// ctx is done (close, or the pool's removal).
func (s *server) followMembers(ctx context.Context, pr *poolRun) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-pr.b.MembersChanged():
		}
		s.mu.Lock()
		if pr.hc != nil {
			pr.hc.hc.Update(pr.hc.opts, healthTargets(pr.b, pr.probes))
		}
		s.warnDiscoveredLoopsLocked()
		s.mu.Unlock()
	}
}

// healthTargets lists the ring's members, static and discovered (absent
// ones too, so their health state carries over if they return), each
// probed over probes' transport for its protocol: cleartext HTTP/2 to an
// h2c upstream, https verified as upstream_tls says.
func healthTargets(b *balancer.Balancer, probes *transport.Set) []healthcheck.Target {
	ms := b.Members()
	ts := make([]healthcheck.Target, len(ms))
	for i, m := range ms {
		ts[i] = healthcheck.Target{Name: m.Name, URL: m.URL, Transport: probes.For(m.Protocol)}
	}
	return ts
}
