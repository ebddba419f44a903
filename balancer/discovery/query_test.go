package discovery

import (
	"context"
	"encoding/binary"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/dnstest"

	"github.com/miekg/dns"
	"golang.org/x/net/dns/dnsmessage"
)

// The targets' addresses from the SRV reply's additional section: the same
// answer as the per-target lookups, with fewer queries.
func TestResolveAdditional(t *testing.T) {
	z := dnstest.New(t)
	rs := &resolver{r: newResolver(z.Addr), timeout: 2 * time.Second}
	zone := func() {
		z.SetSRV("_http._tcp.app.test",
			"App-1.App.Test.:8080", // mixed case, final dot
			"app-0.app.test.:8080",
			"APP-0.app.test.:8080", // the same target and port again
			"app-0.app.test.:9090", // same target, another port: another member
			"dual.app.test.:8080",
		)
		z.SetAddrs("app-0.app.test", "10.0.0.9", "10.0.0.3", "10.0.0.20")
		z.SetAddrs("app-1.app.test", "127.0.0.2")
		z.SetAddrs("dual.app.test", "fd00::1", "192.0.2.7")
	}
	want := recs(
		"app-0.app.test:8080=10.0.0.3:8080",
		"app-0.app.test:9090=10.0.0.3:9090",
		"app-1.app.test:8080=127.0.0.2:8080",
		"dual.app.test:8080=192.0.2.7:8080",
	)
	tests := []struct {
		name    string
		setup   func()
		extra   dnstest.Additional
		want    []record
		queries int64 // DNS queries the answer took; 0: not checked
	}{
		{"none: every target looked up", zone, dnstest.Additional{}, want, 1 + 3},
		{"all: one query", zone, dnstest.Additional{On: true}, want, 1},
		{"owner names in another case", zone, dnstest.Additional{On: true, Upper: true}, want, 1},
		{"partial: the targets left out are looked up", zone,
			dnstest.Additional{On: true, Except: []string{"APP-1.app.test"}}, want, 1 + 1},
		{"IPv6 only: the A query is made, the AAAA comes from the reply", func() {
			z.SetSRV("_http._tcp.app.test", "v6.app.test.:8080", "a.test.:1")
			z.SetAddrs("v6.app.test", "fd00::9", "fd00::1:1", "fd00::2")
			z.SetAddrs("a.test", "127.0.0.1")
		}, dnstest.Additional{On: true}, recs("a.test:1=127.0.0.1:1", "v6.app.test:8080=[fd00::2]:8080"), 1 + 1},
		{"targets without an address are looked up and left out", func() {
			z.SetSRV("_http._tcp.app.test", "a.test.:1", "gone.test.:1", "empty.test.:1", ".:1")
			z.SetAddrs("a.test", "127.0.0.1")
			z.SetAddrs("empty.test")
		}, dnstest.Additional{On: true}, recs("a.test:1=127.0.0.1:1"), 0},
		{"NXDOMAIN is an empty answer", func() {}, dnstest.Additional{On: true}, nil, 1},
		{"no records is an empty answer", func() { z.SetSRV("_http._tcp.app.test") }, dnstest.Additional{On: true}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z.Reset()
			tt.setup()
			z.SetAdditional(tt.extra)
			before := z.Queries()
			got, err := rs.resolve(context.Background(), srvSource("_HTTP._tcp.app.test"))
			if err != nil {
				t.Fatalf("resolve: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
			if n := z.Queries() - before; tt.queries != 0 && n != tt.queries {
				t.Errorf("%d queries, want %d", n, tt.queries)
			}
		})
	}
}

// A failed lookup of a target the additional section left out fails the
// whole answer, as without the section.
func TestResolveAdditionalLookupFails(t *testing.T) {
	z := dnstest.New(t)
	rs := &resolver{r: newResolver(z.Addr), timeout: 300 * time.Millisecond}
	z.SetSRV("_http._tcp.app.test", "a.test.:1", "b.test.:1")
	z.SetAddrs("a.test", "127.0.0.1")
	z.SetRcode("b.test", dns.RcodeServerFailure)
	z.SetAdditional(dnstest.Additional{On: true})
	if got, err := rs.resolve(context.Background(), srvSource("_http._tcp.app.test")); err == nil {
		t.Fatalf("resolve succeeded with %v, want a failure", got)
	}
}

// An answer too large for UDP comes again over TCP, additional section
// included: two queries for 300 members.
func TestResolveAdditionalOverTCP(t *testing.T) {
	z := dnstest.New(t)
	names := z.Big(300)
	z.SetAdditional(dnstest.Additional{On: true})
	rs := &resolver{r: newResolver(z.Addr), timeout: 2 * time.Second}
	got, err := rs.resolve(context.Background(), srvSource("_http._tcp.big.test"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(names) {
		t.Fatalf("%d members, want %d", len(got), len(names))
	}
	if z.TCPQueries() != 1 || z.Queries() != 2 {
		t.Errorf("%d queries, %d over TCP; want 2, 1 (UDP truncated, then TCP)", z.Queries(), z.TCPQueries())
	}
}

// An additional section cut to fit UDP without TC (the answer section
// whole): the targets it lost are looked up.
func TestResolveAdditionalCutToFit(t *testing.T) {
	z := dnstest.New(t)
	names := z.Big(100)
	z.SetAdditional(dnstest.Additional{On: true, Fit: true})
	rs := &resolver{r: newResolver(z.Addr), timeout: 2 * time.Second}
	got, err := rs.resolve(context.Background(), srvSource("_http._tcp.big.test"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(names) {
		t.Fatalf("%d members, want %d", len(got), len(names))
	}
	slices.Sort(names)
	for i, r := range got {
		if r.name != names[i] || !strings.HasPrefix(r.addr, "10.0.0.") {
			t.Errorf("member %d: %v, want %s at 10.0.0.x", i, r, names[i])
		}
	}
	if n := z.Queries(); z.TCPQueries() != 0 || n <= 1 || n >= 101 {
		t.Errorf("%d queries, %d over TCP; want UDP only, more than 1 and fewer than 101", n, z.TCPQueries())
	}
}

// rawServer answers each UDP query on 127.0.0.1 with the packets reply
// returns (none: silence), and TCP queries on the same port likewise (the
// first packet, framed). It returns host:port.
func rawServer(t *testing.T, reply func(q *dns.Msg) [][]byte) string {
	t.Helper()
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	for range 20 {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			for _, p := range reply(q) {
				pc.WriteTo(p, from)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var l [2]byte
				if _, err := c.Read(l[:]); err != nil {
					return
				}
				b := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := c.Read(b); err != nil {
					return
				}
				q := new(dns.Msg)
				if q.Unpack(b) != nil {
					return
				}
				if ps := reply(q); len(ps) > 0 {
					c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(ps[0]))), ps[0]...))
				}
			}()
		}
	}()
	return pc.LocalAddr().String()
}

// pack builds a reply to q: edit may change it; raw may change its bytes.
func pack(t testing.TB, q *dns.Msg, edit func(m *dns.Msg), raw func(b []byte) []byte) []byte {
	m := new(dns.Msg).SetReply(q)
	m.Authoritative = true
	m.Answer = []dns.RR{&dns.SRV{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 5},
		Priority: 1, Weight: 1, Port: 80, Target: "127.0.0.1.nip.test."}}
	m.Extra = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "127.0.0.1.nip.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
		A: net.IPv4(127, 0, 0, 1)}}
	if edit != nil {
		edit(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Error(err)
		return nil
	}
	if raw != nil {
		b = raw(b)
	}
	return b
}

// Replies our own reader classifies: answers, failures, and packets that
// are not the reply at all.
func TestQuerySRVReplies(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ok := recs("127.0.0.1.nip.test:80=127.0.0.1:80")
	otherID := func(b []byte) []byte { b[0] ^= 0xFF; return b }
	tests := []struct {
		name  string
		reply func(t *testing.T, q *dns.Msg) [][]byte
		want  []record
		fail  bool
	}{
		{"answer with its address", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, nil, nil)}
		}, ok, false},
		{"another ID is ignored, the reply after it used", func(t *testing.T, q *dns.Msg) [][]byte {
			forged := pack(t, q, func(m *dns.Msg) { m.Answer[0].(*dns.SRV).Port = 666 }, otherID)
			return [][]byte{forged, pack(t, q, nil, nil)}
		}, ok, false},
		{"another question is ignored, the reply after it used", func(t *testing.T, q *dns.Msg) [][]byte {
			forged := pack(t, q, func(m *dns.Msg) { m.Question[0].Name = "_other._tcp.test." }, nil)
			return [][]byte{forged, pack(t, q, nil, nil)}
		}, ok, false},
		{"garbage is ignored, the reply after it used", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{{1, 2, 3}, pack(t, q, nil, nil)}
		}, ok, false},
		{"only another ID: a timeout", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, nil, otherID)}
		}, nil, true},
		{"a record cut short is a failure", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, nil, func(b []byte) []byte { return b[:len(b)-3] })}
		}, nil, true},
		{"a target that is not a host name is a failure", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, func(m *dns.Msg) { m.Answer[0].(*dns.SRV).Target = "a\\ b.test." }, nil)}
		}, nil, true},
		{"an A record of 5 bytes is a failure", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, nil, func(b []byte) []byte {
				// The A record is last: make its RDLENGTH 5 and add a byte.
				binary.BigEndian.PutUint16(b[len(b)-6:], 5)
				return append(b, 0)
			})}
		}, nil, true},
		{"lame referral is a failure", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, func(m *dns.Msg) { m.Authoritative, m.RecursionAvailable, m.Answer = false, false, nil }, nil)}
		}, nil, true},
		{"NOERROR without records, authoritative, is an empty answer", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, func(m *dns.Msg) { m.Answer, m.Extra = nil, nil }, nil)}
		}, nil, false},
		{"NXDOMAIN is an empty answer", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, func(m *dns.Msg) { m.Rcode, m.Answer, m.Extra = dns.RcodeNameError, nil, nil }, nil)}
		}, nil, false},
		{"NOTIMP is a failure", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, func(m *dns.Msg) { m.Rcode = dns.RcodeNotImplemented }, nil)}
		}, nil, true},
		{"truncated over UDP and TCP is a failure", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, func(m *dns.Msg) { m.Truncated = true }, nil)}
		}, nil, true},
		{"SRV records of another owner are not the answer", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, func(m *dns.Msg) { m.Answer[0].Header().Name = "_x._tcp.test." }, nil)}
		}, nil, false},
		{"SRV records of the question's CNAME are the answer", func(t *testing.T, q *dns.Msg) [][]byte {
			return [][]byte{pack(t, q, func(m *dns.Msg) {
				m.Answer[0].Header().Name = "_x._tcp.test."
				m.Answer = append([]dns.RR{&dns.CNAME{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET},
					Target: "_X._tcp.test."}}, m.Answer...)
			}, nil)}
		}, ok, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawServer(t, func(q *dns.Msg) [][]byte { return tt.reply(t, q) })
			rs := &resolver{r: newResolver(addr), timeout: timeout}
			start := time.Now()
			got, err := rs.resolve(context.Background(), srvSource("_http._tcp.app.test"))
			if tt.fail {
				if err == nil {
					t.Fatalf("resolve succeeded with %v, want a failure", got)
				}
				if d := time.Since(start); d > timeout+time.Second {
					t.Errorf("took %v with a %v timeout", d, timeout)
				}
				return
			}
			if err != nil {
				t.Fatalf("resolve: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
}

// A cancelled poll returns at once, not at the end of the timeout.
func TestQuerySRVCancelled(t *testing.T) {
	addr := rawServer(t, func(*dns.Msg) [][]byte { return nil })
	rs := &resolver{r: newResolver(addr), timeout: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := rs.resolve(ctx, srvSource("_http._tcp.app.test"))
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled query succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled query still waits")
	}
}

// The query: one SRV question, recursion desired, an EDNS0 OPT record
// advertising 4096 bytes; a name DNS cannot carry is an error.
func TestAppendQuery(t *testing.T) {
	for _, name := range []string{"_http._tcp.App.Test.", "a.bc.", "."} {
		b, err := appendQuery(nil, 0x4242, name)
		if err != nil {
			t.Fatalf("appendQuery(%q): %v", name, err)
		}
		m := new(dns.Msg)
		if err := m.Unpack(b); err != nil {
			t.Fatalf("appendQuery(%q): the query does not unpack: %v", name, err)
		}
		want := dns.Question{Name: name, Qtype: dns.TypeSRV, Qclass: dns.ClassINET}
		if m.Id != 0x4242 || m.Response || !m.RecursionDesired || len(m.Question) != 1 || m.Question[0] != want ||
			len(m.Answer)+len(m.Ns) != 0 {
			t.Errorf("appendQuery(%q) = %v", name, m)
		}
		if opt := m.IsEdns0(); opt == nil || opt.UDPSize() != ednsSize || len(m.Extra) != 1 {
			t.Errorf("appendQuery(%q): EDNS0 %v, want one OPT record of %d bytes", name, opt, ednsSize)
		}
	}
	label63 := strings.Repeat("a", 63)
	for _, name := range []string{
		"a..b.",
		strings.Repeat("a", 64) + ".",
		strings.Repeat(label63+".", 4), // 4×64+1 = 257 bytes on the wire
		"a.bc",                         // not absolute: the caller adds the dot
	} {
		if _, err := appendQuery(nil, 1, name); err == nil {
			t.Errorf("appendQuery(%.20q…) accepted", name)
		}
	}
}

// rawReply is a reply header (ID 0x1234, QR RD RA, one question, an
// answers) and the question _http._tcp.app.test SRV IN, for hand-written
// answer bytes to follow.
func rawReply(an uint16) []byte {
	b := []byte{0x12, 0x34, 0x81, 0x80, 0, 1, byte(an >> 8), byte(an), 0, 0, 0, 0}
	for _, l := range []string{"_http", "_tcp", "app", "test"} {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0, 0, 33, 0, 1)
}

// Records written by hand: compression pointers are followed; a pointer
// loop, a label holding a dot and a record longer than what is left of
// the message are refused; none of it panics or loops.
func TestReplyRecords(t *testing.T) {
	qname := []byte("_http._tcp.app.test")
	// srv is a reply of one SRV record owned by owner, its RDLENGTH
	// overstated by over bytes.
	srv := func(over uint16, owner ...byte) []byte {
		b := append(rawReply(1), owner...)
		b = append(b, 0, 33, 0, 1, 0, 0, 0, 5)                   // SRV IN, TTL 5
		rdata := []byte{0, 1, 0, 1, 0, 80, 1, 'x', 0xC0, 12 + 6} // 1 1 80 x.<_tcp.app.test>
		b = binary.BigEndian.AppendUint16(b, uint16(len(rdata))+over)
		return append(b, rdata...)
	}
	for _, tt := range []struct {
		name string
		msg  []byte
		want []srvRR
		err  bool
	}{
		{"owner and target compressed", srv(0, 0xC0, 12), []srvRR{{target: "x._tcp.app.test", port: 80}}, false},
		{"a pointer to itself", srv(0, 0xC0, 37), nil, true},
		{"a reserved label type", srv(0, 0x80, 12), nil, true},
		{"a label holding a dot", srv(0, 3, 'a', '.', 'b', 0xC0, 12), nil, true},
		{"a pointer past the end", srv(0, 0xFF, 0xFF), nil, true},
		{"a record longer than the message", srv(10, 0xC0, 12), nil, true},
	} {
		var p dnsmessage.Parser
		h, ok := matchReply(&p, tt.msg, 0x1234, qname)
		if !ok {
			t.Fatalf("%s: the reply does not match its question", tt.name)
		}
		got, err := parseSRVBody(&p, h, qname)
		if (err != nil) != tt.err || !tt.err && !reflect.DeepEqual(got.srvs, tt.want) {
			t.Errorf("%s: %v, %v; want %v (error %v)", tt.name, got.srvs, err, tt.want, tt.err)
		}
	}
}

// FuzzParseSRVReply: no input makes the reader panic, loop or accept what
// the contract refuses.
func FuzzParseSRVReply(f *testing.F) {
	q := new(dns.Msg).SetQuestion("_http._tcp.app.test.", dns.TypeSRV)
	q.Id = 0x1234
	for _, edit := range []func(m *dns.Msg){
		nil,
		func(m *dns.Msg) { m.Compress = true },
		func(m *dns.Msg) { m.Rcode = dns.RcodeNameError; m.Answer = nil },
		func(m *dns.Msg) { m.SetEdns0(4096, false) },
		func(m *dns.Msg) {
			m.Answer[0].Header().Name = "_x._tcp.test."
			m.Answer = append([]dns.RR{&dns.CNAME{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET},
				Target: "_x._tcp.test."}}, m.Answer...)
		},
	} {
		f.Add(pack(f, q, edit, nil))
	}
	f.Add(rawReply(0))
	qname := []byte("_http._tcp.app.test")
	f.Fuzz(func(t *testing.T, msg []byte) {
		var p dnsmessage.Parser
		h, ok := matchReply(&p, msg, 0x1234, qname)
		if !ok {
			// Read the body anyway, as if the question matched.
			if _, err := p.Start(msg); err != nil || p.SkipAllQuestions() != nil {
				return
			}
			h = replyHeader{}
		}
		reply, err := parseSRVBody(&p, h, qname)
		if err != nil {
			return
		}
		for _, s := range reply.srvs {
			if !isHostName([]byte(s.target)) {
				t.Fatalf("target %q accepted", s.target)
			}
		}
		for target, g := range reply.glue {
			if !slices.ContainsFunc(reply.srvs, func(s srvRR) bool { return s.target == target }) {
				t.Fatalf("glue of %s, which is no target", target)
			}
			if g.v4.IsValid() && !g.v4.Is4() || g.v6.IsValid() && !g.v6.Is6() {
				t.Fatalf("glue of %s: %v %v", target, g.v4, g.v6)
			}
		}
	})
}
