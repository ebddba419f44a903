package discovery

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// querySRV asks the configured server for name's SRV records itself,
// because Go's resolver drops the additional section, where servers such
// as CoreDNS (Kubernetes headless services) and Consul put the targets'
// A and AAAA records; with them, 1000 members cost one query instead of
// 1001. One UDP query with EDNS0 (a 4096-byte buffer), then TCP when the
// reply is truncated; the whole exchange is bounded by the per-query
// timeout.
//
// The reply is classified as Go's resolver classifies it, so that the
// answers and failures are those of the documented contract: NOERROR with
// records, NXDOMAIN, and NOERROR without records are answers (the last
// two empty); any other RCODE, a timeout, an unreachable server, a
// malformed reply, a reply still truncated over TCP, and a lame referral
// (NOERROR with no answer and neither AA nor RA set) are failures. A UDP
// packet that is not the reply to our query (another ID or question) is
// ignored, as Go's resolver does, and the wait goes on until the timeout.
func (rs *resolver) querySRV(ctx context.Context, name string) (srvReply, error) {
	ctx, cancel := context.WithTimeout(ctx, rs.timeout)
	defer cancel()
	qname := fqdn(name)
	fail := func(err error) (srvReply, error) {
		return srvReply{}, failure(qname, rs.r.addr, err)
	}
	id := uint16(rand.Uint32())
	query, err := appendQuery(make([]byte, 0, 64+len(qname)), id, qname)
	if err != nil {
		return fail(err)
	}
	lname := []byte(strings.ToLower(strings.TrimSuffix(qname, ".")))

	reply, err := rs.exchange(ctx, "udp", query, id, lname)
	if err == nil && reply.h.truncated {
		reply, err = rs.exchange(ctx, "tcp", query, id, lname)
		if err == nil && reply.h.truncated {
			err = errors.New("reply truncated over TCP")
		}
	}
	if err != nil {
		return fail(err)
	}
	switch h := reply.h; {
	case h.rcode == int(dnsmessage.RCodeNameError):
		return srvReply{}, nil
	case h.rcode != int(dnsmessage.RCodeSuccess):
		return fail(fmt.Errorf("server answered %s", rcodeString(h.rcode)))
	case h.answers == 0 && !h.authoritative && !h.recursed:
		return fail(errors.New("lame referral"))
	}
	return reply, nil
}

// exchange sends query over network ("udp" or "tcp") to the server and
// reads the reply, until ctx is done.
func (rs *resolver) exchange(ctx context.Context, network string, query []byte, id uint16, qname []byte) (srvReply, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, rs.r.addr)
	if err != nil {
		return srvReply{}, err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline() // set: querySRV's timeout
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) }) // a cancelled poll returns at once
	defer stop()

	var p dnsmessage.Parser
	if network == "udp" {
		if _, err := c.Write(query); err != nil {
			return srvReply{}, err
		}
		buf := make([]byte, 1<<16) // whatever the server sends fits, even beyond the size we advertised
		for {
			n, err := c.Read(buf)
			if err != nil {
				return srvReply{}, err
			}
			h, ok := matchReply(&p, buf[:n], id, qname)
			if !ok {
				continue // not the reply to this query
			}
			if h.truncated {
				return srvReply{h: h}, nil // the caller asks again over TCP
			}
			return parseSRVBody(&p, h, qname)
		}
	}

	// TCP: each message is preceded by its length (RFC 1035 §4.2.2).
	msg := make([]byte, 2, 2+len(query))
	binary.BigEndian.PutUint16(msg, uint16(len(query)))
	if _, err := c.Write(append(msg, query...)); err != nil {
		return srvReply{}, err
	}
	var length [2]byte
	if _, err := io.ReadFull(c, length[:]); err != nil {
		return srvReply{}, err
	}
	reply := make([]byte, binary.BigEndian.Uint16(length[:]))
	if _, err := io.ReadFull(c, reply); err != nil {
		return srvReply{}, err
	}
	h, ok := matchReply(&p, reply, id, qname)
	if !ok {
		return srvReply{}, errors.New("TCP reply does not match the query")
	}
	return parseSRVBody(&p, h, qname)
}
