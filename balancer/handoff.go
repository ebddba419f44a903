package balancer

import (
	"github.com/ringlb/ringlb/balancer/handoff"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/ring"
)

// installHandoff sets the handoff of snapshot s, which is about to replace
// old (nil at start), at time now (see handoff.New).
func installHandoff(s, old *snapshot, now int64) {
	if s.handoffOpts.Header == "" {
		return
	}
	urls := make([]string, len(s.members))
	for i := range s.members {
		urls[i] = s.members[i].url.String()
	}
	var oldRing *ring.Ring
	var was *handoff.State
	if old != nil {
		oldRing, was = old.ring, old.handoff
	}
	s.handoff = handoff.New(s.handoffOpts, s.ring, urls, oldRing, was, now)
}

// Held returns the index of the member called upstream (handoff.Members);
// -1 when there is none. Hold is on: the name is a hold record's.
func (s *snapshot) Held(upstream string) int {
	if i, ok := s.hold.Index[upstream]; ok {
		return i
	}
	return -1
}

// Usable reports whether member i may be named as a key's previous
// upstream (handoff.Members): available and not in maint.
func (s *snapshot) Usable(i int) bool {
	u := s.members[i].u
	return u.available() && u.adminState() != state.Maint
}

// Draining reports whether member i is in admin state drain.
func (s *snapshot) Draining(i int) bool { return s.members[i].u.adminState() == state.Drain }

// lookupHandoff is the handoff a request at ring position h would carry,
// sent to member u (-1: nowhere), with this process's hold record (no
// cookie); nil when none.
func (b *Balancer) lookupHandoff(s *snapshot, h uint64, u int) *handoff.Previous {
	if s.handoff == nil || u < 0 {
		return nil
	}
	now := b.nanotime()
	held := ""
	if s.hold != nil {
		if rec, ok := s.hold.Store.Lookup(h, now); ok && now-rec.LastUse < int64(s.hold.Rule.Idle) {
			held = rec.Upstream
		}
	}
	p := s.handoff.From(held, h, now, s)
	if p < 0 || p == u {
		return nil
	}
	return &handoff.Previous{From: s.members[p].u.name, URL: s.members[p].url.String()}
}

// handoffBegin finds the key's previous upstream (rule 17) for the
// request's attempts, each of which sets or removes the header (so a
// client's own header of that name never passes).
func (b *Balancer) handoffBegin(st *serving) {
	if st.random {
		return
	}
	held := ""
	if q := st.hold(); q != nil && q.RecOK && q.Decision.Reason != hold.Expired {
		held = q.Rec.Upstream
	}
	st.from = st.s.handoff.From(held, st.pos, b.nanotime(), st.s)
}
