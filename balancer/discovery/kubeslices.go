package discovery

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// A Kubernetes source's answer from its EndpointSlices: the identity and
// the conditions of each endpoint, as kube.go describes them.

// sliceRecords returns the answer the slices give for k: one record per
// serving endpoint, sorted by name, each name once.
func sliceRecords(sl []*endpointSlice, k KubeService, domain string) []record {
	type cand struct {
		record
		addr netip.Addr
	}
	var cands []cand
	for _, s := range sl {
		if s.AddressType != addressTypeIPv4 && s.AddressType != addressTypeIPv6 {
			continue // FQDN slices name no address
		}
		port, ok := slicePort(s, k.Port)
		if !ok {
			continue
		}
		ns := cmp.Or(s.Namespace, k.Namespace)
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			c := ep.Conditions
			if c.Serving != nil && !*c.Serving || len(ep.Addresses) == 0 {
				continue
			}
			a, err := netip.ParseAddr(ep.Addresses[0])
			if err != nil {
				continue
			}
			a = a.Unmap()
			ap := netip.AddrPortFrom(a, port).String()
			p := strconv.Itoa(int(port))
			var name string
			switch {
			case ep.Hostname != nil && *ep.Hostname != "":
				name = strings.ToLower(*ep.Hostname + "." + k.Service + "." + ns + ".svc." + strings.TrimSuffix(domain, ".") + ":" + p)
			case ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ep.TargetRef.Name != "":
				name = ep.TargetRef.Name + "." + cmp.Or(ep.TargetRef.Namespace, ns) + ":" + p
			default:
				name = ap
			}
			cands = append(cands, cand{record{name: name, addr: ap, terminating: c.Terminating != nil && *c.Terminating}, a})
		}
	}
	// Per name the best first: not terminating, then IPv4, then the lowest address.
	slices.SortFunc(cands, func(a, b cand) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if a.terminating != b.terminating {
			if a.terminating {
				return 1
			}
			return -1
		}
		if a.addr.Is4() != b.addr.Is4() {
			if a.addr.Is4() {
				return -1
			}
			return 1
		}
		return a.addr.Compare(b.addr)
	})
	var recs []record
	for i, c := range cands {
		if i > 0 && cands[i-1].name == c.name {
			continue
		}
		recs = append(recs, c.record)
	}
	return recs
}

// slicePort returns the number of the slice's TCP port called want (a
// name, or a number).
func slicePort(s *endpointSlice, want string) (uint16, bool) {
	n, numeric := strconv.Atoi(want)
	for _, p := range s.Ports {
		if p.Port == nil || *p.Port < 1 || *p.Port > 65535 || p.Protocol != nil && *p.Protocol != "TCP" {
			continue
		}
		if numeric == nil && int(*p.Port) == n || numeric != nil && p.Name != nil && *p.Name == want {
			return uint16(*p.Port), true
		}
	}
	return 0, false
}
