package config

// This file checks the discovery block: its settings and each source
// (srv, host or kubernetes).

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ringlb/ringlb/balancer/discovery"
)

// validateDiscovery checks the discovery block and each of its sources.
func (d *decoder) validateDiscovery(c *Pool) {
	disc := c.Discovery
	d.validateDiscoverySettings(c)
	if len(disc.Sources) == 0 {
		d.invalid("discovery.sources", "must list at least one source (or remove the discovery block)")
		return
	}
	ppwOK := !d.isBad("ring.points_per_weight") && c.Ring.PointsPerWeight > 0 && c.Ring.PointsPerWeight <= maxPointsPerWeight
	names := map[string]int{}
	for i := range disc.Sources {
		d.validateSource(c, i, names, ppwOK)
	}
}

// validateDiscoverySettings checks the discovery block's own fields: the
// resolver, kubeconfig, cluster domain and timing.
func (d *decoder) validateDiscoverySettings(c *Pool) {
	disc := c.Discovery
	if c.Ring.Placement == "nginx" && !d.isBad("ring.placement") {
		d.invalid("discovery", "needs placement ringlb: placement nginx identifies upstreams by the host:port written in the config")
	}
	if disc.Resolver != "" {
		if host, port, ok := splitHostPort(disc.Resolver); !ok || host == "" || port < 1 {
			d.invalid("discovery.resolver", "must be host:port of a DNS server with a port 1-65535 (or \"\" for the system's), got %q", short(disc.Resolver))
		}
	}
	if disc.Kubeconfig != "" {
		// Read and parsed as serve would, but the API server is not asked.
		if _, err := discovery.KubeRESTConfig(disc.Kubeconfig); err != nil {
			if inner := errors.Unwrap(err); inner != nil {
				err = inner
			}
			d.invalid("discovery.kubeconfig", "%q: cannot load: %v", disc.Kubeconfig, err)
		}
	}
	if !validDNSName(disc.ClusterDomain) {
		d.invalid("discovery.cluster_domain", "must be a DNS name like cluster.local, got %q", short(disc.ClusterDomain))
	}
	positive("discovery.interval", disc.Interval, d)
	positive("discovery.timeout", disc.Timeout, d)
	if disc.Interval > 0 && disc.Timeout > 0 && disc.Timeout >= disc.Interval && !d.isBad("discovery.interval") {
		d.invalid("discovery.timeout", "must be < discovery.interval (%s), got %s", disc.Interval, disc.Timeout)
	}
	if disc.RemoveAfter < 0 {
		d.invalid("discovery.remove_after", "must be >= 0, got %s", disc.RemoveAfter)
	}
	if disc.Confirm < 1 {
		d.invalid("discovery.confirm", "must be >= 1, got %d", disc.Confirm)
	}
}

// validateSource checks discovery.sources[i], noting its name in names
// (the sources' names seen, to their index).
func (d *decoder) validateSource(c *Pool, i int, names map[string]int, ppwOK bool) {
	disc := c.Discovery
	s, f := &disc.Sources[i], index("discovery.sources", i)
	hasSRV, hasHost, hasKube := d.has(f+".srv"), d.has(f+".host"), d.has(f+".kubernetes")
	kinds := 0
	for _, k := range []bool{hasSRV, hasHost, hasKube} {
		if k {
			kinds++
		}
	}
	switch {
	case d.isBad(f + ".srv"), d.isBad(f + ".host"), d.isBad(f + ".kubernetes"):
	case kinds > 1 && hasKube:
		d.invalid(f+".kubernetes", "a source has one of srv, host and kubernetes, not several")
	case hasSRV && hasHost:
		d.invalid(f+".host", "a source has either srv or host, not both")
	case kinds == 0:
		d.invalid(f, "needs srv (a name with SRV records) or host (a name with A/AAAA records), or kubernetes (a Service's EndpointSlices)")
	case hasKube && !d.validKube(f+".kubernetes", &s.Kubernetes):
	case hasSRV && !validDNSName(s.SRV):
		d.invalid(f+".srv", "must be a DNS name like _http._tcp.app.example, got %q", short(s.SRV))
	case hasHost && !validDNSName(s.Host) && !isIP(s.Host):
		d.invalid(f+".host", "must be a DNS name or an IP address, got %q", short(s.Host))
	default:
		name := s.Name()
		if hasKube {
			name = kubeName(*s, disc.Kubeconfig)
		}
		if j, dup := names[name]; dup {
			d.invalid(f, "%q is already discovery.sources[%d]; sources are named by their srv or host value, which must be unique", name, j)
		} else {
			names[name] = i
		}
	}
	switch {
	case hasKube && d.has(f+".port"):
		d.invalid(f+".port", "only with host: a kubernetes source names its port in kubernetes.port")
	case kinds != 1 || hasKube:
	case hasHost && !d.has(f+".port"):
		d.invalid(f+".port", "required with host: the port the members listen on")
	case hasHost && (s.Port < 1 || s.Port > 65535):
		d.invalid(f+".port", "must be 1-65535, got %d", s.Port)
	case hasSRV && d.has(f+".port"):
		d.invalid(f+".port", "only with host: SRV records carry their own ports")
	}
	scheme := s.Scheme == "http" || s.Scheme == "https"
	if !scheme {
		d.invalid(f+".scheme", "must be http or https, got %q", short(s.Scheme))
	}
	switch s.Protocol {
	case ProtocolHTTP1:
	case ProtocolH2C:
		if s.Scheme == "https" {
			d.invalid(f+".protocol", "h2c is cleartext HTTP/2 and needs scheme http; with https use h2")
		}
	case ProtocolH2:
		if s.Scheme == "http" {
			d.invalid(f+".protocol", "h2 needs scheme https; for cleartext HTTP/2 use h2c")
		}
	default:
		d.invalid(f+".protocol", "must be http1, h2c or h2, got %q", short(s.Protocol))
	}
	d.checkWeight(f+".weight", s.Weight, c, ppwOK, false)
}

// kubeName is the name of s, a kubernetes source of a discovery block
// whose kubeconfig is kubeconfig: an unset namespace is the one
// discovery.DefaultNamespace gives, as the Discoverer names the source.
func kubeName(s DiscoverySource, kubeconfig string) string {
	k := s.Kubernetes
	if k.Namespace == "" {
		k.Namespace = discovery.DefaultNamespace(kubeconfig)
	}
	return k.String()
}

// validKube checks a source's kubernetes block (f is its field), asking
// no API server: the names as Kubernetes validates them, and a port that
// is a number 1-65535 or a port name. It reports whether all is well.
func (d *decoder) validKube(f string, k *KubernetesSource) bool {
	ok := true
	switch {
	case d.isBad(f + ".service"):
		ok = false
	case !d.has(f + ".service"):
		d.invalid(f+".service", "required: the name of the Service whose EndpointSlices list the members")
		ok = false
	case !dnsLabel(k.Service, true):
		d.invalid(f+".service", "must be a Service name (lowercase letters, digits and '-', starting with a letter, at most 63), got %q", short(k.Service))
		ok = false
	}
	if k.Namespace != "" && !dnsLabel(k.Namespace, false) {
		d.invalid(f+".namespace", "must be a namespace name (lowercase letters, digits and '-', at most 63), got %q", short(k.Namespace))
		ok = false
	}
	switch {
	case d.isBad(f + ".port"):
		ok = false
	case !d.has(f + ".port"):
		d.invalid(f+".port", "required: the EndpointSlice port, by name (http) or number (8080)")
		ok = false
	case !validKubePort(k.Port):
		d.invalid(f+".port", "must be a port number 1-65535 or a port name (lowercase letters, digits and '-', at most 15, with a letter), got %q", short(k.Port))
		ok = false
	}
	return ok
}

// dnsLabel reports whether s is an RFC 1123 label as Kubernetes names are
// (lowercase letters, digits and '-', alphanumeric at both ends, 1-63
// characters); letterFirst asks for RFC 1035's leading letter (Service
// names).
func dnsLabel(s string, letterFirst bool) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' || letterFirst && !(s[0] >= 'a' && s[0] <= 'z') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// validKubePort reports whether s is a port number 1-65535 or an
// IANA_SVC_NAME as Kubernetes port names are: at most 15 lowercase
// letters, digits and '-', at least one letter, no '-' at either end nor
// two in a row.
func validKubePort(s string) bool {
	if n, err := strconv.Atoi(s); err == nil {
		return n >= 1 && n <= 65535 && strconv.Itoa(n) == s
	}
	if s == "" || len(s) > 15 || !dnsLabel(s, false) || strings.Contains(s, "--") {
		return false
	}
	return strings.ContainsAny(s, "abcdefghijklmnopqrstuvwxyz")
}

// validDNSName reports whether s is a DNS name as resolvers accept it:
// dot-separated labels of 1-63 letters, digits, '-' or '_', at most 253
// characters, with an optional final dot.
func validDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// isIP reports whether s is an IP address without a zone.
func isIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == ""
}
