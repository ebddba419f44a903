package balancer

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a registry holding the Go runtime and process
// collectors, ready to be passed to New and served on /metrics. The command
// and the tests share it so that both expose the same families.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// metrics holds the balancer's collectors. Counters and histograms with an
// upstream label are vectors whose children are resolved once per upstream
// (see upstreamMetrics) and deleted when a reload removes the upstream.
// Gauges read the live atomics at scrape time through stateCollector.
type metrics struct {
	requests   *prometheus.CounterVec   // upstream, code
	duration   *prometheus.HistogramVec // upstream
	ejections  *prometheus.CounterVec   // upstream, reason
	overflow   *prometheus.CounterVec   // upstream
	retries    *prometheus.CounterVec   // upstream
	noUpstream prometheus.Counter
	reloads    *prometheus.CounterVec // result
	reloadOK   prometheus.Counter
	reloadErr  prometheus.Counter
	reloadLast prometheus.Gauge // 1: the last reload (or the start) applied
}

func newMetrics() *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlb_requests_total",
			Help: "Requests answered, by the upstream that served the final attempt and the status code (499: client went away).",
		}, []string{"upstream", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ringlb_request_duration_seconds",
			Help:    "Time from receiving a request to finishing its response, by the upstream that served the final attempt.",
			Buckets: prometheus.DefBuckets,
		}, []string{"upstream"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlb_ejections_total",
			Help: "Times an upstream became unavailable, by reason (health or breaker).",
		}, []string{"upstream", "reason"}),
		overflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlb_overflow_total",
			Help: "Requests sent past this owner because it held its bounded-load share.",
		}, []string{"upstream"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlb_retries_total",
			Help: "Retries away from this upstream after it failed a request.",
		}, []string{"upstream"}),
		noUpstream: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlb_no_upstream_total",
			Help: "Requests answered 503 because no upstream was available.",
		}),
	}
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlb_config_reloads_total",
		Help: "Config reloads, by result (ok or error).",
	}, []string{"result"})
	m.reloads = reloads
	m.reloadOK = reloads.WithLabelValues("ok")
	m.reloadErr = reloads.WithLabelValues("error")
	m.reloadLast = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ringlb_config_last_reload_success",
		Help: "1 if the last config reload (or, before any, the start) applied, 0 if it was rejected.",
	})
	m.reloadLast.Set(1)
	return m
}

// register registers every collector on reg, or none.
func (m *metrics) register(b *Balancer, reg prometheus.Registerer) error {
	cs := []prometheus.Collector{
		m.requests, m.duration, m.ejections, m.overflow, m.retries, m.noUpstream, m.reloads, m.reloadLast,
		&stateCollector{b: b},
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}

// upstreamMetrics are one upstream's pre-resolved metric children, so the
// request path never looks a label set up (except once per new status code).
type upstreamMetrics struct {
	name     string
	requests *prometheus.CounterVec
	duration prometheus.Observer
	overflow prometheus.Counter
	retries  prometheus.Counter
	ejectH   prometheus.Counter
	ejectB   prometheus.Counter
	codes    [600]atomic.Pointer[prometheus.Counter]
	retired  atomic.Bool
}

func (m *metrics) forUpstream(name string) *upstreamMetrics {
	um := &upstreamMetrics{
		name:     name,
		requests: m.requests,
		duration: m.duration.WithLabelValues(name),
		overflow: m.overflow.WithLabelValues(name),
		retries:  m.retries.WithLabelValues(name),
		ejectH:   m.ejections.WithLabelValues(name, "health"),
		ejectB:   m.ejections.WithLabelValues(name, "breaker"),
	}
	return um
}

// code returns the requests_total child for a status code, resolving it on
// first use. A retired upstream (removed by a reload) gets a detached
// counter so that its draining requests do not resurrect deleted series.
func (um *upstreamMetrics) code(code int) prometheus.Counter {
	if code < 0 || code >= len(um.codes) {
		code = 0
	}
	if c := um.codes[code].Load(); c != nil {
		return *c
	}
	var c prometheus.Counter
	if um.retired.Load() {
		c = prometheus.NewCounter(prometheus.CounterOpts{Name: "detached"})
	} else {
		c = um.requests.WithLabelValues(um.name, strconv.Itoa(code))
	}
	um.codes[code].CompareAndSwap(nil, &c)
	return *um.codes[code].Load()
}

// retire deletes the upstream's series after a reload removed it.
func (m *metrics) retire(um *upstreamMetrics) {
	um.retired.Store(true)
	l := prometheus.Labels{"upstream": um.name}
	m.requests.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
	m.ejections.DeletePartialMatch(l)
	m.overflow.DeletePartialMatch(l)
	m.retries.DeletePartialMatch(l)
}

var (
	descInflight = prometheus.NewDesc("ringlb_upstream_inflight",
		"Requests in flight to the upstream.", []string{"upstream"}, nil)
	descAvailable = prometheus.NewDesc("ringlb_upstream_available",
		"1 when the upstream is available (health check up and breaker not open), else 0.", []string{"upstream"}, nil)
	descBreaker = prometheus.NewDesc("ringlb_breaker_state",
		"Circuit breaker state: 0 closed, 1 half-open, 2 open.", []string{"upstream"}, nil)
	descRingInfo = prometheus.NewDesc("ringlb_ring_info",
		"Always 1; the version label is the current ring's membership version.", []string{"version"}, nil)
)

// stateCollector reports the gauges straight from the current snapshot's
// atomics at scrape time, so removed upstreams vanish with the snapshot
// and only the current ring version is ever exported.
type stateCollector struct{ b *Balancer }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descInflight
	ch <- descAvailable
	ch <- descBreaker
	ch <- descRingInfo
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.snap.Load()
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descRingInfo, prometheus.GaugeValue, 1, s.ring.Version())
	for i := range s.members {
		u := s.members[i].u
		avail := 0.0
		if u.available() {
			avail = 1
		}
		ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(u.inflight.Load()), u.name)
		ch <- prometheus.MustNewConstMetric(descAvailable, prometheus.GaugeValue, avail, u.name)
		ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, float64(u.breakerState()), u.name)
	}
}
