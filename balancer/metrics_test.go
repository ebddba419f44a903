package balancer

import (
	"net/http"
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
