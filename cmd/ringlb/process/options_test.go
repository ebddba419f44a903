package process

import (
	"fmt"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// The ring block reaches the balancer as written, defaults included.
func TestBalancerOptionsRing(t *testing.T) {
	const up = "upstreams:\n  - name: a\n    url: http://127.0.0.1:9001\n"
	for src, want := range map[string][2]float64{
		up:                                 {0, 8}, // bounded loads off by default; floor 8
		"ring: {load_factor: 1.25}\n" + up: {1.25, 8},
		"ring: {load_factor: 1.5, load_floor: 2}\n" + up: {1.5, 2},
	} {
		cfg, err := config.Parse("c.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		o, err := balancerOptions(cfg, &cfg.Pool)
		if err != nil {
			t.Fatal(err)
		}
		if o.Ring.LoadFactor != want[0] || float64(o.Ring.LoadFloor) != want[1] {
			t.Errorf("%q: load_factor %v, load_floor %d; want %v", src, o.Ring.LoadFactor, o.Ring.LoadFloor, want)
		}
	}
}

// retry_statuses reaches the balancer as written; absent, none.
func TestBalancerOptionsRetryStatuses(t *testing.T) {
	const up = "upstreams:\n  - name: a\n    url: http://127.0.0.1:9001\n"
	for src, want := range map[string]string{
		up:                                  "[]",
		"retry_statuses: [502, 503]\n" + up: "[502 503]",
	} {
		cfg, err := config.Parse("c.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		o, err := balancerOptions(cfg, &cfg.Pool)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(o.RetryStatuses); got != want {
			t.Errorf("%q: RetryStatuses %s, want %s", src, got, want)
		}
	}
}
