package balancer

import (
	"net/http"
	"runtime"
	"strconv"
	"testing"
)

// TestRequestsByStatusCode counts an upstream's answers by status code
// across every class (and one outside 0-599, counted as code 0), and a
// reload that removes the upstream deletes every one of its series.
func TestRequestsByStatusCode(t *testing.T) {
	x, y := newBackend(t, "x"), newBackend(t, "y")
	x.handle = func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		w.WriteHeader(code)
	}
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, x)))
	c := front.Client()
	sent := map[string]float64{}
	for _, code := range []int{200, 200, 101, 204, 302, 404, 418, 599, 999} {
		req, _ := http.NewRequest(http.MethodGet, front.URL+"/?user=u&code="+strconv.Itoa(code), nil)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != code {
			t.Fatalf("code=%d: got %d", code, res.StatusCode)
		}
		label := strconv.Itoa(code)
		if code == 999 {
			label = "0"
		}
		sent[label]++
	}
	for label, n := range sent {
		if v := metric(t, reg, "ringlb_requests_total", "upstream=x", "code="+label); v != n {
			t.Errorf("ringlb_requests_total{x,%s} = %v, want %v", label, v, n)
		}
	}
	if _, err := b.Update(baseOptions(upstreamsOf(t, y))); err != nil {
		t.Fatal(err)
	}
	if v := metric(t, reg, "ringlb_requests_total", "upstream=x"); v != -1 {
		t.Errorf("removed upstream x still has series (%v)", v)
	}
}

// TestUpstreamMetricsHeap bounds what each upstream's metrics hold: the
// Prometheus children (~3.4 KB) and one block of status codes once it
// has answered: 3.7 KB with a 200 answered; a table of all 600 codes
// made it 8.5 KB.
func TestUpstreamMetricsHeap(t *testing.T) {
	const n = 1000
	m := newMetrics("p")
	ums := make([]*upstreamMetrics, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range ums {
		ums[i] = m.forUpstream("u" + strconv.Itoa(i))
		ums[i].code(200).Inc()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d bytes per upstream", per)
	if per > 6<<10 {
		t.Errorf("each upstream's metrics hold %d bytes", per)
	}
	runtime.KeepAlive(ums)
}
