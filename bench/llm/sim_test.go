package main

import (
	"strings"
	"testing"
	"time"
)

// TestSimulationGoals runs a small version of the simulation (a few
// seconds of conversations a row) and checks the direction of what
// RESULTS-llm.md reports: routing on the prefix with bounded loads hits
// the servers' caches more than least connections, with a lower time to
// first token, and with hold no conversation changes server when a
// fifth server comes.
func TestSimulationGoals(t *testing.T) {
	sim := DefaultSim()
	sim.Workload.Duration = 5 * time.Second
	sim.Workload.Turns = 5
	sim.Workload.Think = 500 * time.Millisecond
	res := map[string]Result{}
	for _, sc := range Scenarios() {
		switch sc.Name {
		case "least-connections", "ringlb, prefix + bounded loads", "ringlb, prefix, 4→5 servers", "ringlb, prefix + hold, 4→5 servers":
		default:
			continue
		}
		r, err := sim.Run(sc)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s", sc.Name, r.Line())
		if r.Failed > 0 || r.Requests == 0 {
			t.Fatalf("%s: %d requests, %d failed", sc.Name, r.Requests, r.Failed)
		}
		res[sc.Name] = r
	}
	lc, pb := res["least-connections"], res["ringlb, prefix + bounded loads"]
	if pb.HitRate < 1.5*lc.HitRate || pb.TTFT50 >= lc.TTFT50 {
		t.Errorf("prefix + bounded loads: hit rate %.1f%%, TTFT p50 %v; least connections %.1f%%, %v: want a far higher hit rate and a lower TTFT",
			100*pb.HitRate, pb.TTFT50, 100*lc.HitRate, lc.TTFT50)
	}
	held, moved := res["ringlb, prefix + hold, 4→5 servers"], res["ringlb, prefix, 4→5 servers"]
	if held.Spanning == 0 || held.Lost+held.Spilled != 0 || moved.Lost+moved.Spilled < held.Lost+held.Spilled {
		t.Errorf("at the scale-out: with hold %d of %d conversations changed server, without %d of %d; want none with hold",
			held.Lost+held.Spilled, held.Spanning, moved.Lost+moved.Spilled, moved.Spanning)
	}
	var b strings.Builder
	report(&b, sim, []Result{lc, pb, moved, held}, "")
	if !strings.Contains(b.String(), "| least-connections |") {
		t.Errorf("report:\n%s", b.String())
	}
}
