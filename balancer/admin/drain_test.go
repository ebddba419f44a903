package admin

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// drainProxy serves a Balancer in front of real backends a and b, with
// hold on or off, logging into logs, and its admin handler on a real
// listener (answering Host 127.0.0.1:9901).
func drainProxy(t *testing.T, holdOn bool) (adm *httptest.Server, logs *testenv.Buffer) {
	t.Helper()
	var ups []options.Upstream
	for _, n := range []string{"a", "b"} {
		be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, n) }))
		t.Cleanup(be.Close)
		u := mustParse(t, be.URL)
		ups = append(ups, options.Upstream{Name: n, URL: u, Addr: u.Host, Weight: 1})
	}
	opts := balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Upstreams: ups,
			Ring:      options.Ring{PointsPerWeight: 160},
			Hash:      options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}, OnMissing: options.OnMissingReject},
			Timeouts:  options.Timeouts{Dial: time.Second},
		},
	}
	if holdOn {
		opts.Hold = hold.Options{Idle: time.Hour, MaxKeys: 1000}
	}
	logs = &testenv.Buffer{}
	reg := metrics.NewRegistry()
	b, err := balancer.New(opts, reg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	adm = httptest.NewServer(NewHandler(b, reg, nil, Options{Addr: "127.0.0.1:9901"}))
	t.Cleanup(adm.Close)
	return adm, logs
}

// With hold off, a drain keeps no key in use: POST /upstreams/NAME/drain
// answers "hold": false with a warning saying so, GET /upstreams too, a
// warning is logged, and the status page says it. With hold on the
// answer says "hold": true, and nothing warns.
func TestDrainSaysWhenHoldIsOff(t *testing.T) {
	adm, logs := drainProxy(t, false)
	code, body := call(t, adm, http.MethodPost, "/upstreams/b/drain", "")
	u := decode(t, body)
	if code != 200 || u["state"] != "drain" || u["hold"] != false {
		t.Errorf("POST /upstreams/b/drain with hold off: %d %s", code, body)
	}
	if w, _ := u["warning"].(string); !strings.Contains(w, "hold is off") || !strings.Contains(w, "not kept") {
		t.Errorf("the drain answer's warning is %q", u["warning"])
	}
	_, body = call(t, adm, http.MethodGet, "/upstreams", "")
	for _, x := range decode(t, body)["pools"].(map[string]any)["default"].([]any) {
		u := x.(map[string]any)
		if _, warned := u["warning"]; u["hold"] != false || warned != (u["name"] == "b") {
			t.Errorf("GET /upstreams with b draining, hold off: %v", u)
		}
	}
	if l := logs.String(); !strings.Contains(l, `level=WARN msg="upstream draining with hold off: keys in use on it are not kept" upstream=b by=api`) {
		t.Errorf("no warning logged for the drain:\n%s", l)
	}
	code, page := getStatusPage(t, adm)
	for _, want := range []string{
		`<span data-f="admin">drain (hold off: keys in use not kept)</span>`,
		`<dd id="hold" class="hold-off">off: a drain keeps no key in use`,
		`<table id="upstreams" data-hold="false">`,
		`title="take no new keys; hold is off, so the keys in use move too">Drain</button>`,
	} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("the status page (%d) lacks %s", code, want)
		}
	}

	adm, logs = drainProxy(t, true)
	code, body = call(t, adm, http.MethodPost, "/upstreams/b/drain", "")
	if u := decode(t, body); code != 200 || u["state"] != "drain" || u["hold"] != true || u["warning"] != nil {
		t.Errorf("POST /upstreams/b/drain with hold on: %d %s", code, body)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("a warning with hold on:\n%s", logs)
	}
	if _, page := getStatusPage(t, adm); strings.Contains(page, `class="hold-off"`) || !strings.Contains(page, `<span data-f="admin">drain (drained)</span>`) || !strings.Contains(page, `data-hold="true"`) {
		t.Error("the status page with hold on speaks of hold off, or does not say it is on")
	}
}

// getStatusPage gets the admin server's status page, as the listener's own
// Host.
func getStatusPage(t *testing.T, adm *httptest.Server) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, adm.URL+"/", nil)
	req.Host = "127.0.0.1:9901"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}
