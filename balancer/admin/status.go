package admin

import (
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/hotkeys"
)

// The status page (GET /) is one self-contained HTML document: status.html
// with status.css and status.js inlined, no external assets. The server
// renders it complete, so it reads right without JavaScript; the script
// then refreshes it in place from /debug/ring and /metrics every
// refreshInterval, reloads the whole page when the ring's version changes
// (the arcs are drawn from ring samples taken at render time), and answers
// the lookup box from /debug/lookup. Every URL it fetches is relative, so
// the page also works behind a path prefix.

var (
	//go:embed status.html
	statusHTML string
	//go:embed status.css
	statusCSS string
	//go:embed status.js
	statusJS string
)

// statusTmpl parses status.html on the first request for the page, not
// when the process starts: the parsed tree (~125 KB, more once executed
// and escaped) is live heap the garbage collector marks in every cycle,
// for a page most processes never serve. A template that does not parse
// fails the package's tests (TestStatusTemplateParses), so the panic
// cannot reach a request.
var statusTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("status").Funcs(template.FuncMap{
		"pct": formatPct,
		"num": func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
	}).Parse(statusHTML))
})

// ringSamples is how many evenly spaced positions of the circle the page
// samples to draw the ring: a quarter of a degree each. With the default
// 160 points per weight a few upstreams own arcs well below a degree, so
// the picture shows how finely the ring interleaves them, not every point.
const ringSamples = 1440

// Ring geometry, in SVG user units: the ring is a band of width ringWidth
// centred on a circle of radius ringRadius around (ringCentre, ringCentre).
const (
	ringCentre = 150.0
	ringRadius = 104.0
	ringWidth  = 46.0
)

// greyColor draws unavailable upstreams; it is not in palette.
const greyColor = "#c8c8c8"

// palette holds distinct colours for the first upstreams (Tableau 10,
// without its grey, reordered so neighbours in name order contrast);
// further upstreams get hues a golden angle apart.
var palette = []string{
	"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948",
	"#76b7b2", "#e15759", "#9c755f", "#ff9da7",
}

func upstreamColor(i int) string {
	if i < len(palette) {
		return palette[i]
	}
	return fmt.Sprintf("hsl(%d, 55%%, 50%%)", (i*137)%360)
}

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
	Reload                *balancer.Reload
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
	Routes   []balancer.Route
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

// ringGeometry is where the ring picture's parts go (see ringCentre): the
// SVG's size, the circle the arcs are stroked on, the band's inner edge,
// the key marker's ends and the centre text's baselines.
type ringGeometry struct {
	Size, Centre, Radius, Width, InnerR float64
	MarkerTop, MarkerBottom             float64
	CountY, LabelY                      float64
}

var geometry = ringGeometry{
	Size:         2 * ringCentre,
	Centre:       ringCentre,
	Radius:       ringRadius,
	Width:        ringWidth,
	InnerR:       ringRadius - ringWidth/2,
	MarkerTop:    ringCentre - ringRadius - ringWidth/2 - 10,
	MarkerBottom: ringCentre - ringRadius + ringWidth/2 + 10,
	CountY:       ringCentre - 4,
	LabelY:       ringCentre + 18,
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

const refreshInterval = 1500 // milliseconds

// The page's cost grows with the pools it shows: every refresh fetches
// each shown pool's /debug/ring, and every ring is drawn. With several
// pools shown, each ring is sampled at multiSamples (two degrees each),
// only a slow-starting upstream's arc is drawn a second time hatched
// (one becomes slow-starting by a return or a reload, which reload the
// page), and the refresh interval grows by refreshInterval for every
// poolsPerRefresh pools beyond the first poolsPerRefresh. 50 pools of 20
// upstreams make a page of about 2.5 MB (BenchmarkStatusPagePools).
const (
	multiSamples    = 180
	poolsPerRefresh = 10
)

func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	pools := h.rt.Pools()
	if len(pools) == 0 {
		http.Error(w, "no pools", http.StatusServiceUnavailable)
		return
	}
	shown := pools
	if name := r.URL.Query().Get("pool"); name != "" {
		b := h.rt.Pool(name)
		if b == nil {
			http.Error(w, "no pool "+quote(name)+"; pools: "+poolNames(pools), http.StatusNotFound)
			return
		}
		shown = []*balancer.Balancer{b}
	}
	byPool, reloads, ok := gatherCounts(h.gatherer)
	now := time.Now()
	page := statusPage{
		Grey:            greyColor,
		RefreshMillis:   refreshInterval * max(1, (len(shown)+poolsPerRefresh-1)/poolsPerRefresh),
		Key:             r.URL.Query().Get("key"),
		CSS:             template.CSS(statusCSS),
		JS:              template.JS(statusJS),
		RinglbVersion:   h.opts.Version,
		Listen:          h.opts.Listen,
		Reload:          h.rt.LastReload(),
		Multi:           len(pools) > 1,
		All:             len(shown) == len(pools),
		ReloadsRendered: int64(reloads),
		Sections:        make([]poolSection, len(shown)),
	}
	if !h.opts.Started.IsZero() {
		page.Started = h.opts.Started.Format(time.RFC3339)
		page.StartedMillis = h.opts.Started.UnixMilli()
		page.Uptime = ago(now.Sub(h.opts.Started))
	}
	if f := h.opts.Certificate; f != nil {
		if subject, notAfter, ok := f(); ok {
			page.CertSubject, page.CertNotAfter = subject, notAfter.UTC().Format(time.RFC3339)
			if left := notAfter.Sub(now); left > 0 {
				page.CertLeft = "in " + ago(left)
			} else {
				page.CertLeft, page.CertExpired = ago(-left)+" ago", true
			}
		}
	}
	if page.Reload != nil {
		page.ReloadAt = page.Reload.At.Format(time.RFC3339)
		page.ReloadAgo = ago(now.Sub(page.Reload.At))
	}
	for i, b := range shown {
		page.Sections[i] = h.section(b, byPool[b.Pool()], ok, len(shown) == 1, now)
		sec := &page.Sections[i]
		sec.Multi, sec.Legend, sec.Key = page.Multi, i == 0, page.Key
		if page.Multi {
			sec.ID, sec.StatePrefix = "p"+strconv.Itoa(i)+"-", "pools/"+b.Pool()+"/"
		}
	}
	if !page.Multi {
		page.One = &page.Sections[0]
	} else {
		page.Routes = h.rt.Routes()
		for _, p := range pools {
			ps := poolSummary{Name: p.Pool(), Version: p.Version(), Shown: page.All || p == shown[0]}
			for _, u := range p.Status().Upstreams {
				ps.Total++
				if u.Available {
					ps.Available++
				}
			}
			page.Available, page.Total = page.Available+ps.Available, page.Total+ps.Total
			page.Pools = append(page.Pools, ps)
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := statusTmpl().Execute(w, page); err != nil {
		// Headers are gone; all that is left is to say so in the page.
		fmt.Fprintf(w, "\n<!-- status page: %s -->\n", template.HTMLEscapeString(err.Error()))
	}
}

// section gathers pool b's part of the page: c are its counts from the
// metrics (ok: they could be gathered). full: it is the page's only
// section, drawn in full detail; else see multiSamples.
func (h *handler) section(b *balancer.Balancer, c *counts, ok, full bool, now time.Time) poolSection {
	if c == nil {
		c = newCounts()
	}
	samples := ringSamples
	if !full {
		samples = multiSamples
	}
	st := b.Status()
	owners := b.Owners(samples)
	hot := b.HotKeys(false)
	if len(hot.Keys) > 10 {
		hot.Keys = hot.Keys[:10]
	}
	sec := poolSection{
		RingStatus:      st,
		ringGeometry:    geometry,
		Pool:            b.Pool(),
		Grey:            greyColor,
		Rows:            make([]statusRow, len(st.Upstreams)),
		MetricsReadable: ok,
		HoldKeys:        c.holdKeys,
		HeldShare:       heldShare(c),
		HotKeys:         hot.Keys,
		HotWindow:       hot.Seconds,
		HotRequests:     hot.Requests,
		KeySources:      strings.Join(st.KeySources, ", "),
	}
	held := map[string]int{}
	drained := map[string]bool{}
	for _, u := range b.UpstreamStates() {
		held[u.Name], drained[u.Name] = u.HeldKeys, u.Drained
	}
	for i, u := range st.Upstreams {
		row := statusRow{
			HeldKeys:       held[u.Name],
			AdminText:      adminText(u.AdminState, drained[u.Name]),
			UpstreamStatus: u,
			Index:          i,
			Color:          upstreamColor(i),
			Path:           arcPath(owners, i),
			Requests:       c.requests[u.Name],
			Overflows:      c.overflows[u.Name],
			Errors:         c.errors[u.Name],
			Latency:        latency(c.durSum[u.Name], c.durCount[u.Name]),
		}
		if e := u.Ejection; e != nil {
			row.Since, row.SinceAgo, row.Why = e.Since.Format(time.RFC3339), ago(now.Sub(e.Since)), e.Cause
			if e.Reason != "" {
				row.Why += ": " + e.Reason
			}
		}
		row.State, row.StateText = upstreamState(u)
		row.Hatch = full || row.State == "slow-start"
		row.Fill = row.Color
		if !u.Available {
			row.Fill = greyColor
		} else {
			sec.Available++
			sec.AvailableNames += u.Name + " "
		}
		row.ClipR = ringRadius + ringWidth/2 + 1
		if row.State == "slow-start" {
			row.ClipR = sec.InnerR + ringWidth*u.ActiveFraction
		}
		sec.Rows[i] = row
	}
	return sec
}

// adminText says an admin state for people; status.js's adminText()
// must agree.
func adminText(state string, drained bool) string {
	if state == "drain" && drained {
		return "drain (drained)"
	}
	return state
}

// upstreamState classifies an upstream for the page; status.js's state()
// must agree.
func upstreamState(u balancer.UpstreamStatus) (class, text string) {
	switch {
	case u.Absent:
		return "ejected", "absent from the answer"
	case !u.Available:
		var why []string
		if u.Health == "down" {
			why = append(why, "health")
		}
		if u.Breaker == "open" {
			why = append(why, "breaker")
		}
		if len(why) == 0 {
			return "ejected", "ejected"
		}
		return "ejected", "ejected (" + strings.Join(why, ", ") + ")"
	case u.ActiveFraction < 1:
		return "slow-start", "slow start " + formatPct(u.ActiveFraction)
	default:
		return "available", "available"
	}
}

// arcPath returns SVG path data drawing the samples owned by member as
// annular sectors of the ring's band: one closed subpath per run of
// consecutive owned samples (a run through the top is two), clockwise from
// the top, sample i covering the angles [i, i+1) × 360° / len(owners).
// Each sector is outer arc, line in, inner arc back, close: filled shapes
// that abut exactly, where dashes on a stroked circle leave seams and
// bleed into the hole at some zoom levels.
func arcPath(owners []int, member int) string {
	n := len(owners)
	var b strings.Builder
	for i := 0; i < n; {
		if owners[i] != member {
			i++
			continue
		}
		j := i
		for j < n && owners[j] == member {
			j++
		}
		if j-i == n { // the whole circle: two halves (an arc cannot end where it starts)
			sector(&b, 0, n/2, n)
			sector(&b, n/2, n, n)
		} else {
			sector(&b, i, j, n)
		}
		i = j
	}
	return strings.TrimSpace(b.String())
}

// sector appends the annular sector of samples [from, to) out of n.
func sector(b *strings.Builder, from, to, n int) {
	const outer, inner = ringRadius + ringWidth/2, ringRadius - ringWidth/2
	a0 := 2 * math.Pi * float64(from) / float64(n)
	a1 := 2 * math.Pi * float64(to) / float64(n)
	large := 0
	if a1-a0 > math.Pi {
		large = 1
	}
	pt := func(r, a float64) string {
		return strconv.FormatFloat(ringCentre+r*math.Sin(a), 'f', 2, 64) + " " +
			strconv.FormatFloat(ringCentre-r*math.Cos(a), 'f', 2, 64)
	}
	fmt.Fprintf(b, "M%s A%g %g 0 %d 1 %s L%s A%g %g 0 %d 0 %s Z ",
		pt(outer, a0), outer, outer, large, pt(outer, a1), pt(inner, a1), inner, inner, large, pt(inner, a0))
}

// ago formats a duration for people: "45s", "3m12s", "2h05m", "3d4h".
func ago(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// latency formats a mean response time from a histogram's sum and count.
func latency(sum, count float64) string {
	if count == 0 {
		return "–"
	}
	ms := 1000 * sum / count
	if ms < 10 {
		return strconv.FormatFloat(ms, 'f', 2, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
}

// counts are what the page reads from the metrics for one pool, by
// upstream: requests answered (every code), 5xx answers, overflows, and
// the request duration histogram's sum and count.
type counts struct {
	requests, errors, overflows, durSum, durCount map[string]float64
	holdKeys, held                                float64 // ringlb_hold_keys, ringlb_held_total
}

func newCounts() *counts {
	return &counts{requests: map[string]float64{}, errors: map[string]float64{}, overflows: map[string]float64{},
		durSum: map[string]float64{}, durCount: map[string]float64{}}
}

// gatherCounts gathers g once and returns every pool's counts, by pool
// label, and reloads, every reload attempt counted; ok is false if g
// could not be gathered.
func gatherCounts(g prometheus.Gatherer) (byPool map[string]*counts, reloads float64, ok bool) {
	byPool = map[string]*counts{}
	if g == nil {
		return byPool, 0, false
	}
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return byPool, 0, false
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if name == "ringlb_config_reloads_total" {
			for _, m := range mf.GetMetric() {
				reloads += m.GetCounter().GetValue()
			}
			continue
		}
		for _, m := range mf.GetMetric() {
			var up, code, pool string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "upstream":
					up = l.GetValue()
				case "code":
					code = l.GetValue()
				case "pool":
					pool = l.GetValue()
				}
			}
			c := byPool[pool]
			if c == nil {
				c = newCounts()
				byPool[pool] = c
			}
			switch name {
			case "ringlb_requests_total":
				v := m.GetCounter().GetValue()
				c.requests[up] += v
				if len(code) == 3 && code[0] == '5' {
					c.errors[up] += v
				}
			case "ringlb_overflow_total":
				c.overflows[up] += m.GetCounter().GetValue()
			case "ringlb_request_duration_seconds":
				c.durSum[up] += m.GetHistogram().GetSampleSum()
				c.durCount[up] += float64(m.GetHistogram().GetSampleCount())
			case "ringlb_hold_keys":
				c.holdKeys = m.GetGauge().GetValue()
			case "ringlb_held_total":
				c.held = m.GetCounter().GetValue()
			}
		}
	}
	return byPool, reloads, true
}

// heldShare formats the share of the requests answered that a hold sent
// to another upstream than the ring's choice, or "–" before any request.
func heldShare(c *counts) string {
	total := 0.0
	for _, n := range c.requests {
		total += n
	}
	if total == 0 {
		return "–"
	}
	return formatPct(c.held / total)
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
