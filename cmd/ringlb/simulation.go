package main

import (
	"fmt"
	"strconv"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/ring"
)

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

	// handoff is the handoff block; handoffs counts by previous upstream
	// the keys whose next request would name it (rule 17): moved keys
	// whose upstream stays a member, and new keys of a draining one.
	handoff  config.Handoff
	handoffs map[string]int

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

// place counts where the key at position h goes for new traffic; true
// when it moves off its draining owner.
func (d *drainSim) place(r *ring.Ring, h uint64, owner int) bool {
	if !d.draining[owner] {
		return false
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
		return false
	}
	d.moved++
	ms := r.Members()
	d.flows[[2]string{ms[owner].Name, ms[to].Name}]++
	return true
}

func (s *simulation) run() {
	s.countBefore = make([]int, s.before.Len())
	if s.after != nil {
		s.countAfter = make([]int, s.after.Len())
		s.flows = make(map[[2]string]int)
	}
	s.handoffs = map[string]int{}
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
		if s.drain != nil && s.drain.place(s.before, h, ob) {
			s.handoffs[bm[ob].Name]++
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
			} else {
				s.handoffs[from]++
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
