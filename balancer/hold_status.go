package balancer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// holdCollector reports ringlb_hold_keys and ringlb_held_total at scrape
// time (0 while hold is off).
type holdCollector struct{ b *Balancer }

func (c *holdCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.b.metrics.HoldKeys
	ch <- c.b.metrics.Held
	ch <- c.b.metrics.ShareErrors
	ch <- c.b.metrics.ShareLookups
	ch <- c.b.metrics.HotShare
}

func (c *holdCollector) Collect(ch chan<- prometheus.Metric) {
	n := 0
	if st := c.b.holdStore.Load(); st != nil {
		n = st.Len()
	}
	ch <- prometheus.MustNewConstMetric(c.b.metrics.HoldKeys, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.b.metrics.Held, prometheus.CounterValue, float64(c.b.heldTotal.Load()))
	sc, m := c.b.shareCounts.Snapshot(), c.b.metrics
	ch <- prometheus.MustNewConstMetric(m.ShareErrors, prometheus.CounterValue, float64(sc.Errors))
	ch <- prometheus.MustNewConstMetric(m.ShareLookups, prometheus.CounterValue, float64(sc.Found), "found")
	ch <- prometheus.MustNewConstMetric(m.ShareLookups, prometheus.CounterValue, float64(sc.None), "none")
	ch <- prometheus.MustNewConstMetric(m.ShareLookups, prometheus.CounterValue, float64(sc.LookupErrors), "error")
	ch <- prometheus.MustNewConstMetric(m.HotShare, prometheus.GaugeValue, c.b.hot.HottestShare())
}

// HoldStatus is the hold block in force, for the status page.
type HoldStatus struct {
	On      bool
	Idle    time.Duration
	MaxKeys int
	Cookie  string // the hold cookie's name; "" for none
	Share   ShareStatus
}

func (s *snapshot) holdStatus() HoldStatus {
	if s.hold == nil {
		return HoldStatus{}
	}
	return HoldStatus{On: true, Idle: s.hold.rule.Idle, MaxKeys: s.hold.maxKeys, Cookie: s.hold.cookie}
}
