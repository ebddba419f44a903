package balancer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer/state"
)

// DefaultPool is the name of the one pool of a config without pools: the
// pool label of a Balancer whose Options.Pool is empty.
const DefaultPool = "default"

// stateCollector reports the gauges straight from the current snapshot's
// atomics at scrape time, so removed upstreams vanish with the snapshot
// and only the current ring version is ever exported.
type stateCollector struct{ b *Balancer }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	m := c.b.metrics
	ch <- m.Inflight
	ch <- m.Available
	ch <- m.Absent
	ch <- m.Breaker
	ch <- m.State
	ch <- m.RingInfo
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.snap.Load()
	if s == nil {
		return
	}
	m := c.b.metrics
	ch <- prometheus.MustNewConstMetric(m.RingInfo, prometheus.GaugeValue, 1, s.ring.Version())
	for i := range s.members {
		u := s.members[i].u
		avail, absent := 0.0, 0.0
		if u.available() {
			avail = 1
		}
		if u.absent.Load() {
			absent = 1
		}
		ch <- prometheus.MustNewConstMetric(m.Inflight, prometheus.GaugeValue, float64(u.inflight.Load()), u.name)
		ch <- prometheus.MustNewConstMetric(m.Available, prometheus.GaugeValue, avail, u.name)
		ch <- prometheus.MustNewConstMetric(m.Absent, prometheus.GaugeValue, absent, u.name)
		ch <- prometheus.MustNewConstMetric(m.Breaker, prometheus.GaugeValue, float64(u.breakerState()), u.name)
		st := u.adminState()
		for i, name := range state.Names() {
			v := 0.0
			if state.Admin(i) == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.State, prometheus.GaugeValue, v, u.name, name)
		}
	}
}

// collectors are the pool's families: its counters and histograms, and
// the gauges read from the snapshot at scrape time.
func (b *Balancer) collectors() []prometheus.Collector {
	return append(b.metrics.Families(), &stateCollector{b: b}, &holdCollector{b: b})
}
