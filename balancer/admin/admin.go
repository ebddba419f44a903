// Package admin serves ringlb's admin listener: a status page, Prometheus
// metrics, liveness and readiness, JSON views of the ring and of a key's
// placement, and POST /reload.
//
// Routes:
//
//	GET  /               HTML status page
//	GET  /metrics        Prometheus exposition from the given gatherer
//	GET  /healthz        200 "ok" while the process runs
//	GET  /readyz         200 when at least one upstream is available, else 503
//	GET  /debug/ring     JSON view of the ring (see ringJSON)
//	GET  /debug/lookup   ?key=K: JSON placement of K (see lookupJSON)
//	POST /reload         re-read the config: 200 {"version"} or 400 {"errors"}
package admin

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlb/ringlb/balancer"
)

// ReloadFunc re-reads the config and applies it with Balancer.Update. On
// failure it returns every problem ("file:line: field: message") and an
// error. It must not count the reload: the handler does, through
// Balancer.RecordReload.
type ReloadFunc func() (version string, problems []string, err error)

// NewHandler returns the admin handler for b. gatherer is what /metrics
// exposes (normally the registry b registered on); reload performs POST
// /reload (nil: 501).
func NewHandler(b *balancer.Balancer, gatherer prometheus.Gatherer, reload ReloadFunc) http.Handler {
	h := &handler{b: b, reload: reload}
	r := chi.NewRouter()
	r.Get("/", h.index)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	r.Get("/readyz", h.readyz)
	r.Get("/debug/ring", h.ring)
	r.Get("/debug/lookup", h.lookup)
	r.Post("/reload", h.doReload)
	return r
}

type handler struct {
	b      *balancer.Balancer
	reload func() (string, []string, error)
}

func (h *handler) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if h.b.Ready() {
		w.Write([]byte("ready\n"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write([]byte("no upstream available\n"))
}

// ringJSON is /debug/ring's shape, fixed by SPEC.
type ringJSON struct {
	Version         string         `json:"version"`
	Placement       string         `json:"placement"`
	PointsPerWeight int            `json:"points_per_weight"`
	LoadFactor      float64        `json:"load_factor"`
	Upstreams       []upstreamJSON `json:"upstreams"`
}

type upstreamJSON struct {
	Name           string  `json:"name"`
	URL            string  `json:"url"`
	Weight         float64 `json:"weight"`
	Points         int     `json:"points"`
	Share          float64 `json:"share"`
	Available      bool    `json:"available"`
	Health         string  `json:"health"`
	Breaker        string  `json:"breaker"`
	Inflight       int64   `json:"inflight"`
	ActiveFraction float64 `json:"active_fraction"`
}

func (h *handler) ring(w http.ResponseWriter, _ *http.Request) {
	st := h.b.Status()
	out := ringJSON{
		Version:         st.Version,
		Placement:       st.Placement,
		PointsPerWeight: st.PointsPerWeight,
		LoadFactor:      st.LoadFactor,
		Upstreams:       make([]upstreamJSON, 0, len(st.Upstreams)),
	}
	for _, u := range st.Upstreams {
		out.Upstreams = append(out.Upstreams, upstreamJSON(u))
	}
	writeJSON(w, http.StatusOK, out)
}

// lookupJSON is /debug/lookup's shape, fixed by SPEC. Chosen is null when
// the request would get 503.
type lookupJSON struct {
	Key        string        `json:"key"`
	Hash       string        `json:"hash"`
	Owner      string        `json:"owner"`
	Preference []string      `json:"preference"`
	Chosen     *string       `json:"chosen"`
	Skipped    []skippedJSON `json:"skipped"`
}

type skippedJSON struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

func (h *handler) lookup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("key") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "missing query parameter key"})
		return
	}
	res := h.b.Lookup(q.Get("key"))
	out := lookupJSON{
		Key:        res.Key,
		Hash:       res.Hash,
		Owner:      res.Owner,
		Preference: res.Preference,
		Skipped:    make([]skippedJSON, 0, len(res.Skipped)),
	}
	if res.Chosen != "" {
		out.Chosen = &res.Chosen
	}
	for _, s := range res.Skipped {
		out.Skipped = append(out.Skipped, skippedJSON(s))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) doReload(w http.ResponseWriter, _ *http.Request) {
	if h.reload == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "reload is not configured"})
		return
	}
	version, problems, err := h.reload()
	h.b.RecordReload(err == nil)
	if err != nil {
		if len(problems) == 0 {
			problems = []string{err.Error()}
		}
		writeJSON(w, http.StatusBadRequest, map[string][]string{"errors": problems})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"version": version})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

var indexTmpl = template.Must(template.New("index").Funcs(template.FuncMap{
	"pct": func(f float64) string { return template.HTMLEscapeString(formatPct(f)) },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>ringlb</title>
<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left}.down{color:#b00}</style>
</head><body>
<h1>ringlb</h1>
<p>ring version {{.Version}} · placement {{.Placement}} · {{.PointsPerWeight}} points per weight · load factor {{.LoadFactor}}</p>
<svg width="240" height="240" viewBox="0 0 240 240" role="img" aria-label="the ring">
{{range .Arcs}}<path d="{{.D}}" fill="{{.Fill}}"><title>{{.Name}}</title></path>
{{end}}<text x="120" y="124" text-anchor="middle" font-size="12">{{.Version}}</text>
</svg>
<table>
<tr><th></th><th>upstream</th><th>url</th><th>state</th><th>health</th><th>breaker</th><th>weight</th><th>points</th><th>share</th><th>in flight</th><th>active</th></tr>
{{range $i, $u := .Upstreams}}{{with $u}}<tr{{if not .Available}} class="down"{{end}}><td><svg width="12" height="12"><rect width="12" height="12" fill="{{index $.Colors $i}}"/></svg></td><td>{{.Name}}</td><td>{{.URL}}</td><td>{{if .Available}}available{{else}}unavailable{{end}}</td><td>{{.Health}}</td><td>{{.Breaker}}</td><td>{{.Weight}}</td><td>{{.Points}}</td><td>{{pct .Share}}</td><td>{{.Inflight}}</td><td>{{pct .ActiveFraction}}</td></tr>
{{end}}{{end}}</table>
<p><a href="/metrics">metrics</a> · <a href="/debug/ring">/debug/ring</a> · <a href="/debug/lookup?key=example">/debug/lookup?key=example</a></p>
</body></html>
`))

// indexPage is what the status page template renders.
type indexPage struct {
	balancer.RingStatus
	Colors []string // per upstream, in Upstreams order
	Arcs   []arc
}

// arc is one run of the ring owned by one upstream, as an SVG path.
type arc struct {
	D, Fill, Name string
}

// ringSamples is how finely the status page samples the circle.
const ringSamples = 720

func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	st := h.b.Status()
	owners := h.b.Owners(ringSamples)
	page := indexPage{RingStatus: st, Colors: make([]string, len(st.Upstreams))}
	for i, u := range st.Upstreams {
		page.Colors[i] = "#cccccc"
		if u.Available {
			page.Colors[i] = fmt.Sprintf("hsl(%d, 60%%, 55%%)", i*360/len(st.Upstreams))
		}
	}
	// Merge runs of samples with the same owner into one donut segment.
	for start := 0; start < len(owners) && len(st.Upstreams) > 0; {
		end := start + 1
		for end < len(owners) && owners[end] == owners[start] {
			end++
		}
		o := owners[start]
		page.Arcs = append(page.Arcs, arc{D: donutPath(start, end, len(owners)), Fill: page.Colors[o], Name: st.Upstreams[o].Name})
		start = end
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	indexTmpl.Execute(w, page)
}

// donutPath draws samples [from, to) of n as a segment of a ring centred
// at (120, 120), clockwise from the top.
func donutPath(from, to, n int) string {
	const cx, cy, ro, ri = 120.0, 120.0, 110.0, 70.0
	a0 := 2 * math.Pi * float64(from) / float64(n)
	a1 := 2 * math.Pi * float64(to) / float64(n)
	if to-from == n {
		a1 -= 1e-4 // a full circle: SVG draws nothing for equal end points
	}
	large := 0
	if a1-a0 > math.Pi {
		large = 1
	}
	pt := func(r, a float64) (float64, float64) { return cx + r*math.Sin(a), cy - r*math.Cos(a) }
	x0, y0 := pt(ro, a0)
	x1, y1 := pt(ro, a1)
	x2, y2 := pt(ri, a1)
	x3, y3 := pt(ri, a0)
	return fmt.Sprintf("M%.2f %.2fA%.0f %.0f 0 %d 1 %.2f %.2fL%.2f %.2fA%.0f %.0f 0 %d 0 %.2f %.2fZ",
		x0, y0, ro, ro, large, x1, y1, x2, y2, ri, ri, large, x3, y3)
}

func formatPct(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" }
