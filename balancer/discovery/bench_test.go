package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/dnstest"

	"github.com/miekg/dns"
	"golang.org/x/net/dns/dnsmessage"
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

// bigReply is a reply to _http._tcp.big.test SRV (ID 0x1234) of n
// targets m-I.big.test port 8080, each with its A record in the
// additional section, compressed as CoreDNS sends it.
func bigReply(b *testing.B, n int) []byte {
	q := new(dns.Msg).SetQuestion("_http._tcp.big.test.", dns.TypeSRV)
	q.Id = 0x1234
	m := new(dns.Msg).SetReply(q)
	m.Compress, m.Authoritative = true, true
	for i := range n {
		target := fmt.Sprintf("m-%d.big.test.", i)
		m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 5},
			Priority: 10, Weight: 5, Port: 8080, Target: target})
		m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
			A: net.IPv4(10, 0, byte(i>>8), byte(i))})
	}
	msg, err := m.Pack()
	if err != nil {
		b.Fatal(err)
	}
	return msg
}

// BenchmarkParseSRVReply1000 is the reply reader alone on a 1000-target
// reply with every target's address in the additional section: what the
// fast path costs once the bytes are in.
func BenchmarkParseSRVReply1000(b *testing.B) {
	msg := bigReply(b, 1000)
	qname := []byte("_http._tcp.big.test")
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		var p dnsmessage.Parser
		h, ok := matchReply(&p, msg, 0x1234, qname)
		if !ok {
			b.Fatal("the reply does not match")
		}
		r, err := parseSRVBody(&p, h, qname)
		if err != nil || len(r.srvs) != 1000 || len(r.glue) != 1000 {
			b.Fatalf("%d records, %d glues, %v", len(r.srvs), len(r.glue), err)
		}
	}
}
