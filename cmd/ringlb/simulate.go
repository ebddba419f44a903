package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/ring"
)

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func cmdSimulate(args []string, stdout, stderr io.Writer) int {
	c, path := newCommand("simulate",
		"simulate [-config config.yaml | config.yaml] [-keys 1000000] [-add NAME[=WEIGHT]]... [-remove NAME]... [-drain NAME]... [-pool NAME]", stdout, stderr)
	keys := c.fs.Int("keys", 1000000, "number of synthetic keys")
	var adds, removes, drains listFlag
	c.fs.Var(&adds, "add", "add an upstream `NAME[=WEIGHT]` (repeatable; under placement nginx NAME is its host:port)")
	c.fs.Var(&removes, "remove", "remove the upstream `NAME` (repeatable)")
	poolName := c.fs.String("pool", "", "the pool `NAME` to simulate (required when the config has several)")
	c.fs.Var(&drains, "drain", "put the upstream `NAME` in state drain (repeatable): which keys new traffic moves")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if len(drains) > 0 && len(adds)+len(removes) > 0 {
		fmt.Fprintln(stderr, "ringlb simulate: -drain is simulated on its own, not with -add or -remove")
		return exitUsage
	}
	if *keys < 1 {
		fmt.Fprintf(stderr, "ringlb simulate: -keys: must be >= 1, got %d\n", *keys)
		return exitUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFail
	}
	if cfg, err = simulatedPool(cfg, *poolName); err != nil {
		fmt.Fprintf(stderr, "ringlb simulate: %v\n", err)
		return exitUsage
	}
	members := ringMembers(cfg.Upstreams)
	if cfg.Discovery != nil {
		found, report := discoverOnce(cfg)
		fmt.Fprint(stdout, report)
		members = withDiscovered(members, found)
	}
	before, err := ring.New(members, ringOptions(cfg))
	if err != nil {
		if cfg.Discovery != nil && len(members) == 0 {
			fmt.Fprintf(stderr, "%s: no upstreams, and discovery found no member: nothing to simulate\n", *path)
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", *path, err)
		}
		return exitFail
	}
	if len(drains) > 0 {
		d, err := newDrainSim(before, drains)
		if err != nil {
			fmt.Fprintf(stderr, "ringlb simulate: %v\n", err)
			return exitUsage
		}
		sim := simulation{keys: *keys, before: before, hold: cfg.Hold, handoff: cfg.Handoff, drain: d}
		sim.run()
		sim.print(stdout, nil, nil)
		sim.printDrain(stdout)
		return exitOK
	}
	after, err := changeMembers(cfg, members, adds, removes)
	if err != nil {
		fmt.Fprintf(stderr, "ringlb simulate: %v\n", err)
		return exitUsage
	}
	sim := simulation{keys: *keys, before: before, hold: cfg.Hold, handoff: cfg.Handoff}
	if len(adds)+len(removes) > 0 {
		sim.after, err = ring.New(after, ringOptions(cfg))
		if err != nil { // changeMembers checked what the ring checks
			fmt.Fprintf(stderr, "ringlb simulate: %v\n", err)
			return exitUsage
		}
		sim.beforeList, sim.afterList = members, after
	}
	sim.run()
	sim.print(stdout, adds, removes)
	return exitOK
}

// simulatedPool returns the config of the pool -pool names (see
// poolConfig): required with several pools, optional with one.
func simulatedPool(cfg *config.Config, name string) (*config.Config, error) {
	pools := cfg.Serving()
	var names []string
	for _, p := range pools {
		if p.Name == name || (name == "" && len(pools) == 1) {
			return poolConfig(cfg, p), nil
		}
		names = append(names, p.Name)
	}
	if name == "" {
		return nil, fmt.Errorf("-pool: required with several pools: %s", strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("-pool: no pool %q; pools: %s", name, strings.Join(names, ", "))
}

// discoverOnce resolves every discovery source of cfg once, as serve does
// at start, and returns the members found with a report of what each
// source answered ("discovery: ..." lines, and an empty line).
func discoverOnce(cfg *config.Config) ([]discovery.Member, string) {
	o := *cfg.Discovery
	o.Logger = slog.New(slog.DiscardHandler)
	d, err := discovery.New(o)
	if err != nil { // config.Load checked what New checks
		return nil, fmt.Sprintf("discovery: %v\n\n", err)
	}
	d.Poll(context.Background())
	var b strings.Builder
	for _, st := range d.Status() {
		if st.LastError != "" {
			fmt.Fprintf(&b, "discovery: %s: no answer: %s\n", st.Source, st.LastError)
		} else {
			fmt.Fprintf(&b, "discovery: %s: %d members\n", st.Source, st.Members)
		}
	}
	b.WriteString("\n")
	return d.Members(), b.String()
}

// withDiscovered appends the discovered members to the static ones, but
// those whose name a static upstream has (serve does the same: the
// static upstream wins).
func withDiscovered(static []ring.Member, found []discovery.Member) []ring.Member {
	out := slices.Clone(static)
	for _, m := range found {
		if slices.ContainsFunc(static, func(s ring.Member) bool { return s.Name == m.Name }) {
			continue
		}
		out = append(out, ring.Member{Name: m.Name, Addr: m.Name, Weight: m.Weight})
	}
	return out
}

// changeMembers applies -add and -remove to a member list. Added members
// go to the end, as an operator appending to a list would. An added name
// and weight must pass the checks the config applies to upstreams: a
// name of letters, digits and "-_.:" (under placement nginx, a host[:port]
// as a URL would hold it), and a weight > 0 that gives between 1 and
// config.MaxPointsPerUpstream points (whole under placement nginx).
func changeMembers(cfg *config.Config, ms []ring.Member, adds, removes []string) ([]ring.Member, error) {
	out := slices.Clone(ms)
	for _, name := range removes {
		i := slices.IndexFunc(out, func(m ring.Member) bool { return m.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("-remove %s: no such upstream", name)
		}
		out = slices.Delete(out, i, i+1)
	}
	for _, a := range adds {
		name, w, hasW := strings.Cut(a, "=")
		weight := 1.0
		if hasW {
			var err error
			weight, err = strconv.ParseFloat(w, 64)
			if err != nil || !(weight > 0) || math.IsInf(weight, 0) {
				return nil, fmt.Errorf("-add %s: weight must be a number > 0, got %q", a, w)
			}
		}
		nginx := cfg.Ring.Placement == ring.PlacementNginx
		switch {
		case name == "":
			return nil, fmt.Errorf("-add %s: empty name", a)
		case nginx && !validHostPort(name):
			return nil, fmt.Errorf("-add %s: under placement nginx the name is the new upstream's host[:port], got %q", a, name)
		case !nginx && !config.ValidName(name):
			return nil, fmt.Errorf("-add %s: a name must use only letters, digits and \"-_.:\", got %q", a, name)
		case nginx && weight != math.Trunc(weight):
			return nil, fmt.Errorf("-add %s: weight must be a whole number under placement nginx, got %s", a, w)
		case ring.PointsFor(cfg.Ring.PointsPerWeight, weight) < 1:
			return nil, fmt.Errorf("-add %s: weight too small: round(%d × %s) = 0 ring points", a, cfg.Ring.PointsPerWeight, w)
		case ring.PointsFor(cfg.Ring.PointsPerWeight, weight) > config.MaxPointsPerUpstream:
			return nil, fmt.Errorf("-add %s: weight too large: more than %d ring points", a, config.MaxPointsPerUpstream)
		}
		if slices.ContainsFunc(out, func(m ring.Member) bool { return m.Name == name || (nginx && m.Addr == name) }) {
			return nil, fmt.Errorf("-add %s: upstream %s exists already", a, name)
		}
		out = append(out, ring.Member{Name: name, Addr: name, Weight: weight})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the change leaves no upstream")
	}
	return out, nil
}

// validHostPort reports whether s is a host[:port] as an upstream URL
// would hold it, with a port 1-65535 if any.
func validHostPort(s string) bool {
	u, err := url.Parse("http://" + s)
	if err != nil || u.Host != s || u.Hostname() == "" || u.User != nil || strings.HasSuffix(s, ":") {
		return false
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		return err == nil && n >= 1 && n <= 65535
	}
	return true
}
