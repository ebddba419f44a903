package discovery

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"
)

// The DNS messages of one SRV query, built and read with
// golang.org/x/net/dns/dnsmessage (the package Go's own resolver uses):
// the query, and a reply reader that keeps the answer section's SRV
// records (of the question's name, or of a name of the CNAME chain from
// it) and the additional section's A and AAAA records of their targets.
// The parser bounds every read and never panics; on top of it the reader
// refuses a record whose data runs past the message, an A or AAAA record
// of the wrong length, an OPT record not owned by the root and a target
// that is not a host name (see FuzzParseSRVReply).

const (
	ednsSize  = 4096 // the UDP reply size we advertise (EDNS0)
	maxCNAMEs = 8    // CNAME hops followed from the question to the SRV records
)

var errMalformed = errors.New("malformed DNS reply")

// errCNAMEChain is a reply whose CNAME chain from the question goes on
// past maxCNAMEs hops (or loops): it was not followed to its end, so it
// says nothing about the name's SRV records and is a failure, not an
// empty answer.
var errCNAMEChain = fmt.Errorf("CNAME chain longer than %d hops", maxCNAMEs)

// rcodeNames names the response codes a failure message may show.
var rcodeNames = map[int]string{
	1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED",
}

func rcodeString(rc int) string {
	if s, ok := rcodeNames[rc]; ok {
		return s
	}
	return fmt.Sprintf("RCODE %d", rc)
}

// appendQuery appends a recursive SRV query for name (absolute: with its
// final dot) with message ID id and an EDNS0 OPT record advertising a
// 4096-byte UDP buffer. A name that is not a valid DNS name (an empty
// label, a label over 63 bytes, over 255 bytes in all) is an error.
func appendQuery(b []byte, id uint16, name string) ([]byte, error) {
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, fmt.Errorf("bad DNS name %q: %w", name, err)
	}
	bld := dnsmessage.NewBuilder(b, dnsmessage.Header{ID: id, RecursionDesired: true})
	if err := bld.StartQuestions(); err != nil {
		return nil, err
	}
	if err := bld.Question(dnsmessage.Question{Name: qname, Type: dnsmessage.TypeSRV, Class: dnsmessage.ClassINET}); err != nil {
		return nil, fmt.Errorf("bad DNS name %q: %w", name, err)
	}
	if err := bld.StartAdditionals(); err != nil {
		return nil, err
	}
	var opt dnsmessage.ResourceHeader
	if err := opt.SetEDNS0(ednsSize, dnsmessage.RCodeSuccess, false); err != nil {
		return nil, err
	}
	if err := bld.OPTResource(opt, dnsmessage.OPTResource{}); err != nil {
		return nil, err
	}
	return bld.Finish()
}

// lowerName appends n to buf (which it resets) lowercased (ASCII), dotted,
// without the final dot: "" is the root. It never allocates: buf has room
// for any name.
func lowerName(n *dnsmessage.Name, buf *[255]byte) []byte {
	out := buf[:0]
	for _, c := range n.Data[:n.Length] {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out = append(out, c)
	}
	if len(out) > 0 && out[len(out)-1] == '.' {
		out = out[:len(out)-1]
	}
	return out
}

// replyHeader is what a reply says about itself.
type replyHeader struct {
	rcode                   int // with the OPT record's extended bits, once the body is read
	truncated               bool
	authoritative, recursed bool // AA and RA
	answers                 int  // records in the answer section, once the body is read
}

// matchReply reads msg's header and question and reports whether msg is
// the reply to the SRV query (id, qname, IN): QR set, opcode QUERY, the
// same ID and the same single question (the name in any case; qname is
// lowercased, without its final dot). A reply that does not match is not
// ours (a forgery, a stray packet): the caller ignores it. p is left at
// the answer section.
func matchReply(p *dnsmessage.Parser, msg []byte, id uint16, qname []byte) (h replyHeader, ok bool) {
	hdr, err := p.Start(msg)
	if err != nil || hdr.ID != id || !hdr.Response || hdr.OpCode != 0 {
		return h, false
	}
	q, err := p.Question()
	if err != nil || q.Type != dnsmessage.TypeSRV || q.Class != dnsmessage.ClassINET {
		return h, false
	}
	var buf [255]byte
	if string(lowerName(&q.Name, &buf)) != string(qname) {
		return h, false
	}
	if _, err := p.Question(); err != dnsmessage.ErrSectionDone { // exactly one question
		return h, false
	}
	return replyHeader{
		rcode:         int(hdr.RCode),
		truncated:     hdr.Truncated,
		authoritative: hdr.Authoritative,
		recursed:      hdr.RecursionAvailable,
	}, true
}

// srvRR is one SRV record of an answer.
type srvRR struct {
	target string // lowercased, no final dot; "" for "." (no service)
	port   uint16
}

// glue is a target's addresses from the additional section: the lowest
// of each family, invalid when the section had none.
type glue struct {
	v4, v6 netip.Addr
}

// add keeps a if it is the lowest of its family so far.
func (g *glue) add(a netip.Addr) {
	p := &g.v6
	if a.Is4() {
		p = &g.v4
	}
	if !p.IsValid() || a.Less(*p) {
		*p = a
	}
}

// srvReply is a parsed SRV reply.
type srvReply struct {
	h    replyHeader
	srvs []srvRR
	// glue maps each SRV target (as in srvs) to its additional A/AAAA
	// records; a target absent from the section has an empty glue.
	glue map[string]*glue
}

// malformed wraps a parser error: the reply is not a well-formed message.
func malformed(err error) error {
	return fmt.Errorf("%w: %v", errMalformed, err)
}

// parseSRVBody reads the sections of a reply that matchReply accepted,
// from where it left p: the answer section's SRV records owned by qname
// or by a name of the CNAME chain from qname, and the additional
// section's A and AAAA records owned by their targets. Records of other
// classes or types are skipped; an OPT record's extended RCODE bits join
// h.rcode. A record that does not fit the message is an error, as is a
// target that is not a host name (letters, digits, '-', '_'), and a CNAME
// chain that goes on past maxCNAMEs hops (errCNAMEChain).
func parseSRVBody(p *dnsmessage.Parser, h replyHeader, qname []byte) (srvReply, error) {
	out := srvReply{h: h}
	var buf [255]byte
	srvs, cnames, err := readAnswers(p, &out.h, &buf)
	if err != nil {
		return out, err
	}
	var chainBuf [maxCNAMEs + 1]string
	chain, err := cnameChain(chainBuf[:0], cnames, qname)
	if err != nil {
		return out, err
	}
	out.srvs, out.glue = answerSRVs(srvs, chain)
	if err := p.SkipAllAuthorities(); err != nil {
		return out, malformed(err)
	}
	if err := readAdditionals(p, &out, &buf); err != nil {
		return out, err
	}
	return out, nil
}

// ownedSRV is an answer section's SRV record with the name that owns it.
type ownedSRV struct {
	owner string
	srv   srvRR
}

// readAnswers reads the answer section from where p is, counting its
// records in h.answers: the SRV records of class IN with their owners,
// and the CNAME records as a map from owner to target (nil if none).
func readAnswers(p *dnsmessage.Parser, h *replyHeader, buf *[255]byte) (srvs []ownedSRV, cnames map[string]string, err error) {
	var owner string // the last record's owner
	for {
		rh, err := p.AnswerHeader()
		if err == dnsmessage.ErrSectionDone {
			return srvs, cnames, nil
		}
		if err != nil {
			return nil, nil, malformed(err)
		}
		h.answers++
		// The parser reads a record's data by the data's own bounds, not
		// the header's length: a record cut short at the end of the
		// message would pass. A copy of the parser skips it first, which
		// checks the length.
		if probe := *p; probe.SkipAnswer() != nil {
			return nil, nil, errMalformed
		}
		if rh.Class != dnsmessage.ClassINET || (rh.Type != dnsmessage.TypeSRV && rh.Type != dnsmessage.TypeCNAME) {
			if err := p.SkipAnswer(); err != nil {
				return nil, nil, malformed(err)
			}
			continue
		}
		if o := lowerName(&rh.Name, buf); string(o) != owner {
			owner = string(o) // the records of one owner share its string
		}
		if rh.Type == dnsmessage.TypeCNAME {
			c, err := p.CNAMEResource()
			if err != nil {
				return nil, nil, malformed(err)
			}
			if cnames == nil {
				cnames = map[string]string{}
			}
			cnames[owner] = string(lowerName(&c.CNAME, buf))
			continue
		}
		s, err := p.SRVResource()
		if err != nil {
			return nil, nil, malformed(err)
		}
		target := lowerName(&s.Target, buf)
		if !isHostName(target) {
			return nil, nil, fmt.Errorf("SRV target %q is not a host name", target)
		}
		srvs = append(srvs, ownedSRV{owner: owner, srv: srvRR{target: string(target), port: s.Port}})
	}
}

// cnameChain appends to chain (room for maxCNAMEs+1 names, so that it
// never grows) the names whose SRV records answer the question: qname and
// the CNAME chain from it, which must end within maxCNAMEs hops
// (errCNAMEChain).
func cnameChain(chain []string, cnames map[string]string, qname []byte) ([]string, error) {
	chain = append(chain, string(qname))
	for range maxCNAMEs {
		t, ok := cnames[chain[len(chain)-1]]
		if !ok {
			break
		}
		chain = append(chain, t)
	}
	if _, more := cnames[chain[len(chain)-1]]; more {
		return nil, errCNAMEChain
	}
	return chain, nil
}

// answerSRVs keeps the SRV records owned by a name of chain, in order,
// and gives each target other than "." an empty glue to fill.
func answerSRVs(srvs []ownedSRV, chain []string) ([]srvRR, map[string]*glue) {
	out := make([]srvRR, 0, len(srvs))
	glues := make(map[string]*glue, len(srvs))
	backing := make([]glue, len(srvs))
	for i, s := range srvs {
		for _, c := range chain {
			if s.owner == c {
				out = append(out, s.srv)
				if _, ok := glues[s.srv.target]; !ok && s.srv.target != "" {
					glues[s.srv.target] = &backing[i]
				}
				break
			}
		}
	}
	return out, glues
}

// readAdditionals reads the additional section from where p is: an OPT
// record's extended RCODE bits join out.h.rcode, and the A and AAAA
// records of a target in out.glue join its glue.
func readAdditionals(p *dnsmessage.Parser, out *srvReply, buf *[255]byte) error {
	for {
		rh, err := p.AdditionalHeader()
		if err == dnsmessage.ErrSectionDone {
			return nil
		}
		if err != nil {
			return malformed(err)
		}
		if probe := *p; probe.SkipAdditional() != nil {
			return errMalformed
		}
		switch {
		case rh.Type == dnsmessage.TypeOPT:
			if rh.Name.Length != 1 { // not the root
				return errMalformed
			}
			out.h.rcode = int(rh.ExtendedRCode(dnsmessage.RCode(out.h.rcode))) // RFC 6891 §6.1.3
		case rh.Class != dnsmessage.ClassINET || (rh.Type != dnsmessage.TypeA && rh.Type != dnsmessage.TypeAAAA):
		case rh.Type == dnsmessage.TypeA && rh.Length != 4, rh.Type == dnsmessage.TypeAAAA && rh.Length != 16:
			return errMalformed
		default:
			g := out.glue[string(lowerName(&rh.Name, buf))] // no allocation: the conversion is only a map key
			if g == nil {
				break // not a target's
			}
			if err := readGlue(p, rh.Type, g); err != nil {
				return err
			}
			continue
		}
		if err := p.SkipAdditional(); err != nil {
			return malformed(err)
		}
	}
}

// readGlue reads the A or AAAA record (by typ) at p into g.
func readGlue(p *dnsmessage.Parser, typ dnsmessage.Type, g *glue) error {
	if typ == dnsmessage.TypeA {
		a, err := p.AResource()
		if err != nil {
			return malformed(err)
		}
		g.add(netip.AddrFrom4(a.A))
		return nil
	}
	a, err := p.AAAAResource()
	if err != nil {
		return malformed(err)
	}
	g.add(netip.AddrFrom16(a.AAAA).Unmap())
	return nil
}

// isHostName reports whether name (lowercased, dotted, no final dot) is
// made of letters, digits, '-' and '_' only; "" (the root) is allowed.
func isHostName(name []byte) bool {
	for _, c := range name {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
