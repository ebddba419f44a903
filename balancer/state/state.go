// Package state names an upstream's admin state (routing rule 12) and
// holds the view of one upstream that the admin API's /upstreams shows.
package state

import "fmt"

// Admin is an upstream's admin state (routing rule 12): what an operator
// wants of it, apart from what its health check and breaker say. The
// zero value is Ready.
//
//   - Ready: routed as rules 1-11 say.
//   - Drain: takes no new key. It is skipped (reason ring.Draining) for
//     every request except one whose key is held on it: a hold record of
//     this process younger than hold.idle, or a valid hold cookie, naming
//     it, whatever the record's ring version. Requests in flight and open
//     tunnels finish. Without hold no key is held, so a draining upstream
//     gets nothing new.
//   - Maint: skipped for every request (reason ring.Maint), held or not;
//     requests in flight and tunnels finish.
//
// Health checks go on in every state, and a state is not a membership
// change: the ring and its version stay, so when the upstream is made
// ready again exactly its keys return, as after an ejection.
type Admin uint32

// The admin states.
const (
	Ready Admin = iota
	Drain
	Maint
)

// names are the states' names, as the config, the admin API and the
// metrics spell them.
var names = [...]string{Ready: "ready", Drain: "drain", Maint: "maint"}

// Names lists every state's name, in order.
func Names() []string { return names[:] }

func (s Admin) String() string {
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("AdminState(%d)", uint32(s))
}

// Parse reads a state's name: ready, drain or maint.
func Parse(s string) (Admin, error) {
	for i, n := range names {
		if n == s {
			return Admin(i), nil
		}
	}
	return 0, fmt.Errorf("unknown state %q: must be ready, drain or maint", s)
}

// Upstream is one upstream as the admin API's /upstreams shows it.
type Upstream struct {
	Name  string
	State Admin
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
