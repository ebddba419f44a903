// Package discovery turns DNS answers into ring members: SRV records (one
// member per target) and A/AAAA records (one member per address), each
// source resolved again every interval through a chosen resolver.
//
// It knows nothing of the balancer. A Discoverer resolves, keeps each
// source's membership, and calls Options.OnChange with the whole member
// list when, and only when, something changed; the caller builds its next
// snapshot from that list. Usage:
//
//	d, err := discovery.New(discovery.Options{
//		Resolver: "10.96.0.10:53", Interval: 5 * time.Second, Timeout: 2 * time.Second,
//		RemoveAfter: 5 * time.Minute, Confirm: 3,
//		Sources:  []discovery.Source{{SRV: "_http._tcp.app.prod.svc.cluster.local", Scheme: "http", Protocol: "http1", Weight: 1}},
//		OnChange: func(u discovery.Update) { install(u.Members) },
//		Logger:   logger,
//	})
//	go d.Run(ctx) // resolves at once, then every Interval, until ctx is done
//	...
//	d.Reconfigure(newOptions) // on reload: keeps the sources that stay, resolves at once
//
// # Identity
//
// A member's Name is its identity on the ring; its URL may change under it.
//
//	SRV  _http._tcp.app.example  →  10 5 8080 App-0.App.Example.
//	     name  app-0.app.example:8080   (target lowercased, final dot dropped, :port)
//	     URL   http://10.0.0.7:8080     (the target's lowest IPv4 address, else lowest IPv6)
//	A    cache.example (port 9000) → 10.0.0.9
//	     name  10.0.0.9:9000            ([v6]:port for IPv6): the address is the identity
//
// So a pod that restarts with a new address keeps its name, and its keys:
// only its URL changes (a Readdressed event).
//
// # Answers and failures
//
// A query that fails (timeout, SERVFAIL, REFUSED, an unreachable resolver,
// any failed address lookup of an SRV target, an SRV reply whose CNAME
// chain was not followed to its end within 8 hops) changes nothing: the
// source keeps its last answer. NXDOMAIN and an empty answer are answers: the
// source has no members. An SRV target whose address lookup answers
// NXDOMAIN or nothing is left out of that answer.
//
// A member missing from an answer becomes Absent (the caller skips it like
// an ejected upstream, so only its keys move) and is removed after
// RemoveAfter; if it reappears before then it Returned. An answer that would
// leave a source with fewer than half of its present members is applied only
// once the same answer came Confirm times in a row (the mass-removal
// guard). Before a source's first successful answer it has no members; the
// members of that first answer are marked Initial.
//
// # Additional records
//
// With a Resolver set, an SRV reply's additional section gives the
// targets' addresses when the server sends them: a target with A records
// there takes the lowest of them; one with only AAAA records there is
// still asked for A records first (the section may lack them), then takes
// the lowest IPv6 address given; any other target is looked up as
// without the section. An RRset in that section is taken as whole (RFC
// 2181 §9 lets a server drop records there, not half an RRset). Owner
// names compare case-insensitively. The answer is the one the lookups
// would give; only the number of queries differs.
//
// Names are queried as fully qualified (a final dot is implied), so the
// host's search list never applies and every replica asks the same
// question.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Source is one place members come from: exactly one of SRV, Host and
// Kubernetes.Service is set. It is an entry of the config file's
// discovery.sources, which decodes into it (see Options).
type Source struct {
	// SRV is srv, a DNS name whose SRV records give one member per target
	// (and port).
	SRV string `yaml:"srv"`
	// Host is host, a DNS name (or an IP address) whose A and AAAA
	// records give one member per address.
	Host string `yaml:"host"`
	// Port is port, with Host: the members' port, 1-65535; ignored
	// otherwise (SRV records carry their ports).
	Port int `yaml:"port"`
	// Kubernetes is the kubernetes block: a Service port whose
	// EndpointSlices give one member per serving endpoint; they are
	// watched, not polled (see KubeService).
	Kubernetes KubeService `yaml:"kubernetes"`
	// Scheme is scheme, "http" (the default) or "https": member URLs are
	// SCHEME://ADDRESS:PORT.
	Scheme string `yaml:"scheme" default:"http"`
	// Protocol is protocol, copied to every member: "http1" (the
	// default), "h2c" (cleartext HTTP/2, scheme http) or "h2" (scheme
	// https); this package does not read it.
	Protocol string `yaml:"protocol" default:"http1"`
	// Weight is weight, the ring weight of every member; default 1; > 0.
	Weight float64 `yaml:"weight" default:"1"`
}

// Name returns the source as configured: its SRV or Host value, or
// "kubernetes:NAMESPACE/SERVICE:PORT". It labels the source in
// Member.Source, Status, events and logs, and is unique among a
// Discoverer's sources. (A Kubernetes source whose namespace is "" is
// named by the namespace the Discoverer gives it: see KubeService.)
func (s Source) Name() string {
	switch {
	case s.SRV != "":
		return s.SRV
	case s.Kubernetes.Service != "":
		return s.Kubernetes.String()
	}
	return s.Host
}

// same reports whether s and o ask the same question, so that a reload
// keeps the source's members: the same SRV name, host and port, or
// Service port.
func (s Source) same(o Source) bool {
	return s.SRV == o.SRV && s.Host == o.Host && s.Kubernetes == o.Kubernetes && (s.Host == "" || s.Port == o.Port)
}

// check returns what is wrong with a source, or nil.
func (s Source) check() error {
	n := 0
	for _, set := range []bool{s.SRV != "", s.Host != "", s.Kubernetes.Service != ""} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return fmt.Errorf("discovery: a source needs exactly one of SRV, Host and Kubernetes, got %q, %q and %q",
			s.SRV, s.Host, s.Kubernetes.Service)
	case s.Kubernetes.Service != "" && s.Kubernetes.Port == "":
		return fmt.Errorf("discovery: source %s: the EndpointSlice port (a name or number) is required", s.Name())
	case s.Host != "" && (s.Port < 1 || s.Port > 65535):
		return fmt.Errorf("discovery: source %s: port must be 1-65535, got %d", s.Host, s.Port)
	case s.Scheme != "http" && s.Scheme != "https":
		return fmt.Errorf("discovery: source %s: scheme must be http or https, got %q", s.Name(), s.Scheme)
	case !(s.Weight > 0):
		return fmt.Errorf("discovery: source %s: weight must be > 0, got %v", s.Name(), s.Weight)
	}
	return nil
}

// Member is one discovered ring member.
type Member struct {
	// Name is the identity on the ring: "target:port" for SRV (target
	// lowercased, no final dot), "address:port" or "[v6]:port" for A/AAAA.
	Name string
	// URL is SCHEME://ADDRESS:PORT, e.g. http://10.0.0.7:8080 or
	// http://[fd00::7]:8080. For an SRV member it changes when the target's
	// address does; the Name does not.
	URL      string
	Weight   float64 // the source's weight
	Protocol string  // the source's protocol
	Source   string  // the source's Name()
	// Terminating is true for a Kubernetes endpoint that is serving and
	// terminating (its pod is being deleted): the caller drains it, so
	// that keys in use stay on it and new keys go elsewhere.
	Terminating bool
	// Absent is true while the member is missing from its source's answer
	// and not yet removed: the caller keeps it on the ring (no version
	// change) and skips it like an ejected upstream (skip reason "absent").
	Absent bool
	// Initial is true for members of the source's first successful answer:
	// they start fully active, as at process start (no slow start). It
	// stays true for the member's life; the caller only looks at it when
	// the member is new to it.
	Initial bool
}

// Status is one source's state, for the admin pages and metrics.
type Status struct {
	Source      string    // the source's Name()
	Members     int       // present members (absent ones not counted)
	LastSuccess time.Time // time of the last successful answer; zero before the first
	LastError   string    // "" when the last query succeeded (or none was made yet)
	Updates     uint64    // answers (polls) that changed the membership, since the source was configured
	Errors      uint64    // failed queries, since the source was configured
}

// EventKind says what an Event reports.
type EventKind uint8

// The events, one per membership change (Added … Readdressed), plus the
// notices worth a log line: a guarded answer, a failure (when its message
// changes), a recovery, and a name two sources both discovered.
const (
	Added       EventKind = iota + 1 // a new member joined
	Absent                           // a member went missing from the answer
	Returned                         // an absent member is back in the answer
	Removed                          // an absent member was removed after RemoveAfter
	Readdressed                      // a member's URL changed (its name did not)
	Terminating                      // a Kubernetes endpoint began terminating (serving still): drained
	Resumed                          // a terminating member is an ordinary one again
	Guarded                          // a short answer waits for confirmation (Detail says how far)
	Failed                           // a query failed; the last answer is kept (Detail: the error)
	Recovered                        // a query succeeded after failures
	Conflict                         // a name another source also discovered; the earlier source's member is kept
)

var kindNames = [...]string{
	Added: "added", Absent: "absent", Returned: "returned", Removed: "removed", Readdressed: "readdressed",
	Terminating: "terminating", Resumed: "resumed",
	Guarded: "guarded", Failed: "failed", Recovered: "recovered", Conflict: "conflict",
}

// String returns the kind's lower-case name, e.g. "readdressed".
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is one change or notice, meant for one log line.
type Event struct {
	Kind   EventKind
	Source string // the source's Name()
	Name   string // the member's name; "" for Guarded, Failed and Recovered
	URL    string // the member's URL (the new one for Readdressed)
	OldURL string // Readdressed only: the URL before
	Detail string // Guarded, Failed, Conflict: what happened
}

// String formats the event as one line, e.g.
// "app-0.app.example:8080 readdressed: http://10.0.0.7:8080 -> http://10.0.0.9:8080".
func (e Event) String() string {
	switch e.Kind {
	case Readdressed:
		return fmt.Sprintf("%s readdressed: %s -> %s", e.Name, e.OldURL, e.URL)
	case Guarded, Failed, Recovered:
		if e.Detail == "" {
			return e.Kind.String()
		}
		return e.Kind.String() + ": " + e.Detail
	case Conflict:
		return fmt.Sprintf("%s conflict: %s", e.Name, e.Detail)
	}
	return fmt.Sprintf("%s %s (%s)", e.Name, e.Kind, e.URL)
}

// log writes the event as one log line.
func (e Event) log(l *slog.Logger) {
	level := slog.LevelInfo
	switch e.Kind {
	case Failed, Guarded, Conflict:
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String("source", e.Source), slog.String("change", e.Kind.String())}
	if e.Name != "" {
		attrs = append(attrs, slog.String("member", e.Name), slog.String("url", e.URL))
	}
	if e.OldURL != "" {
		attrs = append(attrs, slog.String("old_url", e.OldURL))
	}
	if e.Detail != "" {
		attrs = append(attrs, slog.String("detail", e.Detail))
	}
	l.LogAttrs(context.Background(), level, "discovery: "+e.String(), attrs...)
}

// Update is what OnChange receives.
type Update struct {
	// Members is every discovered member, present and absent, sorted by
	// Name, each name once. The slice is the caller's.
	Members []Member
	// Events are the changes that led here, sorted by source, then name;
	// the Discoverer has already logged them.
	Events []Event
}

// Options configures a Discoverer. Its tagged fields are the config
// file's discovery block, which decodes into them: each comment names the
// field in the file, its default there and the bounds the config's
// validation enforces. The zero values of Resolver, Logger and Now are
// usable; the durations, Confirm and Sources must be set.
type Options struct {
	// Resolver is resolver, the host:port of the DNS server asked, over
	// UDP (TCP when an answer is truncated); default "". SRV questions
	// are then asked by this package itself, which keeps the A and AAAA
	// records the server puts in the reply's additional section (CoreDNS,
	// Consul): a target with an IPv4 address there is not looked up. ""
	// uses the system's configuration (/etc/resolv.conf) through Go's
	// resolver, which drops that section: every target is looked up.
	// (Reading only /etc/resolv.conf's first nameserver would lose Go's
	// failover to the next ones and its options, so "" keeps Go's
	// resolver.)
	Resolver string `yaml:"resolver"`
	// Interval is interval; default 5s; > 0: every source is resolved
	// again this often.
	Interval time.Duration `yaml:"interval" default:"5s"`
	// Timeout is timeout, per query; default 2s; > 0 and < Interval.
	Timeout time.Duration `yaml:"timeout" default:"2s"`
	// RemoveAfter is remove_after; default 5m; >= 0: an absent member is
	// removed after this.
	RemoveAfter time.Duration `yaml:"remove_after" default:"5m"`
	// Confirm is confirm, how many identical answers in a row it takes to
	// apply one that would leave a source with fewer than half of its
	// present members (the mass-removal guard); default 3; >= 1 (1: apply
	// at once).
	Confirm int `yaml:"confirm" default:"3"`
	// Sources is sources; at least one; no two share a Name().
	Sources []Source `yaml:"sources" default:"[]"`
	// Kubeconfig is kubeconfig, the kubeconfig file of the Kubernetes
	// sources' API server; default "", the pod's service account
	// (in-cluster). The config holds it resolved against the config
	// file's directory.
	Kubeconfig string `yaml:"kubeconfig" decode:"path"`
	// ClusterDomain is cluster_domain, the cluster's DNS domain, in the
	// names of endpoints with a hostname; default cluster.local (as is
	// "").
	ClusterDomain string `yaml:"cluster_domain" default:"cluster.local"`
	// OnChange is called with the new member list after every poll that
	// changed it; never twice at once, never under a lock of the
	// Discoverer (it may call Status). Nil: nothing is called.
	OnChange func(Update)
	// Logger receives one line per Event. Nil: slog.Default().
	Logger *slog.Logger
	// Now tells the time; nil: time.Now. Tests inject a clock.
	Now func() time.Time
}

// check returns what is wrong with the options, or nil.
func (o *Options) check() error {
	var errs []error
	if o.Interval <= 0 || o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("discovery: interval and timeout must be > 0, got %s and %s", o.Interval, o.Timeout))
	}
	if o.RemoveAfter < 0 {
		errs = append(errs, fmt.Errorf("discovery: remove_after must be >= 0, got %s", o.RemoveAfter))
	}
	if o.Confirm < 1 {
		errs = append(errs, fmt.Errorf("discovery: confirm must be >= 1, got %d", o.Confirm))
	}
	if len(o.Sources) == 0 {
		errs = append(errs, errors.New("discovery: no sources"))
	}
	seen := map[string]bool{}
	for _, s := range o.Sources {
		if err := s.check(); err != nil {
			errs = append(errs, err)
		} else if seen[s.Name()] {
			errs = append(errs, fmt.Errorf("discovery: source %s listed twice", s.Name()))
		}
		seen[s.Name()] = true
	}
	return errors.Join(errs...)
}
