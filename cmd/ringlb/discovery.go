package main

import (
	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// discoveryOptions converts the discovery block; nil when there is none.
func discoveryOptions(d *config.Discovery) *balancer.DiscoveryOptions {
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

// followMembers keeps the health checker's targets equal to the ring's
// members while discovery changes them (a reload updates them itself),
// until close.
func (s *server) followMembers() {
	for {
		select {
		case <-s.hcCtx.Done():
			return
		case <-s.b.MembersChanged():
		}
		s.mu.Lock()
		if s.hc != nil {
			s.hc.hc.Update(s.hc.opts, healthTargets(s.b, s.probes))
		}
		s.mu.Unlock()
	}
}
