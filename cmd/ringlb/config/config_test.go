package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/balancer/transport"
	"github.com/ringlb/ringlb/ring"
)

// rootConfig is the documented default config at the repository root.
const rootConfig = "../../../config.yaml"

// up is a minimal valid upstreams block; cases put it last so the lines
// they test come first and stay put.
const up = "upstreams:\n  - name: a\n    url: http://127.0.0.1:9001\n"

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: unexpected error:\n%v", err)
	}
	return c
}

func mustURL(t *testing.T, s string) *Upstream {
	t.Helper()
	c := mustParse(t, "upstreams:\n  - name: x\n    url: "+s+"\n")
	return &c.Upstreams[0]
}

// defaults is what a config holding only one upstream decodes to.
func defaults(t *testing.T) *Config {
	u := mustURL(t, "http://127.0.0.1:9001")
	return &Config{
		File:            "c.yaml",
		Listen:          "127.0.0.1:8080",
		AdminListen:     "127.0.0.1:9901",
		ShutdownTimeout: 15 * time.Second,
		UpstreamHeader:  "",
		TrustedProxies:  []netip.Prefix{},
		AccessLog:       AccessLog{},
		RequestIDHeader: "X-Request-Id",
		DebugPprof:      false,
		MaxHeaderBytes:  65536,
		HTTP2:           true,
		Limits:          Limits{UpstreamRequests: 1024, StreamsPerConnection: 250, Send: 60 * time.Second, BodyMemory: 64 << 20},
		Pool: Pool{
			Name: "default",
			PoolOptions: balancer.PoolOptions{
				Hash: Hash{
					Key: []key.Source{
						{Kind: key.Cookie, Name: "session"},
						{Kind: key.Header, Name: "X-User-Id"},
						{Kind: key.Query, Name: "user"},
						{Kind: key.URI},
					},
					OnMissing: "random",
					Cookie:    AffinityCookie{Name: "ringlb_affinity", TTL: 24 * time.Hour, Secure: false, HTTPOnly: true},
					BodyLimit: 65536,
				},
				Ring:      Ring{PointsPerWeight: 160, LoadFactor: 0, LoadFloor: 8, Placement: "ringlb", SlowStart: 0, OnUnavailable: "remap"},
				Upstreams: []Upstream{{Name: "a", URL: u.URL, Weight: 1, Addr: "127.0.0.1:9001", Protocol: transport.HTTP1, State: state.Ready}},
				Breaker: Breaker{
					ConsecutiveFailures: 5,
					FailureStatuses:     []int{502, 503, 504},
					FailureGRPCStatuses: []int{14},
					OpenTimeout:         5 * time.Second,
					MaxOpenTimeout:      60 * time.Second,
				},
				RetryStatuses: []int{},
				Retries:       1,
				Timeouts:      Timeouts{Dial: 2 * time.Second, ResponseHeader: 30 * time.Second, Read: 60 * time.Second, ClientBody: 60 * time.Second, IdleConn: 90 * time.Second},
				Hold:          Hold{Idle: 0, MaxKeys: 1000000, Cookie: HoldCookie{Name: "", SecretFile: ""}, Share: HoldShare{Prefix: "ringlb:hold:", Timeout: 50 * time.Millisecond}, OnReturn: "stay"},
				Handoff:       Handoff{Window: 5 * time.Minute},
			},
			Health: nil,
		},
	}
}

func TestMinimalConfigGetsDefaults(t *testing.T) {
	got := mustParse(t, up)
	if want := defaults(t); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// The root config.yaml writes out every field and says that every value is
// the default except its four upstreams, its health block (checks are off
// by default), upstream_header, which the demo shows (off by default), and
// hold.idle, which turns hold on (off by default): it must decode to
// exactly that.
func TestRootConfigIsTheDefaults(t *testing.T) {
	got, err := Load(rootConfig)
	if err != nil {
		t.Fatalf("Load(%s): %v", rootConfig, err)
	}
	want := defaults(t)
	want.File = rootConfig
	want.UpstreamHeader = "X-Upstream"
	want.Hold.Idle = 30 * time.Minute
	want.Health = &Health{
		Path:         "/healthz",
		Interval:     2 * time.Second,
		Timeout:      time.Second,
		Rise:         2,
		Fall:         3,
		ExpectStatus: StatusRange{Min: 200, Max: 399},
	}
	want.Upstreams = nil
	for i := 1; i <= 4; i++ {
		u := mustURL(t, fmt.Sprintf("http://127.0.0.1:900%d", i))
		want.Upstreams = append(want.Upstreams, Upstream{Name: fmt.Sprintf("app-%d", i), URL: u.URL, Weight: 1, Addr: u.Addr, Protocol: transport.HTTP1, State: state.Ready})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if s, want := got.Summary(), rootConfig+": ok: 4 upstreams, 640 points, placement ringlb, hold idle 30m0s max_keys 1000000"; s != want {
		t.Errorf("Summary() = %q, want %q", s, want)
	}
}

func TestParseGood(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "explicit values",
			src: `listen: 0.0.0.0:80
admin_listen: "[::1]:9000"
shutdown_timeout: 1m30s
upstream_header: X-Backend
trusted_proxies: [10.1.2.3/8, 192.168.0.1, "::1", "fd00::/8"]
access_log: true
debug_pprof: true
hash:
  key:
    - header: x-user-id
    - ip
    - path
  on_missing: cookie
  cookie: {name: aff, ttl: 1h, secure: true, http_only: false}
  body_limit: 1048576
ring: {points_per_weight: 100, load_factor: 2, load_floor: 3, slow_start: 30s}
upstreams:
  - name: app-1
    url: https://backend.example:8443/
    weight: 2.5
    protocol: h2
  - name: app_2.x:y
    url: http://[::1]:9002
    weight: 0x10
    protocol: h2c
    state: drain
health: {path: "/ready?deep=1", interval: 10s, timeout: 9s, rise: 1, fall: 1, expect_status: 200}
breaker: {consecutive_failures: 0, failure_statuses: [], failure_grpc_statuses: [0, 16], open_timeout: 1s, max_open_timeout: 1s}
retries: 0
timeouts: {dial: 100ms, response_header: 1s, read: 0s, client_body: 5s, idle_conn: 1h}
max_header_bytes: 1024
limits: {upstream_requests: 0, streams_per_connection: 1, send: 0s, body_memory: 0}
hold: {idle: 10m, max_keys: 5, cookie: {name: "", secret_file: ""}}
http2: false
upstream_tls: {server_name: backend.example, insecure_skip_verify: true}
`,
			check: func(t *testing.T, c *Config) {
				want := defaults(t)
				want.Listen, want.AdminListen = "0.0.0.0:80", "[::1]:9000"
				want.ShutdownTimeout = 90 * time.Second
				want.UpstreamHeader = "X-Backend"
				want.TrustedProxies = []netip.Prefix{
					netip.MustParsePrefix("10.0.0.0/8"),
					netip.MustParsePrefix("192.168.0.1/32"),
					netip.MustParsePrefix("::1/128"),
					netip.MustParsePrefix("fd00::/8"),
				}
				want.AccessLog = AccessLog{Format: "text"}
				want.DebugPprof = true
				want.Hash = Hash{
					Key:       []key.Source{{Kind: key.Header, Name: "X-User-Id"}, {Kind: key.IP}, {Kind: key.Path}},
					OnMissing: "cookie",
					Cookie:    AffinityCookie{Name: "aff", TTL: time.Hour, Secure: true, HTTPOnly: false},
					BodyLimit: 1 << 20,
				}
				want.Ring = Ring{PointsPerWeight: 100, LoadFactor: 2, LoadFloor: 3, Placement: "ringlb", SlowStart: 30 * time.Second, OnUnavailable: "remap"}
				want.Upstreams = []Upstream{
					{Name: "app-1", URL: mustURL(t, "https://backend.example:8443/").URL, Weight: 2.5, Addr: "backend.example:8443", Protocol: transport.H2, State: state.Ready},
					{Name: "app_2.x:y", URL: mustURL(t, "http://[::1]:9002").URL, Weight: 16, Addr: "[::1]:9002", Protocol: transport.H2C, State: state.Drain},
				}
				want.Health = &Health{Path: "/ready?deep=1", Interval: 10 * time.Second, Timeout: 9 * time.Second, Rise: 1, Fall: 1, ExpectStatus: StatusRange{Min: 200, Max: 200}}
				want.Breaker = Breaker{ConsecutiveFailures: 0, FailureStatuses: []int{}, FailureGRPCStatuses: []int{0, 16}, OpenTimeout: time.Second, MaxOpenTimeout: time.Second}
				want.HTTP2 = false
				want.UpstreamTLS = UpstreamTLS{ServerName: "backend.example", InsecureSkipVerify: true}
				want.Retries = 0
				want.Timeouts = Timeouts{Dial: 100 * time.Millisecond, ResponseHeader: time.Second, Read: 0, ClientBody: 5 * time.Second, IdleConn: time.Hour}
				want.MaxHeaderBytes = 1024
				want.Hold = Hold{Idle: 10 * time.Minute, MaxKeys: 5, Share: HoldShare{Prefix: "ringlb:hold:", Timeout: 50 * time.Millisecond}, OnReturn: "stay"}
				want.Handoff = Handoff{Window: 5 * time.Minute}
				want.Limits = Limits{UpstreamRequests: 0, StreamsPerConnection: 1, Send: 0, BodyMemory: 0}
				if !reflect.DeepEqual(c, want) {
					t.Errorf("got  %+v\nwant %+v", c, want)
				}
				if got := c.TotalPoints(); got != 250+1600 {
					t.Errorf("TotalPoints() = %d, want 1850", got)
				}
			},
		},
		{
			name: "host, combine and json keys",
			src: `hash:
  key:
    - combine: [host, uri]
    - combine:
        - cookie: session
        - header: x-tenant
    - host
    - json: metadata.session
    - combine: [{json: user}, host]
  body_limit: 4096
` + up,
			check: func(t *testing.T, c *Config) {
				want := []key.Source{
					{Kind: key.Combine, Sources: []key.Source{{Kind: key.Host}, {Kind: key.URI}}},
					{Kind: key.Combine, Sources: []key.Source{{Kind: key.Cookie, Name: "session"}, {Kind: key.Header, Name: "X-Tenant"}}},
					{Kind: key.Host},
					{Kind: key.JSON, Name: "metadata.session"},
					{Kind: key.Combine, Sources: []key.Source{{Kind: key.JSON, Name: "user"}, {Kind: key.Host}}},
				}
				if c.Hash.BodyLimit != 4096 {
					t.Errorf("BodyLimit = %d, want 4096", c.Hash.BodyLimit)
				}
				if !reflect.DeepEqual(c.Hash.Key, want) {
					t.Errorf("Key = %+v, want %+v", c.Hash.Key, want)
				}
			},
		},
		{
			name: "prefix keys",
			src: `hash:
  key:
    - prefix: {bytes: 256}
    - prefix: 4096
    - combine: [{prefix: {bytes: 16}}, {header: x-tenant}]
  body_limit: 4096
` + up,
			check: func(t *testing.T, c *Config) {
				want := []key.Source{
					{Kind: key.Prefix, Bytes: 256},
					{Kind: key.Prefix, Bytes: 4096},
					{Kind: key.Combine, Sources: []key.Source{{Kind: key.Prefix, Bytes: 16}, {Kind: key.Header, Name: "X-Tenant"}}},
				}
				if !reflect.DeepEqual(c.Hash.Key, want) {
					t.Errorf("Key = %+v, want %+v", c.Hash.Key, want)
				}
			},
		},
		{
			name: "nginx placement",
			src: `ring: {placement: nginx, load_factor: 0}
upstreams:
  - {name: a, url: "http://10.0.0.1", weight: 2}
  - {name: b, url: "http://10.0.0.2:80", weight: 1}
  - {name: c, url: "https://10.0.0.1:8443"}
`,
			check: func(t *testing.T, c *Config) {
				if c.Ring.Placement != "nginx" || c.Ring.PointsPerWeight != 160 || c.Ring.LoadFactor != 0 {
					t.Errorf("Ring = %+v", c.Ring)
				}
				// Identities are host[:port] as written, with no default port added.
				var addrs []string
				for _, u := range c.Upstreams {
					addrs = append(addrs, u.Addr)
				}
				if want := []string{"10.0.0.1", "10.0.0.2:80", "10.0.0.1:8443"}; !reflect.DeepEqual(addrs, want) {
					t.Errorf("Addrs = %q, want %q", addrs, want)
				}
				if got := c.Summary(); got != "c.yaml: ok: 3 upstreams, 640 points, placement nginx" {
					t.Errorf("Summary() = %q", got)
				}
			},
		},
		{
			name: "nginx placement with explicit points_per_weight 160",
			src:  "ring: {placement: nginx, points_per_weight: 160}\n" + up,
			check: func(t *testing.T, c *Config) {
				if c.Ring.PointsPerWeight != 160 {
					t.Errorf("PointsPerWeight = %d", c.Ring.PointsPerWeight)
				}
			},
		},
		{
			name: "fail closed",
			src:  "ring: {on_unavailable: fail, load_factor: 0, slow_start: 0s}\n" + up,
			check: func(t *testing.T, c *Config) {
				if c.Ring.OnUnavailable != "fail" || c.Ring.LoadFactor != 0 || c.Ring.SlowStart != 0 {
					t.Errorf("Ring = %+v", c.Ring)
				}
			},
		},
		{
			name: "explicit zeros where zero is valid",
			src:  "shutdown_timeout: 0s\nretries: 0\nring: {load_factor: 0}\nbreaker: {consecutive_failures: 0}\naccess_log: false\n" + up,
			check: func(t *testing.T, c *Config) {
				if c.ShutdownTimeout != 0 || c.Retries != 0 || c.Ring.LoadFactor != 0 || c.Breaker.ConsecutiveFailures != 0 {
					t.Errorf("zeros replaced by defaults: %+v", c)
				}
			},
		},
		{
			name: "retry_statuses",
			src:  "retry_statuses: [502, 503]\n" + up,
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c.RetryStatuses, []int{502, 503}) {
					t.Errorf("RetryStatuses = %v, want [502 503]", c.RetryStatuses)
				}
			},
		},
		{
			name: "empty upstream_header turns it off",
			src:  "upstream_header: \"\"\n" + up,
			check: func(t *testing.T, c *Config) {
				if c.UpstreamHeader != "" {
					t.Errorf("UpstreamHeader = %q, want empty", c.UpstreamHeader)
				}
			},
		},
		{
			name: "empty health block enables checks with defaults",
			src:  "health: {}\n" + up,
			check: func(t *testing.T, c *Config) {
				want := &Health{Path: "/healthz", Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3, ExpectStatus: StatusRange{Min: 200, Max: 399}}
				if !reflect.DeepEqual(c.Health, want) {
					t.Errorf("Health = %+v, want %+v", c.Health, want)
				}
			},
		},
		{
			name: "expect_status forms",
			src:  "health: {expect_status: \"200-299\"}\n" + up,
			check: func(t *testing.T, c *Config) {
				if c.Health.ExpectStatus != (StatusRange{Min: 200, Max: 299}) || c.Health.ExpectStatus.String() != "200-299" {
					t.Errorf("ExpectStatus = %v", c.Health.ExpectStatus)
				}
			},
		},
		{
			name: "ephemeral ports never overlap",
			src:  "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\n" + up,
			check: func(t *testing.T, c *Config) {
				if c.Listen != "127.0.0.1:0" || c.AdminListen != "127.0.0.1:0" {
					t.Errorf("listeners = %q %q", c.Listen, c.AdminListen)
				}
			},
		},
		{
			name:  "same port on different hosts",
			src:   "listen: 127.0.0.1:8080\nadmin_listen: 127.0.0.2:8080\n" + up,
			check: func(t *testing.T, c *Config) {},
		},
		{
			name: "anchors and aliases",
			src: `timeouts: {dial: &t 3s, response_header: *t, idle_conn: *t}
upstreams:
  - {name: a, url: &u http://127.0.0.1:1, weight: &w 3}
  - {name: b, url: http://127.0.0.1:2, weight: *w}
`,
			check: func(t *testing.T, c *Config) {
				if c.Timeouts.ResponseHeader != 3*time.Second || c.Upstreams[1].Weight != 3 {
					t.Errorf("aliases not followed: %+v %+v", c.Timeouts, c.Upstreams)
				}
			},
		},
		{
			name: "discovery defaults",
			src:  "discovery:\n  sources:\n    - srv: _http._tcp.app.example\n    - host: cache.example\n      port: 8080\n",
			check: func(t *testing.T, c *Config) {
				want := &Discovery{
					Resolver: "", Interval: 5 * time.Second, Timeout: 2 * time.Second, RemoveAfter: 5 * time.Minute, Confirm: 3,
					ClusterDomain: "cluster.local",
					Sources: []DiscoverySource{
						{SRV: "_http._tcp.app.example", Scheme: "http", Protocol: "http1", Weight: 1},
						{Host: "cache.example", Port: 8080, Scheme: "http", Protocol: "http1", Weight: 1},
					},
				}
				if !reflect.DeepEqual(c.Discovery, want) {
					t.Errorf("Discovery = %+v, want %+v", c.Discovery, want)
				}
				if len(c.Upstreams) != 0 {
					t.Errorf("Upstreams = %+v, want none", c.Upstreams)
				}
				if got, want := c.Summary(), "c.yaml: ok: 0 upstreams, 0 points, placement ringlb, discovery every 5s from srv _http._tcp.app.example, host cache.example:8080"; got != want {
					t.Errorf("Summary() = %q, want %q", got, want)
				}
				if got := c.Discovery.Sources[1].Name(); got != "cache.example" {
					t.Errorf("Name() = %q", got)
				}
			},
		},
		{
			name: "discovery explicit values beside static upstreams",
			src: `discovery:
  resolver: "[::1]:5353"
  interval: 10s
  timeout: 9s
  remove_after: 0s
  confirm: 1
  sources:
    - {srv: _grpc._tcp.App.Example., scheme: https, protocol: h2, weight: 2.5}
    - {host: 10.0.0.1, port: 9000, protocol: h2c}
upstreams: []
`,
			check: func(t *testing.T, c *Config) {
				want := &Discovery{
					Resolver: "[::1]:5353", Interval: 10 * time.Second, Timeout: 9 * time.Second, RemoveAfter: 0, Confirm: 1,
					ClusterDomain: "cluster.local",
					Sources: []DiscoverySource{
						{SRV: "_grpc._tcp.App.Example.", Scheme: "https", Protocol: "h2", Weight: 2.5},
						{Host: "10.0.0.1", Port: 9000, Scheme: "http", Protocol: "h2c", Weight: 1},
					},
				}
				if !reflect.DeepEqual(c.Discovery, want) {
					t.Errorf("Discovery = %+v, want %+v", c.Discovery, want)
				}
			},
		},
		{
			name: "discovery kubernetes",
			src: `discovery:
  cluster_domain: corp.internal
  sources:
    - kubernetes: {service: app, namespace: prod, port: http}
      weight: 2
    - kubernetes: {service: cache, port: 6379}
`,
			check: func(t *testing.T, c *Config) {
				want := []DiscoverySource{
					{Kubernetes: KubernetesSource{Service: "app", Namespace: "prod", Port: "http"}, Scheme: "http", Protocol: "http1", Weight: 2},
					{Kubernetes: KubernetesSource{Service: "cache", Port: "6379"}, Scheme: "http", Protocol: "http1", Weight: 1},
				}
				if !reflect.DeepEqual(c.Discovery.Sources, want) || c.Discovery.ClusterDomain != "corp.internal" || c.Discovery.Kubeconfig != "" {
					t.Errorf("Discovery = %+v, want sources %+v", c.Discovery, want)
				}
				if got := c.Discovery.Sources[0].Name(); got != "kubernetes:prod/app:http" {
					t.Errorf("Name() = %q", got)
				}
				if got, want := c.Summary(), "c.yaml: ok: 0 upstreams, 0 points, placement ringlb, discovery every 5s from kubernetes:prod/app:http, kubernetes:default/cache:6379"; got != want {
					t.Errorf("Summary() = %q, want %q", got, want)
				}
			},
		},
		{
			name: "no discovery block",
			src:  up,
			check: func(t *testing.T, c *Config) {
				if c.Discovery != nil {
					t.Errorf("Discovery = %+v, want nil", c.Discovery)
				}
			},
		},
		{
			name: "weight giving one point",
			src:  "ring: {points_per_weight: 1}\nupstreams:\n  - {name: a, url: http://h, weight: 0.5}\n",
			check: func(t *testing.T, c *Config) {
				if got := ring.PointsFor(c.Ring.PointsPerWeight, 0.5); got != 1 {
					t.Errorf("Points(0.5) = %d, want 1 (halves round away from zero)", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustParse(t, tt.src))
		})
	}
}

// errorCases map a config to the exact error text Parse("c.yaml", ...)
// must return, one problem per line.
var errorCases = []struct {
	name string
	src  string
	want string
}{
	// The file as a whole.
	{"empty file", "", "c.yaml: empty config"},
	{"only comments", "# nothing here\n\n   \n# still nothing\n", "c.yaml: empty config"},
	{"empty document", "---\n", "c.yaml: empty config"},
	{"null document", "~\n", "c.yaml: empty config"},
	{"malformed YAML", "listen: [1,\nretries: 2\n", "c.yaml:2: invalid YAML: did not find expected ',' or ']'"},
	// yaml.v3 names the line where the enclosing block starts; the error
	// names the bad line.
	{"unclosed flow in a block", "listen: a\nring:\n  points_per_weight: 160\n  load_factor: [1\n  placement: x\nupstreams: []\n",
		"c.yaml:4: invalid YAML: did not find expected ',' or ']'"},
	{"misindented list item field", "upstreams:\n  - name: a\n    url: x\n  - name: b\n   url: y\n",
		"c.yaml:5: invalid YAML: did not find expected '-' indicator"},
	{"list item in a mapping", "listen: a\nhash:\n  on_missing: random\n  - uri\n", "c.yaml:4: invalid YAML: did not find expected key"},
	{"misindented field", "hash:\n  key:\n    - cookie: a\n  on_missing: cookie\n   cookie: x\n",
		"c.yaml:5: invalid YAML: mapping values are not allowed in this context"},
	{"password in a URL", "upstreams:\n  - name: a\n    url: http://bob:hunter2@127.0.0.1:9001\n",
		"c.yaml:3: upstreams[0].url: must not contain user info, got \"http://xxxxx@127.0.0.1:9001\""},
	{"password in a bad URL", "upstreams:\n  - name: a\n    url: \"http://bob:hunter2@127.0.0.1:bad/\"\n",
		"c.yaml:3: upstreams[0].url: must be an absolute http:// or https:// URL, got \"http://xxxxx@127.0.0.1:bad/\": invalid port \":bad\" after host"},
	{"token in a URL", "upstreams:\n  - name: a\n    url: https://ghp_secret@example.com\n",
		"c.yaml:3: upstreams[0].url: must not contain user info, got \"https://xxxxx@example.com\""},
	{"tab after fields", "listen: 1\nretries: 2\n\tbreaker: 3\n", "c.yaml:3: invalid YAML: found a tab character that violates indentation"},
	{"unterminated string", "listen: a\nring:\n  placement: \"x\n  slow_start: 1s\n", "c.yaml:3: invalid YAML: found unexpected end of stream"},
	{"syntax error past the refined size", strings.Repeat("# comment\n", 5001) + "hash:\n  on_missing: random\n  - uri\n",
		"c.yaml: invalid YAML near line 5002: did not find expected key"},
	{"bad indentation", "listen: a\n  retries: 2\n", "c.yaml:2: invalid YAML: mapping values are not allowed in this context"},
	{"tab indentation", "ring:\n\tload_factor: 2\n", "c.yaml:2: invalid YAML: found character that cannot start any token"},
	// yaml.v3 names no line for these; Parse finds it.
	{"control character", "listen: a\nretries: 1\nupstream_header: \"a\x01b\"\n", "c.yaml:3: invalid YAML: control characters are not allowed"},
	{"NUL byte", "listen: a\n\x00\n", "c.yaml:2: invalid YAML: control characters are not allowed"},
	{"invalid UTF-8", "listen: a\n# fine: é\nupstream_header: \xff\n", "c.yaml:3: invalid YAML: invalid leading UTF-8 octet"},
	{"truncated UTF-8", "listen: a\nretries: 1\nupstream_header: a\xc3", "c.yaml:3: invalid YAML: incomplete UTF-8 octet sequence"},
	{"UTF-8 surrogate", "listen: a\nupstream_header: \xed\xa0\x80\n", "c.yaml:2: invalid YAML: invalid Unicode character"},
	{"unknown alias", "listen: a # *nope\n# *nope in a comment is not it: *nopeX\nupstream_header: *nope\n", "c.yaml:3: invalid YAML: unknown anchor 'nope' referenced"},
	{"unknown alias before a colon", "listen: a\n*k: 1\n", "c.yaml:2: invalid YAML: unknown anchor 'k' referenced"},
	{"unknown alias in flow", "hash: {key: [*k, uri]}\n", "c.yaml:1: invalid YAML: unknown anchor 'k' referenced"},
	{"YAML version", "%YAML 9.9\n---\nlisten: a\n", "c.yaml:1: invalid YAML: found incompatible YAML document"},
	{"bad %-escape in a tag on line 1", "!%80", "c.yaml:1: invalid YAML: found an incorrect leading UTF-8 octet"},
	{"error on line 1", "\"", "c.yaml:1: invalid YAML: found unexpected end of stream"},
	{"bad escape", "listen: a\nupstream_header: \"\\q\"\n", "c.yaml:2: invalid YAML: found unknown escape character"},
	{"root is a list", "- listen: a\n", "c.yaml:1: must be a mapping of fields like `listen: 127.0.0.1:8080`, got a list"},
	{"root is a string", "hello\n", "c.yaml:1: must be a mapping of fields like `listen: 127.0.0.1:8080`, got \"hello\""},
	{"two documents", up + "---\n" + up, "c.yaml:4: more than one YAML document; want exactly one"},

	// Unknown and repeated fields.
	{"unknown top-level field", "listn: :80\n" + up, "c.yaml:1: listn: unknown field (did you mean listen?)"},
	{"unknown nested field", "ring:\n  load_facter: 2\n" + up, "c.yaml:2: ring.load_facter: unknown field (did you mean load_factor?)"},
	{"unknown deeply nested field", "hash:\n  cookie:\n    nmae: x\n" + up, "c.yaml:3: hash.cookie.nmae: unknown field (did you mean name?)"},
	{"unknown upstream field", "upstreams:\n  - name: a\n    url: http://h\n    wieght: 2\n", "c.yaml:4: upstreams[0].wieght: unknown field (did you mean weight?)"},
	{"unknown field one letter off", "hash:\n  keys: [uri]\n" + up, "c.yaml:2: hash.keys: unknown field (did you mean key?)"},
	{"unknown field far from any", "upstreams:\n  - name: a\n    url: http://h\n    address: x\n", "c.yaml:4: upstreams[0].address: unknown field"},
	{"odd unknown field name", "\"a b\\n\": 1\n" + up, "c.yaml:1: \"a b\\n\": unknown field"},
	{"repeated field", "retries: 1\nretries: 2\n" + up, "c.yaml:2: retries: repeated field (first at line 1)"},
	{"merge key", "base: &b {dial: 1s}\n" + up, "c.yaml:1: base: unknown field"},
	{"merge key in block", "timeouts:\n  <<: {dial: 1s}\n" + up, "c.yaml:2: timeouts.<<: merge keys are not supported"},

	// Wrong types.
	{"string wanted", "listen: [a]\n" + up, "c.yaml:1: listen: must be a string, got a list"},
	{"null string", "upstream_header:\n" + up, "c.yaml:1: upstream_header: must be a string, got null"},
	{"integer wanted", "retries: two\n" + up, "c.yaml:1: retries: must be an integer, got \"two\""},
	{"integer not float", "retries: 1.5\n" + up, "c.yaml:1: retries: must be an integer, got 1.5"},
	{"number wanted", "upstreams:\n  - {name: a, url: http://h, weight: \"2\"}\n", "c.yaml:2: upstreams[0].weight: must be a number, got \"2\""},
	{"finite number", "ring: {load_factor: .nan}\n" + up, "c.yaml:1: ring.load_factor: must be a finite number, got .nan"},
	{"bool wanted", "access_log: yes\n" + up, "c.yaml:1: access_log: must be true or false, got \"yes\""},
	{"debug_pprof bool", "debug_pprof: 1\n" + up, "c.yaml:1: debug_pprof: must be true or false, got 1"},
	{"mapping wanted", "ring: 5\n" + up, "c.yaml:1: ring: must be a mapping, got 5"},
	{"null block", "health:\n" + up, "c.yaml:1: health: must be a mapping, got null"},
	{"list wanted", "upstreams: {name: a}\n", "c.yaml:1: upstreams: must be a list, got a mapping"},
	{"upstream not a mapping", up + "  - app-2\n", "c.yaml:4: upstreams[1]: must be a mapping, got \"app-2\""},
	{"bare integer duration", "shutdown_timeout: 5\n" + up, "c.yaml:1: shutdown_timeout: must be a duration like 2s, got 5"},
	{"bad duration", "timeouts:\n  dial: soon\n" + up, "c.yaml:2: timeouts.dial: must be a duration like 2s, got \"soon\""},
	{"status list item type", "breaker:\n  failure_statuses: [502, x]\n" + up, "c.yaml:2: breaker.failure_statuses[1]: must be an integer, got \"x\""},

	// Top-level values.
	{"negative shutdown_timeout", "shutdown_timeout: -1s\n" + up, "c.yaml:1: shutdown_timeout: must be >= 0, got -1s"},
	{"retry_statuses below 500", "retry_statuses: [503, 404]\n" + up, "c.yaml:1: retry_statuses[1]: must be an HTTP status 500-599, got 404"},
	{"retry_statuses not a list", "retry_statuses: 503\n" + up, "c.yaml:1: retry_statuses: must be a list, got 503"},
	{"negative shutdown_delay", "shutdown_delay: -5s\n" + up, "c.yaml:1: shutdown_delay: must be >= 0, got -5s"},
	{"bare integer shutdown_delay", "shutdown_delay: 5\n" + up, "c.yaml:1: shutdown_delay: must be a duration like 2s, got 5"},
	{"bad upstream_header", "upstream_header: X Upstream\n" + up, "c.yaml:1: upstream_header: must be a valid header name (or \"\" to turn it off), got \"X Upstream\""},
	{"bad trusted proxy", "trusted_proxies:\n  - 10.0.0.0/8\n  - 10.0.0.0/33\n  - fe80::1%eth0\n" + up,
		"c.yaml:3: trusted_proxies[1]: must be a CIDR like 10.0.0.0/8 or an IP address, got \"10.0.0.0/33\"\n" +
			"c.yaml:4: trusted_proxies[2]: must be a CIDR like 10.0.0.0/8 or an IP address, got \"fe80::1%eth0\""},
	{"negative retries", "retries: -1\n" + up, "c.yaml:1: retries: must be >= 0, got -1"},
	{"zero timeout", "timeouts: {dial: 0s, idle_conn: -1s}\n" + up,
		"c.yaml:1: timeouts.dial: must be > 0, got 0s\nc.yaml:1: timeouts.idle_conn: must be > 0, got -1s"},
	{"negative read timeout", "timeouts: {read: -1s}\n" + up,
		"c.yaml:1: timeouts.read: must be >= 0 (0: no limit), got -1s"},
	{"negative client_body timeout", "timeouts:\n  client_body: -2s\n" + up,
		"c.yaml:2: timeouts.client_body: must be >= 0 (0: no limit), got -2s"},
	{"bare integer client_body timeout", "timeouts: {client_body: 60}\n" + up,
		"c.yaml:1: timeouts.client_body: must be a duration like 2s, got 60"},
	{"small max_header_bytes", "max_header_bytes: 100\n" + up, "c.yaml:1: max_header_bytes: must be >= 1024, got 100"},
	{"bad limits", "limits:\n  upstream_requests: -1\n  streams_per_connection: 0\n  send: -1s\n  body_memory: -1\n" + up,
		"c.yaml:2: limits.upstream_requests: must be >= 0 (0: no limit), got -1\n" +
			"c.yaml:3: limits.streams_per_connection: must be >= 1, got 0\n" +
			"c.yaml:4: limits.send: must be >= 0 (0: no limit), got -1s\n" +
			"c.yaml:5: limits.body_memory: must be >= 0 (0: no limit), got -1"},
	{"body_memory not an integer", "limits: {body_memory: 64MiB}\n" + up,
		"c.yaml:1: limits.body_memory: must be an integer, got \"64MiB\""},
	{"unknown limits field", "limits: {upstream: 5}\n" + up, "c.yaml:1: limits.upstream: unknown field"},

	// Listeners.
	{"listen without port", "listen: localhost\n" + up, "c.yaml:1: listen: must be host:port with a port 0-65535, got \"localhost\""},
	{"listen port out of range", "listen: :70000\n" + up, "c.yaml:1: listen: must be host:port with a port 0-65535, got \":70000\""},
	{"listen named port", "admin_listen: localhost:http\n" + up, "c.yaml:1: admin_listen: must be host:port with a port 0-65535, got \"localhost:http\""},
	{"same listener", "listen: 127.0.0.1:9000\nadmin_listen: 127.0.0.1:9000\n" + up,
		"c.yaml:2: admin_listen: overlaps listen (127.0.0.1:9000); the admin listener needs its own address"},
	{"admin on wildcard of proxy port", "admin_listen: 0.0.0.0:8080\n" + up,
		"c.yaml:1: admin_listen: overlaps listen (127.0.0.1:8080); the admin listener needs its own address"},
	// Names are resolved before comparing: localhost is 127.0.0.1.
	{"localhost and its address", "listen: localhost:8080\nadmin_listen: 127.0.0.1:8080\n" + up,
		"c.yaml:2: admin_listen: overlaps listen (localhost:8080); the admin listener needs its own address"},
	{"names differing in case", "listen: LocalHost:8080\nadmin_listen: localhost:8080\n" + up,
		"c.yaml:2: admin_listen: overlaps listen (LocalHost:8080); the admin listener needs its own address"},
	{"proxy on empty-host wildcard", "listen: :9901\n" + up,
		"c.yaml:1: admin_listen: overlaps listen (:9901); the admin listener needs its own address"},
	{"ipv6 wildcard", "listen: \"[::]:9000\"\nadmin_listen: \"[::1]:9000\"\n" + up,
		"c.yaml:2: admin_listen: overlaps listen ([::]:9000); the admin listener needs its own address"},

	// Hash.
	{"empty key list", "hash:\n  key: []\n" + up, "c.yaml:2: hash.key: must list at least one source"},
	{"combine sources", "hash:\n  key:\n    - combine: []\n    - combine\n    - combine: host\n    - combine: [host, {combine: [uri]}]\n    - combine: [ip, {header: \"X Y\"}, {host: x}]\n    - {host: a}\n" + up,
		"c.yaml:3: hash.key[0].combine: must list at least one source\n" +
			"c.yaml:4: hash.key[1]: combine needs a list of sources, like `combine: [host, uri]`\n" +
			"c.yaml:5: hash.key[2].combine: must be a list, got \"host\"\n" +
			"c.yaml:6: hash.key[3].combine[1].combine: a combine cannot hold another combine; list its sources in the outer one\n" +
			"c.yaml:7: hash.key[4].combine[2].host: takes no name; write `- host`\n" +
			"c.yaml:8: hash.key[5].host: takes no name; write `- host`"},
	{"json sources", "hash:\n  body_limit: 0\n  key:\n    - json\n    - json: \"\"\n    - json: a..b\n    - json: .a\n    - combine: [{json: x.}]\n    - json: [a]\n" + up,
		"c.yaml:2: hash.body_limit: must be >= 1, got 0\n" +
			"c.yaml:4: hash.key[0]: json needs a field path, like `json: user` or `json: metadata.session`\n" +
			"c.yaml:5: hash.key[1].json: must not be empty\n" +
			"c.yaml:6: hash.key[2].json: must be field names joined by dots, like metadata.session, got \"a..b\"\n" +
			"c.yaml:7: hash.key[3].json: must be field names joined by dots, like metadata.session, got \".a\"\n" +
			"c.yaml:8: hash.key[4].combine[0].json: must be field names joined by dots, like metadata.session, got \"x.\"\n" +
			"c.yaml:9: hash.key[5].json: must be a string, got a list"},
	{"prefix sources", "hash:\n  body_limit: 1024\n  key:\n    - prefix\n    - prefix: {bytes: 15}\n    - prefix: 1025\n    - prefix: {bytes: 1024}\n    - prefix: {byts: 64}\n    - prefix: {}\n    - prefix: {bytes: many}\n    - prefix: [64]\n    - combine: [host, {prefix: 8}]\n    - prefix: {bytes: 64, bytes: 65}\n" + up,
		"c.yaml:4: hash.key[0]: prefix needs its length, like `prefix: {bytes: 256}`\n" +
			"c.yaml:5: hash.key[1].prefix.bytes: must be >= 16, got 15\n" +
			"c.yaml:6: hash.key[2].prefix: must be <= hash.body_limit (1024), got 1025: the key is read from the body's first hash.body_limit bytes\n" +
			"c.yaml:8: hash.key[4].prefix.byts: unknown field (did you mean bytes?)\n" +
			"c.yaml:9: hash.key[5].prefix: needs bytes, the length of the key, like `prefix: {bytes: 256}`\n" +
			"c.yaml:10: hash.key[6].prefix.bytes: must be an integer, got \"many\"\n" +
			"c.yaml:11: hash.key[7].prefix: must be `{bytes: N}` or a number of bytes, got a list\n" +
			"c.yaml:12: hash.key[8].combine[1].prefix: must be >= 16, got 8\n" +
			"c.yaml:13: hash.key[9].prefix.bytes: repeated field (first at line 13)"},
	{"key sources", "hash:\n  key:\n    - uri\n    - cookie\n    - {uri: x}\n    - foo: 1\n    - [1]\n    - {cookie: a, header: b}\n    - header: \"\"\n    - header: X Y\n    - query:\n    - 7\n" + up,
		"c.yaml:4: hash.key[1]: cookie needs a name, like `cookie: NAME`\n" +
			"c.yaml:5: hash.key[2].uri: takes no name; write `- uri`\n" +
			"c.yaml:6: hash.key[3]: unknown key source \"foo\"; want uri, path, ip, host, `cookie: NAME`, `header: NAME`, `query: NAME`, `json: PATH`, `prefix: {bytes: N}` or `combine: [SOURCE, ...]`\n" +
			"c.yaml:7: hash.key[4]: must be uri, path, ip, host, `cookie: NAME`, `header: NAME`, `query: NAME`, `json: PATH`, `prefix: {bytes: N}` or `combine: [SOURCE, ...]`, got a list\n" +
			"c.yaml:8: hash.key[5]: must be one source per list item (uri, path, ip, host, `cookie: NAME`, `header: NAME`, `query: NAME`, `json: PATH`, `prefix: {bytes: N}` or `combine: [SOURCE, ...]`), got a mapping with 2 entries\n" +
			"c.yaml:9: hash.key[6].header: must not be empty\n" +
			"c.yaml:10: hash.key[7].header: must be a valid header name, got \"X Y\"\n" +
			"c.yaml:11: hash.key[8].query: must be a string, got null\n" +
			"c.yaml:12: hash.key[9]: unknown key source 7; want uri, path, ip, host, `cookie: NAME`, `header: NAME`, `query: NAME`, `json: PATH`, `prefix: {bytes: N}` or `combine: [SOURCE, ...]`"},
	{"key source misspelt", "hash:\n  key:\n    - cokie: session\n    - pth\n" + up,
		"c.yaml:3: hash.key[0]: unknown key source \"cokie\" (did you mean cookie?); want uri, path, ip, host, `cookie: NAME`, `header: NAME`, `query: NAME`, `json: PATH`, `prefix: {bytes: N}` or `combine: [SOURCE, ...]`\n" +
			"c.yaml:4: hash.key[1]: unknown key source \"pth\" (did you mean path?); want uri, path, ip, host, `cookie: NAME`, `header: NAME`, `query: NAME`, `json: PATH`, `prefix: {bytes: N}` or `combine: [SOURCE, ...]`"},
	{"bad on_missing", "hash: {on_missing: sometimes}\n" + up, "c.yaml:1: hash.on_missing: must be random, reject or cookie, got \"sometimes\""},
	{"bad affinity cookie", "hash:\n  on_missing: cookie\n  cookie:\n    name: \"a;b\"\n    ttl: 0s\n" + up,
		"c.yaml:4: hash.cookie.name: must be a valid cookie name, got \"a;b\"\nc.yaml:5: hash.cookie.ttl: must be > 0, got 0s"},

	// Ring.
	{"load_factor 1", "ring:\n  load_factor: 1\n" + up, "c.yaml:2: ring.load_factor: must be 0 (off) or > 1, got 1"},
	{"load_factor in (0,1)", "ring: {load_factor: 0.5}\n" + up, "c.yaml:1: ring.load_factor: must be 0 (off) or > 1, got 0.5"},
	{"negative load_factor", "ring: {load_factor: -2}\n" + up, "c.yaml:1: ring.load_factor: must be 0 (off) or > 1, got -2"},
	{"explicit zero points_per_weight", "ring: {points_per_weight: 0}\n" + up, "c.yaml:1: ring.points_per_weight: must be > 0, got 0"},
	{"huge points_per_weight", "ring: {points_per_weight: 20000}\n" + up, "c.yaml:1: ring.points_per_weight: must be <= 10000, got 20000"},
	{"bad placement", "ring: {placement: maglev}\n" + up, "c.yaml:1: ring.placement: must be ringlb or nginx, got \"maglev\""},
	{"negative slow_start", "ring: {slow_start: -1s}\n" + up, "c.yaml:1: ring.slow_start: must be >= 0, got -1s"},
	{"bad on_unavailable", "ring: {on_unavailable: retry}\n" + up, "c.yaml:1: ring.on_unavailable: must be remap or fail, got \"retry\""},
	{"fail with bounded loads", "ring:\n  on_unavailable: fail\n  load_factor: 1.25\n" + up,
		"c.yaml:2: ring.on_unavailable: fail requires ring.load_factor: 0 (got 1.25) and ring.slow_start: 0s (got 0s)"},
	{"zero load_floor", "ring:\n  load_factor: 1.25\n  load_floor: 0\n" + up, "c.yaml:3: ring.load_floor: must be >= 1, got 0"},
	{"negative load_floor", "ring: {load_floor: -4}\n" + up, "c.yaml:1: ring.load_floor: must be >= 1, got -4"},
	{"fractional load_floor", "ring: {load_floor: 2.5}\n" + up, "c.yaml:1: ring.load_floor: must be an integer, got 2.5"},
	{"fail with slow start", "ring: {on_unavailable: fail, load_factor: 0, slow_start: 10s}\n" + up,
		"c.yaml:1: ring.on_unavailable: fail requires ring.load_factor: 0 (got 0) and ring.slow_start: 0s (got 10s)"},
	{"nginx with points_per_weight", "ring:\n  placement: nginx\n  points_per_weight: 100\n" + up,
		"c.yaml:3: ring.points_per_weight: must be unset or 160 under placement nginx, got 100"},
	{"nginx with explicit zero points_per_weight", "ring: {placement: nginx, points_per_weight: 0}\n" + up,
		"c.yaml:1: ring.points_per_weight: must be unset or 160 under placement nginx, got 0"},
	{"nginx fractional weight", "ring: {placement: nginx}\nupstreams:\n  - {name: a, url: http://h, weight: 1.5}\n",
		"c.yaml:3: upstreams[0].weight: must be a whole number under placement nginx, got 1.5"},
	{"nginx duplicate identity", "ring: {placement: nginx}\nupstreams:\n  - {name: a, url: http://h:1}\n  - {name: b, url: https://h:1}\n",
		"c.yaml:4: upstreams[1].url: host \"h:1\" is also upstreams[0]'s; placement nginx identifies upstreams by host[:port] as written"},

	// Upstreams.
	{"no upstreams", "listen: 127.0.0.1:8080\n", "c.yaml:1: upstreams: required: list at least one upstream (or a discovery source)"},
	{"empty upstreams", "retries: 1\nupstreams: []\n", "c.yaml:2: upstreams: must list at least one upstream (or a discovery source)"},
	{"missing name and url", "upstreams:\n  - weight: 1\n", "c.yaml:2: upstreams[0].name: required\nc.yaml:2: upstreams[0].url: required"},
	{"empty name", "upstreams:\n  - {name: \"\", url: http://h}\n", "c.yaml:2: upstreams[0].name: must not be empty"},
	{"bad name", "upstreams:\n  - {name: \"app #1\", url: http://h}\n", "c.yaml:2: upstreams[0].name: must use only letters, digits and \"-_.:\", got \"app #1\""},
	{"duplicate name", up + "  - name: b\n    url: http://127.0.0.1:9002\n  - name: a\n    url: http://127.0.0.1:9003\n",
		"c.yaml:6: upstreams[2].name: \"a\" is already the name of upstreams[0]"},
	{"duplicate url", "upstreams:\n  - {name: a, url: \"http://Example.com\"}\n  - {name: b, url: \"http://example.com:80/\"}\n",
		"c.yaml:3: upstreams[1].url: \"http://example.com:80/\" is the same address as upstreams[0].url"},
	{"url without scheme", "upstreams:\n  - {name: a, url: \"127.0.0.1:9001\"}\n",
		"c.yaml:2: upstreams[0].url: \"127.0.0.1:9001\" has no scheme; write http://127.0.0.1:9001 (or https://127.0.0.1:9001)"},
	{"host name without scheme", "upstreams:\n  - {name: a, url: \"app.internal:8080\"}\n",
		"c.yaml:2: upstreams[0].url: \"app.internal:8080\" has no scheme; write http://app.internal:8080 (or https://app.internal:8080)"},
	{"bare host without scheme", "upstreams:\n  - {name: a, url: localhost}\n",
		"c.yaml:2: upstreams[0].url: \"localhost\" has no scheme; write http://localhost (or https://localhost)"},
	{"relative url", "upstreams:\n  - {name: a, url: /app}\n", "c.yaml:2: upstreams[0].url: must be an absolute http:// or https:// URL, got \"/app\""},
	{"ftp url", "upstreams:\n  - {name: a, url: \"ftp://h\"}\n", "c.yaml:2: upstreams[0].url: must be an absolute http:// or https:// URL, got \"ftp://h\""},
	{"url with path", "upstreams:\n  - {name: a, url: \"http://h/api\"}\n",
		"c.yaml:2: upstreams[0].url: must not have a path (requests keep their own path; ringlb proxies to the upstream's root), got \"http://h/api\""},
	{"url with query", "upstreams:\n  - {name: a, url: \"http://h/?a=1\"}\n", "c.yaml:2: upstreams[0].url: must not have a query or fragment, got \"http://h/?a=1\""},
	{"url with fragment", "upstreams:\n  - {name: a, url: \"http://h#x\"}\n", "c.yaml:2: upstreams[0].url: must not have a query or fragment, got \"http://h#x\""},
	{"url with user", "upstreams:\n  - {name: a, url: \"http://u:p@h\"}\n", "c.yaml:2: upstreams[0].url: must not contain user info, got \"http://xxxxx@h\""},
	{"url with bad port", "upstreams:\n  - {name: a, url: \"http://h:70000\"}\n", "c.yaml:2: upstreams[0].url: port must be 1-65535, got \"http://h:70000\""},
	{"url with empty port", "upstreams:\n  - {name: a, url: \"http://h:\"}\n", "c.yaml:2: upstreams[0].url: has an empty port, got \"http://h:\""},
	{"url without host", "upstreams:\n  - {name: a, url: \"http://:80\"}\n", "c.yaml:2: upstreams[0].url: must have a host, got \"http://:80\""},
	{"negative weight", "# line 1\n" + strings.Repeat("\n", 8) + "upstreams:\n  - name: a\n    url: http://h:1\n  - name: b\n    url: http://h:2\n    weight: -2\n",
		"c.yaml:15: upstreams[1].weight: must be > 0, got -2"},
	{"zero weight", "upstreams:\n  - {name: a, url: http://h, weight: 0}\n", "c.yaml:2: upstreams[0].weight: must be > 0, got 0"},
	{"weight giving no points", "upstreams:\n  - {name: a, url: http://h, weight: 0.003}\n",
		"c.yaml:2: upstreams[0].weight: too small: gives round(160 × 0.003) = 0 ring points"},
	{"weight giving too many points", "upstreams:\n  - {name: a, url: http://h, weight: 1e9}\n",
		"c.yaml:2: upstreams[0].weight: too large: gives round(160 × 1e+09) > 1000000 ring points"},

	// Health.
	{"health timeout not below interval", "health:\n  timeout: 3s\n" + up, "c.yaml:2: health.timeout: must be < health.interval (2s), got 3s"},
	{"health zero values", "health:\n  interval: 0s\n  timeout: -1s\n  rise: 0\n  fall: -1\n" + up,
		"c.yaml:2: health.interval: must be > 0, got 0s\n" +
			"c.yaml:3: health.timeout: must be > 0, got -1s\n" +
			"c.yaml:4: health.rise: must be >= 1, got 0\n" +
			"c.yaml:5: health.fall: must be >= 1, got -1"},
	{"health path", "health: {path: healthz}\n" + up, "c.yaml:1: health.path: must start with \"/\", got \"healthz\""},
	{"health path with space", "health: {path: \"/a b\"}\n" + up, "c.yaml:1: health.path: must be a valid request path, got \"/a b\""},
	{"expect_status out of range", "health: {expect_status: 600}\n" + up, "c.yaml:1: health.expect_status: must be within 100-599, got 600"},
	{"expect_status reversed", "health: {expect_status: \"399-200\"}\n" + up, "c.yaml:1: health.expect_status: must be a range MIN-MAX with MIN <= MAX, got 399-200"},
	{"expect_status garbage", "health: {expect_status: 2xx}\n" + up, "c.yaml:1: health.expect_status: must be a status like 200 or a range like \"200-399\", got \"2xx\""},

	// Breaker.
	{"breaker values", "breaker:\n  consecutive_failures: -1\n  failure_statuses: [502, 99, 600]\n  open_timeout: 10s\n  max_open_timeout: 5s\n" + up,
		"c.yaml:2: breaker.consecutive_failures: must be >= 0 (0 turns breakers off), got -1\n" +
			"c.yaml:3: breaker.failure_statuses[1]: must be an HTTP status 100-599, got 99\n" +
			"c.yaml:3: breaker.failure_statuses[2]: must be an HTTP status 100-599, got 600\n" +
			"c.yaml:5: breaker.max_open_timeout: must be >= breaker.open_timeout (10s), got 5s"},
	{"breaker zero open_timeout", "breaker: {open_timeout: 0s}\n" + up, "c.yaml:1: breaker.open_timeout: must be > 0, got 0s"},
	{"grpc statuses", "breaker:\n  failure_grpc_statuses: [14, -1, 17, x]\n" + up,
		"c.yaml:2: breaker.failure_grpc_statuses[1]: must be a gRPC status code 0-16, got -1\n" +
			"c.yaml:2: breaker.failure_grpc_statuses[2]: must be a gRPC status code 0-16, got 17\n" +
			"c.yaml:2: breaker.failure_grpc_statuses[3]: must be an integer, got \"x\""},

	// TLS and HTTP/2 (the files named are checked in TestTLSFiles).
	{"tls without files", "tls: {}\n" + up,
		"c.yaml:1: tls.cert_file: required with tls\nc.yaml:1: tls.key_file: required with tls"},
	{"tls empty files and bad version", "tls:\n  cert_file: \"\"\n  key_file: \"\"\n  min_version: 1.1\n" + up,
		"c.yaml:2: tls.cert_file: must not be empty\n" +
			"c.yaml:3: tls.key_file: must not be empty\n" +
			"c.yaml:4: tls.min_version: must be \"1.2\" or \"1.3\", got 1.1"},
	{"tls version as a number", "tls: {cert_file: \"\", key_file: \"\", min_version: 1.30}\n" + up,
		"c.yaml:1: tls.cert_file: must not be empty\n" +
			"c.yaml:1: tls.key_file: must not be empty\n" +
			"c.yaml:1: tls.min_version: must be \"1.2\" or \"1.3\", got 1.30"},
	{"tls not a mapping", "tls: on\n" + up, "c.yaml:1: tls: must be a mapping, got \"on\""},
	{"h2c with tls", "tls: {cert_file: \"\", key_file: \"\"}\nh2c: true\n" + up,
		"c.yaml:1: tls.cert_file: must not be empty\n" +
			"c.yaml:1: tls.key_file: must not be empty\n" +
			"c.yaml:2: h2c: must be false with tls: cleartext HTTP/2 is for listeners without TLS (over TLS, http2 offers h2 by ALPN)"},
	{"h2c without http2", "http2: false\nh2c: true\n" + up, "c.yaml:2: h2c: must be false with http2: false, which turns HTTP/2 off"},
	{"http2 not a bool", "http2: yes please\n" + up, "c.yaml:1: http2: must be true or false, got \"yes please\""},
	{"protocols", "upstreams:\n  - {name: a, url: \"http://h:1\", protocol: h2}\n  - {name: b, url: \"https://h:2\", protocol: h2c}\n" +
		"  - {name: c, url: \"http://h:3\", protocol: HTTP2}\n  - {name: d, url: \"ftp://h:4\", protocol: h2}\n",
		"c.yaml:2: upstreams[0].protocol: h2 is HTTP/2 over TLS and needs an https:// URL, got \"http://h:1\" (use h2c for cleartext)\n" +
			"c.yaml:3: upstreams[1].protocol: h2c is cleartext HTTP/2 and needs an http:// URL, got \"https://h:2\" (use h2 for https)\n" +
			"c.yaml:4: upstreams[2].protocol: must be http1, h2c or h2, got \"HTTP2\"\n" +
			"c.yaml:5: upstreams[3].url: must be an absolute http:// or https:// URL, got \"ftp://h:4\""},
	{"states", "upstreams:\n  - {name: a, url: \"http://h:1\", state: maint}\n  - {name: b, url: \"http://h:2\", state: draining}\n" +
		"  - {name: c, url: \"http://h:3\", state: Ready}\n  - {name: d, url: \"http://h:4\", state: [drain]}\n",
		"c.yaml:3: upstreams[1].state: must be ready, drain or maint, got \"draining\"\n" +
			"c.yaml:4: upstreams[2].state: must be ready, drain or maint, got \"Ready\"\n" +
			"c.yaml:5: upstreams[3].state: must be a string, got a list"},
	{"upstream_tls", "upstream_tls:\n  server_name: \"bad name\"\n  verify: true\n" + up,
		"c.yaml:2: upstream_tls.server_name: must be a host name or IP address, got \"bad name\"\n" +
			"c.yaml:3: upstream_tls.verify: unknown field"},

	// Discovery.
	{"discovery with nginx placement", "ring: {placement: nginx}\ndiscovery:\n  sources: [{srv: _http._tcp.a}]\n",
		"c.yaml:2: discovery: needs placement ringlb: placement nginx identifies upstreams by the host:port written in the config"},
	{"discovery without sources", "discovery:\n  interval: 5s\n", "c.yaml:1: discovery.sources: must list at least one source (or remove the discovery block)"},
	{"discovery empty sources", "discovery:\n  sources: []\nupstreams: []\n", "c.yaml:2: discovery.sources: must list at least one source (or remove the discovery block)"},
	{"discovery null block", "discovery:\n" + up, "c.yaml:1: discovery: must be a mapping, got null"},
	{"discovery unknown field", "discovery:\n  sources: [{srv: a.b}]\n  ttl: 5s\n", "c.yaml:3: discovery.ttl: unknown field"},
	{"discovery unknown source field", "discovery:\n  sources:\n    - srv: a.b\n      target: x\n", "c.yaml:4: discovery.sources[0].target: unknown field"},
	{"discovery timeout not below interval", "discovery:\n  interval: 2s\n  sources: [{srv: a.b}]\n",
		"c.yaml:1: discovery.timeout: must be < discovery.interval (2s), got 2s"},
	{"discovery bad values", "discovery:\n  resolver: 10.0.0.53\n  interval: 0s\n  timeout: -1s\n  remove_after: -1m\n  confirm: 0\n  sources: [{srv: a.b}]\n",
		"c.yaml:2: discovery.resolver: must be host:port of a DNS server with a port 1-65535 (or \"\" for the system's), got \"10.0.0.53\"\n" +
			"c.yaml:3: discovery.interval: must be > 0, got 0s\n" +
			"c.yaml:4: discovery.timeout: must be > 0, got -1s\n" +
			"c.yaml:5: discovery.remove_after: must be >= 0, got -1m0s\n" +
			"c.yaml:6: discovery.confirm: must be >= 1, got 0"},
	{"discovery resolver port 0", "discovery:\n  resolver: \"127.0.0.1:0\"\n  sources: [{srv: a.b}]\n",
		"c.yaml:2: discovery.resolver: must be host:port of a DNS server with a port 1-65535 (or \"\" for the system's), got \"127.0.0.1:0\""},
	{"discovery confirm type", "discovery:\n  confirm: many\n  sources: [{srv: a.b}]\n", "c.yaml:2: discovery.confirm: must be an integer, got \"many\""},
	{"discovery source shapes", `discovery:
  sources:
    - {srv: _http._tcp.a, host: b}
    - {scheme: http}
    - {host: cache.example}
    - {host: other.example, port: 70000}
    - {srv: _http._tcp.a, port: 80}
    - {srv: "bad name"}
    - {host: "a..b", port: 1}
    - 5
`,
		"c.yaml:3: discovery.sources[0].host: a source has either srv or host, not both\n" +
			"c.yaml:4: discovery.sources[1]: needs srv (a name with SRV records) or host (a name with A/AAAA records), or kubernetes (a Service's EndpointSlices)\n" +
			"c.yaml:5: discovery.sources[2].port: required with host: the port the members listen on\n" +
			"c.yaml:6: discovery.sources[3].port: must be 1-65535, got 70000\n" +
			"c.yaml:7: discovery.sources[4].port: only with host: SRV records carry their own ports\n" +
			"c.yaml:8: discovery.sources[5].srv: must be a DNS name like _http._tcp.app.example, got \"bad name\"\n" +
			"c.yaml:9: discovery.sources[6].host: must be a DNS name or an IP address, got \"a..b\"\n" +
			"c.yaml:10: discovery.sources[7]: must be a mapping, got 5"},
	{"discovery kubernetes shapes", `discovery:
  kubeconfig: /nonexistent/kubeconfig
  cluster_domain: "bad domain"
  sources:
    - kubernetes: {service: app, port: http}
      srv: _http._tcp.a
    - kubernetes: {port: http}
    - kubernetes: {service: App_1, namespace: "-x", port: 8080}
    - kubernetes: {service: app, port: 70000}
    - kubernetes: {service: app, port: very-long-port-name}
    - kubernetes: {service: app}
    - kubernetes: {service: app, port: http, extra: 1}
    - kubernetes: {service: web, port: "1"}
      port: 80
    - kubernetes: {service: db, namespace: default, port: pg}
    - kubernetes: {service: db, port: pg}
`,
		"c.yaml:2: discovery.kubeconfig: \"/nonexistent/kubeconfig\": cannot load: stat /nonexistent/kubeconfig: no such file or directory\n" +
			"c.yaml:3: discovery.cluster_domain: must be a DNS name like cluster.local, got \"bad domain\"\n" +
			"c.yaml:5: discovery.sources[0].kubernetes: a source has one of srv, host and kubernetes, not several\n" +
			"c.yaml:7: discovery.sources[1].kubernetes.service: required: the name of the Service whose EndpointSlices list the members\n" +
			"c.yaml:8: discovery.sources[2].kubernetes.service: must be a Service name (lowercase letters, digits and '-', starting with a letter, at most 63), got \"App_1\"\n" +
			"c.yaml:8: discovery.sources[2].kubernetes.namespace: must be a namespace name (lowercase letters, digits and '-', at most 63), got \"-x\"\n" +
			"c.yaml:9: discovery.sources[3].kubernetes.port: must be a port number 1-65535 or a port name (lowercase letters, digits and '-', at most 15, with a letter), got \"70000\"\n" +
			"c.yaml:10: discovery.sources[4].kubernetes.port: must be a port number 1-65535 or a port name (lowercase letters, digits and '-', at most 15, with a letter), got \"very-long-port-name\"\n" +
			"c.yaml:11: discovery.sources[5].kubernetes.port: required: the EndpointSlice port, by name (http) or number (8080)\n" +
			"c.yaml:12: discovery.sources[6].kubernetes.extra: unknown field\n" +
			"c.yaml:14: discovery.sources[7].port: only with host: a kubernetes source names its port in kubernetes.port\n" +
			"c.yaml:16: discovery.sources[9]: \"kubernetes:default/db:pg\" is already discovery.sources[8]; sources are named by their srv or host value, which must be unique"},
	{"discovery duplicate source", "discovery:\n  sources:\n    - {host: a.example, port: 1}\n    - {host: a.example, port: 2}\n",
		"c.yaml:4: discovery.sources[1]: \"a.example\" is already discovery.sources[0]; sources are named by their srv or host value, which must be unique"},
	{"discovery scheme, protocol and weight", `discovery:
  sources:
    - {srv: a.example, scheme: ftp}
    - {srv: b.example, protocol: h3}
    - {srv: c.example, protocol: h2}
    - {srv: d.example, scheme: https, protocol: h2c}
    - {srv: e.example, weight: 0}
    - {srv: f.example, weight: 0.001}
`,
		"c.yaml:3: discovery.sources[0].scheme: must be http or https, got \"ftp\"\n" +
			"c.yaml:4: discovery.sources[1].protocol: must be http1, h2c or h2, got \"h3\"\n" +
			"c.yaml:5: discovery.sources[2].protocol: h2 needs scheme https; for cleartext HTTP/2 use h2c\n" +
			"c.yaml:6: discovery.sources[3].protocol: h2c is cleartext HTTP/2 and needs scheme http; with https use h2\n" +
			"c.yaml:7: discovery.sources[4].weight: must be > 0, got 0\n" +
			"c.yaml:8: discovery.sources[5].weight: too small: gives round(160 × 0.001) = 0 ring points"},

	// Several problems at once, reported in line order.
	{"many problems", `listen: localhost
shutdown_timeout: 5
ring:
  load_factor: 0.9
  colour: blue
hash:
  key: []
upstreams:
  - name: a
    url: ftp://h
  - name: a
    url: http://h
    weight: -2
health:
  timeout: 5s
extra: true
`,
		`c.yaml:1: listen: must be host:port with a port 0-65535, got "localhost"
c.yaml:2: shutdown_timeout: must be a duration like 2s, got 5
c.yaml:4: ring.load_factor: must be 0 (off) or > 1, got 0.9
c.yaml:5: ring.colour: unknown field
c.yaml:7: hash.key: must list at least one source
c.yaml:10: upstreams[0].url: must be an absolute http:// or https:// URL, got "ftp://h"
c.yaml:11: upstreams[1].name: "a" is already the name of upstreams[0]
c.yaml:13: upstreams[1].weight: must be > 0, got -2
c.yaml:15: health.timeout: must be < health.interval (2s), got 5s
c.yaml:16: extra: unknown field`},
	// A field of the wrong type is reported once, not again by checks that
	// depend on it.
	// Hold. Secret files that exist are tested in TestHoldSecretFile.
	{"hold idle negative", "hold: {idle: -1s}\n" + up, "c.yaml:1: hold.idle: must be >= 0 (0s turns hold off), got -1s"},
	{"hold max_keys zero", "hold:\n  max_keys: 0\n" + up, "c.yaml:2: hold.max_keys: must be >= 1, got 0"},
	{"hold on_return unknown", "hold:\n  idle: 1m\n  on_return: sometimes\n" + up, "c.yaml:3: hold.on_return: must be stay or home, got \"sometimes\""},
	{"handoff header not a name", "handoff:\n  header: \"Bad Name\"\n" + up, "c.yaml:2: handoff.header: must be a valid header name (or \"\" to turn handoff off), got \"Bad Name\""},
	{"handoff header x-forwarded", "handoff:\n  header: x-forwarded-for\n" + up, "c.yaml:2: handoff.header: \"x-forwarded-for\" is a header ringlb sets itself (X-Forwarded-*); choose another name, e.g. Ringlb-Handoff"},
	{"handoff header request id", "handoff:\n  header: X-Request-ID\n" + up, "c.yaml:2: handoff.header: \"X-Request-ID\" is request_id_header, which ringlb sets itself; choose another name, e.g. Ringlb-Handoff"},
	{"handoff header cdn-loop", "handoff:\n  header: CDN-Loop\n" + up, "c.yaml:2: handoff.header: \"CDN-Loop\" is a header ringlb sets or removes itself; choose another name, e.g. Ringlb-Handoff"},
	{"handoff window zero", "handoff:\n  header: Ringlb-Handoff\n  window: 0s\n" + up, "c.yaml:3: handoff.window: must be > 0, got 0s"},
	{"handoff window negative", "handoff:\n  window: -1m\n" + up, "c.yaml:2: handoff.window: must be > 0, got -1m0s"},
	{"hold idle not a duration", "hold: {idle: 10}\n" + up, "c.yaml:1: hold.idle: must be a duration like 2s, got 10"},
	{"hold unknown field", "hold:\n  cookie:\n    secret: x\n" + up, "c.yaml:3: hold.cookie.secret: unknown field"},
	{"hold cookie name invalid", "hold:\n  cookie:\n    name: a b\n    secret_file: /nonexistent/s\n" + up,
		"c.yaml:3: hold.cookie.name: must be a valid cookie name (or \"\" for no cookie), got \"a b\"\n" +
			"c.yaml:4: hold.cookie.secret_file: \"/nonexistent/s\": cannot read: no such file or directory"},
	{"hold cookie without secret", "hold:\n  cookie: {name: held}\n" + up, "c.yaml:2: hold.cookie.secret_file: required when hold.cookie.name is set"},
	{"hold secret without cookie", "hold:\n  cookie:\n    secret_file: s.txt\n" + up,
		"c.yaml:3: hold.cookie.secret_file: is set but hold.cookie.name is empty (no cookie); set a name or remove secret_file"},
	{"hold cookie is a key cookie", "hash: {key: [uri, cookie: sid]}\nhold:\n  cookie: {name: sid, secret_file: /nonexistent/s}\n" + up,
		"c.yaml:3: hold.cookie.name: \"sid\" is also the cookie hash.key[1] reads; the hold cookie needs a name of its own\n" +
			"c.yaml:3: hold.cookie.secret_file: \"/nonexistent/s\": cannot read: no such file or directory"},
	{"hold cookie is the affinity cookie", "hash: {on_missing: cookie}\nhold:\n  cookie:\n    name: ringlb_affinity\n    secret_file: /nonexistent/s\n" + up,
		"c.yaml:4: hold.cookie.name: \"ringlb_affinity\" is also hash.cookie.name; the hold cookie needs a name of its own\n" +
			"c.yaml:5: hold.cookie.secret_file: \"/nonexistent/s\": cannot read: no such file or directory"},

	// hold.share. A password file that exists is tested in TestHoldSharePasswordFile.
	{"hold share without hold", "hold:\n  share: {redis: redis://127.0.0.1:6379}\n" + up, "c.yaml:2: hold.share.redis: needs hold on (hold.idle > 0)"},
	{"hold share bad scheme", "hold:\n  idle: 1m\n  share: {redis: http://127.0.0.1:6379}\n" + up,
		"c.yaml:3: hold.share.redis: want redis://[user@]host:port[/db] or rediss://...: scheme must be redis or rediss, got \"http\""},
	{"hold share password in url", "hold:\n  idle: 1m\n  share:\n    redis: redis://u:pw@127.0.0.1:6379\n" + up,
		"c.yaml:4: hold.share.redis: holds a password; put it in hold.share.password_file instead"},
	{"hold share timeout", "hold:\n  idle: 1m\n  share:\n    redis: redis://127.0.0.1:6379\n    timeout: 0s\n" + up,
		"c.yaml:5: hold.share.timeout: must be > 0, got 0s"},
	{"hold share password file missing", "hold:\n  idle: 1m\n  share:\n    redis: redis://127.0.0.1:6379\n    password_file: /nonexistent/pw\n" + up,
		"c.yaml:5: hold.share.password_file: \"/nonexistent/pw\": cannot read: no such file or directory"},
	{"hold share password file without redis", "hold:\n  idle: 1m\n  share:\n    password_file: pw\n" + up,
		"c.yaml:4: hold.share.password_file: is set but hold.share.redis is empty (no sharing); set redis or remove password_file"},
	{"hold share unknown field", "hold:\n  share:\n    url: redis://x\n" + up, "c.yaml:3: hold.share.url: unknown field"},

	{"no cascade from a type error", "health: {interval: 5, timeout: 3s}\nring: {points_per_weight: x}\nupstreams:\n  - {name: a, url: http://h, weight: 0.0001}\n",
		"c.yaml:1: health.interval: must be a duration like 2s, got 5\nc.yaml:2: ring.points_per_weight: must be an integer, got \"x\""},
}

func TestParseErrors(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("c.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want error:\n%s", c, tt.want)
			}
			if c != nil {
				t.Errorf("Parse returned a config with its error")
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error:\ngot:\n%s\nwant:\n%s", got, tt.want)
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) != strings.Count(tt.want, "\n")+1 {
				t.Errorf("errors.As(Errors) = %v, %d problems", errs, len(errs))
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(dir, "nope.yaml")
		_, err := Load(p)
		if err == nil || err.Error() != p+": cannot read: no such file or directory" {
			t.Fatalf("err = %v", err)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("errors.Is(err, fs.ErrNotExist) = false")
		}
	})
	t.Run("directory", func(t *testing.T) {
		if _, err := Load(dir); err == nil || !strings.HasPrefix(err.Error(), dir+": cannot read: ") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("empty file", func(t *testing.T) {
		p := write("empty.yaml", "")
		if _, err := Load(p); err == nil || err.Error() != p+": empty config" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("comments only", func(t *testing.T) {
		p := write("comments.yaml", "# listen: :80\n\n")
		if _, err := Load(p); err == nil || err.Error() != p+": empty config" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("errors name the path as given", func(t *testing.T) {
		p := write("bad.yaml", up+"    weight: -2\n")
		if _, err := Load(p); err == nil || err.Error() != p+":4: upstreams[0].weight: must be > 0, got -2" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("good file", func(t *testing.T) {
		p := write("good.yaml", up)
		c, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if c.File != p {
			t.Errorf("File = %q, want %q", c.File, p)
		}
	})
}

func TestErrorsForAdmin(t *testing.T) {
	_, err := Parse("c.yaml", []byte("retries: -1\nbogus: 1\n"+up))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("errors.As(%v, *Errors) = false", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "retries" || fe.Line != 1 {
		t.Errorf("errors.As(*FieldError) = %+v", fe)
	}
	b, jerr := json.Marshal(errs)
	if jerr != nil {
		t.Fatal(jerr)
	}
	want := `[{"file":"c.yaml","line":1,"field":"retries","message":"must be \u003e= 0, got -1"},` +
		`{"file":"c.yaml","line":2,"field":"bogus","message":"unknown field"}]`
	if string(b) != want {
		t.Errorf("JSON:\ngot  %s\nwant %s", b, want)
	}
}

// Defaults apply to absent fields only: an explicit invalid zero is
// reported, never replaced.
func TestExplicitZeroIsNotAbsent(t *testing.T) {
	for _, src := range []string{
		"ring: {points_per_weight: 0}\n",
		"health: {interval: 0s}\n",
		"health: {rise: 0}\n",
		"timeouts: {dial: 0s}\n",
		"max_header_bytes: 0\n",
		"hash: {cookie: {ttl: 0s}}\n",
		"hash: {cookie: {name: \"\"}}\n",
		"hash: {on_missing: \"\"}\n",
		"ring: {placement: \"\"}\n",
		"breaker: {open_timeout: 0s}\n",
		"listen: \"\"\n",
		"hold: {max_keys: 0}\n",
		"tls: {cert_file: \"\", key_file: k}\n",
		"upstreams:\n  - {name: a, url: http://h, weight: 0}\n",
		"discovery: {confirm: 0, sources: [{srv: a.b}]}\n",
		"discovery: {interval: 0s, sources: [{srv: a.b}]}\n",
		"discovery: {sources: [{srv: a.b, weight: 0}]}\n",
		"discovery: {sources: [{srv: a.b, scheme: \"\"}]}\n",
	} {
		if !strings.HasPrefix(src, "upstreams") {
			src += up
		}
		if _, err := Parse("c.yaml", []byte(src)); err == nil {
			t.Errorf("Parse(%q) succeeded; an explicit zero must not get the default", src)
		}
	}
}

// errLine is the shape of every line of a Parse error.
var errLine = regexp.MustCompile(`^f\.yaml(:[1-9][0-9]*)?: \S`)

func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(rootConfig); err == nil {
		f.Add(data)
	}
	f.Add([]byte(up))
	for _, tt := range errorCases {
		f.Add([]byte(tt.src))
	}
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("hash: {key: [&k {cookie: x}, *k]}\n" + up))
	f.Add([]byte("? [a]\n: 1\n"))
	f.Add([]byte("upstreams: !!binary aGVsbG8=\n"))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data)
		if err == nil {
			checkInvariants(t, c)
			return
		}
		if c != nil {
			t.Fatalf("config returned with error %v", err)
		}
		var errs Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("error %T %v is not a non-empty Errors", err, err)
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(errs) {
			t.Fatalf("%d problems printed on %d lines:\n%s", len(errs), len(lines), err)
		}
		for i, l := range lines {
			if !errLine.MatchString(l) {
				t.Fatalf("badly formed error line %q", l)
			}
			if e := errs[i]; e.Line > 0 && !strings.HasPrefix(l, fmt.Sprintf("f.yaml:%d: ", e.Line)) {
				t.Fatalf("line %q does not start with its line number %d", l, e.Line)
			}
			// Only a problem with the whole file may lack a line: every
			// problem with a field, and every YAML syntax error but
			// yaml.v3's alias bomb guard, names one (a syntax error whose
			// line could not be pinned down says "near line N").
			if e := errs[i]; e.Line == 0 && (e.Field != "" || (e.Msg != "empty config" && e.Msg != "invalid YAML: document contains excessive aliasing" &&
				!strings.HasPrefix(e.Msg, "invalid YAML near line "))) {
				t.Fatalf("problem %q names no line", l)
			}
		}
	})
}

// checkInvariants checks what users of a successfully parsed Config rely on.
func checkInvariants(t *testing.T, c *Config) {
	t.Helper()
	if len(c.Upstreams) == 0 && (c.Discovery == nil || len(c.Discovery.Sources) == 0) {
		t.Fatal("no upstreams and no discovery source")
	}
	if disc := c.Discovery; disc != nil {
		if disc.Timeout <= 0 || disc.Timeout >= disc.Interval || disc.Confirm < 1 || disc.RemoveAfter < 0 || c.Ring.Placement != "ringlb" {
			t.Fatalf("bad discovery %+v", disc)
		}
		for _, s := range disc.Sources {
			if (s.SRV == "") == (s.Host == "") || (s.Host != "" && (s.Port < 1 || s.Port > 65535)) || ring.PointsFor(c.Ring.PointsPerWeight, s.Weight) < 1 ||
				(s.Scheme != "http" && s.Scheme != "https") ||
				!(s.Protocol == "http1" || s.Protocol == "h2c" && s.Scheme == "http" || s.Protocol == "h2" && s.Scheme == "https") {
				t.Fatalf("bad source %+v", s)
			}
		}
	}
	if len(c.Hash.Key) == 0 {
		t.Fatal("no key sources")
	}
	for _, k := range c.Hash.Key {
		if k.Kind == "" {
			t.Fatalf("zero key source in %+v", c.Hash.Key)
		}
	}
	for _, u := range c.Upstreams {
		if u.URL == nil || u.Addr != u.URL.Host || (u.URL.Scheme != "http" && u.URL.Scheme != "https") {
			t.Fatalf("bad upstream %+v", u)
		}
		if p := ring.PointsFor(c.Ring.PointsPerWeight, u.Weight); p < 1 || math.IsNaN(u.Weight) {
			t.Fatalf("upstream %s has %d points", u.Name, p)
		}
	}
	if c.Ring.LoadFactor != 0 && c.Ring.LoadFactor <= 1 {
		t.Fatalf("load factor %v", c.Ring.LoadFactor)
	}
	if h := c.Health; h != nil && (h.Timeout >= h.Interval || h.Timeout <= 0 || h.Rise < 1 || h.Fall < 1) {
		t.Fatalf("bad health %+v", h)
	}
	if c.Breaker.MaxOpenTimeout < c.Breaker.OpenTimeout || c.Breaker.OpenTimeout <= 0 {
		t.Fatalf("bad breaker %+v", c.Breaker)
	}
	if h := c.Hold; h.Idle < 0 || h.MaxKeys < 1 || (h.Cookie.Name != "") != (len(h.Cookie.Secrets) > 0) {
		t.Fatalf("bad hold %+v", h)
	}
}

// The hold cookie's secret file: read when the config is, relative to the
// config file's directory; one secret per line, blank lines and surrounding
// blanks ignored; every secret at least 32 bytes; never quoted in errors.
func TestHoldSharePasswordFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte("  s3cret \r\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("hold:\n  idle: 5m\n  share:\n    redis: rediss://ringlb@cache.example:6380/2\n    password_file: pw\n    prefix: \"fleet-a:\"\n    timeout: 20ms\n"+up), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := HoldShare{Redis: "rediss://ringlb@cache.example:6380/2", PasswordFile: "pw", Password: "s3cret", Prefix: "fleet-a:", Timeout: 20 * time.Millisecond}
	if c.Hold.Share != want {
		t.Errorf("Share = %+v, want %+v", c.Hold.Share, want)
	}
	if s := c.Summary(); !strings.Contains(s, "shared through") || strings.Contains(s, "s3cret") {
		t.Errorf("Summary = %q", s)
	}
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || err.Error() != p+`:5: hold.share.password_file: "pw": holds no password on its first line` {
		t.Errorf("empty password file: %v", err)
	}
}

// The kubeconfig is read and parsed as serve reads it, relative to the
// config file, and no API server is asked (the one named is not there).
func TestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("c.yaml", "discovery:\n  kubeconfig: kube.yaml\n  sources:\n    - kubernetes: {service: app, port: http}\n")
	write("kube.yaml", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.1:6443"}}]
users: [{name: u, user: {token: secret}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ignored}}]
current-context: x
`)
	c, err := Load(filepath.Join(dir, "c.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "kube.yaml"); c.Discovery.Kubeconfig != want {
		t.Errorf("Kubeconfig = %q, want %q", c.Discovery.Kubeconfig, want)
	}
	// With a kubeconfig the default namespace is "default", whatever the
	// kubeconfig's context says.
	if got := kubeName(c.Discovery.Sources[0], c.Discovery.Kubeconfig); got != "kubernetes:default/app:http" {
		t.Errorf("source %q", got)
	}
	write("kube.yaml", "current-context: nowhere\n")
	_, err = Load(filepath.Join(dir, "c.yaml"))
	if err == nil || !strings.Contains(err.Error(), "c.yaml:2: discovery.kubeconfig: ") || !strings.Contains(err.Error(), "cannot load: ") {
		t.Errorf("bad kubeconfig: got %v", err)
	}
}

// TestHashSaltFile: hash.salt_file is read beside the config, its
// surrounding blanks and line ends removed; a file that cannot be read or
// holds less than 16 bytes is an error naming the field and its line (and
// never quoting the salt); with pools each pool has its own.
func TestHashSaltFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := func(saltFile string) string {
		p := filepath.Join(dir, "c.yaml")
		write("c.yaml", "hash:\n  key: [ip]\n  salt_file: "+saltFile+"\n"+up)
		return p
	}
	for _, tt := range []struct{ name, data, want string }{
		{"exactly 16 bytes", "0123456789abcdef", "0123456789abcdef"},
		{"trailing newline", "0123456789abcdef\n", "0123456789abcdef"},
		{"blanks around, CRLF", "  \tsalt-of-the-fleet-2026\r\n\n", "salt-of-the-fleet-2026"},
		{"binary, line ends inside", "\x00\x01\n\xff0123456789abcdef", "\x00\x01\n\xff0123456789abcdef"},
	} {
		write("salt", tt.data)
		c, err := Load(config("salt"))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if string(c.Hash.Salt) != tt.want || c.Hash.SaltFile != "salt" {
			t.Errorf("%s: Salt %q, SaltFile %q; want %q", tt.name, c.Hash.Salt, c.Hash.SaltFile, tt.want)
		}
	}
	for _, tt := range []struct{ name, data, want string }{
		{"empty", "", `"salt": holds a salt of 0 bytes, want at least 16 (e.g. head -c 32 /dev/urandom | base64 > FILE)`},
		{"short", "short-salt-15b\n\n", `"salt": holds a salt of 14 bytes, want at least 16 (e.g. head -c 32 /dev/urandom | base64 > FILE)`},
		{"too large", strings.Repeat("s", 70000), `"salt": larger than 64 KiB; want one salt of at least 16 bytes`},
	} {
		write("salt", tt.data)
		p := config("salt")
		_, err := Load(p)
		if want := p + ":3: hash.salt_file: " + tt.want; err == nil || err.Error() != want {
			t.Errorf("%s: err = %v\nwant %s", tt.name, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "short-salt") {
			t.Errorf("%s: the error quotes the salt: %v", tt.name, err)
		}
	}
	if p := config("nope"); true {
		if _, err := Load(p); err == nil || err.Error() != p+`:3: hash.salt_file: "nope": cannot read: no such file or directory` {
			t.Errorf("missing: err = %v", err)
		}
	}
	if c := mustParse(t, "hash: {key: [ip]}\n"+up); c.Hash.Salt != nil {
		t.Errorf("no salt_file: Salt %q", c.Hash.Salt)
	}

	// Per pool: the field is the pool's.
	write("salt-a", "salt-of-pool-a-0123")
	p := filepath.Join(dir, "pools.yaml")
	write("pools.yaml", "pools:\n  a:\n    hash: {key: [ip], salt_file: salt-a}\n    upstreams: [{name: x, url: http://127.0.0.1:1}]\n"+
		"  b:\n    hash:\n      key: [ip]\n      salt_file: salt-b\n    upstreams: [{name: x, url: http://127.0.0.1:2}]\nroutes: [{path_prefix: /b, pool: b}, {pool: a}]\n")
	if _, err := Load(p); err == nil || err.Error() != p+`:8: pools.b.hash.salt_file: "salt-b": cannot read: no such file or directory` {
		t.Errorf("pools: err = %v", err)
	}
	write("salt-b", "salt-of-pool-b-0123")
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Pools[0].Hash.Salt) != "salt-of-pool-a-0123" || string(c.Pools[1].Hash.Salt) != "salt-of-pool-b-0123" {
		t.Errorf("pools' salts %q, %q", c.Pools[0].Hash.Salt, c.Pools[1].Hash.Salt)
	}
}

func TestHoldSecretFile(t *testing.T) {
	dir := t.TempDir()
	s1 := strings.Repeat("a", 32)
	s2 := "0123456789abcdef0123456789abcdef-second"
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := func(secretFile string) string {
		p := filepath.Join(dir, "c.yaml")
		write("c.yaml", "hold:\n  idle: 5m\n  cookie:\n    name: ringlb_hold\n    secret_file: "+secretFile+"\n"+up)
		return p
	}

	good := []struct {
		name, data string
		want       []string
	}{
		{"one secret, no newline", s1, []string{s1}},
		{"trailing newline", s1 + "\n", []string{s1}},
		{"two secrets, CRLF and blank lines", "\n" + s1 + "\r\n\r\n  " + s2 + "\t\n\n", []string{s1, s2}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			write("secret", tt.data)
			c, err := Load(config("secret")) // relative: beside c.yaml, not in the working directory
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range c.Hold.Cookie.Secrets {
				got = append(got, string(s))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Secrets = %q, want %q", got, tt.want)
			}
			if c.Hold.Cookie.SecretFile != "secret" || c.Hold.Cookie.Name != "ringlb_hold" || c.Hold.Idle != 5*time.Minute || !c.Hold.On() {
				t.Errorf("Hold = %+v", c.Hold)
			}
		})
	}

	bad := []struct {
		name, data, want string
	}{
		{"empty", "", `"secret": holds no secret; want one per line, each at least 32 bytes`},
		{"blank lines only", "\n  \n\r\n", `"secret": holds no secret; want one per line, each at least 32 bytes`},
		{"short secret", "tooshort-secret-value\n", `"secret": line 1: secret is 21 bytes, want at least 32`},
		{"second secret short", s1 + "\n\n" + s1[:31] + "\n", `"secret": line 3: secret is 31 bytes, want at least 32`},
		{"too large", strings.Repeat(s1+"\n", 3000), `"secret": larger than 64 KiB; want one secret per line`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			write("secret", tt.data)
			p := config("secret")
			_, err := Load(p)
			want := p + ":5: hold.cookie.secret_file: " + tt.want
			if err == nil || err.Error() != want {
				t.Fatalf("err = %v\nwant %s", err, want)
			}
			if strings.Contains(err.Error(), "tooshort") || strings.Contains(err.Error(), s1) {
				t.Errorf("error quotes the secret: %v", err)
			}
		})
	}

	t.Run("missing", func(t *testing.T) {
		p := config("nope")
		if _, err := Load(p); err == nil || err.Error() != p+`:5: hold.cookie.secret_file: "nope": cannot read: no such file or directory` {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a directory", func(t *testing.T) {
		p := config(dir)
		if _, err := Load(p); err == nil || !strings.HasPrefix(err.Error(), p+`:5: hold.cookie.secret_file: "`+short(dir)+`": cannot read: `) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("absolute path", func(t *testing.T) {
		write("abs", s2)
		c, err := Load(config(filepath.Join(dir, "abs")))
		if err != nil || len(c.Hold.Cookie.Secrets) != 1 || string(c.Hold.Cookie.Secrets[0]) != s2 {
			t.Fatalf("Load: %v, %+v", err, c)
		}
	})
	t.Run("no cookie reads no file", func(t *testing.T) {
		c := mustParse(t, "hold: {idle: 1s}\n"+up)
		if c.Hold.Cookie.Secrets != nil || !c.Hold.On() {
			t.Errorf("Hold = %+v", c.Hold)
		}
	})
}

// LoopsBack flags an upstream that is ringlb's own listener, and nothing
// that could be another machine or another port.
func TestLoopsBack(t *testing.T) {
	for _, c := range []struct {
		listen, url string
		want        bool
	}{
		{"127.0.0.1:8080", "http://127.0.0.1:8080", true},
		{"127.0.0.1:8080", "https://127.0.0.1:8080/x", true},
		{"localhost:8080", "http://127.0.0.1:8080", true},
		{"LOCALHOST:8080", "http://localhost:8080", true},
		{":8080", "http://127.0.0.2:8080", true},
		{"0.0.0.0:8080", "http://[::1]:8080", true},
		{"[::]:443", "https://localhost", true},
		{"127.0.0.1:8080", "http://127.0.0.1:8081", false},
		{"127.0.0.1:8080", "http://127.0.0.2:8080", false},
		{"0.0.0.0:8080", "http://10.0.0.5:8080", false},
		{":8080", "http://app.internal:8080", false},
		{"127.0.0.1:80", "https://127.0.0.1", false},
		{"127.0.0.1:0", "http://127.0.0.1:0", false},
		{"10.0.0.5:8080", "http://app.internal:8080", false},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := LoopsBack(c.listen, u); got != c.want {
			t.Errorf("listen %s, upstream %s: loops back %v, want %v", c.listen, c.url, got, c.want)
		}
	}
}
