package ring

import "math"

// Reason is a judge's verdict on one member at one point of a walk.
// Whoever shows reasons names them (the admin listener's /debug/lookup
// does).
type Reason uint8

const (
	// Accept takes the member.
	Accept Reason = iota
	// Unhealthy: the member's active health check says down.
	Unhealthy
	// BreakerOpen: the member's circuit breaker is open.
	BreakerOpen
	// Full: the member holds its bounded-load share of in-flight requests.
	Full
	// SlowStart: this point of the member is not active yet. The member may
	// still be accepted at a later, active point.
	SlowStart
	// Excluded: the caller has ruled the member out (say, it already
	// failed this request). Not reported in Skipped lists.
	Excluded
	// Absent: the member is missing from its discovery source's answer
	// but not yet removed from the ring.
	Absent
	// Busy: the member holds its limit of requests in flight. Pick never
	// gives it: the caller reports it for a member Pick chose, where a
	// request stops (it is refused, not moved on).
	Busy
	// Draining: the member's admin state is drain: it takes no new key,
	// only keys held on it.
	Draining
	// Maint: the member's admin state is maint: it takes no request.
	Maint
)

// Skip records a member passed over by Pick and why.
type Skip struct {
	Member int
	Reason Reason
}

// Choice is Pick's answer.
type Choice struct {
	// Member is the chosen member's index, or -1 if no member was accepted.
	Member int
	// Owner is the member owning the key's position, regardless of state
	// (-1 on an empty ring).
	Owner int
	// Overflow is the first member passed over because it was Full, or -1.
	// When Member >= 0 and Overflow >= 0 the request overflowed past it.
	Overflow int
}

// Judge decides whether a member may take a request at the point with the
// given sequence number (the i of "NAME#i", used by slow start). It must not
// retain anything; Pick calls it at most once per member, except that a
// member judged SlowStart is judged again at its next point.
type Judge func(member, seq int) Reason

// smallSet is the number of members whose decided-set fits in a stack
// array; Pick and Walk allocate nothing up to it.
const smallSet = 1024

// memberSet returns a zeroed bitset for n members, backed by small when it
// fits. (An earlier version kept the array and a slice of it in one struct;
// the self-reference made every Pick and Walk escape it to the heap.)
func memberSet(small *[smallSet / 64]uint64, n int) []uint64 {
	if n <= smallSet {
		return small[:(n+63)/64]
	}
	return make([]uint64, (n+63)/64)
}

func setHas(s []uint64, i int) bool { return s[i>>6]&(1<<(uint(i)&63)) != 0 }
func setAdd(s []uint64, i int)      { s[i>>6] |= 1 << (uint(i) & 63) }

// Pick walks clockwise from position h and returns the first member the
// judge accepts. Each member is judged once, in preference order, except
// that a SlowStart verdict applies to one point only, so a slow-starting
// member can be accepted at a later active point. If every member that is
// not otherwise ruled out is Full, the first Full member is chosen (with
// c > 1 this cannot happen when load counts are exact; it keeps a request
// from failing when counts race).
//
// If skipped is not nil, members passed over before the choice are
// appended to it with their reason (Excluded ones are not) and the
// extended slice is returned; a member accepted after a SlowStart skip is
// removed again. With skipped nil, Pick allocates nothing for rings of up to
// 1024 members.
func (r *Ring) Pick(h uint64, judge Judge, skipped []Skip) (Choice, []Skip) {
	if r.n == 0 {
		return Choice{Member: -1, Owner: -1, Overflow: -1}, skipped
	}
	start := r.start(h)
	first := r.pts[start]
	c := Choice{Member: -1, Owner: int(first.member), Overflow: -1}
	// Fast path: the owner takes most requests, and needs no walk state.
	firstWhy := judge(c.Owner, int(first.seq))
	if firstWhy == Accept {
		c.Member = c.Owner
		if skipped != nil {
			skipped = dropMember(skipped, c.Owner)
		}
		return c, skipped
	}
	var small [smallSet / 64]uint64
	done := memberSet(&small, len(r.members))
	decided := 0
	n := r.n
	for k := 0; k < n && decided < len(r.members); k++ {
		i := start + k
		if i >= n {
			i -= n
		}
		p := r.pts[i]
		m := int(p.member)
		if setHas(done, m) {
			continue
		}
		why := firstWhy
		if k > 0 {
			why = judge(m, int(p.seq))
		}
		switch why {
		case Accept:
			c.Member = m
			if skipped != nil {
				skipped = dropMember(skipped, m)
			}
			return c, skipped
		case SlowStart:
			if skipped != nil && !containsMember(skipped, m) {
				skipped = append(skipped, Skip{m, why})
			}
			continue
		case Full:
			if c.Overflow < 0 {
				c.Overflow = m
			}
		}
		setAdd(done, m)
		decided++
		if skipped != nil && why != Excluded {
			skipped = dropMember(skipped, m) // a SlowStart entry gives way to the member's real reason
			skipped = append(skipped, Skip{m, why})
		}
	}
	if c.Overflow >= 0 {
		c.Member = c.Overflow
		c.Overflow = -1
		if skipped != nil {
			skipped = dropMember(skipped, c.Member)
		}
	}
	return c, skipped
}

func containsMember(s []Skip, m int) bool {
	for _, x := range s {
		if x.Member == m {
			return true
		}
	}
	return false
}

func dropMember(s []Skip, m int) []Skip {
	for i, x := range s {
		if x.Member == m {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// Walk calls fn with each member once, clockwise from position h, in
// preference order, until fn returns false. It allocates nothing for rings
// of up to 1024 members.
func (r *Ring) Walk(h uint64, fn func(member int) bool) {
	if r.n == 0 {
		return
	}
	var small [smallSet / 64]uint64
	done := memberSet(&small, len(r.members))
	start := r.start(h)
	n := r.n
	left := len(r.members)
	for k := 0; k < n && left > 0; k++ {
		i := start + k
		if i >= n {
			i -= n
		}
		m := int(r.pts[i].member)
		if setHas(done, m) {
			continue
		}
		setAdd(done, m)
		left--
		if !fn(m) {
			return
		}
	}
}

// Limit returns the bounded-load cap of a member of weight w:
// max(ceil(c × (inflight+1) × w / W), floor), where inflight is the total
// number of requests in flight and W the total weight of available
// members. A member holding Limit or more requests is full. c <= 0 means
// no cap.
//
// The floor keeps a quiet fleet from splitting one client's concurrent
// requests: with four equal members and nothing else in flight,
// ceil(1.25 × 2 / 4) = 1, so without a floor a page's second parallel
// request would already leave its owner. With floor 8, no member is full
// below 8 requests, and the proportional cap takes over once the total in
// flight passes about 8 × W / (c × w).
func Limit(c float64, floor, inflight int64, w, W float64) int64 {
	if c <= 0 || W <= 0 {
		return math.MaxInt64
	}
	return max(int64(math.Ceil(c*float64(inflight+1)*w/W)), floor)
}

// ActivePoints returns how many of a member's n points are active at
// slow-start fraction f in [0, 1]: the points with seq < ActivePoints are
// active. The count only grows with f, so keys only come home.
func ActivePoints(n int, f float64) int {
	switch {
	case f >= 1:
		return n
	case f <= 0:
		return 0
	}
	return int(math.Ceil(f * float64(n)))
}

// reasonNames are the reasons' names in /debug/lookup's skipped entries
// and the access log.
var reasonNames = [...]string{
	Unhealthy:   "unhealthy",
	BreakerOpen: "breaker_open",
	Full:        "full",
	SlowStart:   "slow_start",
	Excluded:    "excluded",
	Absent:      "absent",
	Busy:        "busy",
	Draining:    "draining",
	Maint:       "maint",
}

// String names the reason ("unknown" for Accept or an unknown value).
func (r Reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return "unknown"
}
