package balancer

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/ringlb/ringlb/healthcheck"
	"github.com/ringlb/ringlb/ring"
)

// The health checker reports straight into a Balancer's reporter.
var _ healthcheck.Reporter = (*HealthReporter)(nil)

// healthEvent is one report of a health checker, with the probe answers
// the upstream had given by then.
type healthEvent struct {
	name          string
	up            bool
	passes, fails int64
}

// runChecker starts a real health checker over r's backends, reporting
// into r.b; every report also goes to the returned channel.
func runChecker(t *testing.T, r *rig, rise, fall int) <-chan healthEvent {
	events := make(chan healthEvent, 16)
	into := r.b.HealthReporter()
	rep := healthcheck.ReporterFunc(func(name string, up bool, reason string) {
		into.SetHealthy(name, up, reason)
		be := r.bes[name]
		// The prober waits for us: no probe of name runs meanwhile.
		events <- healthEvent{name, up, be.passes.Load(), be.fails.Load()}
	})
	// A generous timeout: a probe slowed down by the race detector must
	// not count as a failure (probes of one target never overlap).
	opts := healthcheck.Options{Path: "/healthz", Interval: 15 * time.Millisecond, Timeout: 2 * time.Second, Rise: rise, Fall: fall}
	hc := healthcheck.New(opts, rep, nil)
	var targets []healthcheck.Target
	for name, be := range r.bes {
		targets = append(targets, healthcheck.Target{Name: name, URL: mustURL(t, be.srv.URL)})
	}
	hc.Update(opts, targets)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		hc.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return events
}

func nextEvent(t *testing.T, events <-chan healthEvent) healthEvent {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no health report")
		return healthEvent{}
	}
}

// TestHealthEjection: an upstream that fails its health check while its
// traffic is fine is ejected after exactly fall failed probes, reason
// health; only its keys move; after rise passes they all come home.
func TestHealthEjection(t *testing.T) {
	r := newRig(t, 4, func(o *Options) { o.HealthChecks = true })
	ks := newKeyset(r.b, 2000)
	events := runChecker(t, r, 2, 3)
	c := r.bes["c"]
	c.health.Store(http.StatusServiceUnavailable)
	ev := nextEvent(t, events)
	if ev.name != "c" || ev.up || ev.fails != 3 {
		t.Fatalf("report %+v, want c down after 3 failed probes", ev)
	}
	if st := status(t, r.b, "c"); st.Available || st.Health != "down" || st.Breaker != "closed" {
		t.Fatalf("after the report: %+v", st)
	}
	if v := r.metric(t, "ringlb_ejections_total", "upstream=c", "reason=health"); v != 1 {
		t.Errorf("ejections{c,health} = %v", v)
	}
	if v := r.metric(t, "ringlb_ejections_total", "upstream=c", "reason=breaker"); v != 0 {
		t.Errorf("ejections{c,breaker} = %v", v)
	}
	if lr := r.b.Lookup(ks.by["c"][0]); !hasSkip(lr, "c", ring.Unhealthy) {
		t.Errorf("lookup: %+v", lr)
	}
	ks.checkPlacement(t, r.b, "c")
	hits := c.hits.Load()
	r.serveAll(t, ks, "c")
	if c.hits.Load() != hits {
		t.Error("an ejected upstream got traffic")
	}

	passes := ev.passes
	c.health.Store(http.StatusOK)
	ev = nextEvent(t, events)
	if ev.name != "c" || !ev.up || ev.passes-passes != 2 {
		t.Fatalf("report %+v, want c up after 2 passes (had %d)", ev, passes)
	}
	ks.checkPlacement(t, r.b)
	r.serveAll(t, ks)
	if n := r.logs.count("upstream unavailable", "upstream=c", "cause=health"); n != 1 {
		t.Errorf("%d 'upstream unavailable' lines, want 1", n)
	}
	if n := r.logs.count("upstream available", "upstream=c", "cause=health"); n != 1 {
		t.Errorf("%d 'upstream available' lines, want 1", n)
	}
	select {
	case ev := <-events:
		t.Errorf("unexpected report %+v", ev)
	default:
	}
}

// TestFlappingHealthNeverEjects: probes that alternate pass and fail never
// reach fall (2) failures in a row.
func TestFlappingHealthNeverEjects(t *testing.T) {
	r := newRig(t, 2, func(o *Options) { o.HealthChecks = true })
	a := r.bes["a"]
	a.flap.Store(true)
	probed := make(chan int64, 64)
	a.probed.Store(&probed)
	events := runChecker(t, r, 2, 2)
	deadline := time.After(20 * time.Second)
	for n := int64(0); n < 30; {
		select {
		case n = <-probed:
		case <-deadline:
			t.Fatalf("only %d probes", n)
		}
	}
	select {
	case ev := <-events:
		t.Fatalf("flapping upstream reported: %+v", ev)
	default:
	}
	if !status(t, r.b, "a").Available || a.fails.Load() < 15 {
		t.Errorf("a: %+v after %d failed probes", status(t, r.b, "a"), a.fails.Load())
	}
	if v := r.metric(t, "ringlb_ejections_total", "upstream=a", "reason=health"); v != 0 {
		t.Errorf("ejections = %v", v)
	}
}

// TestSlowStartAfterEjection: with slow_start, an upstream returning from
// an ejection (health or breaker) takes its keys back in a growing set:
// about a quarter of its keys a quarter of the way through the window,
// about three quarters at three quarters, every earlier key still home,
// and all at the end; no other key moves meanwhile.
func TestSlowStartAfterEjection(t *testing.T) {
	for _, path := range []string{"health", "breaker"} {
		t.Run(path, func(t *testing.T) {
			r := newRig(t, 4, func(o *Options) {
				o.Ring.SlowStart = time.Minute
				o.HealthChecks = true
				o.Breaker.ConsecutiveFailures = 1
			})
			ks := newKeyset(r.b, 4000)
			c, own := r.bes["c"], ks.by["c"]
			if path == "health" {
				r.b.HealthReporter().SetHealthy("c", false, "test")
				ks.checkPlacement(t, r.b, "c")
				r.b.HealthReporter().SetHealthy("c", true, "test")
			} else {
				c.status.Store(http.StatusBadGateway)
				r.get(t, own[0])
				ks.checkPlacement(t, r.b, "c")
				c.status.Store(http.StatusOK)
				r.clk.advance(5 * time.Second)
				if code, be := r.get(t, own[0]); code != 200 || be != "c" {
					t.Fatalf("trial: %d from %q", code, be)
				}
			}
			if st := status(t, r.b, "c"); !st.Available || st.ActiveFraction != 0 {
				t.Fatalf("at return: %+v", st)
			}
			if h := ks.home(r.b, "c"); len(h) != 0 {
				t.Errorf("%d keys home at fraction 0", len(h))
			}
			if lr := r.b.Lookup(own[1]); !hasSkip(lr, "c", ring.SlowStart) {
				t.Errorf("lookup at fraction 0: %+v", lr)
			}
			ks.checkPlacement(t, r.b, "c")

			r.clk.advance(15 * time.Second)
			quarter := ks.home(r.b, "c")
			ks.unmoved(t, r.b, "c")
			r.clk.advance(30 * time.Second)
			threeQ := ks.home(r.b, "c")
			ks.unmoved(t, r.b, "c")
			for k := range quarter {
				if !threeQ[k] {
					t.Errorf("key %s home at 1/4 left again at 3/4", k)
				}
			}
			if st := status(t, r.b, "c"); st.ActiveFraction != 0.75 {
				t.Errorf("active fraction at 45s: %v", st.ActiveFraction)
			}
			// A key at an inactive point of c walks on and may meet an
			// active point of c first, so a little more than the active
			// fraction of c's keys is home.
			q, tq := float64(len(quarter))/float64(len(own)), float64(len(threeQ))/float64(len(own))
			if q < 0.2 || q > 0.45 || tq < 0.7 || tq > 0.95 {
				t.Errorf("share of c's keys home: %.2f at 1/4, %.2f at 3/4", q, tq)
			}
			r.clk.advance(15 * time.Second)
			ks.checkPlacement(t, r.b)
			if st := status(t, r.b, "c"); st.ActiveFraction != 1 {
				t.Errorf("active fraction at the end: %v", st.ActiveFraction)
			}
			r.serveAll(t, ks)
		})
	}
}

// TestFleetReadyAfterOutageWithoutTraffic: every upstream fails, traffic
// trips every breaker, the health checks say down, and traffic stops (a
// readiness probe took the instance out of service). Once the open
// periods are over and the checks say up again, the fleet is ready with
// no request at all: an upstream whose open period is over and whose
// health says up is available (half-open), so /readyz turns 200.
func TestFleetReadyAfterOutageWithoutTraffic(t *testing.T) {
	r := newRig(t, 2, func(o *Options) { o.Breaker.ConsecutiveFailures = 1; o.HealthChecks = true })
	ks := newKeyset(r.b, 200)
	for _, name := range []string{"a", "b"} {
		r.bes[name].status.Store(http.StatusBadGateway)
	}
	for _, name := range []string{"a", "b"} {
		if code, _ := r.get(t, ks.by[name][0]); code != http.StatusBadGateway && code != http.StatusServiceUnavailable {
			t.Fatalf("failure on %s: %d", name, code)
		}
	}
	for _, name := range []string{"a", "b"} {
		if st := status(t, r.b, name); st.Available || st.Breaker != "open" {
			t.Fatalf("%s after the outage: %+v, want open", name, st)
		}
		r.b.HealthReporter().SetHealthy(name, false, "test")
	}
	if r.b.Ready() {
		t.Fatal("ready with every breaker open")
	}
	// The open periods end while the checks say down; then they recover.
	r.clk.advance(time.Minute)
	for _, name := range []string{"a", "b"} {
		r.bes[name].status.Store(http.StatusOK)
		r.b.HealthReporter().SetHealthy(name, true, "test")
	}
	if !r.b.Ready() {
		t.Fatalf("not ready after recovery without traffic: %+v", r.b.Status().Upstreams)
	}
	for _, name := range []string{"a", "b"} {
		if st := status(t, r.b, name); !st.Available || st.Breaker != "half-open" {
			t.Errorf("%s: %+v, want available and half-open", name, st)
		}
		if v := r.metric(t, "ringlb_upstream_available", "upstream="+name); v != 1 {
			t.Errorf("ringlb_upstream_available{%s} = %v", name, v)
		}
	}
	// The next request of each is its trial, and closes the breaker.
	for _, name := range []string{"a", "b"} {
		if code, be := r.get(t, ks.by[name][0]); code != 200 || be != name {
			t.Errorf("trial of %s: %d from %q", name, code, be)
		}
		if st := status(t, r.b, name); st.Breaker != "closed" {
			t.Errorf("%s after its trial: %+v", name, st)
		}
	}
}
