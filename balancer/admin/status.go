package admin

import (
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"

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
	// Dash is the arc as an SVG stroke-dasharray over a circle whose
	// pathLength is Samples: alternating owned and not-owned runs, starting
	// at the top and going clockwise.
	Dash string
	// ClipR is the radius of the circle clipping the solid arc: the whole
	// band when fully active, less of it while slow-starting (the rest
	// shows hatched).
	ClipR               float64
	Requests, Overflows float64
}

const refreshInterval = 1500 // milliseconds

func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	st := h.b.Status()
	owners := h.b.Owners(ringSamples)
	requests, overflows, ok := perUpstreamCounts(h.gatherer)
	page := statusPage{
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
	}
	for i, u := range st.Upstreams {
		row := statusRow{
			UpstreamStatus: u,
			Index:          i,
			Color:          upstreamColor(i),
			Dash:           dashArray(owners, i),
			Requests:       requests[u.Name],
			Overflows:      overflows[u.Name],
		}
		row.State, row.StateText = upstreamState(u)
		row.Fill = row.Color
		if !u.Available {
			row.Fill = greyColor
		} else {
			page.Available++
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

// upstreamState classifies an upstream for the page; status.js's state()
// must agree.
func upstreamState(u balancer.UpstreamStatus) (class, text string) {
	switch {
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

// dashArray returns the stroke-dasharray that draws the samples owned by
// member as dashes on a circle of pathLength len(owners).
func dashArray(owners []int, member int) string {
	var b strings.Builder
	on, run := true, 0 // the array starts with a dash, possibly empty
	for _, o := range owners {
		if (o == member) != on {
			b.WriteString(strconv.Itoa(run))
			b.WriteByte(' ')
			on, run = !on, 0
		}
		run++
	}
	b.WriteString(strconv.Itoa(run))
	if on {
		b.WriteString(" 0") // keep the array even: dash, gap, dash, gap...
	}
	return b.String()
}

// perUpstreamCounts sums ringlb_requests_total (over status codes) and
// ringlb_overflow_total by upstream from g; ok is false if g could not be
// gathered.
func perUpstreamCounts(g prometheus.Gatherer) (requests, overflows map[string]float64, ok bool) {
	requests, overflows = map[string]float64{}, map[string]float64{}
	if g == nil {
		return requests, overflows, false
	}
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return requests, overflows, false
	}
	for _, mf := range mfs {
		var into map[string]float64
		switch mf.GetName() {
		case "ringlb_requests_total":
			into = requests
		case "ringlb_overflow_total":
			into = overflows
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "upstream" {
					into[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return requests, overflows, true
}
