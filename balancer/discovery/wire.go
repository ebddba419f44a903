package discovery

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// The DNS wire format (RFC 1035 §4), just what one SRV query needs: a
// query writer and a reply reader that keeps the answer section's SRV
// records and the additional section's A and AAAA records of their
// targets. The reader checks every bound and never panics, whatever the
// bytes (see FuzzParseSRVReply).

const (
	typeA     = 1
	typeCNAME = 5
	typeAAAA  = 28
	typeSRV   = 33
	typeOPT   = 41
	classIN   = 1

	rcodeSuccess  = 0
	rcodeNXDomain = 3

	headerLen   = 12
	maxNameWire = 255  // a name's wire length, label lengths and final 0 included
	ednsSize    = 4096 // the UDP reply size we advertise (EDNS0)
	maxCNAMEs   = 8    // CNAME hops followed from the question to the SRV records
)

var errMalformed = errors.New("malformed DNS reply")

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

// appendName appends name (dotted, absolute or not, no escapes) in wire
// form: length-prefixed labels and a final zero.
func appendName(b []byte, name string) ([]byte, error) {
	name = strings.TrimSuffix(name, ".")
	wire := 1
	if name != "" {
		for label := range strings.SplitSeq(name, ".") {
			if len(label) == 0 || len(label) > 63 {
				return b, fmt.Errorf("bad DNS name %q: empty label or one longer than 63 bytes", name)
			}
			wire += 1 + len(label)
			b = append(b, byte(len(label)))
			b = append(b, label...)
		}
	}
	if wire > maxNameWire {
		return b, fmt.Errorf("bad DNS name %q: longer than 255 bytes", name)
	}
	return append(b, 0), nil
}

// appendQuery appends a recursive query for (name, qtype, IN) with message
// ID id and an EDNS0 OPT record advertising a 4096-byte UDP buffer.
func appendQuery(b []byte, id uint16, name string, qtype uint16) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, id)
	b = binary.BigEndian.AppendUint16(b, 0x0100) // RD: recursion desired
	b = binary.BigEndian.AppendUint16(b, 1)      // QDCOUNT
	b = binary.BigEndian.AppendUint16(b, 0)      // ANCOUNT
	b = binary.BigEndian.AppendUint16(b, 0)      // NSCOUNT
	b = binary.BigEndian.AppendUint16(b, 1)      // ARCOUNT: the OPT record
	b, err := appendName(b, name)
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint16(b, qtype)
	b = binary.BigEndian.AppendUint16(b, classIN)
	// OPT (RFC 6891): root owner, class = UDP size, TTL = ext. RCODE,
	// version and flags (all 0), no options.
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, typeOPT)
	b = binary.BigEndian.AppendUint16(b, ednsSize)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint16(b, 0)
	return b, nil
}

// readName reads the possibly compressed name at off of msg into buf
// (which it resets), lowercased (ASCII), dotted, without a final dot ("" is
// the root). It returns the name and the offset just past it where it
// started. Each compression pointer must point before the start of the
// labels that led to it, so a loop is impossible; the name's wire length
// is bounded by 255 bytes; a label holding a dot is refused.
func readName(msg []byte, off int, buf []byte) ([]byte, int, error) {
	buf = buf[:0]
	next := -1     // where reading resumes after the name
	segment := off // start of the labels being read (the last jump's target)
	wire := 1      // the final zero
	for {
		if off >= len(msg) {
			return nil, 0, errMalformed
		}
		c := int(msg[off])
		switch c & 0xC0 {
		case 0x00:
			if c == 0 {
				if next < 0 {
					next = off + 1
				}
				return buf, next, nil
			}
			if off+1+c > len(msg) {
				return nil, 0, errMalformed
			}
			if wire += 1 + c; wire > maxNameWire {
				return nil, 0, errMalformed
			}
			if len(buf) > 0 {
				buf = append(buf, '.')
			}
			for _, ch := range msg[off+1 : off+1+c] {
				switch {
				case ch == '.':
					return nil, 0, errMalformed
				case 'A' <= ch && ch <= 'Z':
					ch += 'a' - 'A'
				}
				buf = append(buf, ch)
			}
			off += 1 + c
		case 0xC0:
			if off+1 >= len(msg) {
				return nil, 0, errMalformed
			}
			ptr := (c&0x3F)<<8 | int(msg[off+1])
			if ptr >= segment {
				return nil, 0, errMalformed // forward or looping pointer
			}
			if next < 0 {
				next = off + 2
			}
			off, segment = ptr, ptr
		default: // 0x40, 0x80: reserved label types
			return nil, 0, errMalformed
		}
	}
}

// rr is one resource record's header, its data at msg[data:end].
type rr struct {
	typ, class uint16
	ttl        uint32
	data, end  int
}

// readRR reads the record at off, its owner name into buf.
func readRR(msg []byte, off int, buf []byte) (owner []byte, r rr, next int, err error) {
	owner, off, err = readName(msg, off, buf)
	if err != nil {
		return nil, rr{}, 0, err
	}
	if off+10 > len(msg) {
		return nil, rr{}, 0, errMalformed
	}
	r.typ = binary.BigEndian.Uint16(msg[off:])
	r.class = binary.BigEndian.Uint16(msg[off+2:])
	r.ttl = binary.BigEndian.Uint32(msg[off+4:])
	n := int(binary.BigEndian.Uint16(msg[off+8:]))
	r.data, r.end = off+10, off+10+n
	if r.end > len(msg) {
		return nil, rr{}, 0, errMalformed
	}
	return owner, r, r.end, nil
}

// replyHeader is what a reply says about itself.
type replyHeader struct {
	rcode                   int // with the OPT record's extended bits, once the body is read
	truncated               bool
	authoritative, recursed bool // AA and RA
	an, ns, ar              int  // section counts
}

// matchReply reads msg's header and question and reports whether msg is
// the reply to the query (id, qname, qtype, IN): QR set, opcode QUERY,
// the same ID and the same single question (the name in any case). A
// reply that does not match is not ours (a forgery, a stray packet): the
// caller ignores it. off is where the answer section starts.
func matchReply(msg []byte, id uint16, qname []byte, qtype uint16, buf []byte) (h replyHeader, off int, ok bool) {
	if len(msg) < headerLen || binary.BigEndian.Uint16(msg) != id {
		return h, 0, false
	}
	flags := binary.BigEndian.Uint16(msg[2:])
	if flags&0x8000 == 0 || flags>>11&0xF != 0 || binary.BigEndian.Uint16(msg[4:]) != 1 {
		return h, 0, false
	}
	h = replyHeader{
		rcode:         int(flags & 0xF),
		truncated:     flags&0x0200 != 0,
		authoritative: flags&0x0400 != 0,
		recursed:      flags&0x0080 != 0,
		an:            int(binary.BigEndian.Uint16(msg[6:])),
		ns:            int(binary.BigEndian.Uint16(msg[8:])),
		ar:            int(binary.BigEndian.Uint16(msg[10:])),
	}
	name, off, err := readName(msg, headerLen, buf)
	if err != nil || off+4 > len(msg) || string(name) != string(qname) ||
		binary.BigEndian.Uint16(msg[off:]) != qtype || binary.BigEndian.Uint16(msg[off+2:]) != classIN {
		return h, 0, false
	}
	return h, off + 4, true
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

// parseSRVBody reads the sections of a reply that matchReply accepted,
// from off: the answer section's SRV records owned by qname (or by a name
// a CNAME chain from qname leads to), and the additional section's A and
// AAAA records owned by their targets. Records of other classes or types
// are skipped; an OPT record's extended RCODE bits join h.rcode. A record
// or name that does not fit the message is an error, as is a target that
// is not a host name (letters, digits, '-', '_').
func parseSRVBody(msg []byte, off int, h replyHeader, qname []byte) (srvReply, error) {
	out := srvReply{h: h}
	var buf [maxNameWire]byte
	type owned struct {
		owner string
		srv   srvRR
	}
	var (
		srvs   []owned
		cnames map[string]string
	)
	for range h.an {
		owner, r, next, err := readRR(msg, off, buf[:0])
		if err != nil {
			return out, err
		}
		off = next
		if r.class != classIN || (r.typ != typeSRV && r.typ != typeCNAME) {
			continue
		}
		ownerStr := string(owner)
		if r.typ == typeCNAME {
			target, end, err := readName(msg, r.data, buf[:0])
			if err != nil || end != r.end {
				return out, errMalformed
			}
			if cnames == nil {
				cnames = map[string]string{}
			}
			cnames[ownerStr] = string(target)
			continue
		}
		if r.end-r.data < 7 { // priority, weight, port, at least the root
			return out, errMalformed
		}
		port := binary.BigEndian.Uint16(msg[r.data+4:])
		target, end, err := readName(msg, r.data+6, buf[:0])
		if err != nil || end != r.end {
			return out, errMalformed
		}
		if !isHostName(target) {
			return out, fmt.Errorf("SRV target %q is not a host name", target)
		}
		srvs = append(srvs, owned{owner: ownerStr, srv: srvRR{target: string(target), port: port}})
	}

	// The names whose SRV records answer the question.
	chain := []string{string(qname)}
	for range maxCNAMEs {
		t, ok := cnames[chain[len(chain)-1]]
		if !ok {
			break
		}
		chain = append(chain, t)
	}
	out.srvs = make([]srvRR, 0, len(srvs))
	out.glue = make(map[string]*glue, len(srvs))
	glues := make([]glue, len(srvs))
	for i, s := range srvs {
		for _, c := range chain {
			if s.owner == c {
				out.srvs = append(out.srvs, s.srv)
				if _, ok := out.glue[s.srv.target]; !ok && s.srv.target != "" {
					out.glue[s.srv.target] = &glues[i]
				}
				break
			}
		}
	}

	for range h.ns {
		_, _, next, err := readRR(msg, off, buf[:0])
		if err != nil {
			return out, err
		}
		off = next
	}
	for range h.ar {
		owner, r, next, err := readRR(msg, off, buf[:0])
		if err != nil {
			return out, err
		}
		off = next
		switch {
		case r.typ == typeOPT:
			if len(owner) != 0 {
				return out, errMalformed
			}
			out.h.rcode |= int(r.ttl>>24) << 4 // extended RCODE, RFC 6891 §6.1.3
		case r.class != classIN || (r.typ != typeA && r.typ != typeAAAA):
		case r.typ == typeA && r.end-r.data != 4, r.typ == typeAAAA && r.end-r.data != 16:
			return out, errMalformed
		default:
			g := out.glue[string(owner)] // no allocation: the conversion is only a map key
			if g == nil {
				continue // not a target's
			}
			a, _ := netip.AddrFromSlice(msg[r.data:r.end])
			g.add(a.Unmap())
		}
	}
	return out, nil
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
