package balancer

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/ringlb/ringlb/balancer/state"
)

// ErrUnknownUpstream is SetState's and UpstreamState's error for a name
// that is not a current ring member.
var ErrUnknownUpstream = errors.New("no such upstream")

// adminState returns u's admin state.
func (u *upstream) adminState() state.Admin { return state.Admin(u.state.Load()) }

// UpstreamStates returns every current ring member's admin view, in ring
// member order (by name under placement ringlb). Held keys are counted by
// one pass over the hold records (see hold.Store.CountByUpstream): exact
// at the moment of the call, and nothing kept up to date on the request
// path for it.
func (b *Balancer) UpstreamStates() []state.Upstream {
	s := b.snap.Load()
	held := b.hold.CountByUpstream()
	out := make([]state.Upstream, len(s.members))
	for i := range s.members {
		out[i] = s.upstreamState(i, held)
	}
	return out
}

// UpstreamState returns the admin view of the ring member called name;
// ErrUnknownUpstream when there is none.
func (b *Balancer) UpstreamState(name string) (state.Upstream, error) {
	s := b.snap.Load()
	i := s.ring.Index(name)
	if i < 0 {
		return state.Upstream{}, fmt.Errorf("%w %q", ErrUnknownUpstream, name)
	}
	return s.upstreamState(i, b.hold.CountByUpstream()), nil
}

func (s *snapshot) upstreamState(i int, held map[string]int) state.Upstream {
	m := &s.members[i]
	u := m.u
	st := state.Upstream{
		Name:      u.name,
		State:     u.adminState(),
		Available: u.available(),
		HeldKeys:  held[u.name],
		Inflight:  u.inflight.Load(),
		Tunnels:   u.tunnels.Load(),
		Source:    cmp.Or(m.source, "static"),
	}
	st.Drained = st.State == state.Drain && st.HeldKeys == 0 && st.Inflight == 0 && st.Tunnels == 0
	return st
}

// SetState sets the admin state of the ring member called name, as the
// admin API does, and returns its view. The state stays across reloads
// while the member stays, until SetState sets another or a reload changes
// the member's configured state (options.Upstream.State); a restart
// forgets it. ErrUnknownUpstream when there is no such member.
func (b *Balancer) SetState(name string, st state.Admin) (state.Upstream, error) {
	if int(st) >= len(state.Names()) {
		return state.Upstream{}, fmt.Errorf("balancer: %v is not a state", st)
	}
	b.mu.Lock()
	u := b.ups[name]
	if u == nil {
		b.mu.Unlock()
		return state.Upstream{}, fmt.Errorf("%w %q", ErrUnknownUpstream, name)
	}
	b.setStateLocked(u, st, "api")
	b.mu.Unlock()
	return b.UpstreamState(name)
}

// setStateLocked makes st u's admin state, set by origin ("config" or
// "api"): one log line when it changes, and the weight that takes new
// keys recomputed. Callers hold b.mu.
func (b *Balancer) setStateLocked(u *upstream, st state.Admin, origin string) {
	old := state.Admin(u.state.Swap(uint32(st)))
	if old == st {
		return
	}
	b.log.Info("upstream state", "upstream", u.name, "state", st.String(), "previous", old.String(), "by", origin)
	if st == state.Ready {
		b.returnedLocked()
	}
	b.warnDrainWithoutHold(u, b.snap.Load().hold != nil, origin)
	b.recomputeLocked()
}

// applyConfigStateLocked applies a member's configured state on install:
// a new upstream starts in it; an existing one takes it only when the
// config's word changed since the last install (a state set through the
// API outlives reloads that leave the field alone). Callers hold b.mu.
func (b *Balancer) applyConfigStateLocked(u *upstream, st state.Admin, isNew bool) {
	if isNew {
		u.state.Store(uint32(st))
		u.cfgState = st
		if st != state.Ready {
			b.log.Info("upstream state", "upstream", u.name, "state", st.String(), "by", "config")
		}
		return
	}
	if u.cfgState == st {
		return
	}
	u.cfgState = st
	old := state.Admin(u.state.Swap(uint32(st)))
	if old != st {
		b.log.Info("upstream state", "upstream", u.name, "state", st.String(), "previous", old.String(), "by", "config")
		if st == state.Ready {
			b.returnedLocked()
		}
	}
}

// everyNotReady returns the state that keeps every member of s from new
// keys (state.Drain when any drains, else state.Maint), or state.Ready when
// some member is ready; it words the 503 of a request that found none.
func (s *snapshot) everyNotReady() state.Admin {
	if len(s.members) == 0 {
		return state.Ready
	}
	drain := false
	for i := range s.members {
		switch s.members[i].u.adminState() {
		case state.Ready:
			return state.Ready
		case state.Drain:
			drain = true
		}
	}
	if drain {
		return state.Drain
	}
	return state.Maint
}

// Pool returns the name of the pool b serves (Options.Pool, or
// DefaultPool).
func (b *Balancer) Pool() string { return b.metrics.Labels["pool"] }
