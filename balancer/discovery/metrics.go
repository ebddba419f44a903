package discovery

import "github.com/prometheus/client_golang/prometheus"

var (
	descMembers = prometheus.NewDesc("ringlb_discovery_members",
		"Members the discovery source last resolved to (absent ones not counted).", []string{"source"}, nil)
	descUpdates = prometheus.NewDesc("ringlb_discovery_updates_total",
		"Answers from the discovery source that changed the membership.", []string{"source"}, nil)
	descErrors = prometheus.NewDesc("ringlb_discovery_errors_total",
		"Failed queries of the discovery source (its membership was kept).", []string{"source"}, nil)
)

// NewCollector returns the collector of the discovery families
// (ringlb_discovery_*), which reports the status of the Discoverers that
// running returns at scrape time, so a source removed by a reload (or
// the whole block) loses its series at once. The families are the
// process's: a source several Discoverers have (one per pool) is
// reported once, as the first of them sees it.
func NewCollector(running func() []*Discoverer) prometheus.Collector {
	return collector{running: running}
}

type collector struct{ running func() []*Discoverer }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMembers
	ch <- descUpdates
	ch <- descErrors
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	var seen map[string]bool
	for _, d := range c.running() {
		for _, st := range d.Status() {
			if seen[st.Source] {
				continue
			}
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[st.Source] = true
			ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(st.Members), st.Source)
			ch <- prometheus.MustNewConstMetric(descUpdates, prometheus.CounterValue, float64(st.Updates), st.Source)
			ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(st.Errors), st.Source)
		}
	}
}
