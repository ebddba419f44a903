package admin

// This file is the data status.html renders: the page, its pool sections,
// their upstream rows and the request lookup form.

import (
	"html/template"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/hotkeys"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/route"
)

// statusPage is what status.html renders: what the process is, then one
// section per pool shown. With one pool (One) the page is that pool's,
// as it always was; with several (Multi) it starts with the routes, an
// index of the pools and a request lookup whose host and path the routes
// resolve, then shows every pool (or, with ?pool=NAME, that one) in a
// section of its own.
type statusPage struct {
	Grey          string
	RefreshMillis int
	Key           string // the lookup box's initial key (?key=)
	CSS           template.CSS
	JS            template.JS

	// What the process is: Options.Version, Options.Listen, and its start
	// (RFC 3339, Unix milliseconds for the script, and the uptime).
	RinglbVersion, Listen string
	Started, Uptime       string
	StartedMillis         int64
	Reload                *metrics.Reload
	ReloadAt, ReloadAgo   string
	ReloadsRendered       int64 // reload attempts counted in metrics when rendered
	// The certificate the proxy listener serves (with TLS): its subject,
	// its expiry (RFC 3339) and how far off that is.
	CertSubject, CertNotAfter, CertLeft string
	CertExpired                         bool

	Sections []poolSection
	One      *poolSection // the only section of a one-pool page; nil with several pools
	Multi    bool
	All      bool // with several pools: every pool has its section (no ?pool=)
	Routes   []route.Route
	Pools    []poolSummary
	// Available and Total count the upstreams of every pool (Multi).
	Available, Total int
}

// poolSummary is one pool in the pools index of a page with several.
type poolSummary struct {
	Name, Version    string
	Available, Total int
	Shown            bool // the page has its section
}

// poolSection is one pool's part of the page: its key sources and ring
// settings, hold, the upstreams table with its buttons, the ring picture
// and the hot keys.
type poolSection struct {
	balancer.RingStatus
	ringGeometry
	Pool string
	// ID prefixes the section's element ids: "" on a one-pool page, "pN-"
	// for the Nth section of a page with several, so that ids stay unique.
	ID string
	// Multi is the page's; Legend says whether this section shows the
	// picture's legend and the table's notes (the first one does).
	Multi, Legend   bool
	Available       int
	Rows            []statusRow
	Grey            string
	MetricsReadable bool // whether Requests and Overflows were gathered
	Key             string
	// With hold on: keys held in this process (ringlb_hold_keys) and the
	// held share of the requests answered (ringlb_held_total over
	// ringlb_requests_total), as a percentage ("–" before any request).
	HoldKeys  float64
	HeldShare string
	// HotKeys are the current window's ten hottest keys.
	HotKeys        []hotkeys.Key
	HotWindow      float64 // seconds the window covers so far
	HotRequests    uint64
	KeySources     string // "cookie session, header X-User-Id, ..."
	AvailableNames string // names of available upstreams, for the script
	// The state buttons post to StatePrefix + upstreams/NAME/STATE
	// ("pools/POOL/" with several pools).
	StatePrefix string
}

// statusRow is one upstream: its table row, legend entry and arc.
type statusRow struct {
	balancer.UpstreamStatus
	Index int
	Color string // its own colour, even while unavailable
	Fill  string // what its arc is drawn in now: Color, or greyColor
	// State is "available", "ejected" or "slow-start", also the arc's and
	// the row's CSS class; StateText says it for people.
	State, StateText string
	// Path is the arc as SVG path data: one annular sector per run of
	// samples the upstream owns, clockwise from the top (see arcPath).
	// Hatch says whether it is drawn hatched too (see multiSamples).
	Path  string
	Hatch bool
	// Since and Why say, for an ejected upstream, since when (RFC 3339 and
	// a duration) and why it is unavailable.
	Since, SinceAgo, Why string
	// Errors counts its 5xx answers; Latency is the mean time to answer
	// ("–" before any request).
	Errors  float64
	Latency string
	// ClipR is the radius of the circle clipping the solid arc: the whole
	// band when fully active, less of it while slow-starting (the rest
	// shows hatched).
	ClipR               float64
	Requests, Overflows float64
	// AdminText says the admin state for people ("drain (drained)");
	// HeldKeys counts this process's live hold records on it.
	AdminText string
	HeldKeys  int
}

// lookupForm is what the request lookup form needs. On a one-pool page it
// follows the pool's upstreams table, and the pool's key sources take the
// key. With several pools it comes before the sections and also takes a
// host and a key: the routes pick the pool from the host and the path
// (Pool names the pool a page of one section falls back to without a
// host).
type lookupForm struct {
	Multi                 bool
	Pool, Key             string
	KeySources, OnMissing string
}

// LookupForm is the request lookup of a one-pool page.
func (s poolSection) LookupForm() lookupForm {
	return lookupForm{KeySources: s.KeySources, OnMissing: s.OnMissing, Key: s.Key}
}

// LookupForm is the request lookup of a page with several pools.
func (p statusPage) LookupForm() lookupForm {
	f := lookupForm{Multi: true, Key: p.Key}
	if !p.All {
		f.Pool, f.KeySources, f.OnMissing = p.Sections[0].Pool, p.Sections[0].KeySources, p.Sections[0].OnMissing
	}
	return f
}
