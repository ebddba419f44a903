package balancer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/internal/testutil/dnstest"
)

// BenchmarkDiscoveryInstall1000 resolves an SRV record of 1000 targets
// (the SRV query, then 1000 address lookups over loopback) and installs
// the 1000 members: a new ring and snapshot. The goal is under 50 ms.
func BenchmarkDiscoveryInstall1000(b *testing.B) {
	z := dnstest.New(b)
	z.Big(1000)
	opts := discOptions(z, nil, srvSource("_http._tcp.big.test"))
	opts.Discovery.Timeout = 2 * time.Second
	b.ReportAllocs()
	for b.Loop() {
		bal, err := New(opts, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		bal.disc.run.Discoverer().Poll(context.Background())
		if n := bal.snap.Load().ring.Len(); n != 1000 {
			b.Fatalf("%d members", n)
		}
		bal.Close()
	}
}

// BenchmarkDiscoveryInstall1000Additional is BenchmarkDiscoveryInstall1000
// with the targets' addresses in the SRV answer's additional section (as
// CoreDNS and Consul send them): two queries, no address lookup. The goal
// is under 50 ms.
func BenchmarkDiscoveryInstall1000Additional(b *testing.B) {
	z := dnstest.New(b)
	z.Big(1000)
	z.SetAdditional(dnstest.Additional{On: true})
	opts := discOptions(z, nil, srvSource("_http._tcp.big.test"))
	opts.Discovery.Timeout = 2 * time.Second
	b.ReportAllocs()
	start := z.Queries()
	for b.Loop() {
		bal, err := New(opts, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		bal.disc.run.Discoverer().Poll(context.Background())
		if n := bal.snap.Load().ring.Len(); n != 1000 {
			b.Fatalf("%d members", n)
		}
		bal.Close()
	}
	b.ReportMetric(float64(z.Queries()-start)/float64(b.N), "queries/op")
}

// BenchmarkDiscoveryPollUnchanged1000 is the steady state: the same
// 1000-target answer again. Nothing is installed (the snapshot stays);
// what it allocates is the DNS queries'.
func BenchmarkDiscoveryPollUnchanged1000(b *testing.B) {
	z := dnstest.New(b)
	z.Big(1000)
	opts := discOptions(z, nil, srvSource("_http._tcp.big.test"))
	opts.Discovery.Timeout = 2 * time.Second
	bal, err := New(opts, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bal.Close()
	d := bal.disc.run.Discoverer()
	d.Poll(context.Background())
	snap := bal.snap.Load()
	b.ReportAllocs()
	for b.Loop() {
		d.Poll(context.Background())
	}
	if bal.snap.Load() != snap {
		b.Fatal("an unchanged answer installed a snapshot")
	}
}

// BenchmarkDiscoveryApply1000 is the balancer's part alone: installing a
// member list of 1000 (snapshot, proxies, and the ring when it changed).
// readdress: one member's address changed, so the ring is reused; renamed:
// every name changed (two fleets alternate), so the ring is built again.
func BenchmarkDiscoveryApply1000(b *testing.B) {
	z := dnstest.New(b)
	opts := discOptions(z, nil, srvSource("_http._tcp.big.test"))
	list := func(prefix, addr0 string) []discovery.Member {
		var ms []discovery.Member
		for i := range 1000 {
			ms = append(ms, discovery.Member{
				Name: fmt.Sprintf("%s-%04d.big.test:8080", prefix, i), URL: fmt.Sprintf("http://10.0.%d.%d:8080", i>>8, i&255),
				Weight: 1, Protocol: "http1", Source: "_http._tcp.big.test", Initial: true,
			})
		}
		ms[0].URL = "http://" + addr0 + ":8080"
		return ms
	}
	for _, c := range []struct {
		name  string
		lists [2][]discovery.Member
	}{
		{"readdress", [2][]discovery.Member{list("m", "10.1.0.1"), list("m", "10.1.0.2")}},
		{"renamed", [2][]discovery.Member{list("a", "10.1.0.1"), list("b", "10.1.0.1")}},
	} {
		b.Run(c.name, func(b *testing.B) {
			bal, err := New(opts, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer bal.Close()
			run := bal.disc.run.Discoverer()
			bal.discovered(run, c.lists[1])
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				bal.discovered(run, c.lists[i%2])
				i++
			}
			if bal.snap.Load().ring.Len() != 1000 {
				b.Fatal("not installed")
			}
		})
	}
}
