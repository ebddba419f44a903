package balancer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

const handoffHeader = "Ringlb-Handoff"

// handoffBackends are backends that answer with their name and the
// handoff header they were sent ("" for none).
func handoffBackends(t *testing.T, names ...string) []*backend {
	var bes []*backend
	for _, n := range names {
		be := newBackend(t, n)
		be.handle = func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s|%s", be.name, strings.Join(r.Header.Values(handoffHeader), ","))
		}
		bes = append(bes, be)
	}
	return bes
}

// askHandoff sends a request with key (and a client's own handoff header,
// when forged is set) and returns the upstream that served it and the
// handoff header it was sent.
func askHandoff(t *testing.T, front *httptest.Server, key, forged string) (upstream, handoff string) {
	t.Helper()
	hdr := []string{"X-User-ID", key}
	if forged != "" {
		hdr = append(hdr, handoffHeader, forged)
	}
	code, _, body := get(t, front.Client(), front.URL+"/", hdr...)
	if code != http.StatusOK {
		t.Fatalf("key %s: %d %s", key, code, body)
	}
	up, h, _ := strings.Cut(body, "|")
	return up, h
}

// want is the header value naming be.
func handoffValue(be *backend) string {
	return fmt.Sprintf(`name="%s", url="%s"`, be.name, be.srv.URL)
}

// Rule 17 through a scale-out without hold: within the window, a key the
// new ring moves carries the header naming its previous upstream to the
// newcomer, every other key carries none (a client's own header is
// removed), and after the window none does. The access log, the metric
// and /debug/lookup say the same.
func TestHandoffScaleOut(t *testing.T) {
	bes := handoffBackends(t, "a", "b", "c", "d", "e")
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes[:4]...), 0)
	opts.Handoff = handoff.Options{Header: handoffHeader, Window: time.Minute}
	var logBuf testenv.Buffer
	al, err := accesslog.New(accesslog.JSON, "", &logBuf, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.AccessLog = al
	b, reg, front := holdProxy(t, clk, opts)
	ks := keys("h-", 300)
	before := map[string]string{}
	for _, k := range ks {
		up, h := askHandoff(t, front, k, `name="x", url="http://evil"`)
		if h != "" {
			t.Fatalf("key %s before any change carried %q", k, h)
		}
		before[k] = up
	}
	opts.Upstreams = upstreamsOf(t, bes...)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	byName := map[string]*backend{}
	for _, be := range bes {
		byName[be.name] = be
	}
	moved := 0
	for _, k := range ks {
		up, h := askHandoff(t, front, k, "forged")
		switch {
		case up != before[k]:
			moved++
			if up != "e" || h != handoffValue(byName[before[k]]) {
				t.Errorf("moved key %s: to %s with %q; want e with %q", k, up, h, handoffValue(byName[before[k]]))
			}
			if lk := b.Lookup(k); lk.Handoff == nil || lk.Handoff.From != before[k] || lk.Handoff.URL != byName[before[k]].srv.URL {
				t.Errorf("lookup of moved key %s: handoff %+v", k, lk.Handoff)
			}
		case h != "":
			t.Errorf("key %s stayed on %s but was sent %q", k, up, h)
		}
	}
	if moved == 0 {
		t.Fatal("the newcomer took no key: the test shows nothing")
	}
	if got := metric(t, reg, "ringlb_handoffs_total", "pool=default"); got != float64(moved) {
		t.Errorf("ringlb_handoffs_total = %v, want %d", got, moved)
	}
	logged := 0
	for _, line := range strings.Split(strings.TrimSpace(logBuf.String()), "\n") {
		var e struct {
			Upstream    string `json:"upstream"`
			HandoffFrom string `json:"handoff_from"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		if e.HandoffFrom != "" {
			logged++
			if e.Upstream != "e" {
				t.Errorf("access log: handoff_from %s on a request served by %s", e.HandoffFrom, e.Upstream)
			}
		}
	}
	if logged != moved {
		t.Errorf("access log: %d lines with handoff_from, want %d", logged, moved)
	}
	clk.advance(time.Minute)
	for _, k := range ks {
		if _, h := askHandoff(t, front, k, "forged"); h != "" {
			t.Fatalf("after the window, key %s carried %q", k, h)
		}
	}
}

// Rule 17 without a ring change: a key whose owner drains (and is not
// held there) goes elsewhere naming its owner; a key with a hold record
// on another upstream than the one it goes to names that upstream.
func TestHandoffDrainAndHold(t *testing.T) {
	bes := handoffBackends(t, "a", "b", "c", "d")
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), 0)
	opts.Handoff = handoff.Options{Header: handoffHeader, Window: time.Minute}
	b, _, front := holdProxy(t, clk, opts)
	var ofA []string
	for _, k := range keys("d-", 200) {
		if b.Lookup(k).Owner == "a" {
			ofA = append(ofA, k)
		}
	}
	setState(t, b, "a", state.Drain)
	for _, k := range ofA {
		if up, h := askHandoff(t, front, k, ""); up == "a" || h != handoffValue(bes[0]) {
			t.Errorf("key %s of draining a: served by %s with %q, want elsewhere with %q", k, up, h, handoffValue(bes[0]))
		}
	}
	setState(t, b, "a", state.Maint) // in maint a cannot hand anything over
	for _, k := range ofA {
		if _, h := askHandoff(t, front, k, ""); h != "" {
			t.Errorf("key %s of a in maint carried %q", k, h)
		}
	}
	setState(t, b, "a", state.Ready)

	// Hold under on_return home: keys recorded on b while a was out go
	// back to a, which is told they were on b.
	opts.Hold = hold.Options{Idle: time.Hour, MaxKeys: 1000, OnReturn: hold.Home}
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	b.HealthReporter().SetHealthy("a", false, "test")
	where := map[string]string{}
	for _, k := range ofA {
		where[k], _ = askHandoff(t, front, k, "")
	}
	b.HealthReporter().SetHealthy("a", true, "test")
	for _, k := range ofA {
		up, h := askHandoff(t, front, k, "")
		var was *backend
		for _, be := range bes {
			if be.name == where[k] {
				was = be
			}
		}
		if up != "a" || h != handoffValue(was) {
			t.Errorf("key %s held on %s, back home: served by %s with %q, want a with %q", k, where[k], up, h, handoffValue(was))
		}
	}
}

// metricsHandoffs reads ringlb_handoffs_total.
func (b *Balancer) metricsHandoffs() float64 {
	var m dto.Metric
	if err := b.metrics.Handoffs.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
