package balancer

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/ringlb/ringlb/balancer/reqbody"
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

// DefaultPool is the name of the one pool of a config without pools: the
// pool label of a Balancer whose Options.Pool is empty.
const DefaultPool = "default"

// metrics holds the balancer's collectors. Counters and histograms with an
// upstream label are vectors whose children are resolved once per upstream
// (see upstreamMetrics) and deleted when a reload removes the upstream.
// Gauges read the live atomics at scrape time through stateCollector.
//
// Every per-upstream and per-ring family carries the balancer's pool as a
// constant label, so the Balancers of several pools register the same
// families side by side on one registry. A family added here takes it
// too: build it with m.pool (Opts.ConstLabels) or m.desc.
type metrics struct {
	pool prometheus.Labels // {"pool": name}

	inflight, available, absent, breaker, state, ringInfo *prometheus.Desc
	holdKeys, held                                        *prometheus.Desc
	shareErrors, shareLookups, hotShare                   *prometheus.Desc

	requests   *prometheus.CounterVec   // upstream, code
	duration   *prometheus.HistogramVec // upstream
	ejections  *prometheus.CounterVec   // upstream, reason
	overflow   *prometheus.CounterVec   // upstream
	retries    *prometheus.CounterVec   // upstream
	limited    *prometheus.CounterVec   // upstream
	noUpstream prometheus.Counter
	local      prometheus.Counter // attempts failed for ringlb's own limits
	handoffs   prometheus.Counter // requests that carried the handoff header

	// proc is the process's families, which a Balancer registers only
	// when it is the process's one pool (New); a Router's pools share the
	// Router's.
	proc *procMetrics
}

// procMetrics are the families of the whole process rather than of a
// pool: reloads, which every pool's RecordReload counts alike, and the
// request-body memory of limits.body_memory, which every pool's requests
// take from alike.
type procMetrics struct {
	reloads    *prometheus.CounterVec // result
	reloadOK   prometheus.Counter
	reloadErr  prometheus.Counter
	reloadLast prometheus.Gauge // 1: the last reload (or the start) applied
	lastReload atomic.Pointer[Reload]

	body        reqbody.Memory
	bodyRefused prometheus.Counter   // ringlb_body_memory_refused_total
	bodyHeld    prometheus.GaugeFunc // ringlb_body_memory_bytes, read from body
}

func newMetrics(pool string) *metrics {
	if pool == "" {
		pool = DefaultPool
	}
	m := &metrics{pool: prometheus.Labels{"pool": pool}}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_requests_total",
		Help:        "Requests answered, by the upstream that served the final attempt and the status code (499: client went away).",
		ConstLabels: m.pool,
	}, []string{"upstream", "code"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "ringlb_request_duration_seconds",
		Help:        "Time from receiving a request to finishing its response, by the upstream that served the final attempt.",
		Buckets:     prometheus.DefBuckets,
		ConstLabels: m.pool,
	}, []string{"upstream"})
	m.ejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_ejections_total",
		Help:        "Times an upstream became unavailable, by reason (health or breaker).",
		ConstLabels: m.pool,
	}, []string{"upstream", "reason"})
	m.overflow = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_overflow_total",
		Help:        "Requests sent past this owner because it held its bounded-load share.",
		ConstLabels: m.pool,
	}, []string{"upstream"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_retries_total",
		Help:        "Retries away from this upstream after it failed a request.",
		ConstLabels: m.pool,
	}, []string{"upstream"})
	m.limited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_limited_total",
		Help:        "Requests answered 503 at once because the upstream held limits.upstream_requests requests.",
		ConstLabels: m.pool,
	}, []string{"upstream"})
	m.noUpstream = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "ringlb_no_upstream_total",
		Help:        "Requests answered 503 because no upstream was available.",
		ConstLabels: m.pool,
	})
	m.local = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "ringlb_local_errors_total",
		Help:        "Attempts that failed for want of ringlb's own resources (file descriptors, local ports, buffers), answered 502 and never counted against an upstream.",
		ConstLabels: m.pool,
	})
	m.handoffs = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "ringlb_handoffs_total",
		Help:        "Requests that carried handoff.header, naming the upstream their key was on before.",
		ConstLabels: m.pool,
	})
	m.inflight = m.desc("ringlb_upstream_inflight",
		"Requests in flight to the upstream.", "upstream")
	m.available = m.desc("ringlb_upstream_available",
		"1 when the upstream is available (health check up and breaker not open), else 0.", "upstream")
	m.absent = m.desc("ringlb_upstream_absent",
		"1 while a discovered upstream is missing from its source's answer (skipped, not ejected), else 0.", "upstream")
	m.breaker = m.desc("ringlb_breaker_state",
		"Circuit breaker state: 0 closed, 1 half-open, 2 open.", "upstream")
	m.state = m.desc("ringlb_upstream_state",
		"1 for the upstream's admin state (ready, drain or maint), 0 for the others.", "upstream", "state")
	m.ringInfo = m.desc("ringlb_ring_info",
		"Always 1; the version label is the current ring's membership version.", "version")
	m.holdKeys = m.desc("ringlb_hold_keys",
		"Keys with a hold record in this process.")
	m.held = m.desc("ringlb_held_total",
		"Requests sent to a held upstream instead of the ring's choice.")
	m.hotShare = m.desc("ringlb_hot_key_share",
		"The hottest key's share of the pool's requests in the current hot-key window (see /debug/hotkeys).")
	m.shareErrors = m.desc("ringlb_hold_share_errors_total",
		"Hold share store writes and lookups that failed or timed out, and writes dropped from a full queue.")
	m.shareLookups = m.desc("ringlb_hold_share_lookups_total",
		"Hold share store lookups, by result (found, none, error).", "result")
	return m
}

func newProcMetrics() *procMetrics {
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlb_config_reloads_total",
		Help: "Config reloads, by result (ok or error).",
	}, []string{"result"})
	m := &procMetrics{reloads: reloads, reloadOK: reloads.WithLabelValues("ok"), reloadErr: reloads.WithLabelValues("error")}
	m.reloadLast = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ringlb_config_last_reload_success",
		Help: "1 if the last config reload (or, before any, the start) applied, 0 if it was rejected.",
	})
	m.reloadLast.Set(1)
	m.bodyRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlb_body_memory_refused_total",
		Help: "Requests answered 503 at once because reading their body for a key would have held more than limits.body_memory.",
	})
	m.bodyHeld = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringlb_body_memory_bytes",
		Help: "Bytes of request-body buffers held now to find keys (json sources), all pools together; limits.body_memory bounds it.",
	}, func() float64 { return float64(m.body.Held()) })
	return m
}

// register registers the process's families on reg, or none.
func (m *procMetrics) register(reg prometheus.Registerer, more ...prometheus.Collector) error {
	return registerAll(reg, append([]prometheus.Collector{m.reloads, m.reloadLast, m.bodyRefused, m.bodyHeld}, more...))
}

// registerAll registers every collector on reg, or none.
func registerAll(reg prometheus.Registerer, cs []prometheus.Collector) error {
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

// desc is a scrape-time family of the pool, with the given variable labels.
func (m *metrics) desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, m.pool)
}

// collectors are the pool's families.
func (m *metrics) collectors(b *Balancer) []prometheus.Collector {
	return []prometheus.Collector{
		m.requests, m.duration, m.ejections, m.overflow, m.retries, m.limited, m.noUpstream, m.local, m.handoffs,
		&stateCollector{b: b}, &holdCollector{b: b},
	}
}

// upstreamMetrics are one upstream's pre-resolved metric children, so the
// request path never looks a label set up (except once per new status code).
type upstreamMetrics struct {
	name     string
	requests *prometheus.CounterVec
	duration prometheus.Observer
	overflow prometheus.Counter
	retries  prometheus.Counter
	limited  prometheus.Counter
	ejectH   prometheus.Counter
	ejectB   prometheus.Counter
	// codes are the requests_total children by status code (code 0
	// stands for any code outside 0-599), in blocks of codeBlockSize
	// codes, a block allocated when the upstream first answers one of its
	// codes: 152 bytes here and 256 for each block used (200 to 223 share
	// one, 480 to 511 another), where a flat table of 600 held 4800 bytes
	// of pointers per upstream from the start, marked by every GC cycle.
	codes   [(maxCode + codeBlockSize - 1) / codeBlockSize]atomic.Pointer[codeBlock]
	retired atomic.Bool
}

const (
	maxCode        = 600 // codes counted by their own value: 0-599
	codeBlockShift = 5
	codeBlockSize  = 1 << codeBlockShift
)

// codeBlock is the children of codeBlockSize consecutive status codes
// (see upstreamMetrics.codes).
type codeBlock [codeBlockSize]atomic.Pointer[prometheus.Counter]

func (m *metrics) forUpstream(name string) *upstreamMetrics {
	um := &upstreamMetrics{
		name:     name,
		requests: m.requests,
		duration: m.duration.WithLabelValues(name),
		overflow: m.overflow.WithLabelValues(name),
		retries:  m.retries.WithLabelValues(name),
		limited:  m.limited.WithLabelValues(name),
		ejectH:   m.ejections.WithLabelValues(name, "health"),
		ejectB:   m.ejections.WithLabelValues(name, "breaker"),
	}
	return um
}

// code returns the requests_total child for a status code, resolving it on
// first use. A retired upstream (removed by a reload) gets a detached
// counter so that its draining requests do not resurrect deleted series.
func (um *upstreamMetrics) code(code int) prometheus.Counter {
	i := uint(code)
	if i >= maxCode {
		i = 0
	}
	if blk := um.codes[i>>codeBlockShift].Load(); blk != nil {
		if c := blk[i&(codeBlockSize-1)].Load(); c != nil {
			return *c
		}
	}
	return um.resolve(int(i))
}

// resolve is code's first use of a status code (0-599).
func (um *upstreamMetrics) resolve(code int) prometheus.Counter {
	b := &um.codes[code>>codeBlockShift]
	blk := b.Load()
	if blk == nil {
		b.CompareAndSwap(nil, new(codeBlock))
		blk = b.Load()
	}
	var c prometheus.Counter
	if um.retired.Load() {
		c = prometheus.NewCounter(prometheus.CounterOpts{Name: "detached"})
	} else {
		c = um.requests.WithLabelValues(um.name, strconv.Itoa(code))
	}
	slot := &blk[code&(codeBlockSize-1)]
	slot.CompareAndSwap(nil, &c)
	return *slot.Load()
}

// retire deletes the upstream's series after a reload (or discovery)
// removed it. It deletes each series by its exact labels, the ones
// forUpstream and code created: a partial match scans every series of a
// vector, which made removing 1000 members take seconds.
func (m *metrics) retire(um *upstreamMetrics) {
	um.retired.Store(true)
	for n := range um.codes {
		blk := um.codes[n].Load()
		if blk == nil {
			continue
		}
		for i := range blk {
			if blk[i].Load() != nil {
				m.requests.DeleteLabelValues(um.name, strconv.Itoa(n<<codeBlockShift+i))
			}
		}
	}
	m.duration.DeleteLabelValues(um.name)
	m.ejections.DeleteLabelValues(um.name, "health")
	m.ejections.DeleteLabelValues(um.name, "breaker")
	m.overflow.DeleteLabelValues(um.name)
	m.retries.DeleteLabelValues(um.name)
	m.limited.DeleteLabelValues(um.name)
}

// stateCollector reports the gauges straight from the current snapshot's
// atomics at scrape time, so removed upstreams vanish with the snapshot
// and only the current ring version is ever exported.
type stateCollector struct{ b *Balancer }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	m := c.b.metrics
	ch <- m.inflight
	ch <- m.available
	ch <- m.absent
	ch <- m.breaker
	ch <- m.state
	ch <- m.ringInfo
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.snap.Load()
	if s == nil {
		return
	}
	m := c.b.metrics
	ch <- prometheus.MustNewConstMetric(m.ringInfo, prometheus.GaugeValue, 1, s.ring.Version())
	for i := range s.members {
		u := s.members[i].u
		avail, absent := 0.0, 0.0
		if u.available() {
			avail = 1
		}
		if u.absent.Load() {
			absent = 1
		}
		ch <- prometheus.MustNewConstMetric(m.inflight, prometheus.GaugeValue, float64(u.inflight.Load()), u.name)
		ch <- prometheus.MustNewConstMetric(m.available, prometheus.GaugeValue, avail, u.name)
		ch <- prometheus.MustNewConstMetric(m.absent, prometheus.GaugeValue, absent, u.name)
		ch <- prometheus.MustNewConstMetric(m.breaker, prometheus.GaugeValue, float64(u.breakerState()), u.name)
		st := u.adminState()
		for i, name := range adminStates {
			v := 0.0
			if AdminState(i) == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, v, u.name, name)
		}
	}
}
