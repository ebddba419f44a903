package discovery

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/discovery/dnstest"
)

// benchDiscoverer returns a Discoverer on z's big.test SRV record.
func benchDiscoverer(b *testing.B, z *dnstest.Server, onChange func(Update)) *Discoverer {
	d, err := New(Options{
		Resolver: z.Addr, Interval: time.Hour, Timeout: 2 * time.Second, RemoveAfter: time.Minute, Confirm: 3,
		Sources:  []Source{srvSource("_http._tcp.big.test")},
		OnChange: onChange,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkResolve1000 resolves an SRV record of 1000 targets from scratch
// (the SRV query over TCP after a truncated UDP answer, then 1000 A
// lookups, 16 at a time, over loopback) and builds the member list. The
// goal is under 50 ms; the DNS round trips dominate, so a regression here
// means lookups stopped running in parallel or a target's AAAA query came
// back although it has an IPv4 address.
func BenchmarkResolve1000(b *testing.B) {
	z := dnstest.New(b)
	z.Big(1000)
	b.ReportAllocs()
	start := z.Queries()
	for b.Loop() {
		var got int
		d := benchDiscoverer(b, z, func(u Update) { got = len(u.Members) })
		if !d.Poll(context.Background()) || got != 1000 {
			b.Fatalf("got %d members", got)
		}
	}
	b.ReportMetric(float64(z.Queries()-start)/float64(b.N), "queries/op")
}

// BenchmarkResolve1000Additional is BenchmarkResolve1000 with the
// targets' addresses in the SRV answer's additional section, as CoreDNS
// and Consul send them: two queries (UDP truncated, then TCP) instead of
// 1002, and no address lookup. The goal is under 50 ms.
func BenchmarkResolve1000Additional(b *testing.B) {
	z := dnstest.New(b)
	z.Big(1000)
	z.SetAdditional(dnstest.Additional{On: true})
	b.ReportAllocs()
	start := z.Queries()
	for b.Loop() {
		var got int
		d := benchDiscoverer(b, z, func(u Update) { got = len(u.Members) })
		if !d.Poll(context.Background()) || got != 1000 {
			b.Fatalf("got %d members", got)
		}
	}
	q := float64(z.Queries()-start) / float64(b.N)
	if q != 2 {
		b.Fatalf("%v queries/op, want 2", q)
	}
	b.ReportMetric(q, "queries/op")
}

// BenchmarkPollUnchanged1000 is the steady state: the same 1000-target
// answer again. Everything it allocates is the DNS queries'; the state
// machine adds nothing and no member list is built (see
// TestUnchangedAnswerAllocatesNothing).
func BenchmarkPollUnchanged1000(b *testing.B) {
	z := dnstest.New(b)
	z.Big(1000)
	d := benchDiscoverer(b, z, nil)
	if !d.Poll(context.Background()) {
		b.Fatal("first poll: no members")
	}
	b.ReportAllocs()
	for b.Loop() {
		if d.Poll(context.Background()) {
			b.Fatal("unchanged answer changed the membership")
		}
	}
}

// BenchmarkAnswerUnchanged1000 is the state machine alone on an unchanged
// answer of 1000 members: 0 allocs/op; a regression is any allocation.
func BenchmarkAnswerUnchanged1000(b *testing.B) {
	pol := policy{removeAfter: time.Minute, confirm: 3}
	s := newSourceState(srvSource("x"))
	answer := make([]record, 1000)
	for i := range answer {
		answer[i] = record{name: string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676)) + ":80", addr: "10.0.0.1:80"}
	}
	answer = sortRecords(answer)
	s.answer(pol, answer, t0, nil)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		if changed, _ := s.answer(pol, answer, now, nil); changed {
			b.Fatal("changed")
		}
	}
}
