package discovery

import (
	"context"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/dnstest"

	"github.com/miekg/dns"
)

func srvSource(name string) Source {
	return Source{SRV: name, Scheme: "http", Protocol: "http1", Weight: 1}
}

func hostSource(name string, port int) Source {
	return Source{Host: name, Port: port, Scheme: "http", Protocol: "http1", Weight: 1}
}

// recs builds an answer from "name=addr" pairs ("name" alone: addr = name).
func recs(pairs ...string) []record {
	var out []record
	for _, p := range pairs {
		n, a, ok := strings.Cut(p, "=")
		if !ok {
			a = n
		}
		out = append(out, record{name: n, addr: a})
	}
	return out
}

// Answers, over real DNS: identity, address choice, duplicates, and what
// counts as an empty answer.
func TestResolveAnswers(t *testing.T) {
	z := dnstest.New(t)
	rs := &resolver{r: newResolver(z.Addr), timeout: 2 * time.Second}

	tests := []struct {
		name  string
		setup func()
		src   Source
		want  []record
	}{
		{
			name: "SRV targets: lowercased, no final dot, :port; lowest IPv4 else lowest IPv6",
			setup: func() {
				z.SetSRV("_http._tcp.app.test",
					"App-1.App.Test.:8080", // mixed case, final dot
					"app-0.app.test.:8080",
					"APP-0.app.test.:8080", // the same target and port again
					"app-0.app.test.:9090", // same target, another port: another member
					"v6.app.test.:8080",
					"dual.app.test.:8080",
				)
				z.SetAddrs("app-0.app.test", "10.0.0.9", "10.0.0.3", "10.0.0.20")
				z.SetAddrs("app-1.app.test", "127.0.0.2")
				z.SetAddrs("v6.app.test", "fd00::9", "fd00::1:1", "fd00::2")
				z.SetAddrs("dual.app.test", "fd00::1", "192.0.2.7")
			},
			src: srvSource("_http._tcp.app.test"),
			want: recs(
				"app-0.app.test:8080=10.0.0.3:8080",
				"app-0.app.test:9090=10.0.0.3:9090",
				"app-1.app.test:8080=127.0.0.2:8080",
				"dual.app.test:8080=192.0.2.7:8080",
				"v6.app.test:8080=[fd00::2]:8080",
			),
		},
		{
			name: "SRV name asked with or without final dot, in any case",
			setup: func() {
				z.SetSRV("_http._tcp.app.test", "a.test.:1")
				z.SetAddrs("a.test", "127.0.0.1")
			},
			src:  srvSource("_HTTP._tcp.App.Test."),
			want: recs("a.test:1=127.0.0.1:1"),
		},
		{
			name: "targets without an address (NXDOMAIN or no records) are left out",
			setup: func() {
				z.SetSRV("_http._tcp.app.test", "a.test.:1", "gone.test.:1", "empty.test.:1", ".:1")
				z.SetAddrs("a.test", "127.0.0.1")
				z.SetAddrs("empty.test") // the name exists, with no A or AAAA
			},
			src:  srvSource("_http._tcp.app.test"),
			want: recs("a.test:1=127.0.0.1:1"),
		},
		{
			name:  "SRV NXDOMAIN is an empty answer",
			setup: func() {},
			src:   srvSource("_http._tcp.nothing.test"),
			want:  nil,
		},
		{
			name:  "SRV with no records is an empty answer",
			setup: func() { z.SetSRV("_http._tcp.app.test") },
			src:   srvSource("_http._tcp.app.test"),
			want:  nil,
		},
		{
			name: "SRV whose every target lacks an address is an empty answer",
			setup: func() {
				z.SetSRV("_http._tcp.app.test", "gone.test.:1")
			},
			src:  srvSource("_http._tcp.app.test"),
			want: nil,
		},
		{
			name:  "host: one member per A and AAAA address, duplicates collapsed",
			setup: func() { z.SetAddrs("cache.test", "127.0.0.3", "127.0.0.1", "::1", "127.0.0.1", "fd00::a") },
			src:   hostSource("Cache.Test", 8080),
			want: recs(
				"127.0.0.1:8080", "127.0.0.3:8080", "[::1]:8080", "[fd00::a]:8080",
			),
		},
		{
			name:  "host NXDOMAIN is an empty answer",
			setup: func() {},
			src:   hostSource("nothing.test", 80),
			want:  nil,
		},
		{
			name:  "host given as an IP address answers itself",
			setup: func() {},
			src:   hostSource("::1", 80),
			want:  recs("[::1]:80"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z.Reset()
			tt.setup()
			got, err := rs.resolve(context.Background(), tt.src)
			if err != nil {
				t.Fatalf("resolve: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
}

// Failures, over real DNS: the query fails, which is not an empty answer.
func TestResolveFailures(t *testing.T) {
	z := dnstest.New(t)
	const timeout = 300 * time.Millisecond
	rs := &resolver{r: newResolver(z.Addr), timeout: timeout}

	// A resolver nobody listens on: UDP to a closed port is refused.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := pc.LocalAddr().String()
	pc.Close()

	tests := []struct {
		name  string
		setup func()
		rs    *resolver
		src   Source
	}{
		{"SRV SERVFAIL", func() { z.SetRcode("_http._tcp.app.test", dns.RcodeServerFailure) }, rs, srvSource("_http._tcp.app.test")},
		{"SRV REFUSED", func() { z.SetRcode("_http._tcp.app.test", dns.RcodeRefused) }, rs, srvSource("_http._tcp.app.test")},
		{"SRV silent server", func() { z.SetSilent("_http._tcp.app.test", true) }, rs, srvSource("_http._tcp.app.test")},
		{"target address SERVFAIL", func() {
			z.SetSRV("_http._tcp.app.test", "a.test.:1", "b.test.:1")
			z.SetAddrs("a.test", "127.0.0.1")
			z.SetRcode("b.test", dns.RcodeServerFailure)
		}, rs, srvSource("_http._tcp.app.test")},
		{"target AAAA SERVFAIL after no A", func() {
			z.SetSRV("_http._tcp.app.test", "a.test.:1")
			z.SetRcode("a.test", dns.RcodeServerFailure)
		}, rs, srvSource("_http._tcp.app.test")},
		{"target address silent", func() {
			z.SetSRV("_http._tcp.app.test", "a.test.:1", "b.test.:1")
			z.SetAddrs("a.test", "127.0.0.1")
			z.SetSilent("b.test", true)
		}, rs, srvSource("_http._tcp.app.test")},
		{"host SERVFAIL", func() { z.SetRcode("cache.test", dns.RcodeServerFailure) }, rs, hostSource("cache.test", 80)},
		{"host silent", func() { z.SetSilent("cache.test", true) }, rs, hostSource("cache.test", 80)},
		{"unreachable resolver", func() {}, &resolver{r: newResolver(closed), timeout: timeout}, srvSource("_http._tcp.app.test")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z.Reset()
			tt.setup()
			start := time.Now()
			got, err := tt.rs.resolve(context.Background(), tt.src)
			if err == nil {
				t.Fatalf("resolve succeeded with %v, want a failure", got)
			}
			if notFound(err) {
				t.Errorf("failure %v reads as an answer (not found)", err)
			}
			// Each query is bounded: a silent server costs about one timeout
			// per lookup in the chain, never more.
			if d := time.Since(start); d > 3*timeout+time.Second {
				t.Errorf("took %v with a %v per-query timeout", d, timeout)
			}
		})
	}
}

// A large answer is truncated over UDP and fetched again over TCP.
func TestResolveLargeAnswerOverTCP(t *testing.T) {
	z := dnstest.New(t)
	names := z.Big(300)
	rs := &resolver{r: newResolver(z.Addr), timeout: 2 * time.Second}
	got, err := rs.resolve(context.Background(), srvSource("_http._tcp.big.test"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(names) {
		t.Fatalf("%d members, want %d", len(got), len(names))
	}
	if z.TCPQueries() == 0 {
		t.Errorf("no query came over TCP; the answer should not fit a UDP message")
	}
}
