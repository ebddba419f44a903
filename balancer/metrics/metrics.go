// Package metrics holds a pool's Prometheus families and the process's:
// the counters and histograms the request path adds to, resolved once per
// upstream, and the reload and body-memory families every pool shares.
package metrics

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/ringlb/ringlb/balancer/reqbody"
)

// Pool holds a pool's collectors. Counters and histograms with an
// upstream label are vectors whose children are resolved once per upstream
// (see Upstream) and deleted when a reload removes the upstream.
// Gauges read the live atomics at scrape time through stateCollector.
//
// Every per-upstream and per-ring family carries the balancer's pool as a
// constant label, so the Balancers of several pools register the same
// families side by side on one registry. A family added here takes it
// too: build it with m.Labels (Opts.ConstLabels) or m.Desc.
type Pool struct {
	Labels prometheus.Labels // {"pool": name}

	Inflight, Available, Absent, Breaker, State, RingInfo *prometheus.Desc
	HoldKeys, Held                                        *prometheus.Desc
	ShareErrors, ShareLookups, HotShare                   *prometheus.Desc

	Requests   *prometheus.CounterVec   // upstream, code
	Duration   *prometheus.HistogramVec // upstream
	Ejections  *prometheus.CounterVec   // upstream, reason
	Overflow   *prometheus.CounterVec   // upstream
	Retries    *prometheus.CounterVec   // upstream
	Limited    *prometheus.CounterVec   // upstream
	NoUpstream prometheus.Counter
	Local      prometheus.Counter // attempts failed for ringlb's own limits
	Handoffs   prometheus.Counter // requests that carried the handoff header

	// Proc is the process's families, which a Balancer registers only
	// when it is the process's one pool (New); a Router's pools share the
	// Router's.
	Proc *Process
}

// Process is the families of the whole process rather than of a
// pool: reloads, which every pool's RecordReload counts alike, and the
// request-body memory of limits.body_memory, which every pool's requests
// take from alike.
type Process struct {
	Reloads    *prometheus.CounterVec // result
	ReloadOK   prometheus.Counter
	ReloadErr  prometheus.Counter
	ReloadLast prometheus.Gauge // 1: the last reload (or the start) applied
	LastReload atomic.Pointer[Reload]

	Body        reqbody.Memory
	BodyRefused prometheus.Counter   // ringlb_body_memory_refused_total
	BodyHeld    prometheus.GaugeFunc // ringlb_body_memory_bytes, read from body
}

// NewPool returns the collectors of the pool called pool.
func NewPool(pool string) *Pool {
	m := &Pool{Labels: prometheus.Labels{"pool": pool}}
	m.Requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_requests_total",
		Help:        "Requests answered, by the upstream that served the final attempt and the status code (499: client went away).",
		ConstLabels: m.Labels,
	}, []string{"upstream", "code"})
	m.Duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "ringlb_request_duration_seconds",
		Help:        "Time from receiving a request to finishing its response, by the upstream that served the final attempt.",
		Buckets:     prometheus.DefBuckets,
		ConstLabels: m.Labels,
	}, []string{"upstream"})
	m.Ejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_ejections_total",
		Help:        "Times an upstream became unavailable, by reason (health or breaker).",
		ConstLabels: m.Labels,
	}, []string{"upstream", "reason"})
	m.Overflow = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_overflow_total",
		Help:        "Requests sent past this owner because it held its bounded-load share.",
		ConstLabels: m.Labels,
	}, []string{"upstream"})
	m.Retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_retries_total",
		Help:        "Retries away from this upstream after it failed a request.",
		ConstLabels: m.Labels,
	}, []string{"upstream"})
	m.Limited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "ringlb_limited_total",
		Help:        "Requests answered 503 at once because the upstream held limits.upstream_requests requests.",
		ConstLabels: m.Labels,
	}, []string{"upstream"})
	m.NoUpstream = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "ringlb_no_upstream_total",
		Help:        "Requests answered 503 because no upstream was available.",
		ConstLabels: m.Labels,
	})
	m.Local = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "ringlb_local_errors_total",
		Help:        "Attempts that failed for want of ringlb's own resources (file descriptors, local ports, buffers), answered 502 and never counted against an upstream.",
		ConstLabels: m.Labels,
	})
	m.Handoffs = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "ringlb_handoffs_total",
		Help:        "Requests that carried handoff.header, naming the upstream their key was on before.",
		ConstLabels: m.Labels,
	})
	m.Inflight = m.Desc("ringlb_upstream_inflight",
		"Requests in flight to the upstream.", "upstream")
	m.Available = m.Desc("ringlb_upstream_available",
		"1 when the upstream is available (health check up and breaker not open), else 0.", "upstream")
	m.Absent = m.Desc("ringlb_upstream_absent",
		"1 while a discovered upstream is missing from its source's answer (skipped, not ejected), else 0.", "upstream")
	m.Breaker = m.Desc("ringlb_breaker_state",
		"Circuit breaker state: 0 closed, 1 half-open, 2 open.", "upstream")
	m.State = m.Desc("ringlb_upstream_state",
		"1 for the upstream's admin state (ready, drain or maint), 0 for the others.", "upstream", "state")
	m.RingInfo = m.Desc("ringlb_ring_info",
		"Always 1; the version label is the current ring's membership version.", "version")
	m.HoldKeys = m.Desc("ringlb_hold_keys",
		"Keys with a hold record in this process.")
	m.Held = m.Desc("ringlb_held_total",
		"Requests sent to a held upstream instead of the ring's choice.")
	m.HotShare = m.Desc("ringlb_hot_key_share",
		"The hottest key's share of the pool's requests in the current hot-key window (see /debug/hotkeys).")
	m.ShareErrors = m.Desc("ringlb_hold_share_errors_total",
		"Hold share store writes and lookups that failed or timed out, and writes dropped from a full queue.")
	m.ShareLookups = m.Desc("ringlb_hold_share_lookups_total",
		"Hold share store lookups, by result (found, none, error).", "result")
	return m
}

// NewProcess returns the process's families, the last reload recorded as
// successful.
func NewProcess() *Process {
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlb_config_reloads_total",
		Help: "Config reloads, by result (ok or error).",
	}, []string{"result"})
	m := &Process{Reloads: reloads, ReloadOK: reloads.WithLabelValues("ok"), ReloadErr: reloads.WithLabelValues("error")}
	m.ReloadLast = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ringlb_config_last_reload_success",
		Help: "1 if the last config reload (or, before any, the start) applied, 0 if it was rejected.",
	})
	m.ReloadLast.Set(1)
	m.BodyRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ringlb_body_memory_refused_total",
		Help: "Requests answered 503 at once because reading their body for a key would have held more than limits.body_memory.",
	})
	m.BodyHeld = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ringlb_body_memory_bytes",
		Help: "Bytes of request-body buffers held now to find keys (json sources), all pools together; limits.body_memory bounds it.",
	}, func() float64 { return float64(m.Body.Held()) })
	return m
}

// Register registers the process's families on reg, or none.
func (m *Process) Register(reg prometheus.Registerer, more ...prometheus.Collector) error {
	return RegisterAll(reg, append([]prometheus.Collector{m.Reloads, m.ReloadLast, m.BodyRefused, m.BodyHeld}, more...))
}

// RegisterAll registers every collector on reg, or none.
func RegisterAll(reg prometheus.Registerer, cs []prometheus.Collector) error {
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

// Desc is a scrape-time family of the pool, with the given variable labels.
func (m *Pool) Desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, m.Labels)
}

// Families are the pool's counters and histograms (its scrape-time
// gauges are the balancer's collectors).
func (m *Pool) Families() []prometheus.Collector {
	return []prometheus.Collector{
		m.Requests, m.Duration, m.Ejections, m.Overflow, m.Retries, m.Limited, m.NoUpstream, m.Local, m.Handoffs,
	}
}

// Upstream is one upstream's pre-resolved metric children, so the
// request path never looks a label set up (except once per new status code).
type Upstream struct {
	Name     string
	requests *prometheus.CounterVec
	Duration prometheus.Observer
	Overflow prometheus.Counter
	Retries  prometheus.Counter
	Limited  prometheus.Counter
	EjectH   prometheus.Counter
	EjectB   prometheus.Counter
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
// (see Upstream.codes).
type codeBlock [codeBlockSize]atomic.Pointer[prometheus.Counter]

// ForUpstream resolves the children of upstream name.
func (m *Pool) ForUpstream(name string) *Upstream {
	um := &Upstream{
		Name:     name,
		requests: m.Requests,
		Duration: m.Duration.WithLabelValues(name),
		Overflow: m.Overflow.WithLabelValues(name),
		Retries:  m.Retries.WithLabelValues(name),
		Limited:  m.Limited.WithLabelValues(name),
		EjectH:   m.Ejections.WithLabelValues(name, "health"),
		EjectB:   m.Ejections.WithLabelValues(name, "breaker"),
	}
	return um
}

// Code returns the requests_total child for a status code, resolving it on
// first use. A retired upstream (removed by a reload) gets a detached
// counter so that its draining requests do not resurrect deleted series.
func (um *Upstream) Code(code int) prometheus.Counter {
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
func (um *Upstream) resolve(code int) prometheus.Counter {
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
		c = um.requests.WithLabelValues(um.Name, strconv.Itoa(code))
	}
	slot := &blk[code&(codeBlockSize-1)]
	slot.CompareAndSwap(nil, &c)
	return *slot.Load()
}

// Retire deletes the upstream's series after a reload (or discovery)
// removed it. It deletes each series by its exact labels, the ones
// forUpstream and code created: a partial match scans every series of a
// vector, which made removing 1000 members take seconds.
func (m *Pool) Retire(um *Upstream) {
	um.retired.Store(true)
	for n := range um.codes {
		blk := um.codes[n].Load()
		if blk == nil {
			continue
		}
		for i := range blk {
			if blk[i].Load() != nil {
				m.Requests.DeleteLabelValues(um.Name, strconv.Itoa(n<<codeBlockShift+i))
			}
		}
	}
	m.Duration.DeleteLabelValues(um.Name)
	m.Ejections.DeleteLabelValues(um.Name, "health")
	m.Ejections.DeleteLabelValues(um.Name, "breaker")
	m.Overflow.DeleteLabelValues(um.Name)
	m.Retries.DeleteLabelValues(um.Name)
	m.Limited.DeleteLabelValues(um.Name)
}

// Record counts a reload attempt at now, and keeps it for LastReload.
func (m *Process) Record(ok bool, now time.Time, problems []string) {
	if ok {
		m.ReloadOK.Inc()
		m.ReloadLast.Set(1)
	} else {
		m.ReloadErr.Inc()
		m.ReloadLast.Set(0)
	}
	m.LastReload.Store(&Reload{At: now, OK: ok, Problems: problems})
}

// Reload is one reload attempt as Record recorded it.
type Reload struct {
	At       time.Time
	OK       bool
	Problems []string // why it was rejected
}

// NewRegistry returns a registry holding the Go runtime and process
// collectors, ready to be passed to balancer.New and served on /metrics.
// The command and the tests share it so that both expose the same
// families.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}
