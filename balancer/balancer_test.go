package balancer

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
)

func TestReloadUnderLoad(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
	small := baseOptions(upstreamsOf(t, bes[:3]...))
	big := baseOptions(upstreamsOf(t, bes...))
	big.Upstreams[0].Weight = 2
	b, reg, front := proxy(t, small)
	c := front.Client()

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				res, err := c.Get(fmt.Sprintf("%s/?user=g%d-%d", front.URL, g, i))
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					errs <- fmt.Errorf("status %d", res.StatusCode)
					return
				}
			}
		}()
	}
	var last string
	for i := range 20 {
		o := small
		if i%2 == 0 {
			o = big
		}
		v, err := b.Update(o)
		if err != nil {
			t.Fatal(err)
		}
		last = v
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if b.Version() != last {
		t.Fatalf("version %s, last update gave %s", b.Version(), last)
	}
	// The last update (i = 19) installed the small ring: d is gone.
	for i := range 50 {
		key := fmt.Sprint("after", i)
		_, got, _ := get(t, c, front.URL+"/?user="+key)
		if want := b.Lookup(key).Chosen; got != want || got == "d" {
			t.Fatalf("key %s went to %q, the ring says %q", key, got, want)
		}
	}
	if v := metric(t, reg, "ringlb_requests_total", "upstream=d"); v != -1 {
		t.Errorf("removed upstream d still has series (%v)", v)
	}
	if v := metric(t, reg, "ringlb_ring_info", "version="+last); v != 1 {
		t.Errorf("ringlb_ring_info{%s} = %v", last, v)
	}
}

func TestSameOptionsSameChoice(t *testing.T) {
	ups := []options.Upstream{}
	for _, n := range []string{"app-1", "app-2", "app-3", "app-4", "app-5"} {
		u := mustURL(t, "http://"+n+".internal:8080")
		ups = append(ups, options.Upstream{Name: n, URL: u, Addr: u.Host, Weight: 1})
	}
	ups[2].Weight = 2.5
	b1, err := New(baseOptions(ups), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rev := make([]options.Upstream, len(ups))
	for i := range ups {
		rev[len(ups)-1-i] = ups[i]
	}
	b2, err := New(baseOptions(rev), metrics.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b1.Version() != b2.Version() {
		t.Fatalf("versions differ: %s, %s", b1.Version(), b2.Version())
	}
	for i := range 10000 {
		k := fmt.Sprint("user-", i)
		if c1, c2 := b1.Lookup(k).Chosen, b2.Lookup(k).Chosen; c1 != c2 || c1 == "" {
			t.Fatalf("key %s: %q vs %q", k, c1, c2)
		}
	}
}

func TestUpdateKeepsState(t *testing.T) {
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	b, _, _ := proxy(t, baseOptions(upstreamsOf(t, a, bb)))
	ua := b.snap.Load().members[0].u
	b.HealthReporter().SetHealthy("a", false, "test")
	opts := baseOptions(upstreamsOf(t, a, bb, newBackend(t, "c")))
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	s := b.snap.Load()
	if s.members[0].u != ua || ua.available() {
		t.Error("upstream a lost its identity or state over a reload")
	}
	bad := opts
	bad.Upstreams = nil
	if _, err := b.Update(bad); err == nil || b.snap.Load() != s {
		t.Errorf("empty update: err %v, snapshot changed %v", err, b.snap.Load() != s)
	}
}

func TestSlowStartAfterReload(t *testing.T) {
	a, bb := newBackend(t, "a"), newBackend(t, "b")
	opts := baseOptions(upstreamsOf(t, a))
	opts.Ring.SlowStart = time.Minute
	b, _, _ := proxy(t, opts)
	clk := newFakeClock()
	clk.install(b)
	clk.advance(time.Hour)
	opts.Upstreams = upstreamsOf(t, a, bb)
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n := 0
		for i := range 2000 {
			if b.Lookup(fmt.Sprint(i)).Chosen == "b" {
				n++
			}
		}
		return n
	}
	if n := count(); n != 0 {
		t.Errorf("b took %d keys at fraction 0", n)
	}
	clk.advance(30 * time.Second)
	half := count()
	clk.advance(31 * time.Second)
	full := count()
	if !(half > 0 && half < full) || full < 800 {
		t.Errorf("b's keys: %d at half, %d at full", half, full)
	}
	if st := b.Status(); st.Upstreams[1].ActiveFraction != 1 {
		t.Errorf("active fraction after slow start %v", st.Upstreams[1].ActiveFraction)
	}
}

// TestReloadBreakersAndHealthChecksOff: a reload that turns breakers off
// closes an open one; one that turns health checks off brings every
// upstream back and ignores reports from the checker being stopped.
func TestReloadBreakersAndHealthChecksOff(t *testing.T) {
	r := newRig(t, 2, func(o *Options) { o.Breaker.ConsecutiveFailures = 1; o.HealthChecks = true })
	ks := newKeyset(r.b, 200)
	r.bes["a"].status.Store(http.StatusBadGateway)
	r.get(t, ks.by["a"][0])
	checker := r.b.HealthReporter()
	checker.SetHealthy("b", false, "test")
	opts := r.opts
	opts.Breaker = breaker.Options{}
	if _, err := r.b.Update(opts); err != nil {
		t.Fatal(err)
	}
	if st := status(t, r.b, "a"); !st.Available || st.Breaker != "closed" {
		t.Errorf("breakers off: %+v", st)
	}
	if st := status(t, r.b, "b"); st.Available {
		t.Errorf("breakers off changed b's health: %+v", st)
	}
	opts.HealthChecks = false
	if _, err := r.b.Update(opts); err != nil {
		t.Fatal(err)
	}
	checker.SetHealthy("a", false, "late report")
	for _, name := range []string{"a", "b"} {
		if st := status(t, r.b, name); !st.Available || st.Health != "up" {
			t.Errorf("health checks off: %+v", st)
		}
	}
	opts.HealthChecks = true
	if _, err := r.b.Update(opts); err != nil {
		t.Fatal(err)
	}
	r.b.HealthReporter().SetHealthy("a", false, "test") // the new checker's
	if status(t, r.b, "a").Available {
		t.Error("health checks back on, report ignored")
	}
	if n := r.logs.count("upstream available", "upstream=b"); n != 1 {
		t.Errorf("%d 'upstream available' lines for b, want 1", n)
	}
}

// TestReloadChangesURL: an upstream keeps its name (and its keys) while
// its URL changes; traffic follows the new URL.
func TestReloadChangesURL(t *testing.T) {
	old, moved := newBackend(t, "old"), newBackend(t, "moved")
	opts := baseOptions(upstreamsOf(t, old))
	opts.Upstreams[0].Name = "app"
	b, _, front := proxy(t, opts)
	v1 := b.Version()
	if _, got, _ := get(t, front.Client(), front.URL+"/"); got != "old" {
		t.Fatalf("before: %q", got)
	}
	opts.Upstreams = upstreamsOf(t, moved)
	opts.Upstreams[0].Name = "app"
	v2, err := b.Update(opts)
	if err != nil {
		t.Fatal(err)
	}
	if v1 != v2 {
		t.Errorf("version changed with the URL only: %s → %s", v1, v2)
	}
	if _, got, _ := get(t, front.Client(), front.URL+"/"); got != "moved" {
		t.Errorf("after: %q", got)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	good := baseOptions(upstreamsOf(t, newBackend(t, "a")))
	reg := metrics.NewRegistry()
	for name, mut := range map[string]func(*Options){
		"no upstreams":   func(o *Options) { o.Upstreams = nil },
		"unknown key":    func(o *Options) { o.Hash.Key = []key.Source{{Kind: "body"}} },
		"nameless query": func(o *Options) { o.Hash.Key = []key.Source{{Kind: key.Query}} },
		"load factor":    func(o *Options) { o.Ring.LoadFactor = 0.5 },
		"on_missing":     func(o *Options) { o.Hash.OnMissing = "guess" },
		"cookie name":    func(o *Options) { o.Hash.OnMissing = "cookie"; o.Hash.Cookie.Name = "" },
		"on_unavailable": func(o *Options) { o.Ring.OnUnavailable = "panic" },
		"weight":         func(o *Options) { o.Upstreams = []options.Upstream{{Name: "a", URL: o.Upstreams[0].URL, Weight: -1}} },
		"url":            func(o *Options) { o.Upstreams = []options.Upstream{{Name: "a", URL: mustURL(t, "/rel"), Weight: 1}} },
		"duplicate": func(o *Options) {
			o.Upstreams = append(o.Upstreams, o.Upstreams[0])
		},
	} {
		o := good
		mut(&o)
		if _, err := New(o, reg, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Failed attempts registered nothing: the registry is still free.
	if _, err := New(good, reg, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := New(good, reg, nil); err == nil {
		t.Error("a second balancer on the same registry was accepted")
	}
}

// ringlb_config_last_reload_success is 1 from the start, 0 from a rejected
// reload until one succeeds; LastReload keeps the attempt and its problems.
func TestLastReloadSuccess(t *testing.T) {
	b, reg, _ := proxy(t, baseOptions(upstreamsOf(t, newBackend(t, "a"))))
	gauge := func() float64 { return metric(t, reg, "ringlb_config_last_reload_success") }
	if g := gauge(); g != 1 || b.LastReload() != nil {
		t.Fatalf("at start: gauge %v, last reload %+v", g, b.LastReload())
	}
	b.RecordReload(false, "c.yaml:3: upstreams[0].weight: must be > 0, got -1")
	if g := gauge(); g != 0 {
		t.Errorf("after a rejected reload: gauge %v, want 0", g)
	}
	if lr := b.LastReload(); lr == nil || lr.OK || len(lr.Problems) != 1 || lr.At.IsZero() {
		t.Errorf("last reload %+v", lr)
	}
	b.RecordReload(false)
	if g := gauge(); g != 0 {
		t.Errorf("after a second rejected reload: gauge %v, want 0", g)
	}
	b.RecordReload(true)
	if g := gauge(); g != 1 || !b.LastReload().OK {
		t.Errorf("after a good reload: gauge %v, last %+v", g, b.LastReload())
	}
	if v := metric(t, reg, "ringlb_config_reloads_total", "result=error"); v != 2 {
		t.Errorf("reloads_total{error} = %v, want 2", v)
	}
}
