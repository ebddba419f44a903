package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/dnstest"
)

type discRing struct {
	Upstreams []struct {
		Name      string `json:"name"`
		URL       string `json:"url"`
		Source    string `json:"source"`
		Absent    bool   `json:"absent"`
		Available bool   `json:"available"`
	} `json:"upstreams"`
	Discovery []struct {
		Source      string `json:"source"`
		Members     int    `json:"members"`
		LastSuccess string `json:"last_success"`
		LastError   string `json:"last_error"`
	} `json:"discovery"`
}

func getRing(t *testing.T, srv *httptest.Server) discRing {
	t.Helper()
	_, _, body := fetch(t, http.MethodGet, srv.URL+"/debug/ring")
	var r discRing
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	return r
}

// waitFor polls cond every few milliseconds for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// /debug/ring, /debug/lookup, /readyz and the status page show where
// members come from and which are absent.
func TestDiscoveryViews(t *testing.T) {
	const src = "_http._tcp.app.test"
	z := dnstest.New(t)
	z.SetSilent(src, true)
	reg := metrics.NewRegistry()
	b, err := balancer.New(balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Ring:     options.Ring{PointsPerWeight: 160},
			Hash:     options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}},
			Timeouts: options.Timeouts{Dial: time.Second},
			Discovery: &discovery.Options{
				Resolver: z.Addr, Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond, RemoveAfter: time.Hour, Confirm: 3,
				Sources: []discovery.Source{{SRV: src, Scheme: "http", Protocol: "http1", Weight: 1}},
			},
		},
	}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	srv := httptest.NewServer(NewHandler(b, reg, nil, Options{}))
	t.Cleanup(srv.Close)

	// No answer yet: no members, not ready, the error shown.
	waitFor(t, "the first failed query", func() bool {
		r := getRing(t, srv)
		return len(r.Discovery) == 1 && r.Discovery[0].LastError != ""
	})
	r := getRing(t, srv)
	if d := r.Discovery[0]; d.Source != src || d.Members != 0 || d.LastSuccess != "" || len(r.Upstreams) != 0 {
		t.Errorf("before the first answer: %+v", r)
	}
	if code, _, _ := fetch(t, http.MethodGet, srv.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("readyz before the first answer: %d", code)
	}
	if code, _, _ := fetch(t, http.MethodGet, srv.URL+"/"); code != 200 {
		t.Errorf("status page without members: %d", code)
	}

	for i := range 3 {
		z.SetAddrs(fmt.Sprintf("app-%d.app.test", i), fmt.Sprintf("10.0.0.%d", i+1))
	}
	z.SetSRV(src, "app-0.app.test.:80", "app-1.app.test.:80", "app-2.app.test.:80")
	z.SetSilent(src, false)
	waitFor(t, "three members", func() bool { return len(getRing(t, srv).Upstreams) == 3 })
	r = getRing(t, srv)
	for i, u := range r.Upstreams {
		if u.Name != fmt.Sprintf("app-%d.app.test:80", i) || u.URL != fmt.Sprintf("http://10.0.0.%d:80", i+1) || u.Source != src || u.Absent {
			t.Errorf("member %d: %+v", i, u)
		}
	}
	if d := r.Discovery[0]; d.Members != 3 || d.LastError != "" {
		t.Errorf("discovery after the answer: %+v", d)
	} else if _, err := time.Parse(time.RFC3339, d.LastSuccess); err != nil {
		t.Errorf("last_success %q: %v", d.LastSuccess, err)
	}

	// app-1 leaves the answer: absent, skipped with reason absent.
	z.SetSRV(src, "app-0.app.test.:80", "app-2.app.test.:80")
	const gone = "app-1.app.test:80"
	waitFor(t, "app-1 absent", func() bool { return getRing(t, srv).Upstreams[1].Absent })
	if u := getRing(t, srv).Upstreams[1]; u.Name != gone || u.Available {
		t.Errorf("absent member: %+v", u)
	}
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("user-", i); b.Lookup(k).Owner == gone {
			key = k
		}
	}
	_, _, body := fetch(t, http.MethodGet, srv.URL+"/debug/lookup?key="+key)
	var lk lookupJSON
	if err := json.Unmarshal([]byte(body), &lk); err != nil {
		t.Fatal(err)
	}
	if lk.Owner != gone || lk.Chosen == nil || *lk.Chosen == gone || len(lk.Skipped) != 1 ||
		lk.Skipped[0] != (skippedJSON{Name: gone, Reason: "absent"}) {
		t.Errorf("lookup of a key of the absent member: %s", body)
	}
	_, _, page := fetch(t, http.MethodGet, srv.URL+"/")
	i := strings.Index(page, `id="row-1" data-upstream="`+gone+`">`)
	if i < 0 {
		t.Fatalf("no row for %s in the status page", gone)
	}
	row := page[i:]
	row = row[:strings.Index(row, "</tr>")]
	if !strings.Contains(row, "absent from the answer") || !strings.Contains(row, src) {
		t.Errorf("status page row of the absent member:\n%s", row)
	}
}
