package balancer

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
)

// sick answers every request with status and a header of its own.
func sick(status int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Sick", "yes")
		w.WriteHeader(status)
		io.WriteString(w, "sick body\n")
	}
}

// TestRetryStatuses: with retry_statuses, a bodiless GET, HEAD or OPTIONS
// answered with a listed status goes on to the next upstream clockwise,
// and the client sees nothing of the first answer; a request with a body,
// an unlisted status, or no retry left gets the response as it is. Each
// listed response counts against its upstream's breaker, which opens after
// consecutive_failures of them.
func TestRetryStatuses(t *testing.T) {
	bad, good := newBackend(t, "bad"), newBackend(t, "good")
	bad.handle = sick(http.StatusServiceUnavailable)
	opts := baseOptions(upstreamsOf(t, bad, good))
	opts.RetryStatuses = []int{502, 503}
	opts.Breaker = breaker.Options{ConsecutiveFailures: 4, FailureStatuses: []int{502, 503, 504}, OpenTimeout: time.Minute, MaxOpenTimeout: time.Minute}
	b, reg, front := proxy(t, opts)
	key := keyOwnedBy(t, b, "bad")
	c := front.Client()
	do := func(method string, body io.Reader) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, front.URL+"/?user="+key, body)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res, string(data)
	}

	// A POST with a body: the 503 as the upstream sent it (failure 1).
	res, body := do(http.MethodPost, strings.NewReader("payload"))
	if res.StatusCode != 503 || body != "sick body\n" || res.Header.Get("X-Sick") != "yes" {
		t.Errorf("POST: %d %q, want bad's own 503", res.StatusCode, body)
	}
	// GET, HEAD (failures 2, 3): served by good; nothing of bad's answer.
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		res, body := do(m, nil)
		want := "good"
		if m == http.MethodHead {
			want = ""
		}
		if res.StatusCode != 200 || body != want || res.Header.Get("X-Backend") != "good" || res.Header.Get("X-Sick") != "" {
			t.Errorf("%s: %d %q (X-Backend %q, X-Sick %q), want 200 from good alone", m, res.StatusCode, body, res.Header.Get("X-Backend"), res.Header.Get("X-Sick"))
		}
	}
	if v := metric(t, reg, "ringlb_retries_total", "upstream=bad"); v != 2 {
		t.Errorf("ringlb_retries_total{bad} = %v, want 2", v)
	}
	if v := metric(t, reg, "ringlb_breaker_state", "upstream=bad"); v != 0 {
		t.Errorf("after 3 failures of 4: breaker state %v, want 0 (closed)", v)
	}
	// OPTIONS (failure 4): retried, and bad's breaker opens.
	if res, _ := do(http.MethodOptions, nil); res.StatusCode != 200 || res.Header.Get("X-Backend") != "good" {
		t.Errorf("OPTIONS: %d from %q", res.StatusCode, res.Header.Get("X-Backend"))
	}
	if v := metric(t, reg, "ringlb_breaker_state", "upstream=bad"); v != 2 {
		t.Errorf("after 4 retried 503s: breaker state %v, want 2 (open): they count against bad", v)
	}
	hits := bad.hits.Load()
	if hits != 4 {
		t.Errorf("bad hit %d times, want 4", hits)
	}
	// Open: the key goes to good without asking bad.
	if res, _ := do(http.MethodGet, nil); res.StatusCode != 200 || bad.hits.Load() != hits {
		t.Errorf("breaker open: %d, bad hits %d (was %d)", res.StatusCode, bad.hits.Load(), hits)
	}
}

// TestRetryStatusesPassedOn: a listed status is passed on as it is when
// no retry can follow it (retries 0, or no other upstream available), and
// an unlisted one always is.
func TestRetryStatusesPassedOn(t *testing.T) {
	bad, good := newBackend(t, "bad"), newBackend(t, "good")
	bad.handle = sick(http.StatusServiceUnavailable)
	opts := baseOptions(upstreamsOf(t, bad, good))
	opts.RetryStatuses = []int{503}
	b, _, front := proxy(t, opts)
	key := keyOwnedBy(t, b, "bad")
	check := func(what string, wantCode int, wantFrom string) {
		t.Helper()
		res, err := front.Client().Get(front.URL + "/?user=" + key)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != wantCode || res.Header.Get("X-Backend") != wantFrom {
			t.Errorf("%s: %d %q from %q, want %d from %s", what, res.StatusCode, body, res.Header.Get("X-Backend"), wantCode, wantFrom)
		}
	}
	check("retried", 200, "good")

	b.HealthReporter().SetHealthy("good", false, "test")
	check("nowhere else to go", 503, "bad")
	b.HealthReporter().SetHealthy("good", true, "test")

	opts.Retries = 0
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	check("retries 0", 503, "bad")

	opts.Retries = 1
	bad.handle = sick(http.StatusInternalServerError)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	check("500 is not listed", 500, "bad")

	opts.RetryStatuses = nil
	bad.handle = sick(http.StatusServiceUnavailable)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	check("retry_statuses empty (the default)", 503, "bad")
}
