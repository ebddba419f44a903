package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ringlb/ringlb/ring"
)

// print reports each upstream's share of the keys and, for a change by
// adds and removes, the shares after it and the keys it moves.
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
	s.printHandoffs(w, "a moved key's next request within the window names the upstream it was on\n"+
		"(an upstream that left the ring cannot be named)")
}

// printHandoffs says how many keys' next request would carry the handoff
// header (rule 17), and naming which upstream; how says what names them.
func (s *simulation) printHandoffs(w io.Writer, how string) {
	n := 0
	for _, c := range s.handoffs {
		n += c
	}
	if s.handoff.Header == "" {
		fmt.Fprintf(w, "\nwith handoff.header set, %s of the keys (%d) would name their previous upstream to the new one\n", pct(n, s.keys), n)
		return
	}
	fmt.Fprintf(w, "\nhandoff (header %s, window %s):\n%s\n", s.handoff.Header, s.handoff.Window, how)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "keys that carry a handoff:\t%s\t(%d keys)\n", pct(n, s.keys), n)
	froms := make([]string, 0, len(s.handoffs))
	for f := range s.handoffs {
		froms = append(froms, f)
	}
	slices.SortFunc(froms, func(a, b string) int {
		if d := s.handoffs[b] - s.handoffs[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	for _, f := range froms {
		fmt.Fprintf(tw, "  from %s:\t%s\t(%d keys)\n", f, pct(s.handoffs[f], s.keys), s.handoffs[f])
	}
	tw.Flush()
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
	if s.hold.On() && s.hold.OnReturn != "home" {
		fmt.Fprintf(w, "made ready again, its keys not in use come back; those in use where they went stay there\n"+
			"until idle for %s (hold.on_return stay)\n", s.hold.Idle)
	} else {
		fmt.Fprintf(w, "made ready again, exactly its keys come back\n")
	}
	s.printHandoffs(w, "a new key of a draining upstream names it to the upstream it goes to\n"+
		"(with hold, a key held there goes there and names nothing)")
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

func pct(n, total int) string { return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(total)) }
