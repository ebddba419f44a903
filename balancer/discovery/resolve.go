package discovery

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// record is one member of an answer: its identity and where it listens.
type record struct {
	name string // identity: target:port or address:port
	addr string // address:port ([v6]:port), the URL's host
	// terminating: a Kubernetes endpoint that is serving and terminating
	terminating bool
}

// compareRecords orders records by name, then address.
func compareRecords(a, b record) int {
	return cmp.Or(strings.Compare(a.name, b.name), strings.Compare(a.addr, b.addr))
}

// sortRecords sorts an answer by name and drops repeated records. Names are
// unique afterwards except when an SRV answer gives one target:port two
// addresses, which cannot happen (a target has one chosen address).
func sortRecords(recs []record) []record {
	slices.SortFunc(recs, compareRecords)
	return slices.CompactFunc(recs, func(a, b record) bool { return a.name == b.name })
}

// maxParallel bounds the address lookups of one SRV answer in flight at once.
const maxParallel = 16

// client asks DNS questions: SRV questions itself when addr is set (see
// querySRV), everything else through Go's resolver.
type client struct {
	net  *net.Resolver
	addr string // host:port of the server; "": the system's configuration
}

// newResolver returns a client sending every query to addr (host:port), or
// following the system's configuration when addr is "". Go's resolver is
// built with StrictErrors, which makes a failed sub-query (SERVFAIL,
// timeout) fail the whole lookup instead of being masked by another
// sub-query's "not found".
func newResolver(addr string) *client {
	r := &net.Resolver{PreferGo: true, StrictErrors: true}
	if addr != "" {
		r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	return &client{net: r, addr: addr}
}

// notFound reports whether err is an answer rather than a failure: the
// name does not exist (NXDOMAIN) or has no records of the type asked.
func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// queryError is a failed DNS query, told by what failed and the server
// asked, never by the sockets used: every retry of one outage dials from
// a new ephemeral port, and must read the same (one warning per outage).
type queryError struct {
	name   string // the name asked, absolute
	server string // host:port of the server asked
	kind   string // what failed: "timeout", "connection refused", "server answered SERVFAIL", ...
	err    error  // the cause, with its sockets
}

func (e *queryError) Error() string { return "lookup " + e.name + " on " + e.server + ": " + e.kind }
func (e *queryError) Unwrap() error { return e.err }

// failure returns the error of a query for name that failed with err.
// server is the server asked; "" takes the one Go's resolver reports.
func failure(name, server string, err error) error {
	var de *net.DNSError
	if errors.As(err, &de) && server == "" {
		server = de.Server
	}
	if server == "" {
		server = "the system's resolver"
	}
	return &queryError{name: fqdn(name), server: server, kind: failureKind(err), err: err}
}

// failureKind says what failed, without addresses: "timeout", the socket
// error ("connection refused", "network is unreachable"), Go's resolver's
// verdict ("server misbehaving" for SERVFAIL), or our own reading of the
// reply ("server answered REFUSED", "lame referral", ...).
func failureKind(err error) string {
	var (
		de *net.DNSError
		ne net.Error
		op *net.OpError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.As(err, &de):
		if de.IsTimeout {
			return "timeout"
		}
		return lastPart(de.Err) // "read udp 127.0.0.1:41234->…: read: connection refused"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &op):
		return lastPart(op.Err.Error())
	}
	return err.Error()
}

// lastPart returns what follows the last ": " of a socket error's text,
// which is what failed without the addresses before it.
func lastPart(s string) string {
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// failureKey is what two failures of a source compare by: one outage
// (the same kind of failure from the same server) logs one warning,
// whatever the name or the sockets of each retry.
func failureKey(err error) string {
	var qe *queryError
	if errors.As(err, &qe) {
		return qe.server + " " + qe.kind
	}
	return err.Error()
}

// fqdn returns name with a final dot, so the resolver asks exactly it,
// never a search-list variant.
func fqdn(name string) string {
	if strings.HasSuffix(name, ".") {
		return name
	}
	return name + "."
}

// resolver resolves sources with one client and a per-query timeout.
type resolver struct {
	r       *client
	timeout time.Duration
}

// resolve asks the source's question and returns its answer sorted by name,
// each name once; an empty answer (NXDOMAIN, no records) is a nil slice and
// a nil error. A non-nil error means the query failed and says nothing
// about membership.
func (rs *resolver) resolve(ctx context.Context, s Source) ([]record, error) {
	if s.SRV != "" {
		return rs.resolveSRV(ctx, s.SRV)
	}
	return rs.resolveHost(ctx, s.Host, s.Port)
}

// lookupIP resolves one address family ("ip4" or "ip6") of name with the
// per-query timeout. Not found is an empty answer.
func (rs *resolver) lookupIP(ctx context.Context, network, name string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(name); err == nil { // an IP literal answers itself
		if (network == "ip4") == a.Unmap().Is4() {
			return []netip.Addr{a.Unmap()}, nil
		}
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, rs.timeout)
	defer cancel()
	addrs, err := rs.r.net.LookupNetIP(ctx, network, fqdn(name))
	if err != nil {
		if notFound(err) {
			return nil, nil
		}
		return nil, failure(name, rs.r.addr, err)
	}
	return addrs, nil
}

// resolveHost gives one member per A and AAAA address of name.
func (rs *resolver) resolveHost(ctx context.Context, name string, port int) ([]record, error) {
	v4, err := rs.lookupIP(ctx, "ip4", name)
	if err != nil {
		return nil, err
	}
	v6, err := rs.lookupIP(ctx, "ip6", name)
	if err != nil {
		return nil, err
	}
	if len(v4)+len(v6) == 0 {
		return nil, nil
	}
	recs := make([]record, 0, len(v4)+len(v6))
	for _, a := range slices.Concat(v4, v6) {
		ap := netip.AddrPortFrom(a.Unmap(), uint16(port)).String()
		recs = append(recs, record{name: ap, addr: ap})
	}
	return sortRecords(recs), nil
}

// resolveSRV gives one member per distinct target:port of name's SRV
// records, at the target's lowest IPv4 address (else lowest IPv6). A target
// with no address is left out; a target whose address lookup fails fails
// the whole answer. Addresses the SRV reply carried in its additional
// section are used as they are; only the other targets are looked up.
func (rs *resolver) resolveSRV(ctx context.Context, name string) ([]record, error) {
	srvs, glues, err := rs.lookupSRV(ctx, name)
	if err != nil {
		return nil, err
	}
	targets, names, lookups := srvTargets(srvs, glues)
	if len(lookups) > 0 {
		if err := rs.lookupTargets(ctx, targets, lookups); err != nil {
			return nil, err
		}
	}
	return srvRecords(targets, names), nil
}

// srvTarget is one distinct target of an SRV answer.
type srvTarget struct {
	host string // absolute
	glue glue   // from the reply's additional section
	addr netip.Addr
}

// srvName is one target:port of an SRV answer.
type srvName struct {
	name   string
	target int // index in the targets
	port   uint16
}

// srvTargets gives the distinct targets of srvs (one address lookup each,
// unless the reply gave an IPv4 address) with their glue, the target:port
// names, and the indexes of the targets without an IPv4 address from the
// reply. A "." target is left out.
func srvTargets(srvs []srvRR, glues map[string]*glue) (targets []srvTarget, names []srvName, lookups []int) {
	targets = make([]srvTarget, 0, len(srvs))
	index := make(map[string]int, len(srvs)) // lowercased target → targets index
	names = make([]srvName, 0, len(srvs))
	for _, s := range srvs {
		host := s.target
		if host == "" { // "." : the service is decidedly not available here (RFC 2782)
			continue
		}
		i, ok := index[host]
		if !ok {
			i = len(targets)
			index[host] = i
			t := srvTarget{host: fqdn(host)}
			if g := glues[host]; g != nil {
				t.glue = *g
			}
			if t.glue.v4.IsValid() {
				t.addr = t.glue.v4
			} else {
				lookups = append(lookups, i)
			}
			targets = append(targets, t)
		}
		names = append(names, srvName{name: host + ":" + strconv.Itoa(int(s.port)), target: i, port: s.port})
	}
	return targets, names, lookups
}

// lookupTargets looks up the address of each target of lookups, a few at
// once; the first failure cancels the rest and is the error.
func (rs *resolver) lookupTargets(ctx context.Context, targets []srvTarget, lookups []int) error {
	ctx, cancelAll := context.WithCancel(ctx)
	defer cancelAll()
	var (
		mu      sync.Mutex
		failure error
		wg      sync.WaitGroup
		next    = make(chan int)
	)
	for range min(maxParallel, len(lookups)) {
		wg.Go(func() {
			for i := range next {
				a, err := rs.address(ctx, targets[i].host, targets[i].glue.v6)
				if err != nil {
					mu.Lock()
					if failure == nil {
						failure = err
						cancelAll()
					}
					mu.Unlock()
					continue
				}
				targets[i].addr = a
			}
		})
	}
feed:
	for _, i := range lookups {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if failure != nil {
		return failure
	}
	return ctx.Err()
}

// srvRecords gives one record per name whose target has an address,
// sorted; none is a nil slice.
func srvRecords(targets []srvTarget, names []srvName) []record {
	recs := make([]record, 0, len(names))
	for _, n := range names {
		a := targets[n.target].addr
		if !a.IsValid() {
			continue // no address: left out of this answer
		}
		recs = append(recs, record{name: n.name, addr: netip.AddrPortFrom(a, n.port).String()})
	}
	if len(recs) == 0 {
		return nil
	}
	return sortRecords(recs)
}

// lookupSRV returns name's SRV records, targets lowercased without their
// final dot, and the addresses the reply's additional section gave them
// (nil through Go's resolver, which drops that section). No records
// (NXDOMAIN, none of the type) is an empty answer.
func (rs *resolver) lookupSRV(ctx context.Context, name string) ([]srvRR, map[string]*glue, error) {
	if rs.r.addr != "" {
		reply, err := rs.querySRV(ctx, name)
		return reply.srvs, reply.glue, err
	}
	qctx, cancel := context.WithTimeout(ctx, rs.timeout)
	_, srvs, err := rs.r.net.LookupSRV(qctx, "", "", fqdn(name))
	cancel()
	if err != nil {
		if notFound(err) {
			return nil, nil, nil
		}
		return nil, nil, failure(name, "", err)
	}
	out := make([]srvRR, len(srvs))
	for i, s := range srvs {
		out[i] = srvRR{target: strings.ToLower(strings.TrimSuffix(s.Target, ".")), port: s.Port}
	}
	return out, nil, nil
}

// address returns host's lowest IPv4 address, else its lowest IPv6 one,
// else the zero Addr (no address: an answer, not a failure). The AAAA
// query is only made when there is no IPv4 address, and not at all when
// v6 (the lowest IPv6 address the SRV reply gave) is valid.
func (rs *resolver) address(ctx context.Context, host string, v6 netip.Addr) (netip.Addr, error) {
	for _, network := range [...]string{"ip4", "ip6"} {
		if network == "ip6" && v6.IsValid() {
			return v6, nil
		}
		addrs, err := rs.lookupIP(ctx, network, host)
		if err != nil {
			return netip.Addr{}, err
		}
		if len(addrs) > 0 {
			lowest := addrs[0].Unmap()
			for _, a := range addrs[1:] {
				if a = a.Unmap(); a.Less(lowest) {
					lowest = a
				}
			}
			return lowest, nil
		}
	}
	return netip.Addr{}, nil
}
