package process

import (
	"context"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// DiscoveryOptions converts the discovery block; nil when there is none.
func DiscoveryOptions(d *config.Discovery) *balancer.DiscoveryOptions {
	if d == nil {
		return nil
	}
	o := &balancer.DiscoveryOptions{
		Resolver: d.Resolver, Interval: d.Interval, Timeout: d.Timeout, RemoveAfter: d.RemoveAfter, Confirm: d.Confirm,
		Kubeconfig: d.Kubeconfig, ClusterDomain: d.ClusterDomain,
	}
	for _, s := range d.Sources {
		o.Sources = append(o.Sources, s.Source(d.Kubeconfig))
	}
	return o
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
