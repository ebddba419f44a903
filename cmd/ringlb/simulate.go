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
	"text/tabwriter"

	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/process"
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
		sim := simulation{keys: *keys, before: before, hold: cfg.Hold, drain: d}
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
	sim := simulation{keys: *keys, before: before, hold: cfg.Hold}
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
	o := process.DiscoveryOptions(cfg.Discovery).Options()
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

// simulation hashes synthetic keys onto one ring, or two for a change.
type simulation struct {
	keys          int
	before, after *ring.Ring
	// beforeList and afterList are the member lists in config order, for
	// hash mod N.
	beforeList, afterList []ring.Member

	countBefore []int // keys per member of before
	countAfter  []int // keys per member of after
	moved       int
	modMoved    int
	flows       map[[2]string]int // from, to → keys moved

	hold      config.Hold
	movedGone int // moved keys whose upstream left the ring: they move even with hold

	drain *drainSim // with -drain: what the drained members' new keys do
}

// drainSim is -drain: members in state drain on an unchanged ring. New
// keys of a draining member go clockwise to the next member not draining
// (the walk's skip, reason draining); keys held on it stay.
type drainSim struct {
	names    []string
	draining []bool // by member index
	moved    int
	nowhere  int               // keys with every member draining: 503
	flows    map[[2]string]int // from, to → keys
}

func newDrainSim(r *ring.Ring, names []string) (*drainSim, error) {
	d := &drainSim{names: names, draining: make([]bool, r.Len()), flows: map[[2]string]int{}}
	for _, n := range names {
		i := r.Index(n)
		if i < 0 {
			return nil, fmt.Errorf("-drain %s: no such upstream", n)
		}
		d.draining[i] = true
	}
	return d, nil
}

// place counts where the key at position h goes for new traffic.
func (d *drainSim) place(r *ring.Ring, h uint64, owner int) {
	if !d.draining[owner] {
		return
	}
	to := -1
	r.Walk(h, func(m int) bool {
		if !d.draining[m] {
			to = m
			return false
		}
		return true
	})
	if to < 0 {
		d.nowhere++
		return
	}
	d.moved++
	ms := r.Members()
	d.flows[[2]string{ms[owner].Name, ms[to].Name}]++
}

// printDrain prints what -drain changes: no version, the keys that move
// for new traffic and where they go, and what stays.
func (s *simulation) printDrain(w io.Writer) {
	d := s.drain
	fmt.Fprintf(w, "\ndrain %s: the ring and its version (%s) stay; new keys of a draining upstream go clockwise\n"+
		"to the next upstream that is not draining\n\n", strings.Join(d.names, ", "), s.before.Version())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "keys moved for new traffic:\t%s\t(%d keys)\n", pct(d.moved, s.keys), d.moved)
	if d.nowhere > 0 {
		fmt.Fprintf(tw, "keys with nowhere to go:\t%s\t(%d keys: every upstream draining, new keys get 503)\n", pct(d.nowhere, s.keys), d.nowhere)
	}
	tw.Flush()
	if len(d.flows) > 0 {
		printFlows(w, "where new keys of draining upstreams go", d.flows, d.moved)
	}
	fmt.Fprintln(w)
	if s.hold.On() {
		fmt.Fprintf(w, "with hold (idle %s): keys held on a draining upstream stay there (a record of this process\n"+
			"younger than %s, or a valid hold cookie); it is drained once none is left and nothing is in flight\n", s.hold.Idle, s.hold.Idle)
	} else {
		fmt.Fprintf(w, "without hold no key is held: every key of a draining upstream moves at once, and only the\n"+
			"requests in flight (and open tunnels) finish there\n")
	}
	fmt.Fprintf(w, "made ready again, exactly its keys come back\n")
}

func (s *simulation) run() {
	s.countBefore = make([]int, s.before.Len())
	if s.after != nil {
		s.countAfter = make([]int, s.after.Len())
		s.flows = make(map[[2]string]int)
	}
	bm, am := s.before.Members(), []ring.Member(nil)
	if s.after != nil {
		am = s.after.Members()
	}
	nb, na := uint64(len(s.beforeList)), uint64(len(s.afterList))
	buf := make([]byte, 0, 32)
	for k := 0; k < s.keys; k++ {
		buf = append(buf[:0], "key-"...)
		buf = strconv.AppendInt(buf, int64(k), 10)
		key := string(buf)
		h := s.before.Hash(key)
		ob := s.before.Owner(h)
		s.countBefore[ob]++
		if s.drain != nil {
			s.drain.place(s.before, h, ob)
		}
		if s.after == nil {
			continue
		}
		oa := s.after.Owner(h)
		s.countAfter[oa]++
		if from, to := bm[ob].Name, am[oa].Name; from != to {
			s.moved++
			s.flows[[2]string{from, to}]++
			if s.after.Index(from) < 0 {
				s.movedGone++
			}
		}
		// hash mod N over the config-order lists.
		mh := h
		if s.before.Placement() == ring.PlacementNginx {
			mh >>= 32
		}
		if s.beforeList[mh%nb].Name != s.afterList[mh%na].Name {
			s.modMoved++
		}
	}
}

// minimumMoved is the least fraction of keys any scheme must move to go
// from the ideal shares by weight of before to those of after: the total
// variation distance between them. A real ring's shares differ from the
// ideal by a few percent, so it may move fewer keys than this.
func minimumMoved(before, after []ring.Member) float64 {
	share := func(ms []ring.Member) map[string]float64 {
		total := 0.0
		for _, m := range ms {
			total += m.Weight
		}
		out := make(map[string]float64, len(ms))
		for _, m := range ms {
			out[m.Name] = m.Weight / total
		}
		return out
	}
	sb, sa := share(before), share(after)
	d := 0.0
	for name, a := range sa {
		if a > sb[name] {
			d += a - sb[name]
		}
	}
	return d
}

// leastMoved is the least number of keys any scheme must move to go from
// the shares the keys actually had on the ring before the change to those
// they have after it: every upstream that gains keys must receive that
// many moved keys. The ring's figure is never below it.
func (s *simulation) leastMoved() int {
	before := map[string]int{}
	for i, m := range s.before.Members() {
		before[m.Name] = s.countBefore[i]
	}
	n := 0
	for i, m := range s.after.Members() {
		n += max(s.countAfter[i]-before[m.Name], 0)
	}
	return n
}

func pct(n, total int) string { return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(total)) }

func (s *simulation) print(w io.Writer, adds, removes []string) {
	fmt.Fprintf(w, "%d keys over %d upstreams (%d points, placement %s, version %s)\n\n",
		s.keys, s.before.Len(), s.before.TotalPoints(), s.before.Placement(), s.before.Version())
	printShares(w, s.before, s.countBefore, s.keys)
	if s.after == nil {
		return
	}
	var change []string
	for _, a := range adds {
		change = append(change, "+"+a)
	}
	for _, r := range removes {
		change = append(change, "-"+r)
	}
	fmt.Fprintf(w, "\nafter %s: %d upstreams (%d points, version %s)\n\n",
		strings.Join(change, " "), s.after.Len(), s.after.TotalPoints(), s.after.Version())
	printShares(w, s.after, s.countAfter, s.keys)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "keys moved (ring):\t%s\t(%d keys)\n", pct(s.moved, s.keys), s.moved)
	least := s.leastMoved()
	fmt.Fprintf(tw, "least possible (these shares):\t%s\t(%d keys: what the measured shares before and after force to move)\n", pct(least, s.keys), least)
	fmt.Fprintf(tw, "least possible (ideal shares):\t%.2f%%\t(with every upstream at exactly its share by weight)\n", 100*minimumMoved(s.beforeList, s.afterList))
	fmt.Fprintf(tw, "keys moved (hash mod N):\t%s\t(%d keys)\n", pct(s.modMoved, s.keys), s.modMoved)
	tw.Flush()
	s.printHold(w)
	if s.moved == 0 {
		return
	}
	printFlows(w, "where moved keys went", s.flows, s.moved)
}

// printFlows prints under title the keys that moved from one upstream to
// another, most first, each with its share of the moved keys.
func printFlows(w io.Writer, title string, flows map[[2]string]int, moved int) {
	type flow struct {
		from, to string
		n        int
	}
	var fl []flow
	for k, n := range flows {
		fl = append(fl, flow{k[0], k[1], n})
	}
	slices.SortFunc(fl, func(a, b flow) int {
		if a.n != b.n {
			return b.n - a.n
		}
		if a.from != b.from {
			return strings.Compare(a.from, b.from)
		}
		return strings.Compare(a.to, b.to)
	})
	fmt.Fprintf(w, "\n%s:\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "from\tto\tkeys\tof moved\t\n")
	for _, f := range fl {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t\n", f.from, f.to, f.n, pct(f.n, moved))
	}
	tw.Flush()
}

// printShares prints each member's share of keys with a bar, then max/avg
// and min/avg of keys per unit of weight.
func printShares(w io.Writer, r *ring.Ring, counts []int, keys int) {
	ms := r.Members()
	totalW := 0.0
	for _, m := range ms {
		totalW += m.Weight
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "upstream\tweight\tpoints\tkeys\tshare\tideal\t\n")
	maxR, minR, sumR := 0.0, math.Inf(1), 0.0
	maxShare := 0.0
	for i := range ms {
		maxShare = max(maxShare, float64(counts[i])/float64(keys))
	}
	for i, m := range ms {
		share := float64(counts[i]) / float64(keys)
		ideal := m.Weight / totalW
		ratio := share / ideal
		maxR, minR, sumR = max(maxR, ratio), min(minR, ratio), sumR+ratio
		bar := strings.Repeat("#", int(math.Round(30*share/maxShare)))
		fmt.Fprintf(tw, "%s\t%g\t%d\t%d\t%.2f%%\t%.2f%%\t%s\n", m.Name, m.Weight, r.Points(i), counts[i], 100*share, 100*ideal, bar)
	}
	tw.Flush()
	avg := sumR / float64(len(ms))
	fmt.Fprintf(w, "max/avg %.3f  min/avg %.3f  (keys per unit of weight)\n", maxR/avg, minR/avg)
}

// printHold says, when hold is on, what it changes for the keys the ring
// moves, taking every simulated key as a key in use: without hold they all
// move at once; with it, keys of upstreams that stay are held (up to
// max_keys keys in use) and move only once idle for hold.idle, while keys
// of removed upstreams move at once (their records are dropped).
func (s *simulation) printHold(w io.Writer) {
	if !s.hold.On() {
		return
	}
	// The store keeps the max_keys most recently used keys; with every
	// simulated key in use, that share of the movable keys is held.
	movable := s.moved - s.movedGone
	held := movable
	if s.hold.MaxKeys < s.keys {
		held = int(float64(movable) * float64(s.hold.MaxKeys) / float64(s.keys))
	}
	atOnce := s.moved - held
	fmt.Fprintf(w, "\nwith hold (idle %s, max_keys %d), every simulated key in use:\n", s.hold.Idle, s.hold.MaxKeys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "keys moved at once without hold:\t%s\t(%d keys)\n", pct(s.moved, s.keys), s.moved)
	fmt.Fprintf(tw, "keys moved at once with hold:\t%s\t(%d keys", pct(atOnce, s.keys), atOnce)
	var why []string
	if s.movedGone > 0 {
		why = append(why, fmt.Sprintf("%d of removed upstreams", s.movedGone))
	}
	if movable > held {
		why = append(why, fmt.Sprintf("%d beyond max_keys", movable-held))
	}
	if len(why) > 0 {
		fmt.Fprintf(tw, ": %s", strings.Join(why, ", "))
	}
	fmt.Fprintf(tw, ")\n")
	fmt.Fprintf(tw, "keys held, moving as they go idle:\t%s\t(%d keys)\n", pct(held, s.keys), held)
	tw.Flush()
	fmt.Fprintf(w, "a held key stays on its upstream while it is used at least every %s and follows the new ring\n"+
		"once idle for that long; new keys follow the new ring at once\n", s.hold.Idle)
}
