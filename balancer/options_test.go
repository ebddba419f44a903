package balancer

import (
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/breaker"
	"github.com/ringlb/ringlb/balancer/options"
)

// New trusts the bounds the config's validation enforces: values out of
// them are taken as the fields' comments say, and the Balancer serves.
func TestNewTakesValuesOutOfBounds(t *testing.T) {
	opts := baseOptions(upstreamsOf(t, newBackend(t, "a")))
	opts.Retries = -1
	opts.RetryStatuses = []int{404, 700}
	opts.Limits = options.Limits{UpstreamRequests: -1, Send: -time.Second}
	opts.Hash.BodyLimit = -1
	opts.Breaker = breaker.Options{ConsecutiveFailures: 1, FailureStatuses: []int{99, 700}, FailureGRPCStatuses: []int{-1, 40},
		OpenTimeout: time.Minute, MaxOpenTimeout: time.Second}
	b, _, front := proxy(t, opts)
	if code, be, _ := get(t, front.Client(), front.URL+"/?user=x"); code != 200 || be != "a" {
		t.Fatalf("got %d from %q, want 200 from a", code, be)
	}
	s := b.snap.Load()
	if s.breaker == nil || s.breaker.MaxOpenTimeout != time.Minute || s.breaker.OpenPeriod(3) != time.Minute {
		t.Errorf("max_open_timeout below open_timeout: %+v, want open_timeout without doubling", s.breaker)
	}
	if s.retries != -1 || s.upstreamMax != -1 || s.send != -time.Second {
		t.Errorf("settings %d %d %s", s.retries, s.upstreamMax, s.send)
	}
}
