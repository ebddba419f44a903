package balancer

import (
	"github.com/ringlb/ringlb/balancer/hotkeys"
	"github.com/ringlb/ringlb/balancer/keyhash"
)

// HotKeys returns the hottest keys of the current window (previous false)
// or of the complete window before it, with their owners on the current
// ring and their reported hashes.
func (b *Balancer) HotKeys(previous bool) hotkeys.Window {
	out := b.hot.Window(previous, b.nanotime())
	s := b.snap.Load()
	if s == nil {
		return out
	}
	for i := range out.Keys {
		k := &out.Keys[i]
		if o := s.ring.Owner(k.Hash); o >= 0 {
			k.Owner = s.members[o].u.name
		}
		// Outside the lock that requests take: salted, 100 keys cost
		// 100 HMACs.
		k.Hex = s.reportedHash(k.Hash)
	}
	return out
}

// reportedHash is the hash the balancer shows of the key at ring position
// pos (the access log's key_hash, /debug/hotkeys): the position as
// FormatHash writes it, or with a salt the salted hash, 16 hex digits.
func (s *snapshot) reportedHash(pos uint64) string {
	if s.salt == nil {
		return s.ring.FormatHash(pos)
	}
	return keyhash.Hex(s.salt.Sum(pos))
}

// hotPosition finds the ring position of a hot key (of the current
// window or the one before) whose reported hash is hex. The positions
// are copied under the counter's lock and hashed after it.
func (b *Balancer) hotPosition(s *snapshot, hex string) (uint64, bool) {
	var buf [2 * hotkeys.Counters]uint64
	for _, p := range b.hot.Positions(&buf) {
		if s.reportedHash(p) == hex {
			return p, true
		}
	}
	return 0, false
}
