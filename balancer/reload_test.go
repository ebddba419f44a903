package balancer

import "testing"

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
