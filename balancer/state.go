package balancer

import (
	"cmp"
	"errors"
	"fmt"
)

// AdminState is an upstream's admin state (routing rule 12): what an
// operator wants of it, apart from what its health check and breaker
// say. The zero value is StateReady.
//
//   - StateReady: routed as rules 1-11 say.
//   - StateDrain: takes no new key. It is skipped (reason ring.Draining)
//     for every request except one whose key is held on it: a hold record
//     of this process younger than hold.idle, or a valid hold cookie,
//     naming it, whatever the record's ring version. Requests in flight
//     and open tunnels finish. Without hold no key is held, so a draining
//     upstream gets nothing new.
//   - StateMaint: skipped for every request (reason ring.Maint), held or
//     not; requests in flight and tunnels finish.
//
// Health checks go on in every state, and a state is not a membership
// change: the ring and its version stay, so when the upstream is made
// ready again exactly its keys return, as after an ejection.
type AdminState uint32

const (
	StateReady AdminState = iota
	StateDrain
	StateMaint
)

// adminStates are the states' names, as the config, the admin API and the
// metrics spell them.
var adminStates = [...]string{StateReady: "ready", StateDrain: "drain", StateMaint: "maint"}

// AdminStates lists every state's name, in order.
func AdminStates() []string { return adminStates[:] }

func (s AdminState) String() string {
	if int(s) < len(adminStates) {
		return adminStates[s]
	}
	return fmt.Sprintf("AdminState(%d)", uint32(s))
}

// ParseAdminState reads a state's name: ready, drain or maint.
func ParseAdminState(s string) (AdminState, error) {
	for i, n := range adminStates {
		if n == s {
			return AdminState(i), nil
		}
	}
	return 0, fmt.Errorf("unknown state %q: must be ready, drain or maint", s)
}

// ErrUnknownUpstream is SetState's and UpstreamState's error for a name
// that is not a current ring member.
var ErrUnknownUpstream = errors.New("no such upstream")

// UpstreamState is one upstream as the admin API's /upstreams shows it.
type UpstreamState struct {
	Name  string
	State AdminState
	// Available: health check up, breaker not open, not absent (the
	// admin state does not enter into it).
	Available bool
	// HeldKeys counts this process's hold records younger than hold.idle
	// that name the upstream (0 with hold off).
	HeldKeys int
	// Inflight counts requests in flight to it, tunnels included; Tunnels
	// the upgraded connections (WebSocket) among them.
	Inflight int64
	Tunnels  int64
	// Drained is true in state drain once HeldKeys, Inflight and Tunnels
	// are all 0: what a script waits for before stopping the upstream.
	Drained bool
	// Source is "static", or the discovery source it came from.
	Source string
}

// adminState returns u's admin state.
func (u *upstream) adminState() AdminState { return AdminState(u.state.Load()) }

// UpstreamStates returns every current ring member's admin view, in ring
// member order (by name under placement ringlb). Held keys are counted by
// one pass over the hold records (see hold.Store.CountByUpstream): exact
// at the moment of the call, and nothing kept up to date on the request
// path for it.
func (b *Balancer) UpstreamStates() []UpstreamState {
	s := b.snap.Load()
	held := b.heldCounts()
	out := make([]UpstreamState, len(s.members))
	for i := range s.members {
		out[i] = s.upstreamState(i, held)
	}
	return out
}

// UpstreamState returns the admin view of the ring member called name;
// ErrUnknownUpstream when there is none.
func (b *Balancer) UpstreamState(name string) (UpstreamState, error) {
	s := b.snap.Load()
	i := s.ring.Index(name)
	if i < 0 {
		return UpstreamState{}, fmt.Errorf("%w %q", ErrUnknownUpstream, name)
	}
	return s.upstreamState(i, b.heldCounts()), nil
}

// heldCounts counts the live hold records by upstream; nil with hold off.
func (b *Balancer) heldCounts() map[string]int {
	st := b.holdStore.Load()
	if st == nil {
		return nil
	}
	return st.CountByUpstream(b.nanotime())
}

func (s *snapshot) upstreamState(i int, held map[string]int) UpstreamState {
	m := &s.members[i]
	u := m.u
	st := UpstreamState{
		Name:      u.name,
		State:     u.adminState(),
		Available: u.available(),
		HeldKeys:  held[u.name],
		Inflight:  u.inflight.Load(),
		Tunnels:   u.tunnels.Load(),
		Source:    cmp.Or(m.source, "static"),
	}
	st.Drained = st.State == StateDrain && st.HeldKeys == 0 && st.Inflight == 0 && st.Tunnels == 0
	return st
}

// SetState sets the admin state of the ring member called name, as the
// admin API does, and returns its view. The state stays across reloads
// while the member stays, until SetState sets another or a reload changes
// the member's configured state (UpstreamOptions.State); a restart
// forgets it. ErrUnknownUpstream when there is no such member.
func (b *Balancer) SetState(name string, st AdminState) (UpstreamState, error) {
	if int(st) >= len(adminStates) {
		return UpstreamState{}, fmt.Errorf("balancer: %v is not a state", st)
	}
	b.mu.Lock()
	u := b.ups[name]
	if u == nil {
		b.mu.Unlock()
		return UpstreamState{}, fmt.Errorf("%w %q", ErrUnknownUpstream, name)
	}
	b.setStateLocked(u, st, "api")
	b.mu.Unlock()
	return b.UpstreamState(name)
}

// setStateLocked makes st u's admin state, set by origin ("config" or
// "api"): one log line when it changes, and the weight that takes new
// keys recomputed. Callers hold b.mu.
func (b *Balancer) setStateLocked(u *upstream, st AdminState, origin string) {
	old := AdminState(u.state.Swap(uint32(st)))
	if old == st {
		return
	}
	b.log.Info("upstream state", "upstream", u.name, "state", st.String(), "previous", old.String(), "by", origin)
	if st == StateReady {
		b.returnedLocked()
	}
	b.warnDrainWithoutHold(u, b.snap.Load().hold != nil, origin)
	b.recomputeLocked()
}

// applyConfigStateLocked applies a member's configured state on install:
// a new upstream starts in it; an existing one takes it only when the
// config's word changed since the last install (a state set through the
// API outlives reloads that leave the field alone). Callers hold b.mu.
func (b *Balancer) applyConfigStateLocked(u *upstream, st AdminState, isNew bool) {
	if isNew {
		u.state.Store(uint32(st))
		u.cfgState = st
		if st != StateReady {
			b.log.Info("upstream state", "upstream", u.name, "state", st.String(), "by", "config")
		}
		return
	}
	if u.cfgState == st {
		return
	}
	u.cfgState = st
	old := AdminState(u.state.Swap(uint32(st)))
	if old != st {
		b.log.Info("upstream state", "upstream", u.name, "state", st.String(), "previous", old.String(), "by", "config")
		if st == StateReady {
			b.returnedLocked()
		}
	}
}

// everyNotReady returns the state that keeps every member of s from new
// keys (StateDrain when any drains, else StateMaint), or StateReady when
// some member is ready; it words the 503 of a request that found none.
func (s *snapshot) everyNotReady() AdminState {
	if len(s.members) == 0 {
		return StateReady
	}
	drain := false
	for i := range s.members {
		switch s.members[i].u.adminState() {
		case StateReady:
			return StateReady
		case StateDrain:
			drain = true
		}
	}
	if drain {
		return StateDrain
	}
	return StateMaint
}

// Pool returns the name of the pool b serves (Options.Pool, or
// DefaultPool).
func (b *Balancer) Pool() string { return b.metrics.Labels["pool"] }
