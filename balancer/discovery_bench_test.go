package balancer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/discovery/dnstest"
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
		bal.disc.run.Load().d.Poll(context.Background())
		if n := bal.snap.Load().ring.Len(); n != 1000 {
			b.Fatalf("%d members", n)
		}
		bal.Close()
	}
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
	d := bal.disc.run.Load().d
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
// member list of 1000 (ring, snapshot, proxies), as after an answer that
// changed one member's address.
func BenchmarkDiscoveryApply1000(b *testing.B) {
	z := dnstest.New(b)
	opts := discOptions(z, nil, srvSource("_http._tcp.big.test"))
	bal, err := New(opts, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bal.Close()
	run := bal.disc.run.Load()
	lists := [2][]discovery.Member{}
	for v := range lists {
		for i := range 1000 {
			lists[v] = append(lists[v], discovery.Member{
				Name: fmt.Sprintf("m-%04d.big.test:8080", i), URL: fmt.Sprintf("http://10.0.%d.%d:8080", i>>8, i&255),
				Weight: 1, Protocol: "http1", Source: "_http._tcp.big.test", Initial: true,
			})
		}
		lists[v][0].URL = fmt.Sprintf("http://10.1.0.%d:8080", v)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		bal.discovered(run, lists[i%2])
		i++
	}
	if bal.snap.Load().ring.Len() != 1000 {
		b.Fatal("not installed")
	}
}
