package balancer

import "github.com/ringlb/ringlb/balancer/state"

// HoldOn reports whether hold is on in the snapshot in force: then a
// draining upstream keeps the keys in use on it (those held there);
// without, a drain keeps no key, and the next request of each of its
// keys goes to another upstream.
func (b *Balancer) HoldOn() bool { return b.snap.Load().hold != nil }

// drainWithoutHoldMsg is the warning logged when an upstream starts
// draining while hold is off.
const drainWithoutHoldMsg = "upstream draining with hold off: keys in use on it are not kept"

// warnDrainWithoutHold logs a warning when u has just been set to drain
// (by "api" or "config") while hold is off (holdOn false): nothing keeps
// its sessions in use, so their next requests go elsewhere at once, which
// is what a drain is usually meant to avoid.
func (b *Balancer) warnDrainWithoutHold(u *upstream, holdOn bool, by string) {
	if holdOn || u.adminState() != state.Drain {
		return
	}
	b.log.Warn(drainWithoutHoldMsg, "upstream", u.name, "by", by,
		"hint", "the next request of each of its keys goes to another upstream; hold.idle > 0 keeps the keys in use on it while it drains")
}

// warnSpecDrain warns, on an install, about an upstream that was not
// draining (was) and is now, by its configured state or, for a
// discovered member, by its endpoint terminating, while hold is off.
func (b *Balancer) warnSpecDrain(u *upstream, was state.Admin, spec memberSpec, holdOn bool) {
	if was == state.Drain {
		return
	}
	by := "config"
	if spec.source != "" {
		by = "discovery"
	}
	b.warnDrainWithoutHold(u, holdOn, by)
}
