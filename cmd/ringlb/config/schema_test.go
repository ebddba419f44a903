package config

import (
	"reflect"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/healthcheck"
	"github.com/ringlb/ringlb/ring"
)

// Every block's schema builds: no two fields share a name, and every
// default tag decodes (schemaOf panics otherwise).
func TestSchemas(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for _, f := range schemaOf(t).fields {
			walk(t.FieldByIndex(f.index).Type)
		}
	}
	walk(reflect.TypeFor[Config]())
	for _, b := range []reflect.Type{reflect.TypeFor[Ring](), reflect.TypeFor[Hash](), reflect.TypeFor[Health](), reflect.TypeFor[DiscoverySource]()} {
		if !seen[b] {
			t.Errorf("the walk did not reach %s", b)
		}
	}
}

// The config's defaults that other packages also define agree with them.
func TestDefaultsAgree(t *testing.T) {
	c := mustParse(t, "health: {}\ndiscovery: {sources: [{srv: _a._tcp.x}]}\n"+up)
	h := c.Health
	if h.Path != healthcheck.DefaultPath || h.Interval != healthcheck.DefaultInterval || h.Timeout != healthcheck.DefaultTimeout ||
		h.Rise != healthcheck.DefaultRise || h.Fall != healthcheck.DefaultFall ||
		h.ExpectStatus != (StatusRange{Min: healthcheck.DefaultExpectMin, Max: healthcheck.DefaultExpectMax}) {
		t.Errorf("health defaults %+v differ from package healthcheck's", *h)
	}
	if c.Hash.BodyLimit != options.DefaultBodyLimit {
		t.Errorf("hash.body_limit default %d, options.DefaultBodyLimit %d", c.Hash.BodyLimit, options.DefaultBodyLimit)
	}
	if c.Discovery.ClusterDomain != discovery.DefaultClusterDomain {
		t.Errorf("discovery.cluster_domain default %q, discovery.DefaultClusterDomain %q", c.Discovery.ClusterDomain, discovery.DefaultClusterDomain)
	}
	// An absent points_per_weight is valid under placement nginx.
	if c.Ring.PointsPerWeight != ring.NginxPointsPerWeight {
		t.Errorf("ring.points_per_weight default %d, ring.NginxPointsPerWeight %d", c.Ring.PointsPerWeight, ring.NginxPointsPerWeight)
	}
}

// Defaults are copies: a change to one config's default list does not
// reach the next config.
func TestDefaultsAreCopies(t *testing.T) {
	a := mustParse(t, up)
	a.Breaker.FailureStatuses[0] = 599
	a.Hash.Key[0].Name = "changed"
	b := mustParse(t, up)
	if b.Breaker.FailureStatuses[0] != 502 || b.Hash.Key[0].Name != "session" {
		t.Errorf("a default list is shared between configs: %v, %v", b.Breaker.FailureStatuses, b.Hash.Key)
	}
	if b.Timeouts.Dial != 2*time.Second {
		t.Errorf("timeouts.dial default %s", b.Timeouts.Dial)
	}
}
