package admin

import (
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer"
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

var statusTmpl = template.Must(template.New("status").Funcs(template.FuncMap{
	"pct": formatPct,
	"num": func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
}).Parse(statusHTML))

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

// statusPage is what status.html renders.
type statusPage struct {
	balancer.RingStatus
	Available int
	Rows      []statusRow
	Samples   int
	Grey      string
	// Ring geometry (see ringCentre): the SVG's size, the circle the arcs
	// are stroked on, the band's inner edge, the key marker's ends and the
	// centre text's baselines.
	Size, Centre, Radius, Width, InnerR float64
	MarkerTop, MarkerBottom             float64
	CountY, LabelY                      float64
	RefreshMillis                       int
	Key                                 string // the lookup box's initial key (?key=)
	CSS                                 template.CSS
	JS                                  template.JS
	MetricsReadable                     bool // whether Requests and Overflows were gathered

	// What the process is: Options.Version, Options.Listen, and its start
	// (RFC 3339, Unix milliseconds for the script, and the uptime).
	RinglbVersion, Listen    string
	Started, Uptime          string
	StartedMillis            int64
	KeySources               string // "cookie session, header X-User-Id, ..."
	Reload                   *balancer.Reload
	ReloadAt, ReloadAgo      string
	Reloads, ReloadsRendered int64 // reload attempts counted in metrics when rendered
	// With hold on: keys held in this process (ringlb_hold_keys) and the
	// held share of the requests answered (ringlb_held_total over
	// ringlb_requests_total), as a percentage ("–" before any request).
	HoldKeys float64
	// HotKeys are the current window's ten hottest keys.
	HotKeys        []balancer.HotKey
	HotWindow      float64 // seconds the window covers so far
	HotRequests    uint64
	HeldShare      string
	AvailableNames string // names of available upstreams, for the script
	// The certificate the proxy listener serves (with TLS): its subject,
	// its expiry (RFC 3339) and how far off that is.
	CertSubject, CertNotAfter, CertLeft string
	CertExpired                         bool

	// Pool is the pool the page shows (?pool=, else the first). With
	// several (Multi), the page starts with the routes and every pool,
	// each linking to its own view, and the state buttons post to
	// StatePrefix + upstreams/NAME/STATE.
	Pool        string
	Multi       bool
	Routes      []balancer.Route
	Pools       []poolSummary
	StatePrefix string
}

// poolSummary is one pool in the pools table of a page with several.
type poolSummary struct {
	Name, Version    string
	Available, Total int
	Current          bool // the pool the page shows
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
	Path string
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

func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	pools := h.rt.Pools()
	if len(pools) == 0 {
		http.Error(w, "no pools", http.StatusServiceUnavailable)
		return
	}
	b := pools[0]
	if name := r.URL.Query().Get("pool"); name != "" {
		if b = h.rt.Pool(name); b == nil {
			http.Error(w, "no pool "+quote(name)+"; pools: "+poolNames(pools), http.StatusNotFound)
			return
		}
	}
	st := b.Status()
	owners := b.Owners(ringSamples)
	c, ok := perUpstreamCounts(h.gatherer, b.Pool())
	requests, overflows := c.requests, c.overflows
	now := time.Now()
	hot := b.HotKeys(false)
	if len(hot.Keys) > 10 {
		hot.Keys = hot.Keys[:10]
	}
	page := statusPage{
		HotKeys:         hot.Keys,
		HotWindow:       hot.Seconds,
		HotRequests:     hot.Requests,
		RingStatus:      st,
		Rows:            make([]statusRow, len(st.Upstreams)),
		Samples:         ringSamples,
		Grey:            greyColor,
		Size:            2 * ringCentre,
		Centre:          ringCentre,
		Radius:          ringRadius,
		Width:           ringWidth,
		InnerR:          ringRadius - ringWidth/2,
		MarkerTop:       ringCentre - ringRadius - ringWidth/2 - 10,
		MarkerBottom:    ringCentre - ringRadius + ringWidth/2 + 10,
		CountY:          ringCentre - 4,
		LabelY:          ringCentre + 18,
		RefreshMillis:   refreshInterval,
		Key:             r.URL.Query().Get("key"),
		CSS:             template.CSS(statusCSS),
		JS:              template.JS(statusJS),
		MetricsReadable: ok,
		RinglbVersion:   h.opts.Version,
		Listen:          h.opts.Listen,
		KeySources:      strings.Join(st.KeySources, ", "),
		Reload:          h.rt.LastReload(),
		Pool:            b.Pool(),
		Multi:           len(pools) > 1,
		Routes:          h.rt.Routes(),
		ReloadsRendered: int64(c.reloads),
		HoldKeys:        c.holdKeys,
		HeldShare:       heldShare(c),
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
	held := map[string]int{}
	drained := map[string]bool{}
	if page.Multi {
		page.StatePrefix = "pools/" + b.Pool() + "/"
		for _, p := range pools {
			ps := poolSummary{Name: p.Pool(), Version: p.Version(), Current: p == b}
			for _, u := range p.Status().Upstreams {
				ps.Total++
				if u.Available {
					ps.Available++
				}
			}
			page.Pools = append(page.Pools, ps)
		}
	}
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
			Requests:       requests[u.Name],
			Overflows:      overflows[u.Name],
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
		row.Fill = row.Color
		if !u.Available {
			row.Fill = greyColor
		} else {
			page.Available++
			page.AvailableNames += u.Name + " "
		}
		row.ClipR = ringRadius + ringWidth/2 + 1
		if row.State == "slow-start" {
			row.ClipR = page.InnerR + ringWidth*u.ActiveFraction
		}
		page.Rows[i] = row
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := statusTmpl.Execute(w, page); err != nil {
		// Headers are gone; all that is left is to say so in the page.
		fmt.Fprintf(w, "\n<!-- status page: %s -->\n", template.HTMLEscapeString(err.Error()))
	}
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

// counts are what the page reads from the metrics, by upstream: requests
// answered (every code), 5xx answers, overflows, and the request duration
// histogram's sum and count; reloads is every reload attempt counted.
type counts struct {
	requests, errors, overflows, durSum, durCount map[string]float64
	reloads                                       float64
	holdKeys, held                                float64 // ringlb_hold_keys, ringlb_held_total
}

// perUpstreamCounts gathers the counts of pool's series from g; ok is
// false if g could not be gathered.
func perUpstreamCounts(g prometheus.Gatherer, pool string) (c counts, ok bool) {
	c = counts{requests: map[string]float64{}, errors: map[string]float64{}, overflows: map[string]float64{},
		durSum: map[string]float64{}, durCount: map[string]float64{}}
	if g == nil {
		return c, false
	}
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return c, false
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var up, code string
			other := false
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "upstream":
					up = l.GetValue()
				case "code":
					code = l.GetValue()
				case "pool":
					other = l.GetValue() != pool
				}
			}
			if other {
				continue
			}
			switch mf.GetName() {
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
			case "ringlb_config_reloads_total":
				c.reloads += m.GetCounter().GetValue()
			case "ringlb_hold_keys":
				c.holdKeys = m.GetGauge().GetValue()
			case "ringlb_held_total":
				c.held = m.GetCounter().GetValue()
			}
		}
	}
	return c, true
}

// heldShare formats the share of the requests answered that a hold sent
// to another upstream than the ring's choice, or "–" before any request.
func heldShare(c counts) string {
	total := 0.0
	for _, n := range c.requests {
		total += n
	}
	if total == 0 {
		return "–"
	}
	return formatPct(c.held / total)
}
