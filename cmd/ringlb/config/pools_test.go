package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/balancer/key"
)

const poolsYAML = `pools:
  sessions:
    hash: {key: [{cookie: sid}]}
    upstreams:
      - {name: app-1, url: http://127.0.0.1:9001}
      - {name: app-2, url: http://127.0.0.1:9002, weight: 2}
  assets:
    hash: {key: [uri]}
    ring: {points_per_weight: 40}
    retries: 0
    upstreams:
      - {name: app-1, url: http://127.0.0.1:9101}
routes:
  - {host: App.Example.com, path_prefix: /api, pool: sessions}
  - {host: "*.cdn.example", pool: assets}
  - {path_prefix: /static/, pool: assets}
  - {pool: sessions}
`

// A pool is decoded and defaulted exactly as a config without pools is:
// each pool of a pools config equals the top-level pool of the same
// blocks written alone, named after its key.
func TestPoolsDecodeAsTopLevel(t *testing.T) {
	c := mustParse(t, poolsYAML)
	if len(c.Pools) != 2 || c.Pools[0].Name != "sessions" || c.Pools[1].Name != "assets" {
		t.Fatalf("pools = %+v", c.Pools)
	}
	for i, alone := range []string{
		"hash: {key: [{cookie: sid}]}\nupstreams:\n  - {name: app-1, url: http://127.0.0.1:9001}\n  - {name: app-2, url: http://127.0.0.1:9002, weight: 2}\n",
		"hash: {key: [uri]}\nring: {points_per_weight: 40}\nretries: 0\nupstreams:\n  - {name: app-1, url: http://127.0.0.1:9101}\n",
	} {
		want := mustParse(t, alone).Pool
		want.Name = c.Pools[i].Name
		if !reflect.DeepEqual(c.Pools[i], want) {
			t.Errorf("pool %s:\ngot  %+v\nwant %+v", want.Name, c.Pools[i], want)
		}
	}
	wantRoutes := []Route{
		{Host: "app.example.com", PathPrefix: "/api", Pool: "sessions"},
		{Host: "*.cdn.example", Pool: "assets"},
		{PathPrefix: "/static/", Pool: "assets"},
		{Pool: "sessions"},
	}
	if !reflect.DeepEqual(c.Routes, wantRoutes) {
		t.Errorf("routes = %+v", c.Routes)
	}
	if got := c.Serving(); len(got) != 2 || got[0] != &c.Pools[0] || got[1] != &c.Pools[1] {
		t.Errorf("Serving() = %v", got)
	}
	if want := "c.yaml: ok: 2 pools (sessions, assets), 4 routes"; c.Summary() != want {
		t.Errorf("Summary() = %q, want %q", c.Summary(), want)
	}
	if got, want := c.Pools[1].Summary(), "1 upstream, 40 points, placement ringlb"; got != want {
		t.Errorf("assets Summary() = %q, want %q", got, want)
	}
	if !reflect.DeepEqual(c.Pools[0].Hash.Key, []key.Source{{Kind: key.Cookie, Name: "sid"}}) {
		t.Errorf("sessions key = %v", c.Pools[0].Hash.Key)
	}
}

// Without pools the top-level blocks are the pool "default".
func TestNoPoolsIsDefault(t *testing.T) {
	c := mustParse(t, up)
	if ps := c.Serving(); len(ps) != 1 || ps[0] != &c.Pool || ps[0].Name != DefaultPool || c.Routes != nil {
		t.Errorf("Serving() = %+v, routes %v", ps, c.Routes)
	}
}

func TestPoolsErrors(t *testing.T) {
	two := "pools:\n  a:\n    upstreams: [{name: x, url: http://127.0.0.1:1}]\n  b:\n    upstreams: [{name: x, url: http://127.0.0.1:2}]\n"
	for _, tt := range []struct{ name, src, want string }{
		{"top-level block with pools", "ring: {load_factor: 2}\n" + up + two + "routes: [{pool: a}, {path_prefix: /b, pool: b}]\n",
			"c.yaml:1: ring: must be inside a pool when the config has pools: move it under pools.NAME\n" +
				"c.yaml:2: upstreams: must be inside a pool when the config has pools: move it under pools.NAME"},
		{"route to an unknown pool", two + "routes: [{pool: a}, {path_prefix: /b, pool: b}, {host: c.example, pool: c}]\n",
			`c.yaml:6: routes[2].pool: "c" is not a pool; define it under pools`},
		{"route to a misspelled pool", "pools:\n  sessions:\n    upstreams: [{name: x, url: http://127.0.0.1:1}]\nroutes: [{pool: sesions}]\n",
			`c.yaml:2: pools.sessions: no route reaches pool "sessions": add a route with pool: sessions` + "\n" +
				`c.yaml:4: routes[0].pool: "sesions" is not a pool (did you mean sessions?); define it under pools`},
		{"pool no route reaches", two + "routes: [{pool: a}]\n",
			`c.yaml:4: pools.b: no route reaches pool "b": add a route with pool: b`},
		{"routes missing", two,
			"c.yaml:1: routes: required with pools: list the routes that send requests to them"},
		{"bad host: *. alone", two + "routes:\n  - {host: \"*.\", pool: a}\n  - {pool: b}\n",
			`c.yaml:7: routes[0].host: must be a host name (app.example.com), an IP address or a wildcard *.example.com, without port; got "*."`},
		{"bad host: * inside", two + "routes:\n  - {host: \"a.*.example\", pool: a}\n  - {pool: b}\n",
			`c.yaml:7: routes[0].host: must be a host name (app.example.com), an IP address or a wildcard *.example.com, without port; got "a.*.example"`},
		{"bad host: port", two + "routes:\n  - {host: \"a.example:80\", pool: a}\n  - {pool: b}\n",
			`c.yaml:7: routes[0].host: must be a host name (app.example.com), an IP address or a wildcard *.example.com, without port; got "a.example:80"`},
		{"duplicate route", two + "routes:\n  - {host: A.example, path_prefix: /x, pool: a}\n  - {host: a.example, path_prefix: /x, pool: b}\n  - {pool: a}\n",
			`c.yaml:4: pools.b: no route reaches pool "b": add a route with pool: b` + "\n" +
				"c.yaml:8: routes[1]: never matches: routes[0] has the same host and path_prefix and comes first"},
		{"bad path_prefix", two + "routes: [{path_prefix: api, pool: a}, {pool: b}]\n",
			`c.yaml:6: routes[0].path_prefix: must be a path starting with "/" (no query or fragment), got "api"`},
		{"pool error names the pool", "pools:\n  sessions:\n    upstreams:\n      - {name: a, url: http://127.0.0.1:1}\n      - {name: b, url: http://127.0.0.1:2}\n      - {name: c, url: http://127.0.0.1:3, weight: -1}\nroutes: [{pool: sessions}]\n",
			"c.yaml:6: pools.sessions.upstreams[2].weight: must be > 0, got -1"},
		{"pool without upstreams", "pools:\n  sessions:\n    ring: {points_per_weight: 10}\nroutes: [{pool: sessions}]\n",
			"c.yaml:2: pools.sessions.upstreams: required: list at least one upstream (or a discovery source)"},
		{"bad pool name", "pools:\n  Sessions:\n    upstreams: [{name: a, url: http://127.0.0.1:1}]\nroutes: [{pool: Sessions}]\n",
			`c.yaml:2: pools.Sessions: a pool name must be made of a-z, 0-9, '_' and '-', got "Sessions"`},
		{"no pools", "pools: {}\nroutes: []\n",
			`c.yaml:1: pools: must define at least one pool (or remove pools: a config without them is the pool "default")`},
		{"routes without pools", up + "routes: [{pool: a}]\n",
			"c.yaml:4: routes: needs pools: routes send requests to the pools they name"},
		{"unknown field in a pool", "pools:\n  a:\n    listen: 127.0.0.1:1\n    upstreams: [{name: a, url: http://127.0.0.1:1}]\nroutes: [{pool: a}]\n",
			"c.yaml:3: pools.a.listen: unknown field"},
		{"route without pool", two + "routes: [{pool: a}, {path_prefix: /b, pool: b}, {path_prefix: /c}]\n",
			"c.yaml:6: routes[2].pool: required: the pool this route sends requests to"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded, want:\n%s", tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error:\ngot:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// Each pool's upstream_tls.ca_file is read as the top-level one is, and a
// problem with it names the pool.
func TestPoolCAFile(t *testing.T) {
	src := "pools:\n  a:\n    upstreams: [{name: a, url: https://127.0.0.1:1}]\n    upstream_tls: {ca_file: missing.pem}\nroutes: [{pool: a}]\n"
	_, err := Parse("c.yaml", []byte(src))
	if err == nil || !strings.HasPrefix(err.Error(), "c.yaml:4: pools.a.upstream_tls.ca_file: ") {
		t.Errorf("err = %v", err)
	}
}
