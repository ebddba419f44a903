package admin

import (
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

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

// index serves the status page (GET /), every pool's or, with ?pool=NAME,
// one pool's.
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
	h.describeProcess(&page, now)
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
		page.Pools, page.Available, page.Total = poolSummaries(pools, shown[0], page.All)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := statusTmpl().Execute(w, page); err != nil {
		// Headers are gone; all that is left is to say so in the page.
		fmt.Fprintf(w, "\n<!-- status page: %s -->\n", template.HTMLEscapeString(err.Error()))
	}
}

// describeProcess fills in what the page says of the process: its start
// and uptime, the proxy listener's certificate and the last reload.
func (h *handler) describeProcess(page *statusPage, now time.Time) {
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
}

// poolSummaries is the pools index of a page with several pools, and the
// upstreams available and in all over every pool; all says every pool is
// shown, else only first is.
func poolSummaries(pools []*balancer.Balancer, first *balancer.Balancer, all bool) (sums []poolSummary, available, total int) {
	for _, p := range pools {
		ps := poolSummary{Name: p.Pool(), Version: p.Version(), Shown: all || p == first}
		for _, u := range p.Status().Upstreams {
			ps.Total++
			if u.Available {
				ps.Available++
			}
		}
		available, total = available+ps.Available, total+ps.Total
		sums = append(sums, ps)
	}
	return sums, available, total
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
			AdminText:      adminText(u.AdminState, drained[u.Name], st.Hold.On),
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
// must agree. With hold off, a drain keeps no key in use, and says so.
func adminText(state string, drained, holdOn bool) string {
	switch {
	case state == "drain" && !holdOn:
		return "drain (hold off: keys in use not kept)"
	case state == "drain" && drained:
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
