// Package dnstest is a real DNS server on loopback for tests: UDP and TCP
// on one port of 127.0.0.1, answering SRV, A and AAAA queries (following
// CNAME chains) from a zone the test edits while it runs, and able to fail (a forced response code)
// or stay silent per name. Tests of discovery, of the balancer and of the
// ringlb command use it as their resolver.
package dnstest

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
)

// Server is a real DNS server on 127.0.0.1, UDP and TCP on one port,
// answering from a zone the test edits while it runs. UDP answers larger
// than the client's buffer are truncated, so the client retries over TCP.
// A name with no records of any type answers NXDOMAIN; a name with records
// of other types answers NOERROR with none.
type Server struct {
	Addr string // host:port

	mu    sync.Mutex
	srv   map[string][]*dns.SRV
	a     map[string][]net.IP
	aaaa  map[string][]net.IP
	cname map[string]string // name → the target of its CNAME record
	rcode map[string]int    // forced response code for a name (any type)
	drop  map[string]bool   // names whose queries get no reply at all
	extra Additional        // what SRV answers carry in their additional section

	queries atomic.Int64
	tcp     atomic.Int64 // queries that came over TCP
}

// New starts a server and stops it when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	z := &Server{}
	z.Reset()
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	// Take a free UDP port, then the same port for TCP; retry if another
	// process holds the TCP side.
	for range 20 {
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Fatalf("no port free for both UDP and TCP: %v", err)
	}
	z.Addr = pc.LocalAddr().String()
	servers := []*dns.Server{
		{PacketConn: pc, Handler: dns.HandlerFunc(z.serve)},
		{Listener: ln, Handler: dns.HandlerFunc(z.serve)},
	}
	for _, s := range servers {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Shutdown()
		}
	})
	return z
}

// Reset empties the zone.
func (z *Server) Reset() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.srv, z.a, z.aaaa = map[string][]*dns.SRV{}, map[string][]net.IP{}, map[string][]net.IP{}
	z.cname = map[string]string{}
	z.rcode, z.drop = map[string]int{}, map[string]bool{}
	z.extra = Additional{}
}

// Additional says what SRV answers carry in their additional section, as
// CoreDNS (Kubernetes headless services) and Consul do: the zone's A and
// AAAA records of each target. The zero value: nothing (the default).
type Additional struct {
	On bool // add each target's A and AAAA records
	// Upper writes the records' owner names in upper case (the SRV
	// records keep the target as set): names compare case-insensitively.
	Upper bool
	// Except lists targets whose records are left out.
	Except []string
	// Fit cuts the additional section of a UDP answer to the client's
	// buffer without setting TC when the answer section fits, as RFC 2181
	// §9 allows; otherwise any cut record sets TC.
	Fit bool
}

// SetAdditional sets what SRV answers carry in their additional section.
// Reset clears it.
func (z *Server) SetAdditional(a Additional) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.extra = a
}

func key(name string) string { return dns.Fqdn(strings.ToLower(name)) }

// SetSRV replaces name's SRV records; each target is "host:port" written as
// it should appear in the answer (case and final dot kept).
func (z *Server) SetSRV(name string, targets ...string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	var rrs []*dns.SRV
	for _, tp := range targets {
		host, port, err := net.SplitHostPort(tp)
		if err != nil {
			panic(err)
		}
		var p uint16
		for _, c := range port {
			p = p*10 + uint16(c-'0')
		}
		rrs = append(rrs, &dns.SRV{Priority: 10, Weight: 5, Port: p, Target: host})
	}
	z.srv[key(name)] = rrs
}

// SetAddrs replaces name's A and AAAA records.
func (z *Server) SetAddrs(name string, addrs ...string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	k := key(name)
	z.a[k], z.aaaa[k] = nil, nil
	for _, s := range addrs {
		ip := net.ParseIP(s)
		if ip4 := ip.To4(); ip4 != nil {
			z.a[k] = append(z.a[k], ip4)
		} else {
			z.aaaa[k] = append(z.aaaa[k], ip)
		}
	}
}

// SetCNAME gives name a CNAME record pointing at target ("" removes it).
// A query for name (of any other type) is answered as an authoritative
// server answers it: the CNAME records of the chain from name, up to
// MaxChain of them, then the records of the name where the chain stops.
func (z *Server) SetCNAME(name, target string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if target == "" {
		delete(z.cname, key(name))
	} else {
		z.cname[key(name)] = dns.Fqdn(target)
	}
}

// MaxChain is how many CNAME records of a chain the server puts in one
// answer at most: twice what package discovery follows, so that a chain
// too long for it reaches it whole.
const MaxChain = 16

// SetRcode makes every query for name get rcode (0 clears it).
func (z *Server) SetRcode(name string, rcode int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if rcode == 0 {
		delete(z.rcode, key(name))
	} else {
		z.rcode[key(name)] = rcode
	}
}

// SetSilent makes the server ignore queries for name (or stop ignoring them).
func (z *Server) SetSilent(name string, silent bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.drop[key(name)] = silent
}

func (z *Server) serve(w dns.ResponseWriter, req *dns.Msg) {
	z.queries.Add(1)
	if w.LocalAddr().Network() == "tcp" {
		z.tcp.Add(1)
	}
	if len(req.Question) != 1 {
		w.WriteMsg(new(dns.Msg).SetRcode(req, dns.RcodeFormatError))
		return
	}
	q := req.Question[0]
	name := q.Name
	k := key(name)

	z.mu.Lock()
	if z.drop[k] {
		z.mu.Unlock()
		return // no reply: the client times out
	}
	m := new(dns.Msg).SetReply(req)
	m.Compress = true
	m.Authoritative = true
	if rc, ok := z.rcode[k]; ok {
		m.Rcode = rc
	} else {
		for range MaxChain {
			target, ok := z.cname[k]
			if !ok || q.Qtype == dns.TypeCNAME {
				break
			}
			m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 5},
				Target: target})
			name, k = target, key(target)
		}
		hdr := func(t uint16) dns.RR_Header {
			return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: 5}
		}
		switch q.Qtype {
		case dns.TypeSRV:
			for _, r := range z.srv[k] {
				rr := *r
				rr.Hdr = hdr(dns.TypeSRV)
				m.Answer = append(m.Answer, &rr)
			}
			m.Extra = z.additional(z.srv[k])
		case dns.TypeA:
			for _, ip := range z.a[k] {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: ip})
			}
		case dns.TypeAAAA:
			for _, ip := range z.aaaa[k] {
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: ip})
			}
		}
		_, hasSRV := z.srv[k]
		_, hasA := z.a[k]
		_, hasAAAA := z.aaaa[k]
		if len(m.Answer) == 0 && !hasSRV && !hasA && !hasAAAA {
			m.Rcode = dns.RcodeNameError // NXDOMAIN; otherwise NOERROR with no records
		}
	}
	z.mu.Unlock()

	if w.LocalAddr().Network() == "udp" {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		answers := len(m.Answer)
		m.Truncate(size)
		if z.fit() && len(m.Answer) == answers {
			m.Truncated = false
		}
	}
	w.WriteMsg(m)
}

// additional returns the additional section of an answer of srvs; z.mu
// is held.
func (z *Server) additional(srvs []*dns.SRV) []dns.RR {
	if !z.extra.On {
		return nil
	}
	var extra []dns.RR
	done := map[string]bool{}
	for _, r := range srvs {
		k := key(r.Target)
		if done[k] || slices.ContainsFunc(z.extra.Except, func(e string) bool { return key(e) == k }) {
			continue
		}
		done[k] = true
		owner := dns.Fqdn(r.Target)
		if z.extra.Upper {
			owner = strings.ToUpper(owner)
		}
		hdr := func(t uint16) dns.RR_Header {
			return dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET, Ttl: 5}
		}
		for _, ip := range z.a[k] {
			extra = append(extra, &dns.A{Hdr: hdr(dns.TypeA), A: ip})
		}
		for _, ip := range z.aaaa[k] {
			extra = append(extra, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: ip})
		}
	}
	return extra
}

func (z *Server) fit() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.extra.Fit
}

// Queries returns how many queries the server received.
func (z *Server) Queries() int64 { return z.queries.Load() }

// TCPQueries returns how many of them came over TCP.
func (z *Server) TCPQueries() int64 { return z.tcp.Load() }

// Big fills the zone with an SRV record _http._tcp.big.test of n targets
// m-I.big.test port 8080, each with one IPv4 address in 10.0.0.0/8, and
// returns the member names in order.
func (z *Server) Big(n int) []string {
	targets := make([]string, n)
	names := make([]string, n)
	for i := range n {
		host := fmt.Sprintf("m-%d.big.test", i)
		targets[i] = host + ".:8080"
		names[i] = host + ":8080"
		z.SetAddrs(host, fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
	}
	z.SetSRV("_http._tcp.big.test", targets...)
	return names
}
